"""Developer sessions: ``nox -s tests`` is the command README.md and CI both run."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox
import nox.command

nox.options.sessions = [
    "tests", "tests_notorch", "integrations", "frameworks", "lint", "typecheck",
]  # fmt: skip
nox.options.reuse_existing_virtualenvs = True

# The CPU build of torch 2.13.0 ships on this project's machines (a local wheel pip finds).
# Elsewhere PyPI's torch 2.13.0 is the CUDA build (GBs with its NVIDIA libraries): set
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu to take torch from PyTorch's CPU index.
TORCH = "torch==2.13.0"
TEST_DEPS = ["pytest>=8", "hypothesis>=6.100"]


def install_torch(session: nox.Session) -> None:
    """torch (from $TORCH_INDEX_URL when set), then numpy: without it importing torch warns,
    and warnings are errors in tests."""
    index = os.environ.get("TORCH_INDEX_URL")
    session.install(TORCH, *(["--index-url", index] if index else []))
    session.install("numpy")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit and integration tests, with the real CPU torch installed."""
    install_torch(session)
    session.install("-e", ".[test]")
    session.run("pytest", "tests", *session.posargs)


@nox.session
def tests_notorch(session: nox.Session) -> None:
    """The core without torch: proves nothing outside the adapters needs it."""
    session.install("-e", ".", *TEST_DEPS)
    session.run(
        "python",
        "-c",
        "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)",
    )
    session.run(
        "pytest",
        "tests",
        "-m",
        "not torch and not gpu and not stress and not extras and not frameworks and not newcomer",
        *session.posargs,
    )


@nox.session
def integrations(session: nox.Session) -> None:
    """The optional integrations (Lightning, transformers) against the real libraries,
    bitsandbytes' 4-bit weights under plan (its CPU-capable wheel, for that test alone), and
    the training-loop libraries whose callbacks the plan answers (PyTorch-Ignite, skorch)."""
    install_torch(session)
    session.install(
        "-e",
        ".[lightning,transformers]",
        *TEST_DEPS,
        "bitsandbytes>=0.50",
        "pytorch-ignite>=0.5",
        "skorch>=1.0",
    )
    session.run("pytest", "tests", "-m", "extras", *session.posargs)


@nox.session
def frameworks(session: nox.Session) -> None:
    """The adapters and the verl mapping against the newest torch_npu and verl on PyPI.

    The wheels are downloaded, never installed: torch_npu's sources are read with ``ast``
    (importing it needs CANN), verl's generated configs are resolved with OmegaConf.
    """
    wheels = Path(session.create_tmp()) / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    session.run(
        "python", "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
        "--dest", str(wheels), "torch_npu", "verl",
    )  # fmt: skip
    session.install("-e", ".", *TEST_DEPS, "omegaconf")
    session.run(
        "pytest",
        "tests/frameworks",
        "-m",
        "frameworks",
        *session.posargs,
        env={"MEMFORENSICS_FRAMEWORK_WHEELS": str(wheels)},
    )


@nox.session
def newcomer(session: nox.Session) -> None:
    """README's first command as a new user meets it: a clone of HEAD in a temporary folder, a
    fresh virtual environment, ``pip install .`` and ``memforensics demo`` (pip's index only)."""
    session.install("-e", ".", *TEST_DEPS)
    session.run("pytest", "tests/integration/test_newcomer.py", "-m", "newcomer", *session.posargs)


@nox.session
def stress(session: nox.Session) -> None:
    """Heavy fault-injection variants (kills, OOM storms, 16 ranks); prints the figures reached."""
    install_torch(session)
    session.install("-e", ".", *TEST_DEPS)
    session.run("pytest", "tests", "-m", "stress", "-p", "no:cacheprovider", *session.posargs)


@nox.session
def browser(session: nox.Session) -> None:
    """The report and overview pages in a real headless Chromium (apt: chromium chromium-driver)."""
    session.install("-e", ".", *TEST_DEPS, "selenium>=4.10")
    pages = [f"tests/integration/test_{page}_browser.py" for page in ("report", "overview")]
    session.run("pytest", *pages, "-m", "browser", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff lint and format check, then the layering contract (pyproject's [tool.importlinter]):
    no import cycles, analysis without capture or torch, the CLI on public analysis names."""
    session.install("ruff>=0.6", "import-linter>=2.1")
    session.run("ruff", "check", "src", "tests", "benchmarks", "noxfile.py")
    session.run("ruff", "format", "--check", "src", "tests", "benchmarks", "noxfile.py")
    # import-linter reads the sources without importing them: finding the package is enough
    session.run("lint-imports", env={"PYTHONPATH": "src"})


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the library."""
    session.install("mypy>=1.10", "-e", ".")
    session.run("mypy", "--strict", "src")


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """Real-accelerator tests, then the real-GPU check (benchmarks/gpu_truth.py, under 8 minutes),
    in the current interpreter whose torch already sees the device."""
    session.run("python", "-m", "pip", "install", "-q", "-e", ".", *TEST_DEPS)
    try:  # a failing test must not cost the check's figures: GPU time comes rarely
        session.run("pytest", "tests/gpu", "-m", "gpu", *session.posargs)
        tests_failed = False
    except nox.command.CommandFailed:
        tests_failed = True
    session.run(
        "python",
        "benchmarks/gpu_truth.py",
        "--device",
        "cuda",
        "--out",
        "gpu_truth.json",
        "--archive",
        "benchmarks/gpu",
    )
    if tests_failed:
        session.error("tests/gpu failed (the check above still ran and wrote gpu_truth.json)")


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks (ratios against references measured in the same run); not part of tests."""
    install_torch(session)
    session.install("-e", ".")
    session.run("python", "benchmarks/run.py", *session.posargs)
