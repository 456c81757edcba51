"""What the console script loads: a command imports what it needs when it runs, so the analysis
commands start without pydantic, structlog, capture or torch, and ``--version`` and ``--help``
import no command at all."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from memforensics.cli._command import COMMANDS
from memforensics.testing import exhausted

pytestmark = pytest.mark.integration

TRAINING_ONLY = ("pydantic", "structlog", "memforensics.capture", "torch")
"""What only training (install, the config, capture) or ``run`` and ``plan`` need."""


# ``python -m memforensics ARGS``, writing the names in ``sys.modules`` to a file as it exits
# (``-X importtime`` misses what ``importlib.import_module`` loads: the commands themselves).
_WRAPPER = """
import atexit, runpy, sys
out, sys.argv = sys.argv[1], ["memforensics", *sys.argv[2:]]
atexit.register(lambda: open(out, "w").write("\\n".join(sys.modules)))
runpy.run_module("memforensics", run_name="__main__", alter_sys=True)
"""


def _imported(tmp_path: Path, *args: str | Path) -> set[str]:
    """The modules ``python -m memforensics *args`` had imported when it exited (it must
    succeed)."""
    out = tmp_path / "modules.txt"
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, out, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(out.read_text().split())


def _under(modules: set[str], *roots: str) -> set[str]:
    return {m for m in modules if any(m == r or m.startswith(f"{r}.") for r in roots)}


def test_summary_imports_nothing_training_needs(tmp_path: Path) -> None:
    """``memforensics summary`` of an OOM dump, cache on, imports no pydantic, structlog,
    capture or torch, and no other command's module."""
    path = exhausted().write(tmp_path / "oom" / "rank0_pid1_step3.pickle")
    modules = _imported(tmp_path, "summary", path, "--cache-dir", tmp_path / "cache")
    assert "memforensics.analysis.summary" in modules  # the subprocess did run the analysis
    assert _under(modules, *TRAINING_ONLY) == set()
    assert _under(modules, "memforensics.cli.commands") == {
        "memforensics.cli.commands",
        "memforensics.cli.commands.summary",
    }


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_no_command(args: list[str], tmp_path: Path) -> None:
    """``--version`` and the command list import no command, no analysis and no capture."""
    modules = _imported(tmp_path, *args)
    assert "memforensics.cli._main" in modules
    loaded = _under(modules, "memforensics.cli.commands", "memforensics.analysis", *TRAINING_ONLY)
    assert loaded == set()


def test_a_commands_help_imports_that_command_alone(tmp_path: Path) -> None:
    """``summary --help`` imports the summary command's module and no other command's."""
    modules = _imported(tmp_path, "summary", "--help")
    assert _under(modules, "memforensics.cli.commands") == {
        "memforensics.cli.commands",
        "memforensics.cli.commands.summary",
    }
    assert _under(modules, *TRAINING_ONLY) == set()


def test_plan_help_imports_the_plan_command_alone(tmp_path: Path) -> None:
    """``plan --help`` imports the plan command's module and no other command's, no analysis
    (not even the cache's dump reader) and nothing training needs."""
    modules = _imported(tmp_path, "plan", "--help")
    assert _under(modules, "memforensics.cli.commands") == {
        "memforensics.cli.commands",
        "memforensics.cli.commands.plan",
    }
    assert _under(modules, "memforensics.analysis", *TRAINING_ONLY) == set()


NEVER_PLANNING_ONE_PROCESS = ("torch.distributed.fsdp", "torch.distributed.tensor", "sympy")
"""What planning a script that never shards and never compiles does not import: FSDP and
DTensor (their stand-ins are replaced where a script imports them) and sympy, which
``torch.compile`` brings."""


@pytest.mark.torch
def test_planning_a_single_process_script_imports_no_fsdp_sympy_or_other_analysis(
    tmp_path: Path,
) -> None:
    """``plan`` of a one-process script that neither shards nor compiles imports no FSDP,
    DTensor or sympy, and of the analysis only the dump reader and the JSON schema it writes
    and caches with (no summary, diff, leaks or replay)."""
    script = tmp_path / "zeros.py"
    script.write_text('import torch\nx = torch.zeros(10, device="cuda")\n')
    out = tmp_path / "plan"
    modules = _imported(tmp_path, "plan", "--no-cache", "--out-dir", out, script)
    assert (out / "planned.pickle").is_file()  # the subprocess did plan the script
    assert "torch" in modules
    assert _under(modules, *NEVER_PLANNING_ONE_PROCESS) == set()
    analysis = {
        m.split(".")[2] for m in _under(modules, "memforensics.analysis") if m.count(".") > 1
    }
    assert analysis <= {"dump", "schema"}


def test_import_memforensics_loads_capture_on_first_use() -> None:
    """``import memforensics`` loads no capture; its first ``install`` does, and is the facade's."""
    code = (
        "import sys, memforensics\n"
        "print('memforensics.capture' in sys.modules)\n"
        "from memforensics.capture.facade import install\n"
        "print(memforensics.install is install)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listed_summary_is_the_commands_own(name: str) -> None:
    """The one-line summary ``--help`` lists without importing a command is the first line of
    that command's docstring, and the registered class is the command of that name."""
    module = importlib.import_module(f"memforensics.cli.commands.{name}")
    command = getattr(module, COMMANDS[name].cls)
    assert command.name == name
    assert (command.__doc__ or "").strip().splitlines()[0] == COMMANDS[name].summary


def test_help_lists_every_command() -> None:
    """``memforensics --help`` names every registered command with its summary."""
    done = subprocess.run(
        [sys.executable, "-m", "memforensics", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    text = " ".join(done.stdout.split())
    for name, registered in COMMANDS.items():
        assert f"{name} {' '.join(registered.summary.split())}" in text
