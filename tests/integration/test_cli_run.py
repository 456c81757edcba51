"""The real ``memforensics run`` console script in subprocesses, as users and launchers run it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

_BIN = Path(sys.executable).parent


def _console() -> list[str]:
    script = shutil.which("memforensics", path=str(_BIN))
    return [script] if script else [sys.executable, "-m", "memforensics"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFORENSICS_")}
    env.update(extra)
    return env


def _run(
    *args: str | Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    launcher: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(launcher or _console()), "run", *map(str, args)],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


_REPORT = """
import json, sys
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "name": __name__}))
"""


@pytest.mark.parametrize("launcher", ["console", "python -m"])
def test_argv_main_and_path_like_python(tmp_path: Path, launcher: str) -> None:
    """Under both entry points the script sees python's argv, __main__ and sys.path[0], and gets
    every argument after it untouched, including ones that look like ours."""
    sub = tmp_path / "sub"
    sub.mkdir()
    script = _script(sub, _REPORT)
    runner = _console() if launcher == "console" else [sys.executable, "-m", "memforensics"]
    args = ["--device", "sim", "sub/train.py", "--steps", "9", "-m", "x", "--", "--help"]
    proc = _run(*args, cwd=tmp_path, launcher=runner)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen == {
        "argv": [str(script), "--steps", "9", "-m", "x", "--", "--help"],
        "path0": str(sub),
        "name": "__main__",
    }


def test_module_mode(tmp_path: Path) -> None:
    """-m runs a module from the working directory with argv[0] its file."""
    _script(tmp_path, _REPORT, name="mfmod.py")
    proc = _run("--device", "sim", "-m", "mfmod", "a", "--b", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen == {
        "argv": [str(tmp_path / "mfmod.py"), "a", "--b"],
        "path0": str(tmp_path),
        "name": "__main__",
    }


@pytest.mark.parametrize(
    ("body", "status"), [("sys.exit(3)", 3), ("sys.exit(0)", 0), ("pass", 0), ("sys.exit('no')", 1)]
)
def test_exit_status_passes_through(tmp_path: Path, body: str, status: int) -> None:
    """The script's exit status is the process's."""
    script = _script(tmp_path, f"import sys\n{body}\n")
    assert _run("--device", "sim", script, cwd=tmp_path).returncode == status


def test_uncaught_exception_prints_pythons_traceback(tmp_path: Path) -> None:
    """An uncaught exception exits 1 with a traceback ending in the script's frames and error,
    not memforensics' one-line error."""
    script = _script(
        tmp_path,
        """
        def train():
            raise ValueError("lr too high")

        train()
        """,
    )
    proc = _run("--device", "sim", script, cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert "Traceback (most recent call last):" in lines
    assert lines[-1] == "ValueError: lr too high"
    assert f'  File "{script}", line 3, in train' in lines
    assert "runpy" not in proc.stderr
    assert "memforensics run:" not in proc.stderr


@pytest.mark.torch
def test_without_an_accelerator_run_says_once_that_nothing_is_captured(tmp_path: Path) -> None:
    """On a torch that sees no GPU, run says once on stderr that nothing will be captured and
    how to make a dry run, and the script still runs."""
    pytest.importorskip("torch")
    from memforensics.backends._select import create_backend

    if create_backend("auto").name != "none":
        pytest.skip("this machine has an accelerator: auto would use it")
    script = _script(tmp_path, "print('trained')\n")
    proc = _run(script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "trained\n"
    said = [line for line in proc.stderr.splitlines() if "capture nothing" in line]
    assert len(said) == 1
    assert "--device sim" in said[0]
    assert "dry run" in said[0]


def test_oom_in_a_script_without_steps_is_dumped(tmp_path: Path) -> None:
    """A sim OOM in a script that never calls mf.step() exits 1 with the OOM's traceback and
    leaves an oom/ dump whose sidecar names the failing line."""
    script = _script(
        tmp_path,
        """
        from memforensics.testing import get_device

        def grow():
            blocks = []
            while True:
                blocks.append(get_device().empty(16 << 20))

        grow()
        """,
    )
    env = _env(MEMFORENSICS_SIM_TOTAL_BYTES=str(128 << 20))
    proc = _run("--device", "sim", "--out-dir", "out", script, cwd=tmp_path, env=env)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1].startswith("memforensics.backends.sim.SimOutOfMemoryError")
    [sidecar] = (tmp_path / "out" / "oom").glob("*.json")
    data = json.loads(sidecar.read_text())
    assert data["kind"] == "oom"
    assert data["step"] is None
    assert data["oom"]["stack"][-1]["name"] == "grow"
    assert sidecar.with_suffix(".pickle").exists()


def test_env_vars_and_flags_configure_the_run(tmp_path: Path) -> None:
    """MEMFORENSICS_* variables apply under the flags; a script's own install() gets the same
    facade and its steps make windows."""
    script = _script(
        tmp_path,
        """
        import memforensics, memforensics.capture.facade
        from memforensics.testing import get_device
        before = memforensics.capture.facade.current()
        mf = memforensics.install()
        assert mf is before, (mf.config, before.config)
        kept = []
        for step in range(4):
            with mf.step(step):
                kept.append(get_device().empty(1 << 20))
        """,
    )
    env = _env(MEMFORENSICS_STEPS="2", MEMFORENSICS_OUT_DIR="from-env", MEMFORENSICS_DEVICE="sim")
    proc = _run("--out-dir", "from-flag", "--keep-last", "none", script, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in (tmp_path / "from-flag").iterdir())
    assert written == ["journal", "steps0-1", "steps2-3"]
    assert not (tmp_path / "from-env").exists()


def test_partial_window_flushed_on_exception(tmp_path: Path) -> None:
    """A script that fails mid-window still leaves that window, marked partial."""
    script = _script(
        tmp_path,
        """
        import memforensics
        mf = memforensics.install()
        for step in range(3):
            with mf.step():
                pass
        raise SystemExit(5)
        """,
    )
    proc = _run("--steps", "8", "--device", "sim", "--out-dir", "o", script, cwd=tmp_path)
    assert proc.returncode == 5
    [sidecar] = (tmp_path / "o" / "steps0-2").glob("*.json")
    assert json.loads(sidecar.read_text())["partial"] is True


def test_bad_flag_and_missing_script_are_one_line_errors(tmp_path: Path) -> None:
    """A bad config value exits 2 and a missing script exits 2, each with one stderr line."""
    _script(tmp_path, "raise AssertionError('must not run')\n", name="ok.py")
    bad = _run("--device", "gpu", "ok.py", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "memforensics run: invalid config field 'device': Input should be 'auto', 'cuda', "
        "'npu', 'none' or 'sim' (from --device)"
    ]
    missing = _run("--device", "sim", "x.py", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        f"memforensics run: can't open file '{tmp_path / 'x.py'}': "
        "[Errno 2] No such file or directory"
    )


@pytest.mark.torch
def test_under_torchrun_every_rank_dumps_its_own_oom(tmp_path: Path) -> None:
    """`torchrun --nproc_per_node 2 -m memforensics run train.py` gives each rank its own OOM
    dump, named by the rank torchrun assigned, and each rank's script gets its arguments."""
    torchrun = shutil.which("torchrun", path=str(_BIN))
    if torchrun is None:
        pytest.skip("torchrun is not on this interpreter's PATH")
    # Each rank reports in its own file, not on the stdout all ranks share: under
    # PYTHONUNBUFFERED (set by many CI images) one print() is several write()s, and two ranks
    # interleave them whenever one is preempted mid-print.
    script = _script(
        tmp_path,
        """
        import json, os, sys
        from memforensics.testing import get_device, SimOutOfMemoryError
        try:
            get_device().empty(1 << 40)
        except SimOutOfMemoryError:
            with open(f"seen-rank{os.environ['RANK']}.json", "x") as handle:
                json.dump(sys.argv[1:], handle)
        """,
    )
    proc = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "memforensics", "run",
         "--device", "sim", "--out-dir", "out", str(script), "--lr", "3e-4"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = {path.name: json.loads(path.read_text()) for path in tmp_path.glob("seen-rank*.json")}
    assert seen == {
        "seen-rank0.json": ["--lr", "3e-4"],
        "seen-rank1.json": ["--lr", "3e-4"],
    }
    names = sorted(path.name.split("_")[0] for path in (tmp_path / "out" / "oom").glob("*.pickle"))
    assert names == ["rank0", "rank1"]
