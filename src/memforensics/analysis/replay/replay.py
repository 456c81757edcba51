"""``replay``: self-check the allocator model on a dump, then "would this setting have saved it?"

First the dump's trace is replayed under the settings it was recorded with, from the state
recording started in, and the model's segment events are compared with the real ones
(:mod:`~memforensics.analysis.replay.runner`). Only when that reproduces what happened (fidelity
at least :data:`MIN_FIDELITY`, the OOM reproduced, the history complete and consistent) are the
same requests replayed under other settings: a what-if from a model that cannot reproduce the
recorded run would be an opinion, not evidence.

A trace that starts with live blocks (history is cleared when a step window opens) has lost how
they were placed. Under another setting they are allocated afresh, in address order, at the
start; the same is done under the recorded settings ("calibration", shown as the baseline row
every setting is measured against) and when that changes whether the OOM happens, the layout
before recording decided the outcome and the what-if is refused. A self-check that compared
nothing (no block placed, no segment event) is refused as one that failed.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, replace

from memforensics._units import format_bytes as fmt
from memforensics.allocator import AllocatorSettings, ConfRules, apply_assignment
from memforensics.analysis.dump import (
    NO_HISTORY,
    NOTHING_ALLOCATED,
    ONE_EVENT,
    STACKS_ONLY,
    TRACE,
    Dump,
)
from memforensics.analysis.dump.load import paused_gc
from memforensics.analysis.oom import (
    AllocatorState,
    LowerBound,
    OomMoment,
    Verdict,
    has_history,
    judge,
    lower_bound,
    oom_moment,
    recorded_rules,
    recorded_settings,
    replayable,
    settings_read,
    state_before,
)
from memforensics.analysis.replay.blame import Pinner, pinners
from memforensics.analysis.replay.recorded import (
    BaselineCheck,
    Event,
    cache_releases,
    decode,
    recorded_reserved,
)
from memforensics.analysis.replay.runner import (
    UNBOUNDED,
    Device,
    RunResult,
    placement_share,
    run,
)
from memforensics.analysis.replay.what_if import WhatIf, lint, plan_rows, row

SCHEMA = 3
"""``replay --json``'s ``schema`` (docs/json.md: adding keys keeps it; renaming or removing one
bumps it)."""

AS_RECORDED = "as recorded"
"""The first what-if row: the recorded settings, from the recorded start layout."""
BASELINES = {
    "live": "recorded settings, live blocks placed afresh",
    "cached": "recorded settings, cached segments dropped",
}
"""The baseline row's name by how recording started: what every setting's row does to the
start layout, under the recorded settings."""

MIN_FIDELITY = 0.99
"""Below this share of reproduced segment events, or of blocks placed at their recorded address,
a what-if is refused: one decision in a hundred already differs, the size of the differences a
what-if is asked to judge."""
STANDARD_ALTERNATIVES: tuple[tuple[str, ...], ...] = (
    ("expandable_segments=True",),
    ("max_split_size_mb=64",),
    ("max_split_size_mb=256",),
    ("max_split_size_mb=1024",),
    ("garbage_collection_threshold=0.8",),
    ("roundup_power2_divisions=4",),
    ("expandable_segments=True", "roundup_power2_divisions=4"),
)


@dataclass(frozen=True)
class Replay:
    """What ``memforensics replay`` prints; its ``--json`` object is derived from the fields
    (:func:`~memforensics.analysis.schema.document`, see docs/json.md)."""

    file: str
    recorded_conf: str
    start: str  # "empty", "cached" (segments but no live blocks) or "live"
    live_at_start_blocks: int
    live_at_start_bytes: int
    trace_events: int
    fidelity: float | None
    segment_events: int
    segment_events_matched: int
    placements_checked: int
    placements_same: int
    oom_reproduced: bool | None
    refusals: tuple[str, ...]
    oom: OomMoment | None
    lower_bound: LowerBound | None
    what_if: tuple[WhatIf, ...]
    pinners: tuple[Pinner, ...]
    lint: tuple[str, ...]
    history: bool = True  # False: the trace holds no allocator events, only the snapshot's state
    recorded: str = TRACE  # what the dump records of the history (SnapshotShape.history)
    verdict: Verdict | None = None  # the same verdict summary gives (None: no OOM to judge)
    settings_notes: tuple[str, ...] = ()  # recorded settings the model could not read
    settings_rules: str = ""  # whose parser read them: "torch 2.9", or the newest rules

    trusted: bool = False
    """True when the what-if answers stand on a reproduced run: no refusals, and the baseline
    reaches the recorded peak reserved to the byte (``baseline_check.peak_reproduced``). A peak
    off by even 1 % is not trusted: a setting's change of that size could be the baseline's
    own error."""
    placement_fidelity: float | None = None
    """Share of the recorded blocks the self-check placed at their address (None: none)."""
    avoided_by: tuple[str, ...] = ()
    """Names of the alternatives under which the OOM does not happen."""
    baseline: str = AS_RECORDED
    """The row every setting's ``change_bytes`` is measured against: ``as recorded``, or, when
    recording started with blocks live or cached, the recorded settings with those placed
    afresh (as every setting's row places them)."""
    predicted: bool = False
    """True when ``memforensics plan`` wrote the dump: a prediction, not a GPU's record."""
    baseline_check: BaselineCheck | None = None
    """The baseline row against the recorded run (None: no table was run)."""
    device_known: bool = True
    """False when nothing records the device's size: no row can rule out an OOM, and each
    row's ``oom`` is null unless it failed where the recording did."""


EXPANDABLE_ROW = "expandable_segments=True"
"""The row that turns expandable segments on (``--set expandable_segments=True``)."""


def avoids(result: Replay, name: str) -> tuple[bool | None, str | None]:
    """Does the row ``name`` avoid the OOM: True when it is in ``avoided_by``, False when it
    ran and is not, None with the reason when the replay cannot say (refused, untrusted, or
    no such row). Every command that asks this reads this one answer."""
    if not result.trusted:
        check = result.baseline_check
        why = result.refusals[0] if result.refusals else (check.why if check else None)
        return None, why
    if not any(row.name == name for row in result.what_if):
        return None, f"the replay ran no {name} row"
    return name in result.avoided_by, None


def device_for(dump: Dump, moment: OomMoment | None) -> Device:
    """The device the replay runs on: at an OOM, what the allocator could still reserve then."""
    if (
        moment is not None
        and moment.reserved_bytes is not None
        and moment.device_free_bytes is not None
    ):
        capacity = moment.reserved_bytes + moment.device_free_bytes
        limit = moment.device_total_bytes
        if limit is not None and limit < capacity:
            return Device(capacity, limit, limit)
        return Device(capacity, None, limit or capacity)
    return Device(UNBOUNDED, None, UNBOUNDED)


@paused_gc()
def replay_dump(
    dump: Dump,
    *,
    sets: list[str] | None = None,
    requested: int | None = None,
    jobs: int = 1,
) -> Replay:
    """Self-check, lower bound, what-if table, pinners and lint for one dump.

    ``sets``: ``key=value`` settings for one alternative row (with none, the standard
    alternatives); raises :class:`~memforensics.allocator.SettingsError` for a bad one.
    ``jobs``: how many processes replay what-if rows at once (this one and ``jobs - 1``
    forked workers, started before the self-check).
    """
    recorded = recorded_settings(dump)
    read = settings_read(dump)
    rules = recorded_rules(dump)
    alternatives = _alternatives(recorded, sets, rules)
    moment = oom_moment(dump, requested=requested)
    device = _device_with_conf_fraction(device_for(dump, moment), recorded, moment)
    start = state_before(dump, 0, recorded)
    live_blocks = [block for segment in start.segments for block in segment.blocks]
    kind = "live" if live_blocks else ("cached" if start.segments else "empty")
    refusals = _history_refusals(dump, start)
    events = decode(dump.trace)  # read once; every run below walks these tuples
    releases = cache_releases(events, start)  # where every run releases its whole cache
    tabled = has_history(dump) and not start.problem_count
    note = "live blocks at the start placed afresh" if kind == "live" else None
    planned = plan_rows(
        dump, events, start, device, recorded, alternatives if tabled else [], note=note,
        jobs=jobs, releases=releases,
    )  # fmt: skip
    if not refusals:  # with jobs, the rows start now in workers while the self-check runs here
        planned.start()
    with closing(planned):
        try:
            exact = run(
                dump, recorded, start, device, exact=True, stop_at_oom=False, events=events,
                releases=releases,
            )  # fmt: skip
        except (KeyError, IndexError) as exc:  # the model's own books disagree: no evidence
            exact, tabled = RunResult(recorded), False
            refusals.append(
                f"the allocator model lost track of its blocks while following the trace"
                f" ({type(exc).__name__} in the model): its self-check and what-if are no"
                " evidence (a defect of memforensics' model; please report it with the dump)"
            )
        refusals += _self_check_refusals(exact)
        if tabled and not _verified(exact):
            refusals.append(
                "the self-check verified nothing: the trace holds no allocation to place and no"
                " segment event to compare, so a what-if would rest on no evidence"
            )
        reproduced: bool | None = None
        if moment is not None and moment.index is not None:
            reproduced = exact.oom_index == dump.oom_positions[0]  # the first of any retries
            if not reproduced:
                refusals.append("the model does not fail where the recorded allocator failed")
        rows: list[WhatIf] = []
        check: BaselineCheck | None = None
        if tabled:
            # The exact run noted what it would have reported had it stopped at the first OOM:
            # that is the baseline, step for step, without a second run.
            baseline = calibration = exact.at_first_stop or exact
            rows.append(row(AS_RECORDED, recorded, baseline, None))
            if kind != "empty":  # the calibration matters only with blocks live or cached
                calibration = run(
                    dump, recorded, start, device, exact=False, stop_at_oom=True, events=events,
                    releases=releases,
                )  # fmt: skip
                rows.append(row(BASELINES[kind], recorded, calibration, note))
                if (calibration.oom_index is None) != (baseline.oom_index is None):
                    refusals.append(
                        "the blocks live when recording started decide the outcome: placed"
                        " afresh under the recorded settings they give a different result, so"
                        " their lost history matters"
                    )
            check = _check_baseline(events, start, kind, exact, calibration, len(releases))
            if not refusals:  # refused: only row one shows
                rows += planned.rows(calibration)  # placed as the other rows place them
    bound = lower_bound(dump, moment) if moment is not None else None
    expandable = any(segment.is_expandable for segment in dump.segments)
    verdict = (
        judge(
            moment,
            bound=bound,
            top_sites=[],
            expandable=expandable,
            history=replayable(dump),
            predates_expandable=dump.shape.predates_expandable,
        )
        if moment is not None
        else None
    )
    device_known = device.capacity < UNBOUNDED
    what_if = _sized(rows if not refusals else rows[:1], device_known=device_known)
    return Replay(
        file=dump.name,
        recorded_conf=recorded.to_conf(),
        start=kind,
        live_at_start_blocks=len(live_blocks),
        live_at_start_bytes=sum(block.size or 0 for block in live_blocks),
        trace_events=len(dump.trace),
        fidelity=exact.fidelity,
        segment_events=exact.real_segment_events,
        segment_events_matched=exact.matched_segment_events,
        placements_checked=exact.allocs_checked,
        placements_same=exact.allocs_placed_same,
        oom_reproduced=reproduced,
        refusals=tuple(refusals),
        oom=moment,
        lower_bound=bound,
        what_if=what_if,
        pinners=tuple(pinners(dump, moment, recorded)),
        lint=tuple(lint(dump, recorded, moment)),
        history=has_history(dump),
        recorded=dump.shape.history,
        verdict=verdict,
        settings_notes=tuple(read.notes()) if read is not None else (),
        settings_rules=rules.label(),
        trusted=not refusals and (check is None or check.peak_reproduced),
        placement_fidelity=placement_share(exact.allocs_placed_same, exact.allocs_checked),
        avoided_by=tuple(
            r.name
            for r in what_if
            if r.change_bytes is not None and r.oom is False and not r.no_effect
        )
        if moment is not None
        else (),
        baseline=BASELINES.get(kind, AS_RECORDED),
        predicted=dump.meta.predicted,
        baseline_check=check,
        device_known=device_known,
    )


def _sized(rows: list[WhatIf], *, device_known: bool) -> tuple[WhatIf, ...]:
    """The rows as the device's size lets them read: on a device of unknown size no run can
    rule out an OOM, so a row that did not fail says nothing (``oom`` None) but its peak."""
    if device_known:
        return tuple(rows)
    return tuple(r if r.oom else replace(r, oom=None) for r in rows)


def _check_baseline(
    events: list[Event],
    start: AllocatorState,
    kind: str,
    exact: RunResult,
    baseline: RunResult,
    releases: int,
) -> BaselineCheck:
    """The baseline against the recording up to where the baseline stops: the same peak
    reserved to the byte and the same number of segment events, or where and why not. That
    the segment events are the recording's own is the self-check's fidelity (a baseline that
    places blocks afresh remakes the segments it dropped at the start)."""
    made = baseline.segment_events_made
    record = recorded_reserved(events, start, baseline.stopped_at)
    peak = baseline.peak_reserved == record.peak_bytes
    check = BaselineCheck(
        recorded_peak_reserved_bytes=record.peak_bytes,
        recorded_peak_index=record.peak_index,
        baseline_peak_reserved_bytes=baseline.peak_reserved,
        baseline_peak_index=baseline.peak_index,
        recorded_segment_events=record.segment_events,
        baseline_segment_events=made,
        cache_releases=releases,
        reproduced=peak and made == record.segment_events,
        peak_reproduced=peak,
    )
    if check.reproduced:
        return check
    where = baseline.diverged
    return replace(
        check,
        diverged_at=where[0] if where else None,
        diverged_reserved_bytes=where[1] if where else None,
        diverged_recorded_bytes=where[2] if where else None,
        why=_why_diverged(start, kind, exact),
    )


def _why_diverged(start: AllocatorState, kind: str, exact: RunResult) -> str:
    """Why a baseline does not reproduce the recording, from how recording started."""
    cached = [segment for segment in start.segments if not segment.blocks]
    dropped = sum(segment.size for segment in cached)
    reasons: list[str] = []
    if kind != "empty" and dropped:
        reasons.append(
            f"it starts without the {fmt(dropped)} cached in {len(cached):,} unused"
            f" segment{'' if len(cached) == 1 else 's'} when recording began (every row drops"
            " them: under another setting they would not be laid out so)"
        )
    if kind == "live":
        blocks = sum(len(segment.blocks) for segment in start.segments)
        reasons.append(
            f"the {blocks:,} blocks live when recording began are placed afresh, not where"
            " their lost history put them"
        )
    if not reasons:
        first = f": {exact.mismatches[0]}" if exact.mismatches else ""
        reasons.append(f"the allocator model decides unlike the recorded allocator{first}")
    return "; ".join(reasons)


_NO_TRACE = {
    NO_HISTORY: "the dump records no allocator history (record_memory_history was off)",
    STACKS_ONLY: "the dump records stacks but no trace of allocator events (history recorded"
    " as state only, or by PyTorch 2.0 per block): there are no events to replay",
    NOTHING_ALLOCATED: "nothing allocated: the snapshot holds no segment and no event",
}
"""Why a dump without allocator events has no what-if, by what it records instead."""


def _history_refusals(dump: Dump, start: AllocatorState) -> list[str]:
    """Why the history cannot carry a what-if: none, contradicting the snapshot, overflowed."""
    refusals: list[str] = []
    if not has_history(dump):
        refusals.append(_NO_TRACE.get(dump.shape.history, _NO_TRACE[NO_HISTORY]))
    elif dump.shape.history == ONE_EVENT:
        refusals.append(
            "the trace holds one event (the legacy _record_memory_history(True) keeps one):"
            " too short to replay or to rule out an OOM"
        )
    if start.problem_count:
        refusals.append(
            f"the history contradicts the snapshot ({start.problem_count} events):"
            f" {start.problems[0]}"
        )
    if _overflowed(dump):
        refusals.append(
            "the history ring buffer overflowed: the events that shaped the starting layout are"
            " lost (raise max_entries)"
        )
    return refusals


def _verified(exact: RunResult) -> bool:
    """Did the self-check compare anything: a block placement or a segment event?"""
    return bool(exact.allocs_checked or exact.real_segment_events or exact.model_segment_events)


def _self_check_refusals(exact: RunResult) -> list[str]:
    """Why the self-check does not reproduce the recorded run closely enough for a what-if."""
    refusals: list[str] = []
    fidelity = exact.fidelity
    if fidelity is not None and fidelity < MIN_FIDELITY:
        refusals.append(
            f"the model reproduced only {fidelity:.1%} of the recorded segment events"
            f" (needs {MIN_FIDELITY:.0%}); first differences: {'; '.join(exact.mismatches[:2])}"
        )
    placed = exact.placement_fidelity
    if placed is not None and placed < MIN_FIDELITY:
        refusals.append(
            f"the model placed only {placed:.1%} of the blocks at their recorded address"
            f" ({exact.allocs_placed_same:,}/{exact.allocs_checked:,}, needs {MIN_FIDELITY:.0%}):"
            f" the start layout or the settings differ from the recorded allocator's; first"
            f" differences: {'; '.join(exact.misplaced)}"
        )
    return refusals


def _device_with_conf_fraction(
    device: Device, settings: AllocatorSettings, moment: OomMoment | None
) -> Device:
    """A ``per_process_memory_fraction`` in the conf string limits what may be reserved:
    that share of the device's total, unless the OOM's figures already show a lower limit."""
    fraction = settings.memory_fraction
    if fraction is None or fraction >= 1.0 or moment is None or moment.device_total_bytes is None:
        return device  # a fraction of 1.0 sets no limit (``setMemoryFraction``)
    if device.allowed is not None:  # the limit the OOM met is already the fraction's
        return device
    allowed = int(fraction * moment.device_total_bytes)
    return Device(device.capacity, min(allowed, device.capacity), device.total)


def _alternatives(
    recorded: AllocatorSettings, sets: list[str] | None, rules: ConfRules
) -> list[tuple[str, AllocatorSettings]]:
    """The rows to run: the ``--set`` combination, else the standard alternatives that differ."""
    groups = [tuple(sets)] if sets else list(STANDARD_ALTERNATIVES)
    found: list[tuple[str, AllocatorSettings]] = []
    seen = {recorded}
    for group in groups:
        settings = recorded
        for assignment in group:
            settings = apply_assignment(settings, assignment, rules)
        if settings not in seen or sets:
            seen.add(settings)
            found.append((", ".join(group), settings))
    return found


def _overflowed(dump: Dump) -> bool:
    """The ring buffer dropped events: the sidecar's ``truncated`` or PyTorch's own flag."""
    settings = dump.snapshot.get("allocator_settings")
    flag = isinstance(settings, dict) and settings.get("trace_alloc_overflowed") is True
    return flag or dump.meta.truncated is True
