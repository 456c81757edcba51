"""The downloaded wheels the framework checks read (``nox -s frameworks`` downloads them).

The wheels are never installed or imported: their sources are read from the zip files, Python
with ``ast``. A missing wheel is a failure, not a skip: these checks exist to run.
"""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

WHEELS_ENV = "MEMFORENSICS_FRAMEWORK_WHEELS"

# torchfakes holds the recorded torch_npu signatures these checks compare with the real wheel.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))


def _wheel(name: str) -> Path:
    folder = os.environ.get(WHEELS_ENV)
    if not folder:
        pytest.fail(f"set {WHEELS_ENV} to a folder of downloaded wheels (nox -s frameworks does)")
    found = sorted(Path(folder).glob(f"{name}-*.whl"))
    if not found:
        pytest.fail(f"no {name} wheel in {folder}: run `pip download --no-deps {name}` there")
    return found[-1]


@pytest.fixture(scope="session")
def torch_npu_wheel() -> Iterator[zipfile.ZipFile]:
    """The newest torch_npu wheel, opened as a zip."""
    with zipfile.ZipFile(_wheel("torch_npu")) as wheel:
        yield wheel


@pytest.fixture(scope="session")
def verl_wheel() -> Iterator[zipfile.ZipFile]:
    """The newest verl wheel, opened as a zip."""
    with zipfile.ZipFile(_wheel("verl")) as wheel:
        yield wheel
