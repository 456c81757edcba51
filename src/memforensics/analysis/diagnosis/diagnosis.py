"""One diagnosis: the causes of an OOM (or of a rank at risk, or of a dump's peak), ranked, each
with its evidence.

The verdict (:mod:`~memforensics.analysis.oom.verdict`) names the allocator's category of
failure: fragmentation, exhaustion, memory outside PyTorch. A user acts on the *cause*: a site
whose live bytes grow every step, a KV cache sized to most of the device, optimizer state that
sharding would spread. :func:`diagnose` looks for each cause only on evidence in the dump, its
sidecar or its run folder, and ranks them:

0. a request that alone exceeds what PyTorch could get with nothing else live (the limit
   less the memory outside PyTorch) heads the diagnosis, with the site that made it and its
   fix, a smaller request (or a higher per-process limit): nothing freed can make room for
   it, so no other cause is sufficient then, whatever its bytes;
1. the causes whose removal alone would have let the failed request succeed come first
   ("removing it frees X, the request needed Y"); among them growth first (while it grows, any
   other fix only postpones the OOM by a few steps) and fragmentation last (a growth fills the
   room its fix frees);
2. then by bytes.

What the request needed (:func:`needed_bytes`) is the size the allocator asked the device for
(``allocation_bytes``: a whole segment) less what the device could still give (the headroom),
or nothing when the allocator model served the request in the recorded state. A cause is
*sufficient* when what its removal (or its best fix) frees covers that. A cause that is not
never heads the diagnosis while one that is exists; when none is, the headline says so.

What the trace proves comes before what a classifier guesses: at an OOM whose trace shows the
unwinding, the blocks it freed right after the failure are the failing step's tensors, named
with their sites and bytes, whatever confidence their kinds have. A cause read from inferred
kinds is still a cause; its evidence says the kinds were inferred, with its bytes and sites.
A figure that is not known is left out, never printed as ``0 B``.

A dump with no OOM and no pressure is diagnosed at its peak (or, without a trace, at the
snapshot): the headline is what makes up that moment and the smallest change that cuts it,
then the other parts (parameters, gradients, optimizer state, a cache and its knob, pending
frees) with their bytes. ``none: ...`` is the headline only of an empty snapshot; a dump whose
trace cannot show whether anything failed (none, or one event) says so.

Where evidence is missing, :attr:`Diagnosis.missing` says what and how to get it; a cause is
never invented. Every fix is one the dump's torch release has.

``summary`` computes the diagnosis once; its text, ``--json``, the report's headline and
``overview``'s failing rank all read that one object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from memforensics.analysis.diagnosis import text
from memforensics.analysis.dump import Dump, as_int
from memforensics.analysis.filled import (
    KV_ALLOCATORS,
    OPTIMIZER_TEMPORARIES,
    Gathered,
    KindBytes,
    KindSite,
    Moment,
    OptimizerTemporaries,
    Unwound,
)
from memforensics.analysis.oom import (
    RAISE_FRACTION,
    ExpandableAnswer,
    OomMoment,
    Verdict,
    capacity_text,
    recorded_rules,
    request_site,
)

REQUEST = "request"
GROWTH = "growth"
STATIC = "static"
ACTIVATIONS = "activations"
OPTIMIZER_STEP = "optimizer_temporaries"
CACHE = "cache"
OUTSIDE = "outside"
PENDING_FREES = "pending_frees"
FRAGMENTATION = "fragmentation"
CAUSES = (
    REQUEST,
    GROWTH,
    STATIC,
    ACTIVATIONS,
    OPTIMIZER_STEP,
    CACHE,
    OUTSIDE,
    PENDING_FREES,
    FRAGMENTATION,
)
"""Every cause :func:`diagnose` can name (a :class:`Cause`'s ``name``)."""

# Kind names of the kinds table (analysis/filled/kinds.py).
_PARAMETER, _GRADIENT, _OPTIMIZER = "parameter", "gradient", "optimizer_state"
_ACTIVATION, _TEMPORARY, _KV_CACHE = "activation", "temporary", "kv_cache"
_INPUT = "input"
_BATCH = (_ACTIVATION, _INPUT, _TEMPORARY)
"""The kinds that grow with the micro-batch: what the step was fed and what its forward and
backward made of it (the activations cause)."""
_UNATTRIBUTED = ("before_recording", "unknown")  # bytes whose kind nothing tells
_UNKNOWN_VERDICT = "unknown"

MIN_GROWTH_STEPS = 3
"""A site grows when its live blocks were made in at least this many steps ..."""
MIN_GROWTH_COVER = 0.5
"""... covering at least this share of the steps from its first to its last."""
GATHERED_SHARE = 0.25
"""FSDP's unsharded parameters are a large part of the judged moment from this share of its
live bytes: the static cause names them, and what frees them."""
EXPANDABLE_SINCE = (2, 1)
"""The first torch release with ``expandable_segments`` in ``PYTORCH_CUDA_ALLOC_CONF``."""


@dataclass(frozen=True, slots=True)
class Fix:
    """One way to remove (part of) a cause, and the bytes it frees (None: not known)."""

    action: str
    bytes: int | None
    sufficient: bool | None = None


@dataclass(frozen=True, slots=True)
class Cause:
    """One cause: what it holds, what removing it frees, the evidence, the fixes.

    ``sufficient``: removing it alone (by its best fix) would have let the failed request
    succeed; None without a failed request. ``sites`` are the allocation sites behind it.
    ``rate_bytes_per_step``, ``first_step`` and ``steps_left`` are growth's (``steps_left``:
    steps until the headroom is gone, at that rate).
    """

    name: str
    bytes: int
    freed_bytes: int | None
    sufficient: bool | None
    evidence: str
    fixes: tuple[Fix, ...]
    sites: tuple[str, ...] = ()
    rate_bytes_per_step: int | None = None
    first_step: int | None = None
    steps_left: int | None = None
    inferred: bool = False
    """The cause rests on kinds the classifier inferred (not told by the process, not proven
    by the trace)."""

    @property
    def fix(self) -> Fix | None:
        """The smallest sufficient fix (the first, in order of effort, that frees enough), else
        the first fix."""
        for found in self.fixes:
            if found.sufficient:
                return found
        return self.fixes[0] if self.fixes else None


@dataclass(frozen=True)
class Diagnosis:
    """The ranked causes, the headline (top cause and its smallest sufficient fix), what the
    failed request needed, and what evidence is missing and how to get it."""

    causes: tuple[Cause, ...]
    headline: str
    requested_bytes: int | None = None
    needed_bytes: int | None = None
    missing: tuple[str, ...] = ()
    moment: str | None = None
    """The moment judged: ``oom``, ``peak`` or ``snapshot`` (None: no moment was judged)."""

    @property
    def top(self) -> Cause | None:
        """The top-ranked cause, None when none was found."""
        return self.causes[0] if self.causes else None


class Trend(Protocol):
    """A site's live bytes over a rank's window dumps (``leaks``' ``SiteTrend``)."""

    @property
    def site(self) -> str: ...
    @property
    def steps(self) -> tuple[int, ...]: ...
    @property
    def bytes(self) -> tuple[int, ...]: ...
    @property
    def growth_per_step(self) -> float: ...
    @property
    def first_step(self) -> int | None: ...
    @property
    def suspect(self) -> bool: ...


class Climb(Protocol):
    """Allocated bytes climbing steadily over steps in the journal of the dump's process (the
    forecast's ``Line``)."""

    @property
    def growth_per_step(self) -> float: ...
    @property
    def first_step(self) -> int: ...
    @property
    def last_step(self) -> int: ...
    @property
    def points(self) -> int: ...


@dataclass(frozen=True)
class Evidence:
    """What :func:`diagnose` reads besides the dump, computed by ``summary``'s one pass.

    ``live`` holds ``(site, block bytes, step)`` per live block at the snapshot (step None:
    untagged); ``kinds`` are the kinds at the judged moment (the OOM's, else the peak's);
    ``sites`` the biggest sites then; ``pending`` bytes and sites of blocks freed on one stream
    and awaiting another; ``headroom_bytes`` what the device could still give (a near-OOM
    dump's); ``device_total_bytes`` the limit; ``at_risk`` whether it is a near-OOM dump;
    ``trends`` the run folder's window trends of this rank (``trends_read``: they were looked
    for); ``climb`` the journal's allocated bytes climbing step after step (None: not read, or
    flat); ``kinds_known``: the kinds come from the process (the sidecar's ``tensors``);
    ``callers``: ``(site, caller, bytes)`` of each site reached from more than one caller, a
    row per caller as the sites table counts it at the snapshot, biggest first.
    ``moment`` is the judged moment (its bytes, position and each kind's sites); ``unwound``
    what the unwinding freed right after the trace's ``oom`` entry; ``inference``: the trace
    shows forwards alone, no backward and no optimizer's step (nothing is saved for a
    backward; False where nothing tells).
    """

    live: Sequence[tuple[str, int, int | None]] = ()
    kinds: tuple[KindBytes, ...] = ()
    kinds_known: bool = False
    sites: Sequence[tuple[str, int]] = ()
    pending_bytes: int = 0
    pending_sites: Sequence[tuple[str, int]] = ()
    headroom_bytes: int | None = None
    device_total_bytes: int | None = None
    at_risk: bool = False
    has_history: bool = False
    trends: Sequence[Trend] = ()
    trends_read: bool = False
    climb: Climb | None = None
    moment: Moment | None = None
    unwound: Unwound | None = None
    inference: bool = False
    callers: Sequence[tuple[str, str, int]] = ()

    def sites_of(self, *kinds: str) -> tuple[KindSite, ...]:
        """The judged moment's biggest sites of ``kinds``, biggest first (merged by site)."""
        if self.moment is None:
            return ()
        merged: dict[str, list[int]] = {}
        for found in self.moment.sites:
            if found.kind in kinds:
                entry = merged.setdefault(found.site, [0, 0])
                entry[0] += found.bytes
                entry[1] += found.blocks
        ordered = sorted(merged.items(), key=lambda item: (-item[1][0], item[0]))
        return tuple(KindSite(kinds[0], site, size, n) for site, (size, n) in ordered)


ExpandableServes = Callable[[], ExpandableAnswer]
"""Asks whether ``expandable_segments`` serves the request (the plan's own run with it, else
the replay); called only when the verdict is fragmentation."""


def needed_bytes(moment: OomMoment | None) -> int | None:
    """What the failed request lacked: the allocation (a fresh segment) less the headroom; 0
    when the request was given by hand (``--requested``) and the allocator model serves it in
    the recorded state; None without a request."""
    if moment is None or moment.requested_bytes is None:
        return None
    if moment.served and moment.assumed:
        return 0
    size = max(moment.allocation_bytes or 0, moment.requested_bytes)
    return max(size - (moment.headroom_bytes or 0), 0)


def has_expandable(dump: Dump) -> bool:
    """True when the dump's torch release has ``expandable_segments`` (unknown release: the
    newest rules, which have it)."""
    version = recorded_rules(dump).version
    return version is None or version >= EXPANDABLE_SINCE


def diagnose(
    dump: Dump,
    *,
    moment: OomMoment | None,
    verdict: Verdict,
    evidence: Evidence,
    expandable_serves: ExpandableServes | None = None,
) -> Diagnosis:
    """The ranked causes of ``dump``'s OOM (or of its peak, without one); see the module."""
    served = needed_bytes(moment) == 0  # a --requested request the recorded state serves
    needed = None if served else needed_bytes(moment)
    missing: list[str] = []
    pressure = moment is not None or evidence.at_risk
    growth = _growth(evidence, needed, missing)
    request = _request(dump, moment)
    causes = [
        found
        for found in (
            growth,
            _cache(evidence, needed, moment),
            _static(dump, evidence, needed),
            _activations(evidence, needed),
            _optimizer_step(evidence, needed),
            _outside(moment, needed, missing),
            _pending(evidence, needed),
            _fragmentation(
                dump,
                moment,
                verdict,
                growth.rate_bytes_per_step if growth else None,
                expandable_serves,
                missing,
            ),
        )
        if found is not None
    ]
    if request is not None:  # nothing freed makes room: no other cause is sufficient
        causes = [request, *(_not_sufficient(found) for found in causes)]
    if pressure and not evidence.has_history and not evidence.kinds_known:
        missing.append(text.MISSING_HISTORY)
    judged = evidence.moment.name if evidence.moment is not None else None
    if pressure:
        ranked = tuple(sorted(causes, key=_rank))
        headline = _headline(ranked[0] if ranked else None, needed)
        if served and moment is not None:
            headline = text.served(
                headline if ranked else None, moment.requested_bytes, moment.device_total_bytes
            )
        elif moment is not None and moment.assumed and moment.requested_bytes and needed:
            lacks = text.does_not_fit(moment.requested_bytes, moment.device_total_bytes, needed)
            headline = f"{lacks}; {headline}"
    else:
        ranked = tuple(sorted(causes, key=_by_bytes))
        headline = _peak_headline(
            ranked[0] if ranked else None, evidence, verdict, dump.meta.allocator_peak_bytes
        )
    return Diagnosis(
        causes=ranked,
        headline=headline,
        requested_bytes=moment.requested_bytes if moment is not None else None,
        needed_bytes=0 if served else needed,
        missing=tuple(missing),
        moment=judged,
    )


def _headline(top: Cause | None, needed: int | None) -> str:
    """The top cause and its smallest sufficient fix, in one sentence."""
    if top is None:
        return text.no_cause()
    fix = top.fix
    action = fix.action if fix is not None else None
    if top.name == REQUEST:  # each of its fixes serves the request: name them all
        action = "; or ".join(found.action for found in top.fixes)
    return text.headline(
        top.name, top.evidence, top.freed_bytes, top.sufficient, needed, action
    )  # fmt: skip


def _peak_headline(
    top: Cause | None, evidence: Evidence, verdict: Verdict, counted: int | None
) -> str:
    """What makes up the judged moment (the peak, or the snapshot without a trace) and the
    smallest change that cuts it; whether anything failed, when nothing can tell. ``counted``:
    the allocator's own peak, said beside a trace's peak that shows less."""
    unknown = verdict.reason if verdict.name == _UNKNOWN_VERDICT else None
    at = evidence.moment
    if at is None or (at.live_bytes == 0 and top is None):
        return text.empty(unknown)
    unattributed = sum(k.bytes for k in at.kinds if k.kind in _UNATTRIBUTED)
    if top is None:
        return text.peak_headline(
            at.name, at.position, at.live_bytes, unattributed, None, None, unknown, counted
        )
    fix = top.fix
    action = None if fix is None else (fix.action, fix.bytes)
    if top.name == ACTIVATIONS:  # either cuts them by about half
        saved = any(found.action == text.CHECKPOINTING for found in top.fixes)
        action = (text.CHECKPOINTING_OR_HALF if saved else text.HALF_NO_BACKWARD, top.bytes // 2)
    return text.peak_headline(
        at.name, at.position, at.live_bytes, unattributed, (top.name, top.bytes, top.evidence),
        action, unknown, counted,
    )  # fmt: skip


def _by_bytes(cause: Cause) -> tuple[int, int]:
    """Growth first (it fills whatever room any other fix frees), then by bytes."""
    return (0 if cause.name == GROWTH else 1), -cause.bytes


def _rank(cause: Cause) -> tuple[int, int, int]:
    """A request too large for the device first (nothing else can make room for it); then
    sufficient causes: among them growth first (while it grows, any other fix only
    postpones the OOM), then an optimizer step's temporaries (the step made the moment, and one
    keyword of the optimizer frees them), fragmentation last (its fix buys room a growth then
    fills); then by bytes."""
    if cause.name == REQUEST:
        return -1, 0, 0
    if not cause.sufficient:
        return 1, 0, -cause.bytes
    tiers = {GROWTH: 0, OPTIMIZER_STEP: 1, FRAGMENTATION: 3}
    return 0, tiers.get(cause.name, 2), -cause.bytes


def _enough(freed: int | None, needed: int | None) -> bool | None:
    """Whether ``freed`` bytes cover ``needed`` (None when either is unknown)."""
    if needed is None or freed is None:
        return None
    return freed >= needed


def _fixes(options: Sequence[tuple[str, int | None]], needed: int | None) -> tuple[Fix, ...]:
    """Fixes in order of effort, each marked sufficient when it frees what was needed."""
    return tuple(Fix(action, freed, _enough(freed, needed)) for action, freed in options)


def _cause(
    name: str,
    size: int,
    evidence: str,
    fixes: tuple[Fix, ...],
    needed: int | None,
    sites: tuple[str, ...] = (),
) -> Cause:
    """A cause whose removal frees what its best fix frees."""
    known = [fix.bytes for fix in fixes if fix.bytes is not None]
    freed = max(known) if known else None
    return Cause(name, size, freed, _enough(freed, needed), evidence, fixes, sites)


def _not_sufficient(cause: Cause) -> Cause:
    """``cause`` beside a request too large for the device: neither it nor any of its fixes
    makes room for that request."""
    fixes = tuple(replace(found, sufficient=False) for found in cause.fixes)
    return replace(cause, sufficient=False, fixes=fixes)


# the request alone -------------------------------------------------------------------------


def _request(dump: Dump, moment: OomMoment | None) -> Cause | None:
    """A request that alone exceeds what PyTorch could get with nothing else live
    (:attr:`~memforensics.analysis.oom.OomMoment.request_too_large`): its bytes, the site that
    made it, and what it exceeds. Its fixes: make that one allocation smaller (under what was
    left beside the live memory: the headroom, or the largest free block of its pool), and,
    under a per-process limit the device has room beyond, raise that limit. Both serve it."""
    if moment is None or moment.requested_bytes is None or not moment.request_too_large:
        return None
    site = request_site(dump)
    room = moment.headroom_bytes
    if room is not None:
        room = max(room, moment.largest_free_block_bytes or 0)
    fixes = [Fix(text.smaller_request(room, site_named=site is not None), None, True)]
    if moment.raising_limit_serves:
        fixes.append(Fix(RAISE_FRACTION, None, True))
    evidence = text.request_evidence(moment.requested_bytes, site, capacity_text(moment))
    return Cause(
        REQUEST, moment.requested_bytes, None, True, evidence, tuple(fixes),
        (site,) if site is not None else (),
    )  # fmt: skip


# growth ------------------------------------------------------------------------------------


def _growth(evidence: Evidence, needed: int | None, missing: list[str]) -> Cause | None:
    """The fastest-growing site: its live blocks made step after step in this dump's trace,
    or its bytes rising over the run folder's window dumps; else, with no site to name, the
    journal's allocated bytes climbing step after step. Where the windows show the site this
    dump's step tags name, its rate and first step are the windows' fit, the figures ``leaks``
    prints for that site."""
    by_site: dict[str, dict[int, int]] = {}
    tagged = False
    for site, size, step in evidence.live:
        if step is None:
            continue
        tagged = True
        steps = by_site.setdefault(site, {})
        steps[step] = steps.get(step, 0) + size
    best: tuple[int, str, int, int, int] | None = None  # (rate, site, bytes, first, last)
    for site, steps in by_site.items():
        first, last = min(steps), max(steps)
        span = last - first + 1
        if len(steps) < MIN_GROWTH_STEPS or len(steps) < MIN_GROWTH_COVER * span:
            continue
        held = sum(steps.values())
        rate = held // span
        if best is None or (rate, held) > (best[0], best[2]):
            best = (rate, site, held, first, last)
    trend = _fastest_trend(evidence.trends)
    if best is None and trend is None and evidence.climb is not None:
        return _climb(evidence.climb, needed)
    if best is None and trend is None:
        if not tagged and evidence.has_history and not evidence.trends_read:
            missing.append(text.MISSING_STEPS)
        return None
    if best is None and trend is not None:
        rate = int(trend.growth_per_step)
        site = trend.site
        # What the site holds in this dump (a window early in the run holds less than the
        # last); the last window's bytes where this dump names no block of it.
        held = sum(size for named, size, _step in evidence.live if named == site)
        held = held or trend.bytes[-1]
        first = trend.first_step if trend.first_step is not None else trend.steps[0]
        windows = len(trend.steps)
    else:
        assert best is not None
        rate, site, held, first, _last = best
        windows = 0
        if trend is not None and trend.site == site:
            # The windows name this site too: its rate is the one ``leaks`` prints for it.
            windows = len(trend.steps)
            rate = int(trend.growth_per_step)
            first = trend.first_step if trend.first_step is not None else first
    left = None
    if needed is None and evidence.headroom_bytes is not None and rate > 0:
        left = evidence.headroom_bytes // rate
    fixes = _fixes([(text.growth_fix(site), held)], needed)
    callers = [(caller, size) for named, caller, size in evidence.callers if named == site]
    said = text.growth_evidence(site, held, rate, first, windows, left, callers)
    found = _cause(GROWTH, held, said, fixes, needed, (site,))
    return replace(found, rate_bytes_per_step=rate, first_step=first, steps_left=left)


def _climb(climb: Climb, needed: int | None) -> Cause:
    """Growth the journal shows and no site names: the bytes the line gained over its steps,
    which stopping the growth frees (as removing a growing site frees what it holds)."""
    rate = int(climb.growth_per_step)
    gained = int(climb.growth_per_step * (climb.last_step - climb.first_step))
    evidence = text.climb_evidence(rate, climb.points, climb.first_step, climb.last_step)
    found = _cause(GROWTH, gained, evidence, _fixes([(text.CLIMB_FIX, gained)], needed), needed)
    return replace(found, rate_bytes_per_step=rate, first_step=climb.first_step)


def _fastest_trend(trends: Sequence[Trend]) -> Trend | None:
    """The suspect growing fastest (``leaks``' suspects)."""
    suspects = [trend for trend in trends if trend.suspect and trend.growth_per_step > 0]
    return max(suspects, key=lambda t: t.growth_per_step, default=None)


# a preallocated cache ----------------------------------------------------------------------


def _allocators(path: str, names: frozenset[str]) -> re.Pattern[str]:
    """A site (``file:line name``) in one of ``names`` of the file ``path`` ends with."""
    functions = "|".join(re.escape(name) for name in sorted(names))
    return re.compile(rf"{re.escape(path)}:\d+ (?:{functions})$")


_CACHE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("vllm", re.compile(r":\d+ _allocate_kv_cache\w*$")),
    *((engine, _allocators(path, names)) for engine, path, names in KV_ALLOCATORS),
    ("megatron", re.compile(r"param_and_grad_buffer")),
    ("deepspeed", re.compile(r"/deepspeed/.*(contiguous|flatten|bucket)|contiguous_gradients")),
)
"""Frames of the preallocated caches whose size a knob sets, by framework. An engine's KV
cache is known by the functions that allocate it (:data:`~memforensics.analysis.filled.
KV_ALLOCATORS`, which names the ``kv_cache`` kind too; vLLM's ``_allocate_kv_cache`` and
``_allocate_kv_cache_tensors`` by their names): the same files make each forward's or step's
temporaries (SGLang's ``set_kv_buffer`` and ``translate_loc_from_full_to_swa``, Hugging
Face's ``PagedAttentionCache.update``, vLLM's ``CacheEngine.swap_in``)."""


def cache_framework(site: str) -> str | None:
    """``vllm``, ``sglang``, ``hf_paged``, ``megatron`` or ``deepspeed`` when ``site`` is one of
    their preallocated caches or contiguous buffers; None otherwise."""
    for name, pattern in _CACHE_RULES:
        if pattern.search(site):
            return name
    return None


def _cache(evidence: Evidence, needed: int | None, moment: OomMoment | None) -> Cause | None:
    """The preallocated caches and contiguous buffers among the biggest sites (or the
    ``kv_cache`` kind), with the knob that sizes them."""
    found: dict[str, list[tuple[str, int]]] = {}
    for site, size in _sites_then(evidence):
        framework = cache_framework(site)
        if framework is not None:
            found.setdefault(framework, []).append((site, size))
    kv_kind = sum(k.bytes for k in evidence.kinds if k.kind == _KV_CACHE)
    if not found and not kv_kind:
        return None
    inferred = False
    if found:
        framework = max(found, key=lambda name: sum(size for _s, size in found[name]))
        rows = found[framework]
        held = sum(size for _s, size in rows)
        sites = tuple(site for site, _size in rows)
    else:
        kv_sites = evidence.sites_of(_KV_CACHE)
        sites = tuple(found.site for found in kv_sites)
        named = [cache_framework(site) for site in sites]
        framework = next((name for name in named if name is not None), text.KV)
        held, inferred = kv_kind, not evidence.kinds_known
    total = moment.device_total_bytes if moment is not None else evidence.device_total_bytes
    options = text.cache_fixes(framework, held, needed, total)
    cause = _cause(
        CACHE, held, text.cache_evidence(framework, held, sites, total),
        _fixes(options, needed), needed, sites,
    )  # fmt: skip
    return replace(cause, inferred=inferred)


def _cached_by_kind(evidence: Evidence) -> dict[str, int]:
    """The judged moment's bytes at preallocated caches' and buffers' sites, by kind."""
    found: dict[str, int] = {}
    if evidence.moment is not None:
        for site in evidence.moment.sites:
            if cache_framework(site.site) is not None:
                found[site.kind] = found.get(site.kind, 0) + site.bytes
    return found


def _sites_then(evidence: Evidence) -> Sequence[tuple[str, int]]:
    """The judged moment's sites, all kinds merged, biggest first: a cache is judged where the
    other causes are (a bucket live at the peak may be gone at the snapshot); the snapshot's
    sites where the moment lists none."""
    moment = evidence.moment
    if moment is None or not moment.sites:
        return evidence.sites
    kinds = tuple(dict.fromkeys(found.kind for found in moment.sites))
    return [(found.site, found.bytes) for found in evidence.sites_of(*kinds)]


# static memory -----------------------------------------------------------------------------


def _static(dump: Dump, evidence: Evidence, needed: int | None) -> Cause | None:
    """Parameters, gradients and optimizer state against the device, with what sharding,
    lower-precision optimizer state and offload free. A part the kinds do not show is not
    known (unless the process told the kinds), so it is left out, never counted as 0 B. What
    a preallocated buffer holds (DeepSpeed's gradient buckets, Megatron's buffers) is that
    cause's, with its own knob (:func:`_cache`), and not counted twice.

    Where FSDP all-gathers parameters at the moment, sharding is no fix (they are sharded
    already). Where its unsharded parameters are a large part of the moment
    (:func:`_gathered`), the evidence says how much, and the first fix frees them: resharding
    after forward where modules beyond the root and the running one held theirs from the
    forward into the backward (:attr:`~memforensics.analysis.filled.Gathered.reshard_frees`),
    else, where the trace reaches the backward and shows none held, smaller wrap units, whose
    bytes the dump does not tell; a trace that ends in the forward tells neither."""
    by_kind = {k.kind: k.bytes for k in evidence.kinds}
    cached = _cached_by_kind(evidence)
    params = max(by_kind.get(_PARAMETER, 0) - cached.get(_PARAMETER, 0), 0)
    grads = max(by_kind.get(_GRADIENT, 0) - cached.get(_GRADIENT, 0), 0)
    optim = max(by_kind.get(_OPTIMIZER, 0) - cached.get(_OPTIMIZER, 0), 0)
    held = params + grads + optim
    if not held:
        return None
    ranks = as_int(dump.meta.sidecar.get("world_size"))
    gathered = _gathered(evidence)
    options: list[tuple[str, int | None]] = []
    per_sample = min(_per_sample_gradients(evidence), grads)
    if per_sample:
        options.append((text.OPACUS_PER_SAMPLE, per_sample))
    if gathered is not None and gathered.reshard_frees:
        options.append((text.RESHARD_AFTER_FORWARD, gathered.reshard_frees))
    elif gathered is not None and gathered.told:
        options.append((text.SMALLER_WRAP_UNITS, None))
    if optim:
        options.append((text.LOW_PRECISION_OPTIMIZER, optim * 3 // 4))
    sharded = evidence.moment is not None and evidence.moment.gathered is not None  # by FSDP
    if not sharded and ranks is not None and ranks > 1:
        options.append((text.shard_optimizer(ranks), (optim + grads) * (ranks - 1) // ranks))
        options.append((text.shard_all(ranks), held * (ranks - 1) // ranks))
    elif not sharded:
        options.append((text.SHARD_MORE_RANKS, None))
    if optim:
        options.append((text.OFFLOAD_OPTIMIZER, optim))
    known = evidence.kinds_known
    parts = [
        (name, size, tuple(f for f in evidence.sites_of(kind) if not cache_framework(f.site))[:1])
        for name, kind, size in (
            ("parameters", _PARAMETER, params),
            ("gradients", _GRADIENT, grads),
            ("optimizer state", _OPTIMIZER, optim),
        )
        if size or known
    ]
    total = evidence.device_total_bytes
    sites = tuple(found[0].site for _n, _s, found in parts if found)
    unsharded = None
    if gathered is not None:
        unsharded = (gathered.bytes, gathered.held_bytes if gathered.reshard_frees else 0)
    cause = _cause(
        STATIC, held, text.static_evidence(parts, held, total, known, unsharded),
        _fixes(options, needed), needed, sites,
    )  # fmt: skip
    return replace(cause, inferred=not known)


_PER_SAMPLE_FILES = "/opacus/grad_sample/"
_PER_SAMPLE_SUM = " clip_and_accumulate"


def _per_sample_gradients(evidence: Evidence) -> int:
    """The judged moment's gradient bytes that are Opacus' per-sample gradients: made by its
    ``grad_sample`` hooks (``p.grad_sample``) and by its optimizer's ``clip_and_accumulate``
    (``p.summed_grad``, their clipped sum), not the gradient its step writes (``add_noise``)."""
    return sum(
        found.bytes
        for found in evidence.sites_of(_GRADIENT)
        if _PER_SAMPLE_FILES in found.site.replace("\\", "/")
        or found.site.endswith(_PER_SAMPLE_SUM)
    )


def _gathered(evidence: Evidence) -> Gathered | None:
    """FSDP's unsharded parameters at the judged moment where they are a large part of it
    (:data:`GATHERED_SHARE`), else None."""
    moment = evidence.moment
    found = moment.gathered if moment is not None else None
    if found is None or moment is None or found.bytes < GATHERED_SHARE * moment.live_bytes:
        return None
    return found


# activations at the moment judged -------------------------------------------------------------


def _activations(evidence: Evidence, needed: int | None) -> Cause | None:
    """What the step's batch holds at the judged moment: its input, and what its forward and
    backward made of it (activations and temporaries), with what a smaller batch or sequence
    frees (each halves the input too), and activation checkpointing where something is saved
    for a backward (it keeps the input). At an OOM whose unwinding the trace shows, the
    blocks it freed are those tensors, proven (no kind needs trusting); otherwise the kinds
    say, inferred unless told, and the evidence names them as the kinds table does.

    Where nothing is saved for a backward, checkpointing frees nothing: the moment holds no
    ``activation`` (an inference forward's tensors read ``temporary``), or the trace shows
    forwards alone (``Evidence.inference``: a forward the trace ends in, or one an inference
    loop ran out in). Computing the biggest op in chunks does instead (an op's, never the
    input's site), and the batch halved is the inference's, not a training step's
    micro-batch. At an OOM in such a trace, the forward that ran out may also be a training
    step's first, which the trace cannot tell from an inference loop's: checkpointing is
    offered too, for that case.
    """
    unwound = evidence.unwound
    stepped = _optimizer_temporaries(evidence)
    in_step = stepped.bytes if stepped is not None else 0
    if unwound is not None and unwound.bytes > in_step:
        held, proven = unwound.bytes - in_step, True
        kept = {found.site for found in evidence.sites_of(OPTIMIZER_TEMPORARIES)}
        sites = tuple(
            (found.site, found.bytes) for found in unwound.sites if found.site not in kept
        )
        parts: list[tuple[str, int]] = []
        saved = not evidence.inference
    else:
        unwound = None
        by_kind = {k.kind: k.bytes for k in evidence.kinds}
        by_kind[_TEMPORARY] = by_kind.get(_TEMPORARY, 0) - in_step
        parts = [(kind, by_kind[kind]) for kind in _BATCH if by_kind.get(kind, 0) > 0]
        held = sum(size for _kind, size in parts)
        proven = False  # no process tells its activations: the kinds inferred them
        saved = by_kind.get(_ACTIVATION, 0) > 0 and not evidence.inference
        sites = tuple((found.site, found.bytes) for found in evidence.sites_of(*_BATCH))
    if not held:
        return None
    options: list[tuple[str, int | None]] = [
        (text.HALF_BATCH if saved else text.HALF_INFERENCE_BATCH, held // 2),
        (text.HALF_SEQUENCE, held // 2),
    ]
    if saved:
        options.append((text.CHECKPOINTING, None))
    else:  # nothing saved for a backward: chunk an op, not the input
        ops = evidence.sites_of(_ACTIVATION, _TEMPORARY)
        if ops:
            options.append((text.chunk_fix(ops[0].site), ops[0].bytes // 2))
        at_oom = evidence.moment is not None and evidence.moment.name == "oom"
        if evidence.inference and at_oom:  # or a training step's first forward
            options.append((text.CHECKPOINTING_IF_GRAD, None))
    fixes = _fixes(options, needed)
    return Cause(
        ACTIVATIONS, held, held, _enough(held, needed),
        text.activations_evidence(held, sites, parts, unwound=unwound is not None and proven,
                                  inferred=not proven, inference=evidence.inference),
        fixes, tuple(site for site, _size in sites[:3]), inferred=not proven,
    )  # fmt: skip


# an optimizer step's temporaries ------------------------------------------------------------


def _optimizer_temporaries(evidence: Evidence) -> OptimizerTemporaries | None:
    """The judged moment's temporaries made inside an optimizer's step (None: none)."""
    return evidence.moment.optimizer_temporaries if evidence.moment is not None else None


def _optimizer_step(evidence: Evidence, needed: int | None) -> Cause | None:
    """The temporaries an optimizer's step holds at the judged moment: a multi-tensor
    (``foreach``, torch's default on CUDA) Adam or AdamW makes one per parameter at once, about
    the size of all parameters. ``fused=True`` makes none (it frees them all);
    ``foreach=False`` makes one parameter's at a time (it frees all but the largest, which
    stands for the largest parameter's share). A hand-written step's temporaries (no
    ``_multi_tensor_`` frame) are freed by updating in place. Halving the batch frees none."""
    found = _optimizer_temporaries(evidence)
    if found is None:
        return None
    sites = tuple((site.site, site.bytes) for site in evidence.sites_of(OPTIMIZER_TEMPORARIES))
    options: list[tuple[str, int | None]] = (
        [(text.FUSED_OPTIMIZER, found.bytes), (text.FOREACH_OFF, found.bytes - found.largest)]
        if found.foreach
        else [(text.in_place_step(sites[0][0] if sites else None), found.bytes)]
    )
    return replace(
        _cause(
            OPTIMIZER_STEP, found.bytes,
            text.optimizer_step_evidence(
                found.bytes, found.blocks, sites, inferred=not evidence.kinds_known
            ),
            _fixes(options, needed), needed, tuple(site for site, _size in sites[:3]),
        ),
        inferred=not evidence.kinds_known,
    )  # fmt: skip


# memory outside PyTorch, pending frees -----------------------------------------------------


def _outside(moment: OomMoment | None, needed: int | None, missing: list[str]) -> Cause | None:
    """Device memory PyTorch's allocator does not own (limit - device free - reserved), less
    the CUDA context the dump accounts for (a planned dump's: known, never a cause)."""
    if moment is None:
        return None
    external = moment.unaccounted_external_bytes
    if external is None:
        if moment.requested_bytes is not None and not moment.served:
            known_free = moment.device_free_bytes is not None
            missing.append(text.MISSING_DEVICE_TOTAL if known_free else text.MISSING_DEVICE_FREE)
        return None
    if external <= 0:
        return None
    return _cause(
        OUTSIDE, external, text.outside_evidence(moment, external),
        _fixes([(text.OUTSIDE_FIX, external)], needed), needed,
    )  # fmt: skip


def _pending(evidence: Evidence, needed: int | None) -> Cause | None:
    """Blocks freed on one stream and awaiting another's events (``record_stream``)."""
    if evidence.pending_bytes <= 0:
        return None
    sites = tuple(site for site, _size in evidence.pending_sites[:3])
    return _cause(
        PENDING_FREES, evidence.pending_bytes,
        text.pending_evidence(evidence.pending_bytes, evidence.pending_sites[:3]),
        _fixes([(text.PENDING_FIX, evidence.pending_bytes)], needed), needed, sites,
    )  # fmt: skip


# fragmentation -----------------------------------------------------------------------------


def _fragmentation(
    dump: Dump,
    moment: OomMoment | None,
    verdict: Verdict,
    growth_rate: int | None,
    expandable_serves: ExpandableServes | None,
    missing: list[str],
) -> Cause | None:
    """Enough free inside reserved but no block for the request: a cause only where the
    plan's own run with ``expandable_segments``, or else the replay, shows that setting would
    have served the request (with growth:
    about how many more steps the freed holes buy at its rate)."""
    if moment is None or verdict.name != FRAGMENTATION:
        return None
    holes = moment.free_in_reserved_bytes or 0
    expandable_on = any(segment.is_expandable for segment in dump.segments)
    if expandable_on:
        missing.append(text.FRAGMENTED_EXPANDABLE_ON)
        return None
    if not has_expandable(dump):
        missing.append(text.NO_EXPANDABLE_RELEASE)
        return None
    if expandable_serves is None:
        missing.append(text.missing_replay(None))
        return None
    answer = expandable_serves()
    if answer.served is None:
        missing.append(text.missing_replay(answer.why))
        return None
    if not answer.served:
        missing.append(
            text.EXPANDABLE_PLANNED_RUNS_OUT if answer.planned else text.EXPANDABLE_DOES_NOT_SERVE
        )
        return None
    bought = holes // growth_rate if growth_rate else None
    return Cause(
        FRAGMENTATION, holes, holes, True,
        text.fragmentation_evidence(moment, holes, bought, planned=answer.planned),
        (Fix(text.EXPANDABLE_FIX, holes, True),),
    )  # fmt: skip
