"""``summary``: what filled the device, and whether the OOM was fragmentation or exhaustion.

Everything here is one pass over segments and blocks plus at most one backward pass over the
trace (stopping early when it can), so a summary costs little more than loading the file.
Those passes live in :mod:`~memforensics.analysis.summary.scan`, the :class:`Summary` type in
:mod:`~memforensics.analysis.summary.result`; both are re-exported here for code that still
imports them from this module.
"""

from __future__ import annotations

from memforensics.analysis.dump.frames import BEFORE_RECORDING
from memforensics.analysis.dump.load import Dump
from memforensics.analysis.filled.what_filled import what_filled
from memforensics.analysis.oom.proof import verdict_at_oom
from memforensics.analysis.summary.result import SiteBytes, StepBytes, Summary
from memforensics.analysis.summary.scan import (
    Tally,
    by_step,
    live_blocks,
    live_sites,
    merge_oom,
    scan_trace,
)

__all__ = [
    "SiteBytes",
    "StepBytes",
    "Summary",
    "live_blocks",
    "live_sites",
    "merge_oom",
    "scan_trace",
    "summarize",
]


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
        SiteBytes(site, size, count, caller) for (site, caller), (size, count) in shown
    )
    unrecorded = tally.sites.get((BEFORE_RECORDING, BEFORE_RECORDING), [0, 0])
    verdict, moment, bound = verdict_at_oom(
        dump,
        requested=requested,
        top_sites=[(site.site, site.bytes) for site in top_sites[:3]],
        expandable=any(segment.is_expandable for segment in dump.segments),
    )
    return Summary(
        file=dump.name,
        kind=dump.meta.kind,
        rank=dump.meta.rank,
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
        warnings=dump.warnings,
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
        filled=what_filled(dump),
    )


def _device_name(dump: Dump) -> str | None:
    """The sidecar's ``device`` (``"cuda"``, ``"npu"``, ``"sim"``); None without a sidecar."""
    name = dump.meta.sidecar.get("device")
    return name if isinstance(name, str) else None
