"""verl-style ``torch_memory`` configs mapped onto ``ForensicsConfig`` (no verl needed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import memforensics
import memforensics.capture.log
from memforensics.integrations.verl import (
    IGNORED,
    MAPPED,
    config_from_verl,
    install_from_verl,
    verl_options,
)
from memforensics.testing import SimAdam, SimModule, get_device, reset_device


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


VERL_091_ACTOR_PROFILER = {
    "_target_": "verl.utils.profiler.ProfilerConfig",
    "tool": None,
    "enable": False,
    "all_ranks": False,
    "ranks": [],
    "save_path": "outputs/profile",
    "relocate_results": False,
    "finish_hook_cmd": None,
    "finish_hook_all_ranks": False,
    "finish_hook_ranks": [],
    "tool_config": {
        "npu": {"_target_": "verl.utils.profiler.config.NPUToolConfig", "contents": [],
                "level": "level0", "analysis": False, "discrete": False,
                "profile_token_start": None, "profile_token_end": None},
        "torch": {"_target_": "verl.utils.profiler.config.TorchProfilerToolConfig",
                  "contents": [], "discrete": False},
    },
}  # fmt: skip
"""``actor_rollout_ref.actor.profiler`` of verl 0.9.1's _generated_ppo_trainer.yaml, resolved
(nox -s frameworks runs the real file)."""
VERL_091_GLOBAL_PROFILER = {
    "_target_": "verl.utils.profiler.ProfilerConfig",
    "tool": None,
    "steps": None,
    "profile_continuous_steps": False,
    "save_path": "outputs/profile",
    "relocate_results": False,
    "finish_hook_cmd": None,
    "finish_hook_all_ranks": False,
    "finish_hook_ranks": [],
    "global_tool_config": {
        "torch_memory": {"trace_alloc_max_entries": 100000, "stack_depth": 32,
                         "memory_snapshot_num_steps": 1, "context": "all", "stacks": "all",
                         "kw_args": {}},
    },
}  # fmt: skip
"""``global_profiler`` of the same file, resolved."""


def test_verl_091_profiler_sections_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verl 0.9.1's own profiler sections (finish_hook_*, relocate_results) map without error."""
    monkeypatch.chdir(tmp_path)
    actor = install_from_verl(VERL_091_ACTOR_PROFILER, device="sim")
    assert (actor.config.out_dir, actor.config.window_ranks) == ("outputs/profile", ())
    actor.close()
    config = config_from_verl(VERL_091_GLOBAL_PROFILER)
    assert (config.max_entries, config.steps) == (100_000, 1)
    assert (config.stacks, config.context) == ("all", "all")


def test_unknown_options_are_ignored_with_a_debug_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Keys of a newer verl schema are ignored, named in one debug log line."""
    monkeypatch.setenv("MEMFORENSICS_LOG_LEVEL", "DEBUG")
    memforensics.capture.log.reset_logging()
    options = verl_options({"memory_snapshot_num_steps": 2, "some_future_option": 1})
    assert options == {"steps": 2}
    err = capsys.readouterr().err
    assert "verl_options_ignored" in err
    assert "some_future_option" in err


@pytest.mark.parametrize(
    ("option", "value"),
    [("stacks", "cpp"), ("trace_alloc_max_entries", -1), ("context", "state")],
)
def test_mapped_values_are_still_validated(option: str, value: object) -> None:
    """A mapped key with a value memforensics cannot honour fails fast, naming the field."""
    with pytest.raises(memforensics.ConfigError):
        config_from_verl({option: value})


def test_dump_on_oom_is_not_a_verl_option() -> None:
    """dump_on_oom exists in no verl release: it is not mapped (OOM capture stays on)."""
    assert "dump_on_oom" not in MAPPED
    assert config_from_verl({"dump_on_oom": False}).oom is True


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
    visible = sorted(
        path.name
        for path in tmp_path.iterdir()
        if path.name != "journal" and not path.name.startswith(".")
    )
    assert visible == ["steps0-1", "steps2-3"]


def test_install_overrides_win_over_mapped_options(tmp_path: Path) -> None:
    """An override of a mapped field (out_dir over save_path) wins instead of clashing."""
    mf = install_from_verl(
        {"save_path": "outputs/profile", "memory_snapshot_num_steps": 2},
        out_dir=str(tmp_path),
        device="sim",
    )
    assert (mf.config.out_dir, mf.config.steps) == (str(tmp_path), 2)


def test_install_from_verl_tracks_the_workers_model(tmp_path: Path) -> None:
    """model= and optimizer= pass through to install(): each window lists their tensors."""
    device = get_device()
    actor = SimModule(device, {"actor.weight": 1 << 20})
    optimizer = SimAdam(actor.parameters(), device)
    mf = install_from_verl(
        {"memory_snapshot_num_steps": 1, "save_path": str(tmp_path)},
        device="sim",
        model=actor,
        optimizer=optimizer,
    )
    assert mf.tracked == ([actor], [optimizer])
    with mf.step(0):
        actor.backward()
        optimizer.step()
    sidecar = json.loads(mf.dumps[0].with_suffix(".json").read_text())
    names = sorted(entry["name"] for entry in sidecar["tensors"])
    assert names == [
        "actor.weight",
        "actor.weight.exp_avg",
        "actor.weight.exp_avg_sq",
        "actor.weight.grad",
    ]
