"""ForensicsConfig: validation at install time, environment variables, explicit keywords winning."""

from __future__ import annotations

from pathlib import Path

import pytest

import memforensics
from memforensics import ConfigError, ForensicsConfig
from memforensics.capture.config import FIELDS, build_config, env_var


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"steps": 0}, "steps"),
        ({"steps": 4, "every": 2}, "every"),
        ({"every": 3}, "every"),
        ({"unknown_field": 1}, "unknown_field"),
        ({"ranks": "some"}, "ranks"),
        ({"window_ranks": [-1]}, "window_ranks"),
        ({"stacks": "cpp"}, "stacks"),
        ({"device": "tpu"}, "device"),
        ({"oom_history": "everything"}, "oom_history"),
        ({"max_entries": 0}, "max_entries"),
        ({"keep_last": -1}, "keep_last"),
        ({"steps": "4"}, "steps"),
        ({"oom": "yes"}, "oom"),
        ({"out_dir": ""}, "out_dir"),
    ],
)
def test_bad_keyword_raises_value_error_naming_field(
    bad: dict[str, object], field: str, tmp_path: Path
) -> None:
    """install() rejects each bad value with a ValueError subclass that names the field."""
    with pytest.raises(ConfigError) as info:
        memforensics.install(**{"out_dir": str(tmp_path), **bad})
    assert isinstance(info.value, ValueError)
    assert info.value.field == field
    assert repr(field)[1:-1] in str(info.value)


def test_config_is_frozen() -> None:
    """A validated config cannot be changed after the fact."""
    config = ForensicsConfig(steps=2)
    with pytest.raises(ValueError, match="frozen"):
        config.steps = 3  # type: ignore[misc]


def test_every_field_has_an_environment_variable() -> None:
    """Each field reads MEMFORENSICS_<FIELD>, parsed to its type."""
    env = {
        "MEMFORENSICS_RANK": "3",
        "MEMFORENSICS_RANKS": "0,3",
        "MEMFORENSICS_WINDOW_RANKS": "all",
        "MEMFORENSICS_STEPS": "4",
        "MEMFORENSICS_EVERY": "10",
        "MEMFORENSICS_SKIP_FIRST": "2",
        "MEMFORENSICS_MAX_WINDOWS": "none",
        "MEMFORENSICS_KEEP_LAST": "5",
        "MEMFORENSICS_OUT_DIR": "/tmp/x",
        "MEMFORENSICS_DEVICE": "sim",
        "MEMFORENSICS_MAX_ENTRIES": "1000",
        "MEMFORENSICS_STACKS": "all",
        "MEMFORENSICS_OOM": "false",
        "MEMFORENSICS_OOM_HISTORY": "off",
        "MEMFORENSICS_MAX_OOM_SNAPSHOTS": "1",
        "MEMFORENSICS_ANNOTATE_STEPS": "0",
        "MEMFORENSICS_JOURNAL_EVERY": "none",
        "MEMFORENSICS_CONTEXT": "all",
        "MEMFORENSICS_WRITER": "inline",
        "MEMFORENSICS_NEAR_OOM": "off",
        "MEMFORENSICS_NEAR_OOM_FRACTION": "0.9",
        "MEMFORENSICS_NEAR_OOM_EVERY": "5",
        "MEMFORENSICS_MAX_NEAR_OOM_SNAPSHOTS": "4",
    }
    assert set(env) == {env_var(f) for f in FIELDS}
    config = build_config({}, env)
    assert config == ForensicsConfig(
        rank=3,
        ranks=(0, 3),
        window_ranks="all",
        steps=4,
        every=10,
        skip_first=2,
        max_windows=None,
        keep_last=5,
        out_dir="/tmp/x",
        device="sim",
        max_entries=1000,
        stacks="all",
        oom=False,
        oom_history="off",
        max_oom_snapshots=1,
        annotate_steps=False,
        journal_every=None,
        context="all",
        writer="inline",
        near_oom=False,
        near_oom_fraction=0.9,
        near_oom_every=5,
        max_near_oom_snapshots=4,
    )


def test_explicit_keyword_wins_over_environment() -> None:
    """A keyword overrides the same field's environment variable."""
    config = build_config({"steps": 2}, {"MEMFORENSICS_STEPS": "8", "MEMFORENSICS_EVERY": "9"})
    assert (config.steps, config.every) == (2, 9)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MEMFORENSICS_STEPS", "four"),
        ("MEMFORENSICS_STEPS", "0"),
        ("MEMFORENSICS_OOM", "maybe"),
        ("MEMFORENSICS_RANKS", "[1, 'x']"),
        ("MEMFORENSICS_DEVICE", "tpu"),
    ],
)
def test_bad_environment_value_names_the_variable(name: str, value: str) -> None:
    """A bad environment value fails like a keyword, naming the variable instead of the field."""
    with pytest.raises(ConfigError, match=name):
        build_config({}, {name: value})


def test_rank_selection_accepts_lists_tuples_and_single_ints() -> None:
    """ranks=[0, 2], (0, 2) and 0 are all accepted and stored as tuples."""
    assert ForensicsConfig(ranks=[0, 2]).ranks == (0, 2)
    assert ForensicsConfig(ranks=(0, 2)).ranks == (0, 2)
    assert ForensicsConfig(ranks=0).ranks == (0,)


def test_window_ranks_need_steps_and_capture() -> None:
    """A rank records windows only with steps set, inside ranks and window_ranks."""
    assert not ForensicsConfig(window_ranks="all").records_windows(0)
    assert ForensicsConfig(steps=2).records_windows(0)
    assert not ForensicsConfig(steps=2).records_windows(1)
    assert not ForensicsConfig(steps=2, ranks=[1], window_ranks="all").records_windows(0)


def test_unwritable_out_dir_fails_fast(tmp_path: Path) -> None:
    """install() refuses an out_dir that cannot be created (a file is in the way)."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="out_dir") as info:
        memforensics.install(out_dir=str(blocker / "dumps"), device="none")
    assert info.value.field == "out_dir"
