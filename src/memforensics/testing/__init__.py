"""Test helpers that ship with memforensics: synthetic snapshots with known truth, and the
simulated ``sim`` device (a caching allocator in pure Python) for tests without an accelerator."""

from memforensics.backends.sim import (
    SimBackend,
    SimDevice,
    SimOutOfMemoryError,
    SimTensor,
    get_device,
    reset_device,
)
from memforensics.testing._journals import JournalTruth, write_journals
from memforensics.testing._synthetic import (
    CACHE,
    OPTIMIZER,
    TRAIN,
    Block,
    GiB,
    MiB,
    RunTruth,
    Site,
    SnapshotBuilder,
    SnapshotTruth,
    SyntheticDump,
    exhausted,
    fragmented,
    growth_pair,
    make_sidecar,
    write_dump,
    write_run_folder,
)

__all__ = [
    "CACHE",
    "OPTIMIZER",
    "TRAIN",
    "Block",
    "GiB",
    "JournalTruth",
    "MiB",
    "RunTruth",
    "SimBackend",
    "SimDevice",
    "SimOutOfMemoryError",
    "SimTensor",
    "Site",
    "SnapshotBuilder",
    "SnapshotTruth",
    "SyntheticDump",
    "exhausted",
    "fragmented",
    "get_device",
    "growth_pair",
    "make_sidecar",
    "reset_device",
    "write_dump",
    "write_journals",
    "write_run_folder",
]
