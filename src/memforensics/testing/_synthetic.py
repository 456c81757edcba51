"""Synthetic snapshots with known truth, for tests, benchmarks and trying the CLI without a GPU.

A real snapshot needs a GPU and an OOM to make; a test needs to *know* what the answer is. The
builder writes exactly the dict ``torch.cuda.memory._snapshot()`` returns (segments with blocks,
``device_traces`` with ``alloc``/``free_*``/``segment_*``/``oom`` entries, frames innermost
first, ``user_metadata: "step=N"``) and keeps the totals it put in, as a :class:`SnapshotTruth`.

    builder = SnapshotBuilder()
    builder.segment(Block(MiB(64), site=TRAIN), Block(MiB(64), state="inactive"))
    builder.oom(requested=MiB(96), device_free=0)
    snapshot, truth = builder.build(), builder.truth()

The scenario functions built on it (:func:`fragmented`, :func:`exhausted`, :func:`growth_pair`,
:func:`write_run_folder`) and the dump files they write live in
:mod:`memforensics.testing._scenarios`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    inside: tuple[tuple[str, int, str], ...] = (
        ("/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", 125, "forward"),
    )
    """The torch or library frames this line calls into, innermost first (file, line, name)."""
    outside: tuple[tuple[str, int, str], ...] = (("/job/train.py", 1, "<module>"),)
    """The frames that call this line, innermost first (file, line, name)."""

    def __str__(self) -> str:
        return f"{self.filename}:{self.line} {self.function}"

    def frames(self) -> list[dict[str, Any]]:
        """Innermost first: a C++ frame, torch internals, this site, then its callers."""
        native = {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::malloc"}
        return [
            native,
            *({"filename": file, "line": line, "name": name} for file, line, name in self.inside),
            {"filename": self.filename, "line": self.line, "name": self.function},
            *({"filename": file, "line": line, "name": name} for file, line, name in self.outside),
        ]


@dataclass(frozen=True)
class NativeStack:
    """A stack with no Python frame, as ``stacks="all"`` records one: ``(file, name)`` pairs,
    innermost first. Its site is ``<no Python frames>`` (what ``str`` gives, for the truth's
    keys)."""

    frames_: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        return NO_PYTHON

    def frames(self) -> list[dict[str, Any]]:
        """The frames as the snapshot holds them (line 0: the unwinder knows none)."""
        return [{"filename": file, "line": 0, "name": name} for file, name in self.frames_]


AUTOGRAD_THREAD = NativeStack(
    (
        ("CUDACachingAllocator.cpp", "c10::cuda::CUDACachingAllocator::Native::malloc"),
        ("??", "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)"),
        ("??", "torch::autograd::Engine::evaluate_function(std::shared_ptr<GraphTask>&)"),
        ("??", "torch::autograd::Engine::thread_main(std::shared_ptr<GraphTask> const&)"),
        ("thread48.o", "execute_native_thread_routine"),
        ("??", "start_thread"),
        ("clone3.S", "__clone3"),
    )
)
"""Autograd's backward thread as a real ``stacks="all"`` dump records it: libstdc++'s
``thread48.o`` and libc's ``clone3.S`` below the engine, not one Python frame."""

TRAIN = Site("/job/model.py", 40, "forward")
OPTIMIZER = Site("/job/optim.py", 12, "step")
CACHE = Site("/job/kv_cache.py", 88, "append")


NO_PYTHON = "<no Python frames>"
BEFORE_RECORDING = "<before recording>"


@dataclass(frozen=True)
class Block:
    """A block to place in a segment: size, allocator state, where and in which step it was made.

    ``size`` is the block's (rounded) size; ``requested`` what the caller asked for, which the
    trace's entries carry (None: the same as ``size``). ``site`` None: no frames, which in a
    trace that records stacks means no Python was on the stack (autograd's backward thread
    with ``stacks="python"``). ``recorded`` False: allocated before recording began, so the
    trace holds no ``alloc`` for it (its frees, if any, are recorded).
    """

    size: int
    state: str = ALLOCATED
    site: Site | NativeStack | None = TRAIN
    step: int | None = None
    unwound: bool = False  # live at the OOM (or until release()), freed after (inactive at the end)
    requested: int | None = None
    recorded: bool = True

    @property
    def final_state(self) -> str:
        """The block's state in the snapshot (after any unwinding)."""
        return INACTIVE if self.unwound else self.state

    @property
    def requested_size(self) -> int:
        """What the caller asked for."""
        return self.size if self.requested is None else self.requested


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
    oom_allocated_bytes: int | None = None  # live at the OOM (before any unwinding)
    oom_site_bytes: dict[str, int] = field(default_factory=dict)  # sites live at the OOM
    allocated_requested_bytes: int = 0  # what the callers of the allocated blocks asked for


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
    _unwound: list[tuple[Block, int]] = field(default_factory=list)

    def _event(
        self,
        action: str,
        addr: int,
        size: int,
        site: Site | NativeStack | None,
        step: int | None,
        **extra: Any,
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
        allocated = sum(b.size for b in blocks if b.final_state == ALLOCATED)
        active = sum(b.size for b in blocks if b.final_state != INACTIVE)
        segment: dict[str, Any] = {
            "device": self.device,
            "address": address,
            "total_size": total,
            "allocated_size": allocated,
            "active_size": active,
            "requested_size": sum(b.requested_size for b in blocks if b.state == ALLOCATED),
            "stream": 0,
            "segment_type": segment_type,
            "blocks": raw_blocks,
        }
        if not self.legacy:
            segment.update(segment_pool_id=(0, 0), is_expandable=expandable, frames=[])
        self._segments.append(segment)
        return address

    def _block(self, block: Block, address: int) -> dict[str, Any]:
        frames = block.site.frames() if block.site and block.final_state != INACTIVE else []
        raw: dict[str, Any] = {
            "size": block.size,
            "requested_size": block.requested_size,
            "state": block.final_state,
        }
        if self.legacy:
            raw["history"] = [
                {"addr": address, "real_size": block.requested_size, "frames": frames}
            ]
        else:
            raw["address"] = address
            raw["frames"] = frames
        if self.steps_on_blocks and block.step is not None:
            raw["user_metadata"] = f"step={block.step}"
        asked = block.requested_size
        if block.recorded:
            self._event("alloc", address, asked, block.site, block.step)
        if block.unwound:
            self._unwound.append((block, address))
        elif block.state != ALLOCATED:
            self._event("free_requested", address, asked, block.site, block.step)
        if block.state == INACTIVE:
            self._event("free_completed", address, asked, block.site, block.step)
        return raw

    def churn(
        self,
        events: int,
        *,
        size: int = 512,
        site: Site | NativeStack | None = TRAIN,
        step: int | None = None,
    ) -> None:
        """Add ``events`` trace entries of short-lived allocations (alloc, then both frees)."""
        address = self.base_address + self._next + (1 << 40)
        for index in range(events):
            action = ("alloc", "free_requested", "free_completed")[index % 3]
            self._event(action, address + (index // 3) * size, size, site, step)

    def oom(self, *, requested: int, device_free: int) -> None:
        """Record a failed allocation (as the allocator does), then the unwinding: the frees of
        every block marked ``unwound``, as the exception releases what the step held."""
        self._oom = (requested, device_free)
        self._event("oom", 0, requested, TRAIN, None, device_free=device_free)
        for block, address in self._unwound:
            self._event("free_requested", address, block.requested_size, block.site, block.step)
            self._event("free_completed", address, block.requested_size, block.site, block.step)

    def release(self) -> None:
        """Free every block marked ``unwound``, as the end of a step frees its activations
        (the same frees :meth:`oom` records after its failed allocation, without one)."""
        for block, address in self._unwound:
            self._event("free_requested", address, block.requested_size, block.site, block.step)
            self._event("free_completed", address, block.requested_size, block.site, block.step)
        self._unwound.clear()

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

    @staticmethod
    def _site_key(block: Block, stacks: bool) -> str:
        """The site the analysis must name ``block`` by: its own, else without frames
        ``<no Python frames>`` when the trace recorded its allocation with stacks, else
        ``<before recording>``."""
        if block.site:
            return str(block.site)
        return NO_PYTHON if block.recorded and stacks else BEFORE_RECORDING

    def truth(self, *, device_total: int | None = None) -> SnapshotTruth:
        """Totals of what was put in, and the verdict the OOM (if any) deserves."""
        sizes = {
            state: [b.size for b, _ in self._blocks if b.final_state == state]
            for state in (ALLOCATED, PENDING_FREE, INACTIVE)
        }
        site_bytes: dict[str, int] = {}
        oom_site_bytes: dict[str, int] = {}
        step_bytes: dict[int | None, int] = {}
        stacks = any(entry["action"] == "alloc" and entry["frames"] for entry in self._trace)
        for block, _ in self._blocks:
            key = self._site_key(block, stacks)
            if block.state == ALLOCATED:
                oom_site_bytes[key] = oom_site_bytes.get(key, 0) + block.size
            if block.final_state == ALLOCATED:
                site_bytes[key] = site_bytes.get(key, 0) + block.size
                step_bytes[block.step] = step_bytes.get(block.step, 0) + block.size
        reserved = sum(segment["total_size"] for segment in self._segments)
        free, largest = sum(sizes[INACTIVE]), max(sizes[INACTIVE], default=0)
        verdict, requested, device_free, oom_allocated = "no-oom", None, None, None
        if self._oom is not None:
            requested, device_free = self._oom
            headroom = device_free
            if device_total is not None:
                headroom = min(headroom, max(device_total - reserved, 0))
            holes = [b.size for b, _ in self._blocks if b.state == INACTIVE]  # at the OOM
            fits = sum(holes) + headroom >= requested
            verdict = "fragmentation" if max(holes, default=0) < requested and fits else "exhausted"
            oom_allocated = sum(b.size for b, _ in self._blocks if b.state == ALLOCATED)
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
            oom_allocated_bytes=oom_allocated,
            oom_site_bytes=oom_site_bytes if self._oom is not None else {},
            allocated_requested_bytes=sum(
                b.requested_size for b, _ in self._blocks if b.state == ALLOCATED
            ),
        )
