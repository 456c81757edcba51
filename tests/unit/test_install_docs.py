"""The install and test commands the docs give work as written."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


class _Session:
    """What the noxfile's sessions call on ``nox.Session``: install, run, posargs."""

    def __init__(self) -> None:
        self.installs: list[tuple[str, ...]] = []
        self.runs: list[tuple[str, ...]] = []
        self.posargs: list[str] = []

    def install(self, *args: str) -> None:
        self.installs.append(args)

    def run(self, *args: str, **kwargs: Any) -> None:
        self.runs.append(args)


def _fake_nox() -> ModuleType:
    """``nox`` as the noxfile uses it: ``nox.session`` bare or with keywords, ``nox.options``,
    ``nox.command.CommandFailed``."""
    module = ModuleType("nox")
    command = ModuleType("nox.command")
    command.CommandFailed = type("CommandFailed", (Exception,), {})  # type: ignore[attr-defined]
    module.command = command  # type: ignore[attr-defined]

    def session(*args: Any, **kwargs: Any) -> Any:
        if args and callable(args[0]):
            return args[0]
        return lambda function: function

    module.session = session  # type: ignore[attr-defined]
    module.options = SimpleNamespace()  # type: ignore[attr-defined]
    module.Session = _Session  # type: ignore[attr-defined]
    return module


def _noxfile(monkeypatch: pytest.MonkeyPatch) -> Any:
    fake = _fake_nox()
    monkeypatch.setitem(sys.modules, "nox", fake)
    monkeypatch.setitem(sys.modules, "nox.command", fake.command)
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torch_installs(session_function: Callable[[_Session], None]) -> list[tuple[str, ...]]:
    session = _Session()
    session_function(session)
    return [args for args in session.installs if any(a.startswith("torch==") for a in args)]


def _readme_cpu_command() -> tuple[str, str]:
    """The variable and URL README.md's CPU-build test command sets."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^\s*([A-Z_]+)=(\S+) nox -s tests$", text, re.MULTILINE)
    assert match, "README.md shows no command for a CPU build of torch"
    return match.group(1), match.group(2)


def test_readme_cpu_command_sends_torch_to_the_cpu_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """README's `VAR=URL nox -s tests` makes every torch install use that index, torch only."""
    variable, url = _readme_cpu_command()
    assert url == CPU_INDEX
    monkeypatch.setenv(variable, url)
    noxfile = _noxfile(monkeypatch)
    for name in ("tests", "integrations", "stress", "bench"):
        [install] = _torch_installs(getattr(noxfile, name))
        assert install == ("torch==2.13.0", "--index-url", CPU_INDEX), name
    session = _Session()
    noxfile.tests(session)
    others = [args for args in session.installs if "torch==2.13.0" not in args]
    assert others
    assert all("--index-url" not in args for args in others)


def test_plain_nox_tests_installs_torch_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the variable the tests session asks pip for torch==2.13.0 alone (local wheel)."""
    variable, _ = _readme_cpu_command()
    monkeypatch.delenv(variable, raising=False)
    noxfile = _noxfile(monkeypatch)
    assert _torch_installs(noxfile.tests) == [("torch==2.13.0",)]


def test_lint_session_checks_the_layering_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    """`nox -s lint` installs import-linter and runs lint-imports; the runtime needs neither."""
    session = _Session()
    _noxfile(monkeypatch).lint(session)
    installed = [arg for args in session.installs for arg in args]
    assert any(arg.startswith("import-linter") for arg in installed)
    assert ("lint-imports",) in session.runs
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    runtime = re.search(r"^dependencies = \[(.*?)\]", pyproject, re.MULTILINE | re.DOTALL)
    assert runtime, "pyproject.toml names no runtime dependencies"
    assert "import-linter" not in runtime.group(1)
    assert "[tool.importlinter]" in pyproject


def test_readme_says_what_the_test_session_downloads() -> None:
    """README names the CUDA download a fresh machine would get, beside the CPU command."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "CUDA build" in text
    assert "several GB of NVIDIA libraries" in text
    assert "installs the CPU build of torch" not in text


def _bash_lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def _memforensics_installs(lines: list[str]) -> list[str]:
    """Each ``pip install`` of memforensics in ``lines`` (``a && b`` counts as two commands)."""
    commands = [part.strip() for line in lines for part in re.split(r"&&|;", line.split("#")[0])]
    return [
        command
        for command in commands
        if command.startswith("pip install")
        and any(mark in f" {command}" for mark in ("memforensics", " .", " /", ".whl", "git"))
    ]


def _local_target(target: str) -> bool:
    """A checkout (``.``, ``".[torch]"``), a local folder, or a wheel file: never a URL."""
    target = target.strip("\"'")
    if "://" in target or "git+" in target or "@" in target:
        return False
    return target.startswith((".", "/", "~")) or target.endswith(".whl")


def install_problems(lines: list[str]) -> list[str]:
    """The install commands among ``lines`` that name anything but a local source or wheel."""
    problems = []
    for command in _memforensics_installs(lines):
        targets = [word for word in command.split()[2:] if not word.startswith("-")]
        if not targets or not all(_local_target(target) for target in targets):
            problems.append(command)
    return problems


@pytest.mark.parametrize("page", ["README.md", "docs/quickstart.md", "docs/guide.md"])
def test_install_commands_work_before_release(page: str) -> None:
    """Every `pip install` of memforensics in a page installs from a checkout, a local path or a
    wheel built with `python -m build`: this project has no git repository to install from."""
    lines = _bash_lines(ROOT / page)
    assert _memforensics_installs(lines), f"{page} shows no install command"
    assert install_problems(lines) == []
    assert not any("git+" in line or "github.com" in line for line in lines), page


@pytest.mark.parametrize(
    "line",
    [
        'pip install "git+https://github.com/memforensics/memforensics.git"',
        'pip install "memforensics @ git+https://github.com/memforensics/memforensics.git@main"',
        "pip install memforensics",
        "pip install . && pip install memforensics[torch]",
    ],
)
def test_a_remote_install_line_fails_the_check(line: str) -> None:
    """A git URL or a PyPI name that does not exist yet is caught as an install problem."""
    assert install_problems([line]) == [line.rsplit("&& ", maxsplit=1)[-1]]


def test_readme_opens_with_the_two_commands_that_work() -> None:
    """README's first commands install from the checkout, run the demo, and run the tests."""
    assert _bash_lines(ROOT / "README.md")[:2] == [
        "pip install . && memforensics demo",
        "pip install nox && nox -s tests",
    ]


def test_pages_say_how_to_build_a_wheel() -> None:
    """README and the guide show `python -m build` and installing the wheel it writes."""
    for page in ("README.md", "docs/guide.md"):
        lines = _bash_lines(ROOT / page)
        assert any("python -m build" in line for line in lines), page
        assert any(re.match(r"pip install dist/memforensics-\*\.whl", line) for line in lines)


def test_quickstart_says_torchrun_needs_torch_before_using_it() -> None:
    """The no-GPU path says torchrun comes with torch, which memforensics does not install."""
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    section = text[text.index("## Try it without a GPU") :]
    flat = " ".join(section.split())
    assert "memforensics does not install torch" in flat
    assert section.index("pip install torch") < section.index("torchrun --standalone")
