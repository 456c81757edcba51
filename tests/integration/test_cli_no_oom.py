"""summary of a dump with no OOM, through the real console script: the site rows are the
peak's (also from the cache), and --requested with --device-memory asks whether a request fits
on a device of that size, and what frees it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memforensics.testing import GiB, context_pair
from memforensics.testing._scenarios import write_dump
from memforensics.testing._synthetic import Block, Site, SnapshotBuilder

pytestmark = pytest.mark.integration

ATTENTION = Site("/job/model.py", 71, "attention")
WEIGHTS = Site("/job/model.py", 40, "forward")


def _cli(*args: str | Path, cache: Path) -> str:
    """stdout of the real console script, in a pipe, with its own cache folder."""
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["XDG_CACHE_HOME"] = str(cache)
    proc = subprocess.run(
        [*command, *map(str, args)], capture_output=True, text=True, timeout=300, env=env,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def full(tmp_path: Path) -> Path:
    """A raw snapshot (no sidecar, so no device size) with 7 GiB live in 7 GiB reserved:
    attention's 5 GiB of activations and 2 GiB of weights, nothing free."""
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(4), site=ATTENTION))
    builder.segment(Block(GiB(2), site=WEIGHTS), Block(GiB(1), site=ATTENTION))
    return write_dump(tmp_path / "snapshot.pickle", builder.build())


def test_a_request_that_does_not_fit_names_what_frees_it(full: Path, tmp_path: Path) -> None:
    """2 GiB on an 8 GiB device with 7 GiB reserved lacks 1 GiB; the headline says so and names
    the activations, whose removal frees enough."""
    cache = tmp_path / "cache"
    text = _cli("summary", full, "--requested", "2GiB", "--device-memory", "8GiB", cache=cache)
    words = _words(text)
    assert "a request of 2.00 GiB does not fit on the 8.00 GiB device: it lacks 1.00 GiB" in words
    assert "the request needed 1.00 GiB" in words
    answer = json.loads(
        _cli("summary", full, "--json", "--requested", "2GiB", "--device-memory", "8GiB",
             cache=cache)
    )  # fmt: skip
    top = answer["diagnosis"]["causes"][0]
    assert (top["name"], top["bytes"], top["sufficient"]) == ("activations", GiB(7), True)
    assert answer["diagnosis"]["needed_bytes"] == GiB(1)
    assert answer["oom"]["device_total_bytes"] == GiB(8)


def test_a_request_that_fits_says_so(full: Path, tmp_path: Path) -> None:
    """On a 16 GiB device the same 2 GiB fits in the 9 GiB left; the cache keeps the two device
    sizes apart."""
    cache = tmp_path / "cache"
    _cli("summary", full, "--requested", "2GiB", "--device-memory", "8GiB", cache=cache)
    text = _cli("summary", full, "--requested", "2GiB", "--device-memory", "16GiB", cache=cache)
    assert "a request of 2.00 GiB fits on the 16.00 GiB device" in _words(text)


def test_without_the_device_size_it_says_it_is_not_known(full: Path, tmp_path: Path) -> None:
    """Without --device-memory a raw snapshot's device size is not known: the headline says so
    and counts only what is reserved."""
    text = _words(_cli("summary", full, "--requested", "2GiB", cache=tmp_path / "cache"))
    assert "does not fit in what is reserved (the device's size is not known" in text
    assert "--device-memory SIZE gives it" in text


def test_the_peak_s_site_rows_print_the_same_from_the_cache(tmp_path: Path) -> None:
    """A window dump with no OOM: the site rows are those live at the peak (attention's
    584 MiB, freed before the snapshot), the second run answers from the cache alike."""
    _before, after = context_pair()
    path = after.write(tmp_path / "run" / "steps4-7" / "rank0_pid1.pickle")
    cache = tmp_path / "cache"
    first = _cli("summary", path, cache=cache)
    again = _cli("summary", path, cache=cache)
    assert first == again
    assert any(p.is_file() for p in cache.rglob("*"))  # the second answer could be a hit
    lines = first.splitlines()
    header = next(index for index, line in enumerate(lines) if "live bytes" in line)
    assert "(at the peak, trace entry" in lines[header]
    assert "/job/model.py:71 attention" in lines[header + 1]
    assert "584.00 MiB" in lines[header + 1]
