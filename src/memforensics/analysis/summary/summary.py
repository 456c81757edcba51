"""``summary``: what filled the device, and whether the OOM was fragmentation or exhaustion.

:class:`Summary` and its rows are the facts; their JSON is their fields (docs/json.md), which
``summary --json``, the report and the diff read. :func:`summarize` computes them in one pass
over segments and blocks plus at most one backward pass over the trace (stopping early when it
can), so a summary costs little more than loading the file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import Any

from memforensics._units import outside_pytorch_bytes
from memforensics.analysis.diagnosis import Diagnosis, Evidence, diagnose, has_expandable
from memforensics.analysis.diagnosis.diagnosis import Climb, Trend
from memforensics.analysis.dump import (
    ALLOCATED,
    BEFORE_RECORDING,
    INACTIVE,
    PENDING_FREE,
    UNKNOWN_SITE,
    Block,
    DeviceUsage,
    Dump,
    OomRecord,
    SnapshotShape,
    as_int,
    attribute,
    parse_step,
    per_recorded_stack,
)
from memforensics.analysis.dump.load import paused_gc
from memforensics.analysis.filled import (
    CallNode,
    Filled,
    KindBytes,
    KindShare,
    Known,
    Lifetimes,
    Moment,
    block_kinds,
    kind_sites,
    kind_split,
    live_at,
    optimizer_temporaries,
    what_filled,
)
from memforensics.analysis.filled.peak import KINDS_TOTAL
from memforensics.analysis.oom import (
    FRAGMENTATION,
    TRACE,
    AtRisk,
    ExpandableAnswer,
    LowerBound,
    OomMoment,
    Verdict,
    at_risk,
    expandable_runs_out,
    has_history,
    judged_moment_warning,
    oom_moment,
    replayable,
    settings_notes,
    verdict_at_oom,
)
from memforensics.analysis.replay import EXPANDABLE_ROW, avoids, replay_dump
from memforensics.analysis.schema import NOT_IN_JSON, json_key

# The two passes over a dump that ``summary``, ``diff`` and ``leaks`` share.
#
# One over segments and blocks (each live block with its site and caller, memoized per frames
# list) and one over the trace for the step of every live block: the last event at a live
# block's address is normally its own ``alloc``, so the last position of each such address
# (the events at those addresses picked out in C) answers most blocks, and a backward walk,
# stopping once it has answered them all, only the rest. The last ``oom`` entry is the dump's
# own (:attr:`Dump.oom_positions`).


class Tally:
    """Running totals over blocks: bytes by state, the largest free block, live bytes by site
    (per site: block bytes, blocks, requested bytes).

    ``recorded``: the addresses of the allocated blocks whose allocation the history recorded
    (:meth:`~memforensics.analysis.filled.Lifetimes.recorded_blocks`): such a block without
    frames had no Python on the stack; any other without frames came before recording.
    """

    def __init__(self, recorded: frozenset[int] = frozenset()) -> None:
        self.allocated = self.active = self.free = self.largest = self.blocks = 0
        self.sites: dict[tuple[str, str], list[int]] = {}
        self.live: list[tuple[Block, str, str]] = []
        self.pending: dict[str, int] = {}
        self._recorded = recorded
        self._site_cache = per_recorded_stack(attribute)

    def add(self, block: Block) -> None:
        self.blocks += 1
        if block.state == ALLOCATED:
            self.allocated += block.size
            self.active += block.size
            site, caller = self.site(block)
            entry = self.sites.setdefault((site, caller), [0, 0, 0])
            entry[0] += block.size
            entry[1] += 1
            entry[2] += block.requested_size
            self.live.append((block, site, caller))
        elif block.state == PENDING_FREE:
            self.active += block.size
            site = self.site(block)[0]
            self.pending[site] = self.pending.get(site, 0) + block.size
        elif block.state == INACTIVE:
            self.free += block.size
            self.largest = max(self.largest, block.size)

    def site(self, block: Block) -> tuple[str, str]:
        """``(site, caller)`` of a block, memoized per frames list (a hostile file may share one
        many times)."""
        recorded = block.state == ALLOCATED and block.address in self._recorded
        return self._site_cache(block.frames, recorded)


def live_sites(dump: Dump, lifetimes: Lifetimes | None = None) -> list[tuple[Block, str, str]]:
    """Every allocated block of a dump with its site and caller; ``lifetimes``: the dump's, to
    tell which frameless blocks the history recorded (None: found here)."""
    if lifetimes is None:
        lifetimes = what_filled(dump).lifetimes
    tally = Tally(lifetimes.recorded_blocks())
    for segment in dump.segments:
        for block in segment.blocks:
            tally.add(block)
    return tally.live


def live_blocks(dump: Dump, lifetimes: Lifetimes | None = None) -> list[tuple[Block, str]]:
    """Every allocated block of a dump with its site (used by diff and report too)."""
    return [(block, site) for block, site, _caller in live_sites(dump, lifetimes)]


def scan_trace(dump: Dump, live: list[Block]) -> tuple[OomRecord | None, dict[int, int | None]]:
    """The trace's last ``oom`` entry, and the step of each live block (by address).

    A block's step is its own ``user_metadata``; else the latest ``alloc`` at its address asking
    for the block's requested size (trace entries carry requests, not block sizes; a live block
    cannot have been allocated over, so that entry is its own).
    """
    steps: dict[int, int | None] = {}
    wanted: dict[int, int] = {}
    for block in live:
        step = parse_step(block.user_metadata)
        if step is not None:
            steps[block.address] = step
        else:
            wanted[block.address] = block.requested_size
    trace = dump.trace
    if wanted:
        _steps_from_last_events(trace, wanted, steps)
    if wanted:
        _steps_walking_back(trace, wanted, steps)
    oom: OomRecord | None = None
    if dump.oom_positions:
        entry = trace[dump.oom_positions[-1]]
        oom = OomRecord(
            requested_bytes=as_int(entry.get("size")),
            device_free_bytes=as_int(entry.get("device_free")),
            device_total_bytes=None,
            source="trace",
        )
    return oom, steps


def _steps_from_last_events(
    trace: list[Any], wanted: dict[int, int], steps: dict[int, int | None]
) -> None:
    """Answer (and drop from ``wanted``) every block whose address's last event is its alloc,
    and drop every block whose address the trace never mentions (made before it)."""
    try:
        addresses = list(map(dict.get, trace, repeat("addr")))
        hits = list(compress(range(len(addresses)), map(wanted.__contains__, addresses)))
    except TypeError:  # an entry that is no dict (or an unhashable address): walk instead
        return
    last = {addresses[position]: position for position in hits}  # events at wanted addresses
    for address in list(wanted):
        position = last.get(address)
        if position is None:
            del wanted[address]
            continue
        entry = trace[position]
        if entry.get("action") == "alloc" and entry.get("size") in (wanted[address], None):
            steps[address] = parse_step(entry.get("user_metadata"))
            del wanted[address]


def _steps_walking_back(
    trace: list[Any], wanted: dict[int, int], steps: dict[int, int | None]
) -> None:
    """The latest matching ``alloc`` of each address still in ``wanted``, walking back."""
    for entry in reversed(trace):
        if type(entry) is not dict or entry.get("action") != "alloc":
            continue
        address = entry.get("addr")
        if type(address) is int and address in wanted:
            size = wanted.pop(address)
            if entry.get("size") in (size, None):
                steps[address] = parse_step(entry.get("user_metadata"))
            if not wanted:
                return


def merge_oom(
    sidecar: OomRecord | None, trace: OomRecord | None, kind: str | None
) -> OomRecord | None:
    """Prefer the sidecar's OOM facts, filling its gaps from the trace's ``oom`` entry."""
    if sidecar is None:
        if trace is None and kind == "oom":
            return OomRecord(None, None, None, "sidecar")
        return trace
    if trace is None:
        return sidecar
    return OomRecord(
        requested_bytes=sidecar.requested_bytes
        if sidecar.requested_bytes is not None
        else trace.requested_bytes,
        device_free_bytes=sidecar.device_free_bytes
        if sidecar.device_free_bytes is not None
        else trace.device_free_bytes,
        device_total_bytes=sidecar.device_total_bytes,
        source="sidecar",
        allocation_bytes=sidecar.allocation_bytes,
    )


@dataclass(frozen=True, slots=True)
class SiteBytes:
    """Live bytes and block count of one allocation site, reached from one ``caller``.

    ``site`` is the innermost frame outside torch; ``caller`` the innermost frame outside every
    installed package and the standard library (the user's own line); see
    :mod:`~memforensics.analysis.dump.frames`. ``kinds`` are its bytes by kind of memory,
    biggest first (docs/analysis.md, "Kinds of memory"); ``kind`` is the first of them, the
    kind holding most of its bytes (a site's blocks may be of several kinds: only ``kinds``
    says how many of its bytes are of each).
    """

    site: str
    bytes: int
    blocks: int
    caller: str = UNKNOWN_SITE
    requested_bytes: int = 0  # what the callers asked for; ``bytes`` are block bytes
    kind: str = "unknown"
    kinds: tuple[KindShare, ...] = ()

    def by_kind(self) -> tuple[KindShare, ...]:
        """Its bytes and blocks by kind, biggest first: what a table shows, one row per kind,
        so that no row gives one kind the bytes of another (``kind`` alone when a summary
        read from an older cache lacks ``kinds``)."""
        return self.kinds or (KindShare(self.kind, self.bytes, self.blocks),)


def site_bytes(key: tuple[str, str], entry: list[int], kinds: tuple[KindShare, ...]) -> SiteBytes:
    """A site row from its ``(site, caller)``, its ``[bytes, blocks, requested bytes]`` and its
    bytes by kind (:func:`~memforensics.analysis.filled.kind_split`)."""
    main = kinds[0].kind if kinds else "unknown"
    return SiteBytes(key[0], entry[0], entry[1], key[1], entry[2], main, kinds)


@dataclass(frozen=True, slots=True)
class StepBytes:
    """Live bytes allocated during one step (``step`` None: no step metadata on those blocks)."""

    step: int | None
    bytes: int
    blocks: int


SCHEMA = 2
"""``summary --json``'s ``schema`` (docs/json.md: adding keys keeps it; renaming or removing one
bumps it)."""

RECORDED = "recorded"
"""An :class:`Oom`'s ``state`` when only the record of the failure is known (a sidecar's
``oom`` object): the state at it was not judged."""


@dataclass(frozen=True)
class Oom:
    """The OOM, once: what failed and who recorded it, the allocator state it was judged on,
    and what was live then.

    ``state`` says which state the figures describe: ``final`` (the dump was taken at the
    OOM), ``trace`` (the final state with the events after the trace's ``oom`` entry undone),
    ``unknown`` (``why_unknown`` says why), or ``recorded`` (only the sidecar's record is
    known). ``origin`` is who recorded the failure (``sidecar`` or ``trace``; None when only
    ``--requested`` names it). ``time_us`` to ``tree`` describe what was live at the trace's
    ``oom`` entry (None and empty without one); ``top_sites`` are the biggest sites live then,
    when the snapshot was taken after the OOM.
    """

    state: str
    origin: str | None
    trace_index: int | None
    requested_bytes: int | None
    allocation_bytes: int | None
    device_total_bytes: int | None
    device_free_bytes: int | None
    external_bytes: int | None
    reserved_bytes: int | None
    allocated_bytes: int | None
    free_in_reserved_bytes: int | None
    largest_free_block_bytes: int | None
    stream: int | None = None
    why_unknown: str | None = None
    assumed: bool = False
    could_serve: bool | None = None
    time_us: int | None = None
    live_bytes: int | None = None
    live_requested_bytes: int | None = None
    kinds: tuple[KindBytes, ...] = ()
    tree: CallNode | None = None
    top_sites: tuple[SiteBytes, ...] = ()
    site_count: int = 0

    @property
    def judged(self) -> bool:
        """True when the figures describe a judged state (not only the sidecar's record)."""
        return self.state != RECORDED

    def live(self) -> Moment | None:
        """What was live at the trace's ``oom`` entry, as the peak's moment is told."""
        if self.live_bytes is None or self.trace_index is None or self.tree is None:
            return None
        return Moment(
            "oom", self.trace_index, self.time_us, self.live_bytes, self.kinds, self.tree,
            self.live_requested_bytes or 0,
        )  # fmt: skip


@dataclass(frozen=True)
class Summary:
    """The facts ``memforensics summary`` prints; its ``--json`` object is derived from the
    fields (:func:`~memforensics.analysis.schema.document`, see docs/json.md).

    A fact the sidecar also holds has the sidecar's key (``device`` is the device's name,
    ``device_index`` its index, ``truncated``, ``trace_entries``).
    """

    file: str
    kind: str | None
    rank: int | None
    step: int | None
    steps: tuple[int, int] | None
    device_index: int | None
    reserved_bytes: int
    allocated_bytes: int
    active_bytes: int
    free_in_reserved_bytes: int
    largest_free_block_bytes: int
    segments: int
    blocks: int
    oom: Oom | None
    verdict: Verdict
    top_sites: tuple[SiteBytes, ...]
    live_by_step: tuple[StepBytes, ...]
    trace_entries: int
    truncated: bool | None
    warnings: tuple[str, ...]
    device: str | None = None
    site_count: int = 0
    before_recording_bytes: int = 0
    before_recording_blocks: int = 0
    predicted: bool = False  # written by memforensics plan: a prediction, not a GPU's record
    devices: tuple[DeviceUsage, ...] = ()
    device_reason: str = ""
    shape: SnapshotShape = field(default_factory=SnapshotShape, metadata=json_key("snapshot_shape"))
    limits: tuple[str, ...] = ()
    lower_bound: LowerBound | None = None
    has_sidecar: bool = False  # False: a raw PyTorch snapshot, or its sidecar is missing
    unwound_bytes: int | None = None
    """Allocated bytes the unwinding after the OOM freed (at the OOM less at the snapshot)."""
    judged_note: str | None = None  # what --requested overrode and the moment judged (a warning)
    at_risk: AtRisk | None = None  # a near-OOM dump: how close the rank was
    kinds: tuple[KindBytes, ...] = ()
    kinds_total: str = KINDS_TOTAL  # the figure the kinds add up to
    peak: Moment | None = None
    peak_sites: tuple[SiteBytes, ...] = ()
    """The biggest sites live at the peak, when the peak is the moment judged (no OOM judged,
    and a trace to find the peak in); empty otherwise. ``top_sites`` are the snapshot's."""
    peak_site_count: int = 0
    known: Known | None = None
    """What the process's tracked tensors labelled (the kinds' ``known_bytes``); None when the
    sidecar lists no tracked tensors."""
    other_devices: tuple[Summary, ...] = ()
    """The file's other devices with memory (``summary``'s answer about one file holds each
    device it explains: the OOM's, else every device with memory, this one first)."""
    live_at_start: bool = False  # blocks were live when the trace began (allocated before it)
    allocator_peak_bytes: int | None = None
    """The most bytes allocated at once before the dump by the allocator's own count (the
    dump's :attr:`~memforensics.analysis.dump.DumpMeta.allocator_peak_bytes`); ``peak`` is what
    the trace shows, which misses a peak before it began and counts requests, not blocks."""
    diagnosis: Diagnosis | None = None
    """The ranked causes and the headline (None only in a summary read from an older cache)."""
    filled: Filled | None = field(default=None, metadata=NOT_IN_JSON)
    """The classified lifetimes behind ``kinds``, ``peak`` and the OOM's (for the report)."""

    @property
    def after_oom(self) -> bool:
        """True when the snapshot was taken after the OOM (the unwinding changed the state): the
        headline is then the OOM's moment, reconstructed from the trace."""
        return self.oom is not None and self.oom.state == TRACE


@paused_gc()
def summarize(
    dump: Dump,
    *,
    top: int | None = 10,
    requested: int | None = None,
    trends: Sequence[Trend] | None = None,
    climb: Climb | None = None,
    replay: bool = True,
    device_memory: int | None = None,
) -> Summary:
    """Summarize one dump: totals, OOM, verdict, the diagnosis, the ``top`` biggest sites
    (None: every site), live bytes per step. A site row is one (site, caller) pair.

    ``requested``: the failed request in bytes, for a snapshot that records neither history
    nor a sidecar (it is then judged as taken at that OOM). ``trends``: the run folder's
    window trends of this rank (``leaks``), for growth across windows (None: not read).
    ``climb``: the line of allocated bytes over steps in the journal of the dump's process,
    for growth no window names (None: not read, or it does not climb).
    ``replay``: ask the replay whether ``expandable_segments`` serves a fragmented request.
    ``device_memory``: the device's memory in bytes, for a dump that records none (a raw
    snapshot): whether ``requested`` fits, and the device the causes are weighed against.
    """
    filled = what_filled(dump)
    tally = Tally(filled.lifetimes.recorded_blocks())
    reserved = 0
    for segment in dump.segments:
        reserved += segment.total_size
        for block in segment.blocks:
            tally.add(block)
    trace_oom, block_steps = scan_trace(dump, [block for block, _, _ in tally.live])
    oom = merge_oom(dump.meta.oom, trace_oom, dump.meta.kind)
    sites = sorted(tally.sites.items(), key=lambda item: (-item[1][0], item[0]))
    shown = sites if top is None else sites[: max(top, 0)]
    kinds = site_kinds(tally.live, filled, {key for key, _ in shown})
    top_sites = tuple(site_bytes(key, entry, kinds[key]) for key, entry in shown)
    unrecorded = tally.sites.get((BEFORE_RECORDING, BEFORE_RECORDING), [0, 0, 0])
    moment = oom_moment(dump, requested=requested, device_total=device_memory)
    oom_sites: tuple[SiteBytes, ...] = ()
    oom_site_count = 0
    if moment is not None and moment.source == TRACE and filled.oom is not None:
        oom_sites, oom_site_count = _sites_at(filled, filled.oom.position, top)
    peak_sites: tuple[SiteBytes, ...] = ()
    peak_site_count = 0
    if moment is None and filled.peak.name == "peak":  # the peak is the moment judged
        peak_sites, peak_site_count = _sites_at(filled, filled.peak.position, top)
    judged = oom_sites if oom_sites else top_sites
    verdict, moment, bound = verdict_at_oom(
        dump,
        requested=requested,
        top_sites=[(site.site, site.bytes) for site in judged[:3]],
        expandable=any(segment.is_expandable for segment in dump.segments),
        moment=moment,
    )
    note = judged_moment_warning(dump, requested)
    found = _oom(oom, moment, filled.oom, oom_sites, oom_site_count)
    unwound = None
    if found is not None and found.state == TRACE and found.allocated_bytes is not None:
        unwound = found.allocated_bytes - tally.allocated
    risk = at_risk(dump, free_in_reserved=tally.free, largest_free_block=tally.largest)
    at = _judged_moment(filled, moment)
    evidence = Evidence(
        live=[(site, block.size, block_steps.get(block.address)) for block, site, _ in tally.live],
        kinds=at.kinds,
        kinds_known=bool(dump.meta.sidecar.get("tensors")),
        moment=at,
        unwound=filled.unwound if at.name == "oom" else None,
        inference=filled.inference,
        sites=_by_site(sites),
        callers=_callers(sites),
        pending_bytes=tally.active - tally.allocated,
        pending_sites=sorted(tally.pending.items(), key=lambda item: (-item[1], item[0])),
        headroom_bytes=risk.headroom_bytes if risk is not None else None,
        device_total_bytes=_device_total(moment, risk, device_memory),
        at_risk=risk is not None,
        has_history=has_history(dump),
        trends=trends or (),
        trends_read=trends is not None,
        climb=climb,
    )
    expandable_serves = _Once(lambda: expandable_answer(dump, requested, replay=replay))
    verdict = _advised(dump, verdict, expandable_serves)
    diagnosis = diagnose(
        dump,
        moment=moment,
        verdict=verdict,
        evidence=evidence,
        expandable_serves=expandable_serves,
    )
    return Summary(
        file=dump.name,
        kind=dump.meta.kind,
        rank=dump.meta.rank,
        has_sidecar=dump.meta.has_sidecar,
        predicted=dump.meta.predicted,
        step=dump.meta.step,
        steps=dump.meta.steps,
        device_index=dump.device,
        reserved_bytes=reserved,
        allocated_bytes=tally.allocated,
        active_bytes=tally.active,
        free_in_reserved_bytes=tally.free,
        largest_free_block_bytes=tally.largest,
        segments=len(dump.segments),
        blocks=tally.blocks,
        oom=found,
        verdict=verdict,
        top_sites=top_sites,
        live_by_step=by_step(tally.live, block_steps),
        trace_entries=len(dump.trace),
        truncated=dump.meta.truncated,
        warnings=dump.warnings + settings_notes(dump) + ((note,) if note else ()),
        device=_device_name(dump),
        site_count=len(sites),
        before_recording_bytes=unrecorded[0],
        before_recording_blocks=unrecorded[1],
        devices=dump.devices,
        device_reason=dump.device_reason,
        shape=dump.shape,
        limits=dump.limits,
        lower_bound=bound,
        unwound_bytes=unwound,
        judged_note=note,
        at_risk=risk,
        kinds=filled.kinds,
        peak=filled.peak,
        peak_sites=peak_sites,
        peak_site_count=peak_site_count,
        known=filled.known,
        diagnosis=diagnosis,
        filled=filled,
        live_at_start=filled.lifetimes.live_at_start,
        allocator_peak_bytes=dump.meta.allocator_peak_bytes,
    )


def _judged_moment(filled: Filled, moment: OomMoment | None) -> Moment:
    """The moment the diagnosis reads: the trace's ``oom`` entry, else the snapshot when an OOM
    (or ``--requested``) is judged on it, else the peak (the snapshot without a trace)."""
    if moment is not None and filled.oom is not None:
        return filled.oom
    if moment is None:
        return filled.peak
    if filled.peak.name == "snapshot":
        return filled.peak
    live = filled.lifetimes.at_snapshot()
    return Moment(
        "snapshot", filled.lifetimes.length, None, sum(a.size for a in live), filled.kinds,
        CallNode("all live memory"), sites=kind_sites(live),
        optimizer_temporaries=optimizer_temporaries(live),
    )  # fmt: skip


def _by_site(sites: list[tuple[tuple[str, str], list[int]]]) -> list[tuple[str, int]]:
    """Live bytes per site (callers merged), biggest first."""
    merged: dict[str, int] = {}
    for (site, _caller), (size, _count, _asked) in sites:
        merged[site] = merged.get(site, 0) + size
    return sorted(merged.items(), key=lambda item: (-item[1], item[0]))


def _callers(sites: list[tuple[tuple[str, str], list[int]]]) -> list[tuple[str, str, int]]:
    """``(site, caller, bytes)`` of each site reached from more than one caller: its rows of
    the sites table, biggest first (``sites`` are in that order)."""
    callers: dict[str, int] = {}
    for (site, _caller), _entry in sites:
        callers[site] = callers.get(site, 0) + 1
    return [(site, caller, size) for (site, caller), (size, _, _) in sites if callers[site] > 1]


def _device_total(moment: OomMoment | None, risk: AtRisk | None, given: int | None) -> int | None:
    """The limit the rank ran under, from the OOM's figures or the near-OOM's, else the one
    the user gave (``--device-memory``)."""
    if moment is not None and moment.device_total_bytes is not None:
        return moment.device_total_bytes
    if risk is not None and risk.device_total_bytes is not None:
        return risk.device_total_bytes
    return given


def expandable_answer(
    dump: Dump, requested: int | None, *, replay: bool = True
) -> ExpandableAnswer:
    """Whether ``expandable_segments`` would have avoided the dump's OOM: the plan's own run
    with that setting, for a planned dump that made one (it fit, or ran out too); else the
    replay's own ``avoided_by``, as ``replay --set expandable_segments=True`` prints it (None
    with the replay's reason when it refuses to say, or when ``replay`` is off)."""
    ran_out = dump.meta.oom_expandable
    if ran_out is not None and requested is None:
        return ExpandableAnswer(not ran_out, planned=True)
    if not replay:
        return ExpandableAnswer(None)
    result = replay_dump(dump, sets=[EXPANDABLE_ROW], requested=requested)
    served, why = avoids(result, EXPANDABLE_ROW)
    return ExpandableAnswer(served, why)


class _Once:
    """A question asked at most once: the verdict's advice and the diagnosis read one answer."""

    def __init__(self, ask: Callable[[], ExpandableAnswer]) -> None:
        self._ask = ask
        self._answer: ExpandableAnswer | None = None

    def __call__(self) -> ExpandableAnswer:
        if self._answer is None:
            self._answer = self._ask()
        return self._answer


def _advised(
    dump: Dump, verdict: Verdict, expandable_serves: Callable[[], ExpandableAnswer]
) -> Verdict:
    """The verdict, its advice no longer offering expandable segments where they would not
    avoid the OOM (a fragmentation verdict, the setting off, a release that has it)."""
    if verdict.name != FRAGMENTATION or not has_expandable(dump):
        return verdict
    if any(segment.is_expandable for segment in dump.segments):
        return verdict
    answer = expandable_serves()
    if answer.served is not False:
        return verdict
    return expandable_runs_out(verdict, answer, history=replayable(dump))


def _oom(
    record: OomRecord | None,
    moment: OomMoment | None,
    live: Moment | None,
    sites: tuple[SiteBytes, ...],
    site_count: int,
) -> Oom | None:
    """The one OOM object: the judged moment's figures, who recorded the failure, and what
    was live at it; only the record when no moment was judged."""
    origin = record.source if record is not None else None
    if moment is None:
        if record is None:
            return None
        return Oom(
            RECORDED, origin, None, record.requested_bytes, record.allocation_bytes,
            record.device_total_bytes, record.device_free_bytes,
            outside_pytorch_bytes(record.device_total_bytes, record.device_free_bytes, None),
            None, None, None, None,
        )  # fmt: skip
    return Oom(
        state=moment.source,
        origin=origin,
        trace_index=moment.index,
        requested_bytes=moment.requested_bytes,
        allocation_bytes=moment.allocation_bytes,
        device_total_bytes=moment.device_total_bytes,
        device_free_bytes=moment.device_free_bytes,
        external_bytes=moment.external_bytes,
        reserved_bytes=moment.reserved_bytes,
        allocated_bytes=moment.allocated_bytes,
        free_in_reserved_bytes=moment.free_in_reserved_bytes,
        largest_free_block_bytes=moment.largest_free_block_bytes,
        stream=moment.stream,
        why_unknown=moment.why_unknown,
        assumed=moment.assumed,
        could_serve=moment.served,
        time_us=live.time_us if live is not None else None,
        live_bytes=live.live_bytes if live is not None else None,
        live_requested_bytes=live.live_requested_bytes if live is not None else None,
        kinds=live.kinds if live is not None else (),
        tree=live.tree if live is not None else None,
        top_sites=sites,
        site_count=site_count,
    )


def _sites_at(filled: Filled, position: int, top: int | None) -> tuple[tuple[SiteBytes, ...], int]:
    """The biggest sites of what was live at trace ``position`` (from the lifetimes the kinds
    and call tree read), and how many sites there were."""
    sites: dict[tuple[str, str], list[int]] = {}
    parts: dict[tuple[str, str], list[tuple[tuple[str, int], ...]]] = {}
    site_of = per_recorded_stack(attribute)
    for found in live_at(filled.lifetimes, position):
        key = site_of(found.frames, found.recorded)
        entry = sites.setdefault(key, [0, 0, 0])
        entry[0] += found.size
        entry[1] += 1
        entry[2] += found.requested
        parts.setdefault(key, []).append(block_kinds(found))
    ordered = sorted(sites.items(), key=lambda item: (-item[1][0], item[0]))
    shown = ordered if top is None else ordered[: max(top, 0)]
    rows = tuple(site_bytes(key, entry, kind_split(parts[key])) for key, entry in shown)
    return rows, len(ordered)


def site_kinds(
    live: list[tuple[Block, str, str]],
    filled: Filled,
    wanted: set[tuple[str, str]] | None = None,
) -> dict[tuple[str, str], tuple[KindShare, ...]]:
    """The bytes by kind of each (site, caller)'s live blocks at the snapshot (only the
    ``wanted`` ones; None: every one), each block's kinds found by its address among the
    allocations live at the snapshot (``unknown`` where none is)."""
    found_at = {found.addr: found for found in filled.lifetimes.at_snapshot()}
    parts: dict[tuple[str, str], list[tuple[tuple[str, int], ...]]] = {}
    for block, site, caller in live:
        key = (site, caller)
        if wanted is not None and key not in wanted:
            continue
        found = found_at.get(block.address)
        shares = block_kinds(found) if found is not None else (("unknown", block.size),)
        parts.setdefault(key, []).append(shares)
    return {key: kind_split(blocks) for key, blocks in parts.items()}


def _device_name(dump: Dump) -> str | None:
    """The sidecar's ``device`` (``"cuda"``, ``"npu"``, ``"sim"``); None without a sidecar."""
    name = dump.meta.sidecar.get("device")
    return name if isinstance(name, str) else None


def by_step(
    live: list[tuple[Block, str, str]], steps: dict[int, int | None]
) -> tuple[StepBytes, ...]:
    """Live bytes per step; empty when no live block carries step metadata at all."""
    totals: dict[int | None, list[int]] = {}
    for block, _site, _caller in live:
        entry = totals.setdefault(steps.get(block.address), [0, 0])
        entry[0] += block.size
        entry[1] += 1
    if all(step is None for step in totals):
        return ()
    order = sorted(totals, key=lambda step: (step is None, step or 0))
    return tuple(StepBytes(step, totals[step][0], totals[step][1]) for step in order)
