"""A newcomer's first command, as README.md gives it: a fresh clone, a new virtual environment,
``pip install .`` and ``memforensics demo``, with nothing from this checkout's environment.

Deselected by default (it installs from pip's index, which takes a minute); ``nox -s newcomer``
runs it, and CI runs that session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.newcomer, pytest.mark.integration]

CHECKOUT = Path(__file__).resolve().parents[2]


def _run(command: list[str | Path], cwd: Path, env: dict[str, str]) -> str:
    """Run ``command``; its stdout, or a failure that shows what it printed."""
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_fresh_clone_installs_and_runs_the_demo_into_its_oom(tmp_path: Path) -> None:
    """README's ``pip install . && memforensics demo`` in a new venv from a clone of HEAD trains
    on the sim device into the OOM, names the dump and the next command, which then explains
    it, all without torch or anything this checkout's environment put on the path."""
    git = shutil.which("git")
    assert git is not None, "the newcomer test clones the repository: git is needed"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["COLUMNS"] = (
        "1000"  # whole paths on their lines; tests/integration/test_cli_screen.py keeps 80
    )
    clone, venv, work = tmp_path / "clone", tmp_path / "venv", tmp_path / "work"
    _run([git, "clone", "--quiet", "--no-hardlinks", CHECKOUT, clone], tmp_path, env)
    _run([sys.executable, "-m", "venv", venv], tmp_path, env)
    python, script = venv / "bin" / "python", venv / "bin" / "memforensics"
    _run([python, "-m", "pip", "install", "--quiet", "."], clone, env)
    work.mkdir()

    demo = _run([script, "demo"], work, env).splitlines()

    assert demo[0] == "no CUDA or NPU device found: running on the simulated 'sim' device"
    assert str(venv) in demo[1]  # the installed package ran, not this checkout
    assert demo[2].startswith("trained ")
    assert "out of memory" in demo[2]
    [oom] = [line.removeprefix("OOM snapshot: ") for line in demo if "OOM snapshot:" in line]
    assert Path(oom).is_relative_to(work / "memforensics-demo" / "oom")
    assert demo[-2:] == [
        f"next: memforensics summary {oom}",
        f"next: memforensics leaks {work / 'memforensics-demo'}",
    ]
    modules = _run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"], work, env
    )
    assert modules.strip() == "True"

    summary = _run([script, "summary", oom], work, env)
    assert "keep_metrics" in summary.split("verdict")[0]  # the leak is the cause it names
