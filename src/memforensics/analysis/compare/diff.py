"""``diff``: which sites grew between two dumps, at their peaks and at their ends, and which
live blocks look leaked.

Two runs of one model that differ in a setting (context 100 and 200, say) end in nearly the
same state: the activations that made the difference are freed by then. So the peaks are
compared first (each side's highest live bytes, and reserved bytes and segments at that
moment, and with a trace on both sides the change per site and per kind at the peaks), then the
final states.

Comparing two windows of the same run (say steps 4-7 and 100-103) by live bytes per site shows
where memory went. With step metadata it can say more: a block still alive in the later window
but allocated in a step before that window began outlived its step. Blocks already alive (same
address, size and step) in the earlier dump are steady state, such as optimizer state made at
step 0, and are left out so the suspects are what accumulated in between.

Rows are (site, caller) pairs, as in ``summary``; growth is ordered by the size of the change,
so a big release shows up beside a big growth instead of at the bottom.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from memforensics.analysis.dump import (
    UNKNOWN_SITE,
    Dump,
    attribute,
    parse_step,
    per_recorded_stack,
)
from memforensics.analysis.filled import KINDS, Filled, live_at, main_kind, what_filled
from memforensics.analysis.filled.kinds import UNKNOWN as UNKNOWN_KIND
from memforensics.analysis.summary import live_sites, scan_trace

# What ``diff`` reads of one dump: a side of the comparison.
#
# ``diff`` compares two dumps by their live blocks (address, size, site, caller and the step each
# was made in), the window of steps the later one covers and the live bytes per kind, device by
# device when a file holds several. That is a few thousand rows where the dump is millions of
# trace entries: :func:`diff_side` is a pure function of one dump and a device, and its result a
# plain value, so a caller may keep it (the CLI caches it per file) and compare it with any
# partner later without reading the dump again.


@dataclass(frozen=True, slots=True)
class LiveRow:
    """One live block as ``diff`` sees it, with the kind of its memory."""

    address: int
    size: int
    site: str
    caller: str
    step: int | None
    kind: str = "unknown"


@dataclass(frozen=True, slots=True)
class SiteRow:
    """Live bytes of one (site, caller) pair at a moment."""

    site: str
    caller: str
    bytes: int
    kind: str = UNKNOWN_KIND


@dataclass(frozen=True)
class SidePeak:
    """One side's highest moment of live memory: its live bytes, the reserved bytes and
    segments then, the live bytes per kind then, and (``traced``) per site then. Without a
    trace the snapshot's own moment stands in and ``traced`` is False: its kinds are the
    snapshot's, read from its blocks' frames as ``summary``'s ``peak`` reads them."""

    live_bytes: int
    reserved_bytes: int
    segments: int
    traced: bool
    sites: tuple[SiteRow, ...] = ()
    kinds: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DiffSide:
    """One view of a dump, as ``diff`` compares it: its live blocks and the steps it covers;
    from :func:`diff_side`, also the devices the file holds memory or history on, the live
    bytes per kind, its reserved bytes and segments, and its peak."""

    name: str
    device: int | None
    live: tuple[LiveRow, ...]
    window: tuple[int, int] | None
    held: tuple[int, ...] = ()
    kinds: dict[str, int] = field(default_factory=dict)
    reserved_bytes: int = 0
    segments: int = 0
    peak: SidePeak | None = None
    predicted: bool = False  # written by memforensics plan: a prediction, not a GPU's record

    @property
    def allocated_bytes(self) -> int:
        """Bytes of the live blocks."""
        return sum(row.size for row in self.live)


SideOf = Callable[[int | None], DiffSide]
"""One dump's side of a comparison, by device (None: the whole file)."""


def diff_side(dump: Dump, device: int | None = None) -> DiffSide:
    """The side of ``dump`` on ``device`` (None: the whole file): its live rows and window, the
    file's devices and the live bytes per kind; SnapshotLoadError when the file holds nothing
    on ``device``."""
    view = dump if device is None else dump.on_device(device, reason="same device")
    filled = what_filled(view)
    live = live_side(view, filled)
    kinds = {k.kind: k.bytes for k in filled.kinds}
    held = tuple(item.device for item in dump.devices)
    reserved = sum(segment.total_size for segment in view.segments)
    peak = side_peak(filled, reserved, len(view.segments))
    return DiffSide(
        live.name, live.device, live.live, live.window, held, kinds, reserved,
        len(view.segments), peak, live.predicted,
    )  # fmt: skip


def side_peak(filled: Filled, reserved_now: int, segments_now: int) -> SidePeak:
    """The peak of ``filled`` as ``diff`` compares it: live, reserved and segments then, the
    live bytes per kind then (``filled``'s peak moment, the one ``summary`` prints), and with a
    trace per (site, caller) then."""
    lt, peak = filled.lifetimes, filled.peak
    reserved = lt.reserved_at(peak.position, reserved_now)
    segments = lt.segments_at(peak.position, segments_now)
    kinds = {k.kind: k.bytes for k in peak.kinds}
    if not lt.has_trace:
        return SidePeak(peak.live_bytes, reserved, segments, False, (), kinds)
    site_of = per_recorded_stack(attribute)
    totals: dict[tuple[str, str], dict[str, int]] = {}
    for found in live_at(lt, peak.position):
        by_kind = totals.setdefault(site_of(found.frames, found.recorded), {})
        by_kind[found.kind] = by_kind.get(found.kind, 0) + found.size
    sites = tuple(
        SiteRow(site, caller, sum(by_kind.values()), main_kind(by_kind))
        for (site, caller), by_kind in sorted(totals.items())
    )
    return SidePeak(peak.live_bytes, reserved, segments, True, sites, kinds)


def live_side(view: Dump, filled: Filled | None = None) -> DiffSide:
    """``view``'s live blocks with their sites, steps and kinds (``filled``: ``view``
    classified; None: classified here), and its window of steps."""
    if filled is None:
        filled = what_filled(view)
    kind_of_block = filled.kind_of_blocks()
    live = live_sites(view, filled.lifetimes)
    _, steps = scan_trace(view, [block for block, _, _ in live])
    rows = tuple(
        LiveRow(
            block.address,
            block.size,
            site,
            caller,
            steps.get(block.address),
            kind_of_block.get(block.address, UNKNOWN_KIND),
        )
        for block, site, caller in live
    )
    return DiffSide(view.name, view.device, rows, _window(view), predicted=view.meta.predicted)


def _window(dump: Dump) -> tuple[int, int] | None:
    """The dump's steps: from its sidecar or path; else the steps its history recorded, since
    history is cleared when a window opens."""
    if dump.meta.steps is not None:
        return dump.meta.steps
    if dump.meta.step is not None:
        return (dump.meta.step, dump.meta.step)
    seen = [
        step
        for entry in dump.trace
        if type(entry) is dict and entry.get("action") == "alloc"
        for step in (parse_step(entry.get("user_metadata")),)
        if step is not None
    ]
    return (min(seen), max(seen)) if seen else None


# ``diff`` by kind: live bytes per kind of memory in each dump, and the change.
#
# Each dump is classified on its own (:func:`~memforensics.analysis.filled.peak`); the
# kinds are compared at each dump's snapshot, the same moment the site rows compare.


@dataclass(frozen=True, slots=True)
class KindChange:
    """Live bytes of one kind of memory in both dumps, and the change."""

    kind: str
    before_bytes: int
    after_bytes: int
    delta_bytes: int


def kinds_change(before: DiffSide, after: DiffSide) -> tuple[KindChange, ...]:
    """Live bytes per kind at each side's moment, and the change (for ``diff``), in the
    kinds' order; kinds neither side holds are left out."""
    return _kinds(before.kinds, after.kinds)


def _kinds(old: dict[str, int], new: dict[str, int]) -> tuple[KindChange, ...]:
    return tuple(
        KindChange(kind, old.get(kind, 0), new.get(kind, 0), new.get(kind, 0) - old.get(kind, 0))
        for kind in KINDS
        if kind in old or kind in new
    )


DIFF_SCHEMA = 2
"""``diff --json``'s ``schema`` (docs/json.md: adding keys keeps it; renaming or removing one
bumps it)."""


@dataclass(frozen=True, slots=True)
class SiteGrowth:
    """Live bytes of one site (reached from one caller) in both dumps; ``kind``: the kind of
    most of its bytes in AFTER (in BEFORE when AFTER holds none)."""

    site: str
    before_bytes: int
    after_bytes: int
    delta_bytes: int
    caller: str = UNKNOWN_SITE
    kind: str = "unknown"


@dataclass(frozen=True, slots=True)
class LeakSuspect:
    """Live bytes in AFTER, from one site, allocated in steps before AFTER's window, and the
    kind of most of them."""

    site: str
    bytes: int
    blocks: int
    steps: tuple[int, ...]
    caller: str = UNKNOWN_SITE
    kind: str = "unknown"


@dataclass(frozen=True)
class PeakChange:
    """The two sides' peaks: live bytes at each, reserved bytes and segments then, the change
    per kind at the peaks (a side without a trace: at its snapshot), and when both sides have a
    trace (``traced``), the change per site at the peaks."""

    before_live_bytes: int
    after_live_bytes: int
    delta_bytes: int  # after_live_bytes - before_live_bytes
    before_reserved_bytes: int
    after_reserved_bytes: int
    before_segments: int
    after_segments: int
    before_traced: bool
    after_traced: bool
    growth: tuple[SiteGrowth, ...] = ()
    kinds: tuple[KindChange, ...] = ()

    @property
    def traced(self) -> bool:
        """True when both peaks were found in a trace (so their sites are compared)."""
        return self.before_traced and self.after_traced

    @property
    def reserved_delta_bytes(self) -> int:
        """Reserved bytes at AFTER's peak less at BEFORE's."""
        return self.after_reserved_bytes - self.before_reserved_bytes


def peak_change(before: SidePeak, after: SidePeak) -> PeakChange:
    """Compare two peaks: their kinds always, their sites only when both were found in a
    trace."""
    growth: tuple[SiteGrowth, ...] = ()
    if before.traced and after.traced:
        growth = _growth(
            [(row.site, row.caller, row.kind, row.bytes) for row in before.sites],
            [(row.site, row.caller, row.kind, row.bytes) for row in after.sites],
        )
    return PeakChange(
        before_live_bytes=before.live_bytes,
        after_live_bytes=after.live_bytes,
        delta_bytes=after.live_bytes - before.live_bytes,
        before_reserved_bytes=before.reserved_bytes,
        after_reserved_bytes=after.reserved_bytes,
        before_segments=before.segments,
        after_segments=after.segments,
        before_traced=before.traced,
        after_traced=after.traced,
        growth=growth,
        kinds=_kinds(before.kinds, after.kinds),
    )


def _growth(
    before: list[tuple[str, str, str, int]], after: list[tuple[str, str, str, int]]
) -> tuple[SiteGrowth, ...]:
    """Live bytes per (site, caller) on both sides, from ``(site, caller, kind, bytes)`` rows:
    the sites that changed, the largest change first (growth or release alike), each with the
    kind of most of its bytes in AFTER (in BEFORE when AFTER holds none)."""
    totals: dict[tuple[str, str], list[int]] = {}
    kinds: list[dict[tuple[str, str], dict[str, int]]] = [{}, {}]
    for index, rows in enumerate((before, after)):
        for site, caller, kind, size in rows:
            totals.setdefault((site, caller), [0, 0])[index] += size
            by_kind = kinds[index].setdefault((site, caller), {})
            by_kind[kind] = by_kind.get(kind, 0) + size
    return tuple(
        sorted(
            (
                SiteGrowth(
                    site,
                    old,
                    new,
                    new - old,
                    caller,
                    main_kind(kinds[1].get((site, caller)) or kinds[0][site, caller]),
                )
                for (site, caller), (old, new) in totals.items()
                if new != old
            ),
            key=lambda item: (-abs(item.delta_bytes), -item.delta_bytes, item.site, item.caller),
        )
    )


@dataclass(frozen=True)
class Diff:
    """What ``memforensics diff`` prints; its ``--json`` object is derived from the fields
    (:func:`~memforensics.analysis.schema.document`, see docs/json.md).

    One comparison, ``before_device_index`` of BEFORE against ``after_device_index`` of AFTER.
    ``diff``'s answer about two files is the first device pair's, holding the other pairs in
    ``other_devices`` (each with empty ``other_devices``, ``unmatched_devices`` and ``kinds``),
    the devices only one file holds, and the live bytes per kind of the files compared.
    ``peaks`` compares the two sides' peaks (None where a side was not read whole, as
    :func:`diff_dumps` reads it); the other figures are the final states'.
    """

    before: str
    after: str
    before_allocated_bytes: int
    after_allocated_bytes: int
    total_delta_bytes: int  # after_allocated_bytes - before_allocated_bytes
    growth: tuple[SiteGrowth, ...]
    after_window: tuple[int, int] | None
    leak_suspects: tuple[LeakSuspect, ...]
    before_device_index: int | None = None
    after_device_index: int | None = None
    other_devices: tuple[Diff, ...] = ()
    unmatched_devices: tuple[str, ...] = ()  # "device 2 only in AFTER"
    kinds: tuple[KindChange, ...] = ()
    before_reserved_bytes: int | None = None
    after_reserved_bytes: int | None = None
    before_segments: int | None = None
    after_segments: int | None = None
    peaks: PeakChange | None = None
    before_predicted: bool = False  # BEFORE was written by memforensics plan, not measured
    after_predicted: bool = False


def diff_dumps(before: Dump, after: Dump) -> Diff:
    """Compare live bytes per (site, caller); largest change first (growth or release alike);
    sites that did not change are left out. The peaks and reserved bytes too
    (:func:`diff_by_device` compares device by device)."""
    return diff_sides(diff_side(before), diff_side(after))


def diff_sides(before: DiffSide, after: DiffSide) -> Diff:
    """:func:`diff_dumps` of two views already reduced to what ``diff`` reads of them."""
    growth = _growth(
        [(row.site, row.caller, row.kind, row.size) for row in before.live],
        [(row.site, row.caller, row.kind, row.size) for row in after.live],
    )
    whole = before.peak is not None and after.peak is not None
    peaks = None
    if before.peak is not None and after.peak is not None:
        peaks = peak_change(before.peak, after.peak)
    window = after.window
    suspects: tuple[LeakSuspect, ...] = ()
    if window is not None:
        steady = {(row.address, row.size, row.step) for row in before.live}
        suspects = _suspects(after.live, window[0], steady)
    old_bytes, new_bytes = before.allocated_bytes, after.allocated_bytes
    return Diff(
        before=before.name,
        after=after.name,
        before_allocated_bytes=old_bytes,
        after_allocated_bytes=new_bytes,
        total_delta_bytes=new_bytes - old_bytes,
        growth=tuple(growth),
        after_window=window,
        leak_suspects=suspects,
        before_device_index=before.device,
        after_device_index=after.device,
        before_reserved_bytes=before.reserved_bytes if whole else None,
        after_reserved_bytes=after.reserved_bytes if whole else None,
        before_segments=before.segments if whole else None,
        after_segments=after.segments if whole else None,
        peaks=peaks,
        before_predicted=before.predicted,
        after_predicted=after.predicted,
    )


def _suspects(
    live: tuple[LiveRow, ...], first_step: int, steady: set[tuple[int, int, int | None]]
) -> tuple[LeakSuspect, ...]:
    grouped: dict[tuple[str, str], tuple[int, int, set[int]]] = {}
    kinds: dict[tuple[str, str], dict[str, int]] = {}
    for row in live:
        step = row.step
        if step is None or step >= first_step or (row.address, row.size, step) in steady:
            continue
        key = (row.site, row.caller)
        size, count, seen = grouped.get(key, (0, 0, set()))
        seen.add(step)
        grouped[key] = (size + row.size, count + 1, seen)
        by_kind = kinds.setdefault(key, {})
        by_kind[row.kind] = by_kind.get(row.kind, 0) + row.size
    ordered = sorted(grouped.items(), key=lambda item: (-item[1][0], item[0]))
    return tuple(
        LeakSuspect(site, size, count, tuple(sorted(seen)), caller, main_kind(kinds[site, caller]))
        for (site, caller), (size, count, seen) in ordered
    )


# ``diff`` device to device: growth on device 1 is compared with device 1, never with device 0.
#
# Two single-device dumps are compared as they are, whatever their device numbers (a rank may
# run on ``cuda:3`` in one job and ``cuda:5`` in the next). When either dump covers several
# devices, each device present in both is compared with itself, the default device first, and a
# device present on one side only is named rather than silently dropped.


def sides_of(dump: Dump | SideOf) -> SideOf:
    """``dump``'s sides by device, each worked out once: a dump's from :func:`diff_side`, a
    caller's own (kept ones, say) as they are."""
    side: SideOf = functools.partial(diff_side, dump) if isinstance(dump, Dump) else dump
    return functools.cache(side)


def diff_by_device(
    before: Dump | SideOf, after: Dump | SideOf, *, device: int | None = None
) -> Diff:
    """Compare ``before`` with ``after`` device by device (``device``: only that one, in both):
    the first pair's :class:`Diff` holding the other pairs, the devices only one side holds,
    and the live bytes per kind (on ``device``, else of the whole files).

    Either side may be a dump or a function giving its :class:`DiffSide` by device."""
    old, new = sides_of(before), sides_of(after)
    kinds = kinds_change(old(device), new(device))
    if device is not None:
        return _result([(old(device), new(device))], (), kinds)
    old_whole, new_whole = old(None), new(None)
    if len(old_whole.held) <= 1 and len(new_whole.held) <= 1:
        return _result([(old_whole, new_whole)], (), kinds)
    before_held, after_held = set(old_whole.held), set(new_whole.held)
    common = sorted(before_held & after_held, key=lambda d: (d != new_whole.device, d))
    sides = (("BEFORE", before_held - after_held), ("AFTER", after_held - before_held))
    unmatched = tuple(f"device {d} only in {side}" for side, only in sides for d in sorted(only))
    if not common:
        return _result([(old_whole, new_whole)], unmatched, kinds)
    return _result([(old(d), new(d)) for d in common], unmatched, kinds)


def _result(
    views: list[tuple[DiffSide, DiffSide]],
    unmatched: tuple[str, ...],
    kinds: tuple[KindChange, ...],
) -> Diff:
    first, *others = (diff_sides(b, a) for b, a in views)
    return replace(first, other_devices=tuple(others), unmatched_devices=unmatched, kinds=kinds)
