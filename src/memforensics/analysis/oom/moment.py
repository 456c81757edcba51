"""The allocator state at the moment of the OOM, and the memory outside PyTorch then.

An OOM dump is taken inside the OOM observer, so its final state *is* the state at the OOM. A
window dump that contains the OOM goes on recording: the exception unwinds, activations are
freed, maybe the cache is emptied. Judging it on its final state judges the wrong moment; its
state at the trace's ``oom`` entry is the final state with every later event undone
(:mod:`~memforensics.analysis.oom.history`). When that cannot be done (a later event
contradicts the state) the moment is unknown, and the verdict says so rather than guess.

Two sizes name the failed allocation and they differ: ``requested_bytes`` is the user's request
rounded to the block size (the trace's ``oom`` entry: 5.02 MiB), ``allocation_bytes`` what the
allocator asked the device for (the observer's second argument, printed by PyTorch's error
message: a whole 20 MiB segment for a 1-10 MiB request). Sidecars of schema 1 stored the latter
under ``requested_bytes``; schema 2 stores both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from memforensics._units import format_bytes as fmt
from memforensics._units import outside_pytorch_bytes
from memforensics.allocator import (
    K_SMALL_SIZE,
    AllocatorSettings,
    Block,
    ConfRules,
    DeviceCachingAllocator,
    RecordedSettings,
    get_allocation_size,
    read_snapshot_settings,
    round_size,
    rules_for,
    seed_expandable,
    seed_segment,
)
from memforensics.analysis.dump import (
    BEFORE_RECORDING,
    INACTIVE,
    NATIVE_ONLY,
    UNKNOWN_SITE,
    Dump,
    as_int,
    site_of,
)
from memforensics.analysis.oom.history import (
    AllocatorState,
    changes_after,
    has_history,
    state_before,
)
from memforensics.analysis.schema import json_key

# Could a recorded allocator state serve a request? The allocator model answers, not a guess.
#
# Whether a request fits is the allocator's decision: the pool by size (small up to 1 MiB), the
# stream, the rounding, the oversize rule of ``max_split_size_mb`` (and
# ``max_non_split_rounding_mb``), expandable segments, and a fresh segment from the device's free
# memory. Comparing the request with the largest free block gets those wrong both ways, so the
# state is put into :class:`~memforensics.allocator.DeviceCachingAllocator` block for block and
# the request asked of it. Seeding reads the state alone (no trace): the replay's self-check
# seeds its start layout with the same :func:`seed_state`.

ExpandableBase = Callable[[int, bool, int], "int | None"]
"""``(stream, is_small, first mapped address) -> where the address space begins`` (None: at
that first range)."""


def seed_state(
    model: DeviceCachingAllocator,
    state: AllocatorState,
    base_of: ExpandableBase | None = None,
) -> dict[int, Block]:
    """Put ``state`` into ``model`` block for block at the real addresses; real address ->
    model block for its live blocks. Each stream's and pool's expandable ranges form one
    address space, starting where ``base_of`` says."""
    by_addr: dict[int, Block] = {}
    groups: dict[tuple[int, bool], list[tuple[int, int, list[tuple[int, int, int, bool]]]]] = {}
    for segment in state.segments:
        live = [(b.address, b.size or 0, b.requested, b.pending) for b in segment.blocks]
        if segment.expandable:
            key = (segment.stream, segment.is_small)
            groups.setdefault(key, []).append((segment.address, segment.size, live))
            continue
        placed = seed_segment(
            model, segment.address, segment.size, segment.stream, segment.is_small, live
        )
        by_addr.update((block.address, block) for block in placed)
    for (stream, is_small), ranges in sorted(groups.items()):
        first = min(address for address, _size, _live in ranges)
        base = base_of(stream, is_small, first) if base_of is not None else None
        placed = seed_expandable(model, stream, is_small, ranges, base)
        by_addr.update((block.address, block) for block in placed)
    return by_addr


@dataclass(frozen=True, slots=True)
class ServeRoute:
    """How the allocator model served a request: what it had to do first. All zero: a cached
    block of the request's pool and stream served it."""

    waited_for_bytes: int = 0
    """Blocks freed on one stream and waiting for another's events, freed by waiting for them
    (``synchronize_and_free_events``): the route assumes those events complete."""
    released_segments: int = 0
    released_bytes: int = 0
    """Cached segments given back to the device (``release_cached_blocks``) before a new one."""
    new_segment_bytes: int = 0
    """The new segment (``cudaMalloc``) or mapped pages that served it."""


def could_serve(
    state: AllocatorState,
    settings: AllocatorSettings,
    requested: int,
    stream: int,
    *,
    headroom: int | None,
    device_total: int | None,
) -> ServeRoute | None:
    """How the allocator, in ``state`` under ``settings``, serves ``requested`` bytes on
    ``stream`` (None: it does not): from a cached block, or after waiting for pending frees,
    releasing cached segments and making a new one out of ``headroom`` (the device memory it
    could still reserve; None: unknown, so only released memory is counted on)."""
    capacity = state.reserved + (headroom or 0)
    made: list[tuple[str, int]] = []

    def on_trace(action: str, addr: int, size: int, stream: int, kept: object) -> None:
        made.append((action, size))

    model = DeviceCachingAllocator(
        settings,
        capacity=capacity,
        device_total=device_total if device_total is not None else capacity,
        auto_events=False,
        trace_blocks=False,
        on_trace=on_trace,
    )
    seed_state(model, state)
    made.clear()
    pending = sum(block.size for block in model.pending)
    syncs = model.num_sync_all_streams
    if model.malloc(requested, stream) is None:
        return None
    released = [size for action, size in made if action in ("segment_free", "segment_unmap")]
    return ServeRoute(
        waited_for_bytes=pending if model.num_sync_all_streams > syncs else 0,
        released_segments=len(released),
        released_bytes=sum(released),
        new_segment_bytes=sum(
            size for action, size in made if action in ("segment_alloc", "segment_map")
        ),
    )


FINAL = "final"  # the dump was taken at the OOM (or nothing changed after it)
TRACE = "trace"  # the final state with the events after the ``oom`` entry undone
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class OomMoment:
    """Facts at the failed request; any figure may be None when the dump does not say."""

    source: str  # FINAL, TRACE or UNKNOWN
    index: int | None = field(metadata=json_key("trace_index"))  # the trace's ``oom`` entry
    requested_bytes: int | None
    allocation_bytes: int | None
    device_total_bytes: int | None
    device_free_bytes: int | None
    reserved_bytes: int | None
    allocated_bytes: int | None
    free_in_reserved_bytes: int | None
    largest_free_block_bytes: int | None
    stream: int
    why_unknown: str | None = None
    assumed: bool = False  # the request is the user's (--requested), not the recorded OOM's
    served: bool | None = field(default=None, metadata=json_key("could_serve"))
    """The allocator model serves the request in this state."""
    free_in_pool_bytes: int | None = None
    """Free inside reserved segments of the request's pool and stream: the only free bytes
    that can serve it (the small pool never serves a request over 1 MiB, nor the large pool
    one up to it)."""
    route: ServeRoute | None = None
    """How the model served it, when it did."""
    context_bytes: int | None = None
    """Of the memory outside PyTorch, the CUDA context the dump accounts for (a planned
    dump's ``--context-memory``); None when the dump does not record it (a GPU's dump)."""

    @property
    def external_bytes(self) -> int | None:
        """Memory on the device PyTorch's allocator does not own: limit - free - reserved."""
        return outside_pytorch_bytes(
            self.device_total_bytes, self.device_free_bytes, self.reserved_bytes
        )

    @property
    def unaccounted_external_bytes(self) -> int | None:
        """Memory outside PyTorch less the context the dump accounts for: what NCCL, another
        process or the script's own allocations outside PyTorch can hold, and so what can be a
        cause (all of it when the context is not recorded)."""
        external = self.external_bytes
        if external is None or self.context_bytes is None:
            return external
        return max(external - self.context_bytes, 0)

    @property
    def headroom_bytes(self) -> int | None:
        """Device memory the allocator could still reserve: free, capped by the limit; the
        limit less reserved when only the limit is known (nothing outside PyTorch counted)."""
        if self.device_free_bytes is None:
            if self.device_total_bytes is None or self.reserved_bytes is None:
                return None
            return max(self.device_total_bytes - self.reserved_bytes, 0)
        if self.device_total_bytes is None or self.reserved_bytes is None:
            return self.device_free_bytes
        return max(min(self.device_free_bytes, self.device_total_bytes - self.reserved_bytes), 0)

    @property
    def usable_free_bytes(self) -> int:
        """Free bytes inside reserved segments that can serve the request: its pool's and
        stream's when known, else all of them (0 when not known)."""
        if self.free_in_pool_bytes is not None:
            return self.free_in_pool_bytes
        return self.free_in_reserved_bytes or 0

    @property
    def capacity_bytes(self) -> int | None:
        """The most PyTorch's allocator could hold with nothing of its own live: the limit less
        the memory outside PyTorch, which is ``min(limit, reserved + device free)``; reserved +
        device free where no limit is recorded; the limit where device free is not known (the
        memory outside PyTorch unknown, none is taken off); None when neither is known."""
        room = None
        if self.reserved_bytes is not None and self.device_free_bytes is not None:
            room = self.reserved_bytes + self.device_free_bytes
        if self.device_total_bytes is None:
            return room
        return self.device_total_bytes if room is None else min(self.device_total_bytes, room)

    @property
    def per_process_limit(self) -> bool:
        """The limit is a per-process one below what the device could give
        (``set_per_process_memory_fraction``): the device had more free, beside what PyTorch
        reserved, than the limit allows. False when any of the three is not known."""
        limit, free, reserved = self.device_total_bytes, self.device_free_bytes, self.reserved_bytes
        if limit is None or free is None or reserved is None:
            return False
        return reserved + free > limit

    @property
    def outside_makes_room(self) -> bool:
        """Without the memory outside PyTorch (less the context the dump accounts for), the
        free bytes of the request's pool and the headroom would cover the request: that memory,
        not PyTorch's live or cached bytes, left no room."""
        external = self.unaccounted_external_bytes
        if self.requested_bytes is None or external is None or external <= 0:
            return False
        room = self.usable_free_bytes + (self.headroom_bytes or 0) + external
        return room >= self.requested_bytes

    @property
    def request_too_large(self) -> bool:
        """The request alone exceeds :attr:`capacity_bytes`, and no memory outside PyTorch
        that a fix could remove would make room: with nothing else live it still fails, so
        nothing freed serves it; a smaller request does (or, under a per-process limit the
        device has room beyond, a higher limit)."""
        capacity = self.capacity_bytes
        if self.requested_bytes is None or capacity is None or self.served:
            return False
        return self.requested_bytes > capacity and not self.outside_makes_room

    @property
    def raising_limit_serves(self) -> bool:
        """Under a per-process limit, the device's own free memory (a new segment), or a free
        block of the request's pool, would hold the request: raising the limit alone serves
        it."""
        if not self.per_process_limit or self.requested_bytes is None:
            return False
        room = max(self.device_free_bytes or 0, self.largest_free_block_bytes or 0)
        return room >= self.requested_bytes


def recorded_settings(dump: Dump) -> AllocatorSettings:
    """The settings the dump was taken under (defaults when it does not report them), read by
    the rules of the torch that wrote it (the sidecar's ``torch_version``)."""
    read = settings_read(dump)
    return read.settings if read is not None else AllocatorSettings()


def settings_read(dump: Dump) -> RecordedSettings | None:
    """The snapshot's ``allocator_settings`` with the keys the model set aside (None: the
    snapshot reports no settings)."""
    return read_snapshot_settings(dump.snapshot.get("allocator_settings"), recorded_rules(dump))


def recorded_rules(dump: Dump) -> ConfRules:
    """The conf rules of the torch that wrote the dump (its sidecar's ``torch_version``)."""
    return rules_for(dump.meta.sidecar.get("torch_version"))


def settings_notes(dump: Dump) -> tuple[str, ...]:
    """Sentences on the recorded settings the model could not read (unknown keys, refused
    values); empty when it read them all."""
    read = settings_read(dump)
    return tuple(read.notes()) if read is not None else ()


def sidecar_sizes(dump: Dump) -> tuple[int | None, int | None, int | None, int | None]:
    """``(requested, allocation, limit, device_free)`` from the sidecar's ``oom`` object."""
    side = dump.meta.sidecar.get("oom")
    if not isinstance(side, dict):
        return None, None, None, None
    schema = as_int(dump.meta.sidecar.get("schema"))
    requested = as_int(side.get("requested_bytes"))
    allocation = as_int(side.get("allocation_bytes"))
    if "allocation_bytes" not in side and (schema is None or schema < 2):
        requested, allocation = None, requested  # schema 1 stored the observer's size there
    return (
        requested,
        allocation,
        as_int(side.get("device_total_bytes")),
        as_int(side.get("device_free_bytes")),
    )


def request_site(dump: Dump) -> str | None:
    """The site that made the failed request: the innermost frame outside torch of the trace's
    ``oom`` entry, else of the sidecar's OOM stack (outermost first, as the observer writes
    it); None when neither names one."""
    stacks: list[object] = []
    if dump.oom_positions:
        entry = dump.trace[dump.oom_positions[-1]]
        if isinstance(entry, dict):
            stacks.append(entry.get("frames"))
    side = dump.meta.sidecar.get("oom")
    stack = side.get("stack") if isinstance(side, dict) else None
    if isinstance(stack, list):
        stacks.append(stack[::-1])
    for frames in stacks:
        site = site_of(frames)
        if site not in (BEFORE_RECORDING, NATIVE_ONLY, UNKNOWN_SITE):
            return site
    return None


def oom_moment(
    dump: Dump, *, requested: int | None = None, device_total: int | None = None
) -> OomMoment | None:
    """The state at the dump's OOM; None when the dump records no OOM.

    ``requested``: the failed request as the user states it (``summary --requested``), for a
    snapshot that records neither history nor a sidecar; its final state is then taken as the
    state at the OOM (``_snapshot()`` called from an OOM handler). ``device_total``: the
    device's memory as the user states it (``summary --device-memory``), the limit where the
    dump records none (a raw snapshot records no device size).
    """
    index = dump.oom_positions[-1] if dump.oom_positions else None
    side_requested, allocation, limit, device_free = sidecar_sizes(dump)
    if limit is None:
        limit = device_total
    if index is None and dump.meta.kind != "oom" and requested is None:
        return None
    entry: dict[str, Any] = dump.trace[index] if index is not None else {}
    stream = as_int(entry.get("stream")) or 0
    wanted = requested or as_int(entry.get("size")) or side_requested or allocation
    assumed = requested is not None and index is None and dump.meta.kind != "oom"
    if device_free is None:
        device_free = as_int(entry.get("device_free"))
    settings = recorded_settings(dump)
    if index is not None and changes_after(dump.trace, index):
        state = state_before(dump, index + 1, settings)
        if state.problem_count:
            return OomMoment(
                UNKNOWN, index, wanted, allocation, limit, device_free,
                None, None, None, None, stream,
                why_unknown="the events after the OOM contradict the final state: "
                + "; ".join(state.problems[:2]),
            )  # fmt: skip
        found = _from_state(state, index, wanted, allocation, limit, device_free, stream)
    else:
        state = state_before(dump, len(dump.trace), settings)  # the final state, nothing undone
        found = _from_final(dump, index, wanted, allocation, limit, device_free, stream)
    route = None
    if wanted is not None and not state.problem_count:
        route = could_serve(
            state, settings, wanted, stream, headroom=found.headroom_bytes, device_total=limit
        )
    served = None if wanted is None or state.problem_count else route is not None
    if allocation is None and wanted is not None:
        allocation = _allocation_of(settings, wanted)
    return replace(
        found, assumed=assumed, served=served, route=route, allocation_bytes=allocation,
        context_bytes=dump.meta.context_bytes,
    )  # fmt: skip


def _allocation_of(settings: AllocatorSettings, requested: int) -> int:
    """What PyTorch's error text prints for a request no cached block served: ``malloc``'s
    ``get_allocation_size`` of the rounded request (under expandable segments too, where only
    the pages the block needs are then mapped)."""
    return get_allocation_size(settings, round_size(settings, requested))


def judged_moment_warning(dump: Dump, requested: int | None) -> str | None:
    """What a given ``--requested`` overrides, and which moment it is judged at; None when it
    overrides nothing (a snapshot that records no history and no OOM)."""
    if requested is None:
        return None
    index = dump.oom_positions[-1] if dump.oom_positions else None
    recorded = sidecar_sizes(dump)[0]
    if index is not None:
        recorded = as_int(dump.trace[index].get("size")) or recorded
    if recorded is not None and recorded != requested:
        where = f"trace entry {index:,}" if index is not None else "the snapshot, taken at it"
        return (
            f"--requested {fmt(requested)} replaces the {fmt(recorded)} request recorded at the"
            f" OOM; the state judged is the one at that OOM ({where})"
        )
    if index is not None or dump.meta.kind == "oom":
        return None
    if has_history(dump):
        return (
            f"--requested {fmt(requested)} is judged against the snapshot's final state: the"
            f" recorded history ({len(dump.trace):,} events) holds no OOM, so the moment judged"
            " is when the snapshot was taken, not a recorded failure"
        )
    return None


def _from_state(
    state: AllocatorState,
    index: int,
    requested: int | None,
    allocation: int | None,
    limit: int | None,
    device_free: int | None,
    stream: int,
) -> OomMoment:
    """The moment from a reconstructed state."""
    small = requested is not None and requested <= K_SMALL_SIZE
    runs = state.free_runs()
    pool_runs = [
        size
        for segment, _address, size in runs
        if segment.is_small == small and segment.stream == stream
    ]
    return OomMoment(
        TRACE, index, requested, allocation, limit, device_free,
        state.reserved, state.allocated, sum(size for _s, _a, size in runs),
        max(pool_runs, default=0), stream, free_in_pool_bytes=sum(pool_runs),
    )  # fmt: skip


def _from_final(
    dump: Dump,
    index: int | None,
    requested: int | None,
    allocation: int | None,
    limit: int | None,
    device_free: int | None,
    stream: int,
) -> OomMoment:
    """The moment from the final state (the dump was taken at the OOM)."""
    small = requested is not None and requested <= K_SMALL_SIZE
    reserved = allocated = free = largest = in_pool = 0
    for segment in dump.segments:
        reserved += segment.total_size
        same_pool = (segment.segment_type == "small") == small and (segment.stream or 0) == stream
        for block in segment.blocks:
            if block.state == INACTIVE:
                free += block.size
                if same_pool:
                    largest = max(largest, block.size)
                    in_pool += block.size
            elif block.state == "active_allocated":
                allocated += block.size
    return OomMoment(
        FINAL, index, requested, allocation, limit, device_free,
        reserved, allocated, free, largest, stream, free_in_pool_bytes=in_pool,
    )  # fmt: skip
