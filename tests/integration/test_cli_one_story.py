"""One story per dump: summary, report, overview and watch name the same cause for one OOM
dump (a sim run whose cache grows window after window), and the cache keys that answer by
every window dump and journal it read."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import memforensics
from memforensics.backends.sim import SimDevice, SimOutOfMemoryError, SimTensor, reset_device
from memforensics.testing import (
    Block,
    Site,
    SnapshotBuilder,
    make_sidecar,
    write_dump,
    write_journals,
)

pytestmark = pytest.mark.integration
MiB = 1 << 20
GROWTH = "growth: "
CACHE = "a preallocated cache: "


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    return subprocess.run(
        [*command, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def _allocate_kv_cache(device: SimDevice, cache: list[SimTensor]) -> None:
    """A KV cache that is never trimmed: 8 MiB more every step (named as vLLM's is)."""
    cache.append(device.empty(8 * MiB))


def _train(mf: memforensics.MemoryForensics, device: SimDevice, cache: list[SimTensor]) -> None:
    """Steps until the device is full: a 20 MiB activation, then the cache grows."""
    for number in range(40):
        with mf.step(number):
            activation = device.empty(20 * MiB)
            _allocate_kv_cache(device, cache)
            activation.free()


def _run(root: Path) -> Path:
    """A window every other step, no step tags: the cache grows 8 MiB a step until a 20 MiB
    activation no longer fits the 160 MiB device (the OOM at step 12)."""
    device = reset_device(160 * MiB)
    out = root / "run"
    mf = memforensics.install(
        device="sim", out_dir=str(out), steps=1, every=2, keep_last=None, annotate_steps=False,
        journal_every=1,
    )  # fmt: skip
    weights = device.empty(16 * MiB)
    cache: list[SimTensor] = []
    with pytest.raises(SimOutOfMemoryError):
        _train(mf, device, cache)
    mf.close()
    assert weights.nbytes
    return out


def _headline_of_report(dump: Path, out: Path) -> str:
    proc = _cli("report", dump, "-o", out)
    assert proc.returncode == 0, proc.stderr
    found = re.search(r'id="mf-data">(.*?)</script>', out.read_text(), re.S)
    assert found is not None
    sections = json.loads(found.group(1))["dumps"][0]["devices"][0]["sections"]
    causes = [s["data"]["cause"] for s in sections if "cause" in s.get("data", {})]
    assert len(causes) == 1
    return str(causes[0])


def test_every_command_names_the_growth_of_one_oom_dump(tmp_path: Path) -> None:
    """The OOM dump alone shows a big vLLM-named cache; its rank's window dumps show that cache
    growing 8 MiB a step. summary, report, overview and watch each name that growth, the same
    headline word for word."""
    run = _run(tmp_path)
    [dump] = (run / "oom").glob("*.pickle")
    cache = tmp_path / "cache"
    summary = _cli("summary", dump, "--json", "--cache-dir", cache)
    assert summary.returncode == 0, summary.stderr
    headline = json.loads(summary.stdout)["diagnosis"]["headline"]
    assert headline.startswith(GROWTH)
    assert "_allocate_kv_cache" in headline
    assert "rose across 7 window dumps" in headline  # steps 0, 2, ..., 12: every window read
    assert _headline_of_report(dump, tmp_path / "r.html") == headline
    overview = _cli("overview", run, "--json", "--no-cache")
    assert overview.returncode == 0, overview.stderr
    assert json.loads(overview.stdout)["first_oom_diagnosis"]["headline"] == headline
    watch = _cli("watch", run, "--once", "--json", "--cache-dir", cache)
    assert watch.returncode == 0, watch.stderr
    assert json.loads(watch.stdout)["first_oom_diagnosis"]["headline"] == headline
    text = _cli("watch", run, "--once", "--no-cache")
    assert f"cause: {headline}"[:60] in text.stdout


def test_a_changed_window_dump_changes_the_kept_answer(tmp_path: Path) -> None:
    """summary's kept answer is keyed by the window dumps it read: once the windows no longer
    show growth (each overwritten with the first window's bytes), the same question about the
    unchanged OOM dump is answered afresh: no site is named growing, only the journal's climb
    (8 MiB a step, the cache's true rate)."""
    run = _run(tmp_path)
    [dump] = (run / "oom").glob("*.pickle")
    cache = tmp_path / "cache"
    first = _cli("summary", dump, "--json", "--cache-dir", cache)
    assert json.loads(first.stdout)["diagnosis"]["headline"].startswith(GROWTH)
    again = _cli("summary", dump, "--json", "--cache-dir", cache)
    assert again.stdout == first.stdout
    assert len(list(cache.glob("*.entry"))) == 1
    windows = sorted(run.glob("step*/*.pickle"))
    assert len(windows) >= 3
    for window in windows[1:]:
        window.write_bytes(windows[0].read_bytes())
    after = _cli("summary", dump, "--json", "--cache-dir", cache)
    assert after.returncode == 0, after.stderr
    headline = json.loads(after.stdout)["diagnosis"]["headline"]
    assert headline.startswith(f"{GROWTH}allocated grew ≈ 8.00 MiB a step")
    assert "_allocate_kv_cache" not in headline
    assert len(list(cache.glob("*.entry"))) == 2


def test_a_changed_journal_changes_the_kept_answer(tmp_path: Path) -> None:
    """summary's kept answer is keyed by the journal of the dump's process: while it climbs
    16 MiB a step up to the OOM, growth is named from it; once it is rewritten flat, the same
    question about the unchanged dump is answered afresh, without growth."""

    def journals(leak_rank: int | None) -> None:
        write_journals(
            tmp_path, ranks=2, lines=14, every=1, base=64 * MiB, limit=4096 * MiB,
            leak_rank=leak_rank, leak_per_line=16 * MiB,
        )  # fmt: skip

    builder = SnapshotBuilder()
    builder.segment(Block(64 * MiB, site=Site("/job/model.py", 40, "forward")))
    builder.segment(*[Block(16 * MiB, site=Site("/job/train.py", 30, "remember"))] * 13)
    builder.oom(requested=64 * MiB, device_free=0)
    oom = {"requested_bytes": 64 * MiB, "device_free_bytes": 0, "device_total_bytes": 272 * MiB}
    dump = tmp_path / "oom" / "rank1_pid1001_step13_20261130-101112-000001.pickle"
    sidecar = make_sidecar("oom", rank=1, pid=1001, step=13, oom=oom)
    write_dump(dump, builder.build(), sidecar=sidecar)
    journals(1)
    cache = tmp_path / "cache"
    first = _cli("summary", dump, "--json", "--cache-dir", cache)
    assert first.returncode == 0, first.stderr
    headline = json.loads(first.stdout)["diagnosis"]["headline"]
    assert headline.startswith(GROWTH)
    assert "journal" in headline
    journals(None)
    after = _cli("summary", dump, "--json", "--cache-dir", cache)
    assert after.returncode == 0, after.stderr
    assert not json.loads(after.stdout)["diagnosis"]["headline"].startswith(GROWTH)
    assert len(list(cache.glob("*.entry"))) == 2


STORE = "/venv/lib/python3.12/site-packages/cachelib/store.py"
FROM_STEP = Site(STORE, 12, "append", outside=(("/job/train.py", 30, "train_step"),))
FROM_EVAL = Site(STORE, 12, "append", outside=(("/job/train.py", 40, "evaluate"),))


def _two_callers(root: Path) -> Path:
    """A window of steps 0-9: a library's ``append`` keeps 8 MiB a step for ``train_step`` and
    4 MiB a step for ``evaluate`` (120 MiB, 80 and 40 MiB), beside 256 MiB of the script's."""
    builder = SnapshotBuilder()
    builder.segment(Block(256 * MiB, site=Site("/job/train.py", 10, "<module>")))
    builder.segment(
        *(Block(8 * MiB, site=FROM_STEP, step=step) for step in range(10)),
        *(Block(4 * MiB, site=FROM_EVAL, step=step) for step in range(10)),
    )
    path = root / "steps0-9" / "rank0_pid1.pickle"
    return write_dump(path, builder.build(), sidecar=make_sidecar("window", steps=[0, 9]))


def test_a_growth_reached_from_two_callers_reads_as_the_sites_table_rows(tmp_path: Path) -> None:
    """A growing library site reached from two lines of the script: the growth cause's bytes
    (the site's 120 MiB, as ``leaks`` sums a site) name each caller's share, and the sites
    tables of ``summary`` and ``report`` name the caller of each of the site's rows, whose
    bytes are those shares (80 and 40 MiB)."""
    dump = _two_callers(tmp_path)
    said = _cli("summary", dump, "--no-cache")
    assert said.returncode == 0, said.stderr
    words = " ".join(said.stdout.split())
    assert (
        "store.py:12 append holds 120.00 MiB (80.00 MiB from train.py:30 train_step, "
        "40.00 MiB from train.py:40 evaluate), growing 12.00 MiB a step"
    ) in words, said.stdout
    shown = _cli("summary", dump, "--no-cache", "--all")
    lines = shown.stdout.split("live memory by kind")[0].splitlines()  # the sites table
    rows = [i for i, line in enumerate(lines) if line.endswith("store.py:12 append")]
    assert [(lines[i].split()[:2], lines[i + 1].split()[-2:]) for i in rows] == [
        (["80.00", "MiB"], ["/job/train.py:30", "train_step"]),
        (["40.00", "MiB"], ["/job/train.py:40", "evaluate"]),
    ], shown.stdout
    out = tmp_path / "r.html"
    assert _cli("report", dump, "-o", out, "--no-cache").returncode == 0
    found = re.search(r'id="mf-data">(.*?)</script>', out.read_text(), re.S)
    assert found is not None
    sections = json.loads(found.group(1))["dumps"][0]["devices"][0]["sections"]
    [sites] = [s["data"]["rows"] for s in sections if s["id"] == "sites"]
    assert [row[:2] for row in sites if str(row[0]).startswith(STORE)] == [
        [f"{STORE}:12 append ← caller /job/train.py:30 train_step", 80 * MiB],
        [f"{STORE}:12 append ← caller /job/train.py:40 evaluate", 40 * MiB],
    ]
