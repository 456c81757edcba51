"""The real console script on a sim run with a known leak: leaks, report's leak section, diff."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import memforensics
from memforensics.backends.sim import SimDevice, SimTensor, reset_device

pytestmark = pytest.mark.integration
MiB = 1 << 20


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    script = shutil.which("memforensics", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "memforensics"]
    return subprocess.run(
        [*command, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def _leaky(device: SimDevice, kept: list[SimTensor]) -> None:
    kept.append(device.empty(2 * MiB))


def _run(root: Path) -> Path:
    """Eight steps, a window every other step; a steady 8 MiB and a 2 MiB-a-step leak."""
    device = reset_device(1 << 30)
    out = root / "run"
    mf = memforensics.install(device="sim", out_dir=str(out), steps=1, every=2, keep_last=None)
    steady = device.empty(8 * MiB)
    kept: list[SimTensor] = []
    for number in range(8):
        with mf.step(number):
            device.empty(4 * MiB).free()
            _leaky(device, kept)
    mf.close()
    assert steady.nbytes
    return out


def test_leaks_command_names_the_leak(tmp_path: Path) -> None:
    """leaks --json names the leaking line as the one suspect, 2 MiB a step from step 0; the
    text marks it; a broken window file is listed and turns the exit status to 1."""
    run = _run(tmp_path)
    proc = _cli("leaks", run, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["windows"] == [{"rank": 0, "steps": [0, 2, 4, 6]}]
    suspects = [site for site in data["sites"] if site["suspect"]]
    assert [s["site"].rsplit(" ", 1)[-1] for s in suspects] == ["_leaky"]
    assert suspects[0]["growth_per_step_bytes"] == 2 * MiB
    assert suspects[0]["first_step"] == 0
    text = _cli("leaks", run)
    assert re.search(r"!!\s+2\.00 MiB\s+0\s+1\.00", text.stdout)
    broken = run / "step8" / "rank0_pid1.pickle"
    broken.parent.mkdir()
    broken.write_bytes(b"not a pickle")
    bad = _cli("leaks", run)
    assert bad.returncode == 1
    assert f"skipped: {broken}" in bad.stderr
    assert "_leaky" in bad.stdout


def test_folder_report_has_the_leak_section(tmp_path: Path) -> None:
    """report on a run folder carries a leaks section whose suspect is the leaking line."""
    run = _run(tmp_path)
    out = tmp_path / "r.html"
    proc = _cli("report", run, "-o", out)
    assert proc.returncode == 0, proc.stderr
    pattern = r'<script type="application/json" id="mf-data">(.*?)</script>'
    found = re.search(pattern, out.read_text(), re.S)
    assert found is not None
    [leaks] = [s for s in json.loads(found[1])["run"] if s["id"] == "leaks"]
    suspects = [row for row in leaks["data"]["rows"] if row[-1] == "suspect"]
    assert [row[1].rsplit(" ", 1)[-1] for row in suspects] == ["_leaky"]


def test_diff_shows_kinds(tmp_path: Path) -> None:
    """diff --json adds live bytes per kind before and after."""
    run = _run(tmp_path)
    [first] = run.glob("step0/*.pickle")
    [last] = run.glob("step6/*.pickle")
    proc = _cli("diff", first, last, "--json")
    assert proc.returncode == 0, proc.stderr
    kinds = {row["kind"]: row for row in json.loads(proc.stdout)["kinds"]}
    assert sum(row["delta_bytes"] for row in kinds.values()) == 6 * 2 * MiB  # six more leaked


def _blind_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on leaks cannot read a window dump: whatever it prints came from the cache."""
    from memforensics.analysis.compare import leaks as module

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("leaks read a dump")

    monkeypatch.setattr(module, "load_dump", refuse)


def _printed(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    from memforensics.cli._main import main

    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


def test_leaks_keeps_each_windows_totals_for_the_next_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After one leaks over a folder, leaks with another --top reads none of its windows and
    prints what --no-cache prints."""
    run = _run(tmp_path)
    capsys.readouterr()  # the run's own log lines
    cache = ["--cache-dir", str(tmp_path / "cache"), "--jobs", "1", "-q"]
    assert _printed(capsys, ["leaks", str(run), *cache])[0] == 0
    expected = _printed(capsys, ["leaks", str(run), "--top", "1", "--no-cache", "--jobs", "1"])
    _blind_leaks(monkeypatch)
    assert _printed(capsys, ["leaks", str(run), "--top", "1", *cache]) == expected


def test_kept_totals_of_the_wrong_shape_are_worked_out_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A window's kept totals with a sound checksum but a foreign shape (bytes as text) are
    not trusted: that window is read again, and leaks prints what --no-cache prints."""
    from memforensics.analysis.compare import leaks as module
    from memforensics.cli._cache import ResultCache
    from memforensics.cli.commands.leaks import _WINDOW

    run = _run(tmp_path)
    capsys.readouterr()  # the run's own log lines
    folder = tmp_path / "cache"
    windows = sorted(run.rglob("*.pickle"))
    broken = {"rank": 0, "step": 7, "totals": {"x": "many"}, "first_steps": {}}
    for window in windows:
        ResultCache(folder).keep([window], _WINDOW, broken)
    expected = _printed(capsys, ["leaks", str(run), "--no-cache", "--jobs", "1"])
    read: list[str] = []
    real = module.load_dump

    def counted(path: Path, **kwargs: object) -> object:
        read.append(Path(path).name)
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "load_dump", counted)
    later = ["leaks", str(run), "--cache-dir", str(folder), "--jobs", "1"]
    assert _printed(capsys, later) == expected
    assert len(read) == len(windows)
