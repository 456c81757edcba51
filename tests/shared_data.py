"""Where the shared real data lives, for every test that reads it.

The real GPU snapshots and the real workloads were recorded on machines with accelerators and
are kept outside the repository (they are large and not ours to redistribute).
``MEMFORENSICS_SHARED_DATA`` names their folder (a relative name is taken from the checkout's
root); unset, it is ``../shared/data`` beside the checkout. Where that folder is absent, as in
a user's fresh clone, each test that needs it skips with the one reason :data:`REASON`, which
names the variable. CI (``.ci/run``) sets the variable and stops when the folder is missing, so
there these tests always run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

ENV = "MEMFORENSICS_SHARED_DATA"
CHECKOUT = Path(__file__).resolve().parents[1]


def _folder() -> Path:
    named = os.environ.get(ENV)
    return CHECKOUT / named if named else CHECKOUT.parent / "shared" / "data"


SHARED_DATA = _folder()
"""The folder of the shared real data (it may be absent)."""
REAL_SNAPSHOTS = SHARED_DATA / "real-snapshots"
"""Real allocator snapshots, as PyTorch wrote them on real GPUs (README.md there says how)."""
REAL_WORKLOADS = SHARED_DATA / "real-workloads"
"""Real training scripts with the snapshot each wrote on a real GPU and its truth.json."""
PRESENT = SHARED_DATA.is_dir()
REASON = f"needs the shared real data: set {ENV} to its folder (not found at {SHARED_DATA})"

needs_shared_data = pytest.mark.skipif(not PRESENT, reason=REASON)
"""Mark of a test that reads the shared real data: it skips, saying why, where it is absent."""


def real_snapshots() -> list[Path]:
    """Every real snapshot, sorted by name; none where the shared data is absent."""
    return sorted(REAL_SNAPSHOTS.glob("*.pickle")) if PRESENT else []


def real_params(values: Iterable[Any], width: int = 1) -> list[Any]:
    """``values`` as the parameters of a test of the shared data (``width`` names each); where
    the data is absent, one parameter set that skips with :data:`REASON` (an empty list would
    skip with pytest's own words, which name nothing)."""
    if PRESENT:
        return list(values)
    placeholder = [None] * width
    return [pytest.param(*placeholder, marks=pytest.mark.skip(reason=REASON), id="no-shared-data")]
