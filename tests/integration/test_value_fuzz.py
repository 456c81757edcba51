"""Plain-data snapshots with odd values, through every reading command: refused in one line or
read, never a traceback."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import pickle
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memforensics.cli._main import main
from memforensics.testing import exhausted, make_sidecar

_HUGE = 10**5000  # past int -> str's 4,300-digit limit

_EDGE_VALUES = st.one_of(
    st.sampled_from(
        [
            math.inf,
            -math.inf,
            math.nan,
            _HUGE,
            -_HUGE,
            2**64,
            -1,
            0,
            1e308,
            "²",
            "٣",
            "\x1b[2J",
            "",
            None,
            True,
            [],
            {},
            {"²": 1, "1": _HUGE},
        ]
    ),
    st.integers(),
    st.floats(),
    st.text(max_size=4),
)


def _paths(value: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``value`` a value sits (dict keys and list indices), at any depth."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            found += _paths(item, (*prefix, index))
    return found


_BASE = exhausted().snapshot
_BASE["allocator_settings"].update(
    {
        "garbage_collection_threshold": 0.5,
        "max_split_size": 1 << 30,
        "roundup_power2_divisions": {"1": 0, "2": 0},
    }
)
_PATHS = _paths(_BASE)


def _mutated(mutations: list[tuple[int, object]]) -> dict[str, Any]:
    snapshot = copy.deepcopy(_BASE)
    for index, value in mutations:
        *parents, last = _PATHS[index % len(_PATHS)]
        holder: Any = snapshot
        with contextlib.suppress(KeyError, IndexError, TypeError):
            for part in parents:
                holder = holder[part]
            holder[last] = value
    return snapshot


def _run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, err.getvalue()


_BLOCK_SIZE = _PATHS.index(("segments", 1, "blocks", 0, "size"))


@pytest.mark.integration
@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(st.tuples(st.integers(0, 10**6), _EDGE_VALUES), min_size=1, max_size=4))
@example([(_BLOCK_SIZE, {"²": 1, "1": _HUGE})])  # a block's size a dict holding a huge int
def test_odd_values_through_every_command(mutations: list[tuple[int, object]]) -> None:
    """Inf, NaN, 5,000-digit integers, odd digits and wrong types anywhere in a snapshot: every
    command exits 0, 1 or 2, with at most one line per problem and never a traceback."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        window = root / "steps0-3"
        window.mkdir()
        dump = window / "rank0_pid1.pickle"
        dump.write_bytes(pickle.dumps(_mutated(mutations), protocol=4))
        (window / "rank0_pid1.json").write_text(
            json.dumps(make_sidecar(kind="window", steps=[0, 3]))
        )
        for argv in (
            ("summary", str(dump)),
            ("summary", "--json", str(dump)),
            ("replay", str(dump)),
            ("replay", "--json", str(dump)),
            ("diff", str(dump), str(dump)),
            ("leaks", str(root)),
            ("ls", str(root)),
            ("report", str(dump), "-o", str(root / "r.html")),
            ("overview", str(root)),
        ):
            status, err = _run(*argv)
            assert status in (0, 1, 2), (argv, err)
            assert "Traceback" not in err


@pytest.mark.parametrize(
    ("settings_value", "key"),
    [
        ({"garbage_collection_threshold": math.inf}, "garbage_collection_threshold"),
        ({"roundup_power2_divisions": {"²": 1}}, "roundup_power2_divisions"),
        ({"max_split_size": _HUGE}, "max_split_size"),
    ],
)
def test_odd_allocator_settings_are_read_or_ignored(
    settings_value: dict[str, Any], key: str, tmp_path: Path
) -> None:
    """The three reported settings values: replay reads the file and prints no traceback."""
    snapshot = copy.deepcopy(_BASE)
    snapshot["allocator_settings"].update(settings_value)
    path = tmp_path / f"{key}.pickle"
    path.write_bytes(pickle.dumps(snapshot, protocol=4))
    for command in ("replay", "summary"):
        status, err = _run(command, str(path))
        assert status in (0, 1, 2), err


@pytest.mark.parametrize("where", ["block_size", "frame_line", "trace_size"])
def test_integers_past_the_digit_limit_are_refused_or_read(where: str, tmp_path: Path) -> None:
    """A 5,000-digit block size, frame line or trace size: one line or a reading, no traceback."""
    snapshot = copy.deepcopy(_BASE)
    block = snapshot["segments"][0]["blocks"][0]
    if where == "block_size":
        block["size"] = _HUGE
    elif where == "frame_line":
        for frame in block["frames"]:
            frame["line"] = _HUGE
    else:
        snapshot["device_traces"][0][1]["size"] = _HUGE
    path = tmp_path / f"{where}.pickle"
    path.write_bytes(pickle.dumps(snapshot, protocol=4))
    for command in ("summary", "replay", "report"):
        argv = [command, str(path)] + (
            ["-o", str(tmp_path / "r.html")] if command == "report" else []
        )
        status, err = _run(*argv)
        assert status in (0, 1, 2), err
        assert len(err.strip().splitlines()) <= 1, err


def test_leaks_reads_a_site_whose_blocks_request_zero_bytes(tmp_path: Path) -> None:
    """A live block requesting 0 bytes makes a site of all-zero totals: leaks reads it."""
    snapshot = copy.deepcopy(_BASE)
    snapshot["segments"][1]["blocks"][1]["requested_size"] = 0
    window = tmp_path / "steps0-3"
    window.mkdir()
    (window / "rank0_pid1.pickle").write_bytes(pickle.dumps(snapshot, protocol=4))
    status, err = _run("leaks", str(tmp_path))
    assert status == 0, err
