"""``summary``: what filled the device, and whether the OOM was fragmentation or exhaustion.

:class:`Summary` and its rows are the facts, with their ``--json`` forms (field and key names
are a contract that ``summary --json``, the report and the diff rely on, see docs/analysis.md);
:func:`summarize` computes them. Everything is one pass over segments and blocks plus at most
one backward pass over the trace (stopping early when it can), both in
:mod:`~memforensics.analysis.summary.scan`, so a summary costs little more than loading the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memforensics._units import outside_pytorch_bytes
from memforensics.analysis.dump import (
    BEFORE_RECORDING,
    UNKNOWN_SITE,
    Block,
    DeviceUsage,
    Dump,
    OomRecord,
    SnapshotShape,
    attribute,
)
from memforensics.analysis.dump.gc_pause import paused_gc
from memforensics.analysis.filled import (
    CallNode,
    Filled,
    KindBytes,
    Moment,
    live_at,
    what_filled,
)
from memforensics.analysis.filled.what_filled import KINDS_TOTAL
from memforensics.analysis.oom import (
    TRACE,
    AtRisk,
    LowerBound,
    OomMoment,
    Verdict,
    at_risk,
    judged_moment_warning,
    oom_moment,
    settings_notes,
    verdict_at_oom,
)
from memforensics.analysis.schema import NOT_IN_JSON, json_key
from memforensics.analysis.summary.scan import Tally, merge_oom, scan_trace


@dataclass(frozen=True, slots=True)
class SiteBytes:
    """Live bytes and block count of one allocation site, reached from one ``caller``.

    ``site`` is the innermost frame outside torch; ``caller`` the innermost frame outside every
    installed package and the standard library (the user's own line); see
    :mod:`~memforensics.analysis.dump.frames`.
    """

    site: str
    bytes: int
    blocks: int
    caller: str = UNKNOWN_SITE
    requested_bytes: int = 0  # what the callers asked for; ``bytes`` are block bytes


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
    other_devices: tuple[Summary, ...] = ()
    """The file's other devices with memory (``summary``'s answer about one file holds each
    device it explains: the OOM's, else every device with memory, this one first)."""
    filled: Filled | None = field(default=None, metadata=NOT_IN_JSON)
    """The classified lifetimes behind ``kinds``, ``peak`` and the OOM's (for the report)."""

    @property
    def after_oom(self) -> bool:
        """True when the snapshot was taken after the OOM (the unwinding changed the state): the
        headline is then the OOM's moment, reconstructed from the trace."""
        return self.oom is not None and self.oom.state == TRACE


@paused_gc()
def summarize(dump: Dump, *, top: int | None = 10, requested: int | None = None) -> Summary:
    """Summarize one dump: totals, OOM, verdict, the ``top`` biggest sites (None: every site),
    live bytes per step. A site row is one (site, caller) pair.

    ``requested``: the failed request in bytes, for a snapshot that records neither history
    nor a sidecar (it is then judged as taken at that OOM).
    """
    tally = Tally()
    reserved = 0
    for segment in dump.segments:
        reserved += segment.total_size
        for block in segment.blocks:
            tally.add(block)
    trace_oom, block_steps = scan_trace(dump, [block for block, _, _ in tally.live])
    oom = merge_oom(dump.meta.oom, trace_oom, dump.meta.kind)
    sites = sorted(tally.sites.items(), key=lambda item: (-item[1][0], item[0]))
    shown = sites if top is None else sites[: max(top, 0)]
    top_sites = tuple(
        SiteBytes(site, size, count, caller, asked)
        for (site, caller), (size, count, asked) in shown
    )
    unrecorded = tally.sites.get((BEFORE_RECORDING, BEFORE_RECORDING), [0, 0, 0])
    filled = what_filled(dump)
    moment = oom_moment(dump, requested=requested)
    oom_sites: tuple[SiteBytes, ...] = ()
    oom_site_count = 0
    if moment is not None and moment.source == TRACE and filled.oom is not None:
        oom_sites, oom_site_count = _sites_at(filled, filled.oom.position, top)
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
    return Summary(
        file=dump.name,
        kind=dump.meta.kind,
        rank=dump.meta.rank,
        has_sidecar=dump.meta.has_sidecar,
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
        at_risk=at_risk(dump, free_in_reserved=tally.free, largest_free_block=tally.largest),
        kinds=filled.kinds,
        peak=filled.peak,
        filled=filled,
    )


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
    for found in live_at(filled.lifetimes, position):
        entry = sites.setdefault(attribute(found.frames), [0, 0, 0])
        entry[0] += found.size
        entry[1] += 1
        entry[2] += found.requested
    ordered = sorted(sites.items(), key=lambda item: (-item[1][0], item[0]))
    shown = ordered if top is None else ordered[: max(top, 0)]
    rows = tuple(
        SiteBytes(site, size, count, caller, asked)
        for (site, caller), (size, count, asked) in shown
    )
    return rows, len(ordered)


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
