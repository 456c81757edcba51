"""``summary``: what filled the device, and whether the OOM was fragmentation or exhaustion.

:class:`Summary` and its rows are the facts, with their ``--json`` forms (field and key names
are a contract that ``summary --json``, the report and the diff rely on, see docs/analysis.md);
:func:`summarize` computes them. Everything is one pass over segments and blocks plus at most
one backward pass over the trace (stopping early when it can), both in
:mod:`~memforensics.analysis.summary.scan`, so a summary costs little more than loading the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
from memforensics.analysis.filled import Filled, live_at, what_filled
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "site": self.site,
            "caller": self.caller,
            "bytes": self.bytes,
            "requested_bytes": self.requested_bytes,
            "blocks": self.blocks,
        }


@dataclass(frozen=True, slots=True)
class StepBytes:
    """Live bytes allocated during one step (``step`` None: no step metadata on those blocks)."""

    step: int | None
    bytes: int
    blocks: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"step": self.step, "bytes": self.bytes, "blocks": self.blocks}


@dataclass(frozen=True)
class Summary:
    """The facts ``memforensics summary`` prints; ``to_dict`` gives the ``--json`` object."""

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
    oom: OomRecord | None
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
    shape: SnapshotShape = field(default_factory=SnapshotShape)
    limits: tuple[str, ...] = ()
    oom_state: OomMoment | None = None  # the state the verdict was judged on
    lower_bound: LowerBound | None = None
    filled: Filled | None = None  # kinds, peak and OOM moment
    has_sidecar: bool = False  # False: a raw PyTorch snapshot, or its sidecar is missing
    oom_sites: tuple[
        SiteBytes, ...
    ] = ()  # biggest sites live at the OOM, when it is not the snapshot
    oom_site_count: int = 0
    judged_note: str | None = None  # what --requested overrode and the moment judged (a warning)
    at_risk: AtRisk | None = None  # a near-OOM dump: how close the rank was

    @property
    def after_oom(self) -> bool:
        """True when the snapshot was taken after the OOM (the unwinding changed the state): the
        headline is then the OOM's moment, reconstructed from the trace."""
        return self.oom_state is not None and self.oom_state.source == TRACE

    @property
    def unwound_bytes(self) -> int | None:
        """Allocated bytes the unwinding after the OOM freed (at the OOM less at the snapshot)."""
        if not self.after_oom or self.oom_state is None or self.oom_state.allocated_bytes is None:
            return None
        return self.oom_state.allocated_bytes - self.allocated_bytes

    @property
    def history_events(self) -> int:
        """Old name of ``trace_entries`` (kept for readers written before the rename)."""
        return self.trace_entries

    @property
    def history_truncated(self) -> bool | None:
        """Old name of ``truncated`` (kept for readers written before the rename)."""
        return self.truncated

    def to_dict(self) -> dict[str, Any]:
        """The ``summary --json`` object (key names are a contract; see docs/analysis.md).

        A fact the sidecar also holds has the sidecar's key (``device`` is the device's name,
        ``device_index`` its index, ``truncated``, ``trace_entries``).
        """
        return {
            "file": self.file,
            "kind": self.kind,
            "rank": self.rank,
            "has_sidecar": self.has_sidecar,
            "step": self.step,
            "steps": list(self.steps) if self.steps else None,
            "device": self.device,
            "device_index": self.device_index,
            "reserved_bytes": self.reserved_bytes,
            "allocated_bytes": self.allocated_bytes,
            "active_bytes": self.active_bytes,
            "free_in_reserved_bytes": self.free_in_reserved_bytes,
            "largest_free_block_bytes": self.largest_free_block_bytes,
            "segments": self.segments,
            "blocks": self.blocks,
            "oom": self.oom.to_dict() if self.oom else None,
            "headline": "oom" if self.after_oom else "snapshot",
            "oom_top_sites": [site.to_dict() for site in self.oom_sites],
            "oom_site_count": self.oom_site_count,
            "unwound_bytes": self.unwound_bytes,
            "verdict": self.verdict.name,
            "verdict_reason": self.verdict.reason,
            "oom_state": self.oom_state.to_dict() if self.oom_state else None,
            "external_bytes": self.oom_state.external_bytes if self.oom_state else None,
            "lower_bound": self.lower_bound.to_dict() if self.lower_bound else None,
            "explanation": self.verdict.explanation,
            "advice": self.verdict.advice,
            "top_sites": [site.to_dict() for site in self.top_sites],
            "site_count": self.site_count,
            "before_recording_bytes": self.before_recording_bytes,
            "before_recording_blocks": self.before_recording_blocks,
            "live_by_step": [step.to_dict() for step in self.live_by_step],
            "trace_entries": self.trace_entries,
            "truncated": self.truncated,
            "warnings": list(self.warnings),
            "devices": [item.to_dict() for item in self.devices],
            "device_reason": self.device_reason,
            "snapshot_shape": self.shape.to_dict(),
            "limits": list(self.limits),
            "at_risk": self.at_risk.to_dict() if self.at_risk else None,
            **(self.filled.to_dict() if self.filled else {}),
        }


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
        oom=oom,
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
        oom_state=moment,
        lower_bound=bound,
        filled=filled,
        oom_sites=oom_sites,
        oom_site_count=oom_site_count,
        judged_note=note,
        at_risk=at_risk(dump, free_in_reserved=tally.free, largest_free_block=tally.largest),
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
