"""verl-style ``torch_memory`` configs mapped onto ``ForensicsConfig`` (no verl needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import memforensics
from memforensics.integrations.verl import (
    IGNORED,
    MAPPED,
    config_from_verl,
    install_from_verl,
    verl_options,
)
from memforensics.testing import get_device, reset_device


@pytest.fixture(autouse=True)
def _fresh_sim_device() -> Iterator[None]:
    """Each test starts and ends with a fresh sim device."""
    reset_device()
    yield
    reset_device()


def test_flat_mapping_maps_every_option() -> None:
    """The issue's flat mapping becomes max_entries, steps, out_dir and window_ranks."""
    config = config_from_verl(
        {
            "trace_alloc_max_entries": 50_000,
            "stack_depth": 32,
            "memory_snapshot_num_steps": 3,
            "save_path": "outputs/profile",
            "ranks": [0, 4],
            "all_ranks": False,
        }
    )
    assert config.max_entries == 50_000
    assert config.steps == 3
    assert config.out_dir == "outputs/profile"
    assert config.window_ranks == (0, 4)
    assert config.ranks == "all"


def test_all_ranks_wins_over_ranks() -> None:
    """all_ranks: true records windows on every rank whatever ranks lists."""
    options = verl_options({"all_ranks": True, "ranks": [1]})
    assert options == {"window_ranks": "all"}


def test_nested_role_profiler_config() -> None:
    """A role's profiler config with tool_config.torch_memory (over the global one) maps as is."""
    profiler = {
        "_target_": "verl.utils.profiler.ProfilerConfig",
        "tool": "torch_memory",
        "enable": True,
        "all_ranks": False,
        "ranks": [0],
        "save_path": None,
        "global_tool_config": {"torch_memory": {"trace_alloc_max_entries": 10, "stacks": "all"}},
        "tool_config": {
            "nsys": {"discrete": False},
            "torch_memory": {"trace_alloc_max_entries": 20, "memory_snapshot_num_steps": 2},
        },
    }
    config = config_from_verl(profiler)
    assert (config.max_entries, config.steps, config.stacks) == (20, 2, "all")
    assert config.out_dir == "memforensics"
    assert config.window_ranks == (0,)


def test_selected_tool_config_as_tool_config() -> None:
    """A tool_config that is the torch_memory tool config itself (name torch_memory) maps too."""
    config = config_from_verl(
        {
            "ranks": [0],
            "tool_config": {
                "name": "torch_memory",
                "trace_alloc_max_entries": 30,
                "stack_depth": 8,
            },
        }
    )
    assert config.max_entries == 30


def test_unknown_option_is_a_config_error() -> None:
    """A misspelt verl option fails fast, naming it."""
    with pytest.raises(memforensics.ConfigError, match="memory_snapshot_num_step'"):
        config_from_verl({"memory_snapshot_num_step": 2})


def test_ignored_options_are_documented_and_accepted() -> None:
    """Every ignored option has a reason and changes nothing."""
    assert all(reason for reason in IGNORED.values())
    assert verl_options(dict.fromkeys(IGNORED, "x")) == {}
    assert not set(IGNORED) & set(MAPPED)


def test_env_applies_underneath_and_overrides_win(monkeypatch: pytest.MonkeyPatch) -> None:
    """MEMFORENSICS_* fills what the mapping leaves out; keyword overrides beat the mapping."""
    monkeypatch.setenv("MEMFORENSICS_KEEP_LAST", "7")
    config = config_from_verl({"memory_snapshot_num_steps": 2}, steps=5)
    assert (config.keep_last, config.steps) == (7, 5)


def test_install_from_verl_records_windows(tmp_path: Path) -> None:
    """install_from_verl installs the mapped facade; its windows land under save_path."""
    mf = install_from_verl(
        {"memory_snapshot_num_steps": 2, "save_path": str(tmp_path), "all_ranks": True},
        device="sim",
    )
    kept = []
    for step in range(4):
        with mf.step(step):
            kept.append(get_device().empty(1 << 20))
    mf.close()
    windows = sorted(path.name for path in tmp_path.iterdir() if path.name != "journal")
    assert windows == ["steps0-1", "steps2-3"]
