"""Synthetic snapshots with known truth, for tests, benchmarks and trying the CLI without a GPU.

A real snapshot needs a GPU and an OOM to make; a test needs to *know* what the answer is. The
builder writes exactly the dict ``torch.cuda.memory._snapshot()`` returns (segments with blocks,
``device_traces`` with ``alloc``/``free_*``/``segment_*``/``oom`` entries, frames innermost
first, ``user_metadata: "step=N"``) and keeps the totals it put in, as a :class:`SnapshotTruth`.

    builder = SnapshotBuilder()
    builder.segment(Block(MiB(64), site=TRAIN), Block(MiB(64), state="inactive"))
    builder.oom(requested=MiB(96), device_free=0)
    snapshot, truth = builder.build(), builder.truth()

Scenario functions build the cases the analysis must get right: :func:`fragmented`,
:func:`exhausted`, :func:`growth_pair` and :func:`write_run_folder`.
"""

from __future__ import annotations

import gzip
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ALLOCATED, PENDING_FREE, INACTIVE = "active_allocated", "active_pending_free", "inactive"
_SEGMENT_ALIGN = 2 << 20


def MiB(count: float) -> int:
    """``count`` mebibytes in bytes."""
    return int(count * (1 << 20))


def GiB(count: float) -> int:
    """``count`` gibibytes in bytes."""
    return int(count * (1 << 30))


@dataclass(frozen=True)
class Site:
    """User code that allocates; its frames get a torch frame inside it, as real stacks do."""

    filename: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.line} {self.function}"

    def frames(self) -> list[dict[str, Any]]:
        """Innermost first: torch internals, a C++ frame, this site, then the script's entry."""
        return [
            {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::malloc"},
            {
                "filename": "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
                "line": 125,
                "name": "forward",
            },
            {"filename": self.filename, "line": self.line, "name": self.function},
            {"filename": "/work/train.py", "line": 1, "name": "<module>"},
        ]


TRAIN = Site("/work/model.py", 40, "forward")
OPTIMIZER = Site("/work/optim.py", 12, "step")
CACHE = Site("/work/kv_cache.py", 88, "append")


@dataclass(frozen=True)
class Block:
    """A block to place in a segment: size, allocator state, where and in which step it was made."""

    size: int
    state: str = ALLOCATED
    site: Site | None = TRAIN
    step: int | None = None


@dataclass(frozen=True)
class SnapshotTruth:
    """What the analysis must find in the snapshot the builder made."""

    reserved_bytes: int
    allocated_bytes: int
    active_bytes: int
    free_in_reserved_bytes: int
    largest_free_block_bytes: int
    segments: int
    blocks: int
    site_bytes: dict[str, int]
    step_bytes: dict[int | None, int]
    requested_bytes: int | None = None
    device_free_bytes: int | None = None
    verdict: str = "no-oom"


@dataclass
class SnapshotBuilder:
    """Builds one snapshot dict; ``legacy=True`` writes the older shape (``history``, no address).

    ``steps_on_blocks`` also puts ``user_metadata`` on blocks (as the sim device does); real
    PyTorch keeps it on trace entries only.
    """

    device: int = 0
    legacy: bool = False
    steps_on_blocks: bool = False
    base_address: int = 0x7F00_0000_0000
    start_time_us: int = 1_764_000_000_000_000
    _segments: list[dict[str, Any]] = field(default_factory=list)
    _trace: list[dict[str, Any]] = field(default_factory=list)
    _blocks: list[tuple[Block, int]] = field(default_factory=list)
    _next: int = 0
    _oom: tuple[int, int] | None = None

    def _event(
        self, action: str, addr: int, size: int, site: Site | None, step: int | None, **extra: Any
    ) -> None:
        entry: dict[str, Any] = {
            "action": action,
            "addr": addr,
            "size": size,
            "stream": 0,
            "time_us": self.start_time_us + 10 * len(self._trace),
        }
        entry["frames"] = site.frames() if site else []
        if step is not None:
            entry["user_metadata"] = f"step={step}"
        entry.update(extra)
        self._trace.append(entry)

    def segment(self, *blocks: Block, segment_type: str = "large", expandable: bool = False) -> int:
        """Add a segment made of ``blocks`` (in address order); return its address."""
        total = sum(block.size for block in blocks)
        address = self.base_address + self._next
        self._next += -(-max(total, 1) // _SEGMENT_ALIGN) * _SEGMENT_ALIGN
        self._event("segment_alloc", address, total, blocks[0].site if blocks else None, None)
        raw_blocks, offset = [], address
        for block in blocks:
            raw_blocks.append(self._block(block, offset))
            self._blocks.append((block, offset))
            offset += block.size
        allocated = sum(b.size for b in blocks if b.state == ALLOCATED)
        active = sum(b.size for b in blocks if b.state != INACTIVE)
        segment: dict[str, Any] = {
            "device": self.device,
            "address": address,
            "total_size": total,
            "allocated_size": allocated,
            "active_size": active,
            "requested_size": allocated,
            "stream": 0,
            "segment_type": segment_type,
            "blocks": raw_blocks,
        }
        if not self.legacy:
            segment.update(segment_pool_id=(0, 0), is_expandable=expandable, frames=[])
        self._segments.append(segment)
        return address

    def _block(self, block: Block, address: int) -> dict[str, Any]:
        frames = block.site.frames() if block.site and block.state != INACTIVE else []
        raw: dict[str, Any] = {
            "size": block.size,
            "requested_size": block.size,
            "state": block.state,
        }
        if self.legacy:
            raw["history"] = [{"addr": address, "real_size": block.size, "frames": frames}]
        else:
            raw["address"] = address
            raw["frames"] = frames
        if self.steps_on_blocks and block.step is not None:
            raw["user_metadata"] = f"step={block.step}"
        self._event("alloc", address, block.size, block.site, block.step)
        if block.state != ALLOCATED:
            self._event("free_requested", address, block.size, block.site, block.step)
        if block.state == INACTIVE:
            self._event("free_completed", address, block.size, block.site, block.step)
        return raw

    def churn(
        self, events: int, *, size: int = 512, site: Site | None = TRAIN, step: int | None = None
    ) -> None:
        """Add ``events`` trace entries of short-lived allocations (alloc, then both frees)."""
        address = self.base_address + self._next + (1 << 40)
        for index in range(events):
            action = ("alloc", "free_requested", "free_completed")[index % 3]
            self._event(action, address + (index // 3) * size, size, site, step)

    def oom(self, *, requested: int, device_free: int) -> None:
        """Record a failed allocation as the last trace entry (as the allocator does)."""
        self._oom = (requested, device_free)
        self._event("oom", 0, requested, TRAIN, None, device_free=device_free)

    def build(self) -> dict[str, Any]:
        """The snapshot dict (share nothing with the builder: build it once per use)."""
        snapshot: dict[str, Any] = {"segments": self._segments, "device_traces": [[]]}
        snapshot["device_traces"] = [[] for _ in range(self.device)] + [self._trace]
        if not self.legacy:
            snapshot["allocator_settings"] = {
                "PYTORCH_CUDA_ALLOC_CONF": "",
                "expandable_segments": False,
            }
        return snapshot

    def truth(self, *, device_total: int | None = None) -> SnapshotTruth:
        """Totals of what was put in, and the verdict the OOM (if any) deserves."""
        sizes = {
            state: [b.size for b, _ in self._blocks if b.state == state]
            for state in (ALLOCATED, PENDING_FREE, INACTIVE)
        }
        site_bytes: dict[str, int] = {}
        step_bytes: dict[int | None, int] = {}
        for block, _ in self._blocks:
            if block.state == ALLOCATED:
                key = str(block.site) if block.site else "<before recording>"
                site_bytes[key] = site_bytes.get(key, 0) + block.size
                step_bytes[block.step] = step_bytes.get(block.step, 0) + block.size
        reserved = sum(segment["total_size"] for segment in self._segments)
        free, largest = sum(sizes[INACTIVE]), max(sizes[INACTIVE], default=0)
        verdict, requested, device_free = "no-oom", None, None
        if self._oom is not None:
            requested, device_free = self._oom
            headroom = device_free
            if device_total is not None:
                headroom = min(headroom, max(device_total - reserved, 0))
            fits = free + headroom >= requested
            verdict = "fragmentation" if largest < requested and fits else "exhausted"
        return SnapshotTruth(
            reserved_bytes=reserved,
            allocated_bytes=sum(sizes[ALLOCATED]),
            active_bytes=sum(sizes[ALLOCATED]) + sum(sizes[PENDING_FREE]),
            free_in_reserved_bytes=free,
            largest_free_block_bytes=largest,
            segments=len(self._segments),
            blocks=len(self._blocks),
            site_bytes=site_bytes,
            step_bytes=step_bytes,
            requested_bytes=requested,
            device_free_bytes=device_free,
            verdict=verdict,
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
        name = path.name.removesuffix(".gz").removesuffix(".pickle").removesuffix(".pkl")
        side = dict(sidecar, snapshot_file=path.name, snapshot_bytes=path.stat().st_size)
        path.with_name(f"{name}.json").write_text(json.dumps(side, indent=1))
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
