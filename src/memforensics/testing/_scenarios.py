"""Synthetic dumps on disk and the scenarios the analysis must get right.

:mod:`memforensics.testing._synthetic` builds snapshots; this module writes them as
memforensics does (pickle plus JSON sidecar, named as :mod:`memforensics._layout` names them)
and names the cases with known answers: :func:`fragmented`, :func:`exhausted`,
:func:`growth_pair`, :func:`context_pair` and :func:`write_run_folder`.
"""

from __future__ import annotations

import gzip
import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memforensics._layout import sidecar_path
from memforensics.testing._synthetic import (
    CACHE,
    INACTIVE,
    OPTIMIZER,
    TRAIN,
    Block,
    GiB,
    MiB,
    Site,
    SnapshotBuilder,
    SnapshotTruth,
)


@dataclass(frozen=True)
class SyntheticDump:
    """A snapshot, the sidecar to write beside it (or None), and the truth about it."""

    snapshot: dict[str, Any]
    sidecar: dict[str, Any] | None
    truth: SnapshotTruth

    def write(self, path: Path, *, gz: bool = False) -> Path:
        """Write the pickle (gzip if ``gz``) and its sidecar, as memforensics does."""
        return write_dump(path, self.snapshot, sidecar=self.sidecar, gz=gz)


def make_sidecar(kind: str = "window", **fields: Any) -> dict[str, Any]:
    """A sidecar with every contract key (unknown values null); ``fields`` override them."""
    sidecar: dict[str, Any] = {
        "schema": 1,
        "kind": kind,
        "rank": 0,
        "world_size": 1,
        "hostname": "node0",
        "pid": 1234,
        "device": "cuda",
        "device_index": 0,
        "steps": None,
        "step": None,
        "created_at": "2026-11-30T10:11:12.000000+00:00",
        "snapshot_file": None,
        "snapshot_bytes": None,
        "torch_version": "2.13.0",
        "memforensics_version": "0",
        "partial": False,
        "truncated": False,
    }
    if kind == "oom":
        sidecar["oom"] = {
            "requested_bytes": None,
            "device_total_bytes": None,
            "device_free_bytes": None,
            "stack": None,
            "allocator": None,
        }
    sidecar.update(fields)
    return sidecar


def write_dump(
    path: Path,
    snapshot: Any,
    *,
    sidecar: dict[str, Any] | None = None,
    gz: bool = False,
    protocol: int = 4,
) -> Path:
    """Pickle ``snapshot`` (protocol 4 unless told) to ``path``, ``sidecar`` beside it as JSON.

    ``x.pickle``, ``x.pkl`` and their ``.gz`` forms all get the sidecar ``x.json``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    data = pickle.dumps(snapshot, protocol=protocol)
    path.write_bytes(gzip.compress(data) if gz else data)
    if sidecar is not None:
        side = dict(sidecar, snapshot_file=path.name, snapshot_bytes=path.stat().st_size)
        sidecar_path(path).write_text(json.dumps(side, indent=1))
    return path


def fragmented(*, legacy: bool = False) -> SyntheticDump:
    """Eight 64 MiB segments, each half live in 8 MiB stripes: 256 MiB free, no hole over 8 MiB.

    A 32 MiB request with 0 bytes free on the device fails: fragmentation.
    """
    builder = SnapshotBuilder(legacy=legacy)
    for _ in range(8):
        stripes = [Block(MiB(8), site=TRAIN), Block(MiB(8), state=INACTIVE, site=None)] * 4
        builder.segment(*stripes)
    builder.oom(requested=MiB(32), device_free=0)
    oom = {
        "requested_bytes": MiB(32),
        "device_free_bytes": 0,
        "device_total_bytes": GiB(80),
        "stack": None,
        "allocator": None,
    }
    sidecar = make_sidecar("oom", step=12, oom=oom)
    return SyntheticDump(builder.build(), sidecar, builder.truth())


def exhausted(*, with_sidecar: bool = True) -> SyntheticDump:
    """Two sites fill 3.5 GiB of live memory; a 1 GiB request meets 64 MiB free: exhausted."""
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(2), site=TRAIN), Block(MiB(32), state=INACTIVE, site=None))
    builder.segment(Block(GiB(1), site=OPTIMIZER), Block(MiB(512), site=CACHE))
    builder.oom(requested=GiB(1), device_free=MiB(32))
    oom = {
        "requested_bytes": GiB(1),
        "device_free_bytes": MiB(32),
        "device_total_bytes": None,
        "stack": None,
        "allocator": None,
    }
    sidecar = make_sidecar("oom", step=3, oom=oom) if with_sidecar else None
    return SyntheticDump(builder.build(), sidecar, builder.truth())


UPDATE = Site("/job/gnn.py", 57, "update_nodes")
RELU = Site("/job/gnn.py", 61, "relu")
GATHER = Site("/job/gnn.py", 64, "gather")
REPLICA = Site("/job/parallel.py", 90, "replicate")


def unwound_oom() -> SyntheticDump:
    """An OOM dump taken after the exception unwound: 78 GiB live at the OOM, 240 MiB after.

    ``update_nodes`` (30 GiB), ``relu`` (24 GiB) and ``gather`` (24 GiB) were live when a 2 GiB
    request met 512 MiB free on an 80 GiB device; the unwinding freed them before the snapshot,
    which holds only ``replicate``'s 240 MiB. The truth's ``oom_*`` figures are those at the OOM.
    """
    builder = SnapshotBuilder()
    builder.segment(Block(GiB(30), site=UPDATE, unwound=True))
    builder.segment(Block(GiB(24), site=RELU, unwound=True))
    builder.segment(Block(GiB(24), site=GATHER, unwound=True))
    builder.segment(Block(MiB(240), site=REPLICA), Block(MiB(16), state=INACTIVE, site=None))
    builder.oom(requested=GiB(2), device_free=MiB(512))
    oom = {
        "requested_bytes": GiB(2),
        "device_free_bytes": MiB(512),
        "device_total_bytes": GiB(80),
        "stack": None,
        "allocator": None,
    }
    sidecar = make_sidecar("oom", step=7, oom=oom)
    return SyntheticDump(builder.build(), sidecar, builder.truth(device_total=GiB(80)))


def growth_pair() -> tuple[SyntheticDump, SyntheticDump]:
    """Windows steps 4-7 and 100-103: the KV cache keeps one 16 MiB block from every step.

    Known truth: CACHE grows by 96 x 16 MiB (steps 8..103), TRAIN and OPTIMIZER stay flat;
    the leak suspects are the 92 CACHE blocks of steps 8..99. Optimizer state from step 0 is
    live in both, so it is steady state, not a suspect.
    """

    def build(window: tuple[int, int], cache_steps: range) -> SyntheticDump:
        builder = SnapshotBuilder()
        builder.segment(Block(MiB(256), site=TRAIN), Block(MiB(128), site=OPTIMIZER, step=0))
        cache = [Block(MiB(16), site=CACHE, step=step) for step in cache_steps]
        builder.segment(*cache)
        builder.churn(30, step=window[0])
        sidecar = make_sidecar("window", steps=list(window))
        return SyntheticDump(builder.build(), sidecar, builder.truth())

    return build((4, 7), range(4, 8)), build((100, 103), range(4, 104))


ATTENTION = Site("/job/model.py", 71, "attention")
POSITIONS = Site("/job/model.py", 30, "position_ids")


def context_pair() -> tuple[SyntheticDump, SyntheticDump]:
    """The same model at context 100 and at context 200: the peaks differ, the ends barely.

    Known truth: 256 MiB of weights (TRAIN) in both. At the peak, ATTENTION holds 138 MiB of
    activations at context 100 and 584 MiB at 200, each in a segment of its own, freed by the
    step's end and kept cached. At the end only a 168 KiB position-id block (POSITIONS) more
    is live in AFTER: peaks 394 MiB → 840 MiB, final states +168 KiB.
    """

    def build(activations: int, positions: int) -> SyntheticDump:
        builder = SnapshotBuilder()
        builder.segment(Block(MiB(256), site=TRAIN))
        small = MiB(2) - positions
        builder.segment(Block(positions, site=POSITIONS), Block(small, state=INACTIVE, site=None))
        builder.segment(*(Block(MiB(2), site=ATTENTION, unwound=True) for _ in range(activations)))
        builder.release()
        return SyntheticDump(builder.build(), make_sidecar("window", steps=[0, 0]), builder.truth())

    return build(69, 512 * 2), build(292, 512 * 2 + 168 * 1024)


@dataclass(frozen=True)
class RunTruth:
    """What ``ls`` must report for the folder :func:`write_run_folder` made."""

    dumps: int
    first_oom_rank: int
    first_oom_step: int
    first_oom_path: Path
    ranks: tuple[int, ...]


def write_run_folder(root: Path, *, world_size: int = 4) -> RunTruth:
    """A run folder as many ranks leave it: windows on rank 0, OOMs on every rank but 0.

    Rank ``world_size - 1`` fails first (at step 12); the others a second later, in rank order.
    Also present: a dump without a sidecar, a broken sidecar, a stray log and a temp file.
    """
    base = exhausted()
    dumps = 0
    window = root / "steps4-7" / "rank0_pid100.pickle"
    write_dump(window, base.snapshot, sidecar=make_sidecar("window", steps=[4, 7], pid=100))
    dumps += 1
    first = None
    for rank in range(1, world_size):
        second = 13 if rank == world_size - 1 else 14 + rank
        stamp = f"20261130-101112-{second:06d}"
        name = f"rank{rank}_pid{100 + rank}_step12_{stamp}.pickle"
        created = f"2026-11-30T10:11:{second:02d}.000000+00:00"
        sidecar = make_sidecar(
            "oom",
            rank=rank,
            step=12,
            world_size=world_size,
            created_at=created,
            pid=100 + rank,
            oom=base.sidecar["oom"] if base.sidecar else None,
        )
        path = write_dump(root / "oom" / name, base.snapshot, sidecar=sidecar)
        dumps += 1
        if rank == world_size - 1:
            first = path
    write_dump(
        root / "manual" / "rank0_pid100_20261130-101500-000000.pickle.gz", base.snapshot, gz=True
    )
    (root / "manual" / "broken.pickle").write_bytes(b"\x80\x04not a pickle")
    (root / "manual" / "broken.json").write_text("{not json")
    dumps += 2
    (root / "train.log").write_text("stray file\n")
    (root / "oom" / ".rank9_pid1.pickle.tmp").write_bytes(b"partial")
    assert first is not None
    return RunTruth(dumps, world_size - 1, 12, first, tuple(range(world_size)))
