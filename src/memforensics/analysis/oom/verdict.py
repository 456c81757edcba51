"""The verdict: judged on the allocator state at the moment of the OOM and the lower bound.

:func:`verdict_at_oom` is the one question ``summary`` asks: it finds the state at the OOM
(:mod:`~memforensics.analysis.oom.moment`), the lower bound
(:mod:`~memforensics.analysis.oom.bound`), and judges them, in one pass over the trace at most.

By the time PyTorch raises an OOM it has released every wholly free segment and retried, so what
is left is holes inside partly used segments, the device's free memory (capped by the limit), and
memory on the device that PyTorch's allocator does not own (``limit - device free - reserved``:
NCCL/HCCL buffers, the CUDA context, cuBLAS workspaces, other processes). A planned dump
accounts for its CUDA context (``plan --context-memory``): that part is known, never a cause.
With ``free`` the holes of the request's own pool and stream (the small pool never serves a
request over 1 MiB) plus the free device memory:

- ``fragmentation``: ``free`` covers the request, yet no single hole or fresh segment could hold
  it: the bytes exist but not in one piece. Placement (expandable segments) can fix it.
- ``external``: ``free`` falls short, but would cover the request if the memory outside PyTorch
  (less a context the dump accounts for) were not there: that memory, not PyTorch's live or
  cached bytes, left no room. Also ``external (nothing reserved)``: PyTorch held nothing, so
  only memory outside it, or a device or limit smaller than the request, can have stopped it.
- ``exhausted``: live memory fills the device; "proven" when even the least bytes any setting
  could give the live blocks (requests rounded to 512 B), the request and the external memory
  exceed the limit: no allocator setting could have fit. ``request over the limit``: the
  request alone exceeds what PyTorch could get with nothing else live (the limit less the
  memory outside PyTorch: :attr:`~memforensics.analysis.oom.moment.OomMoment.capacity_bytes`),
  and no memory outside PyTorch a fix could remove would make room; said as that, never as
  live memory filling the device, whatever was live beside it. It is judged first (after a
  ``--requested`` the state serves): no other reading of the state can change it.
- ``could-serve``: the request was given by hand (``summary --requested``) for a state that
  records no OOM of its own, and the allocator model, seeded with that state under the recorded
  settings, serves it; the explanation names the route (a cached block of its pool and stream,
  or waiting for pending cross-stream frees, releasing cached segments and a new segment from
  the device's free memory) and what it rests on. Not an OOM verdict: the OOM happened at
  another moment, when more was live.
- ``unknown``: an OOM the dump cannot judge (no history and no sidecar to say whether or what
  failed, a trace of one event, a state at the OOM that cannot be reconstructed, or a
  ``--requested`` no cached block serves while device free is unknown); ``reason`` says which.
- ``no-oom``: nothing failed in this dump.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memforensics._units import format_bytes as fmt
from memforensics.allocator import K_SMALL_SIZE
from memforensics.analysis.dump import NOTHING_ALLOCATED, ONE_EVENT, Dump
from memforensics.analysis.oom.bound import CAPACITY, LowerBound, lower_bound
from memforensics.analysis.oom.history import has_history
from memforensics.analysis.oom.moment import UNKNOWN as UNKNOWN_STATE
from memforensics.analysis.oom.moment import OomMoment, ServeRoute, oom_moment
from memforensics.analysis.oom.text import (
    request_too_large_advice,
    request_too_large_text,
    sum_terms,
)

FRAGMENTATION = "fragmentation"
EXHAUSTED = "exhausted"
EXTERNAL = "external"
UNKNOWN = "unknown"
NO_OOM = "no-oom"
COULD_SERVE = "could-serve"
DEVICE_FREE_UNKNOWN = "device free unknown"
EXTERNAL_SUSPECTS = (
    "NCCL/HCCL communicator buffers, the CUDA/CANN context, cuBLAS/cuDNN workspaces, "
    "another process on the same device"
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """``name`` is one of the constants above; ``reason`` qualifies it (``proven``, or why
    ``unknown``); the rest is for people."""

    name: str
    explanation: str
    advice: str | None
    reason: str | None = None

    @property
    def label(self) -> str:
        """``exhausted (proven)``, ``unknown (no history and no sidecar)``, or the name."""
        return f"{self.name} ({self.reason})" if self.reason else self.name


@dataclass(frozen=True, slots=True)
class ExpandableAnswer:
    """Whether ``expandable_segments:True`` would have avoided the OOM: ``served`` True or
    False, None when not known (``why``). ``planned``: the plan's own run with that setting
    answered (it ran the script again), not the replay of the dump's trace."""

    served: bool | None
    why: str | None = None
    planned: bool = False


def expandable_runs_out(verdict: Verdict, answer: ExpandableAnswer, *, history: bool) -> Verdict:
    """A fragmentation verdict whose advice says expandable segments would not avoid the OOM
    (``answer.served`` is False), instead of offering them."""
    how = (
        "the plan's own run with expandable_segments:True runs out too"
        if answer.planned
        else "replayed with expandable_segments:True, the request still fails"
    )
    where = " (memforensics replay FILE lists them)" if history else ""
    advice = (
        f"expandable_segments would also run out ({how}): lower the peak, or release"
        f" long-lived tensors that pin partly used segments{where}."
    )
    return Verdict(verdict.name, verdict.explanation, advice, verdict.reason)


def no_oom() -> Verdict:
    """The dump records no OOM."""
    return Verdict(NO_OOM, "No out-of-memory error is recorded in this dump.", None)


def unknown_no_evidence(nothing_allocated: bool = False) -> Verdict:
    """No history and no sidecar: nothing says whether, or what, failed."""
    held = (
        "Nothing was allocated when this snapshot was taken, and it"
        if nothing_allocated
        else ("This snapshot")
    )
    return Verdict(
        UNKNOWN,
        f"{held} records no allocator event and has no sidecar, so nothing records whether an"
        " allocation failed or what it asked for.",
        "If it was taken at an OOM, give the failed request from the error message:"
        " memforensics summary FILE --requested 2GiB.",
        "no history and no sidecar",
    )


def replayable(dump: Dump) -> bool:
    """Has the dump a trace ``replay`` can run (more than the one event of the legacy call)?"""
    return has_history(dump) and dump.shape.history != ONE_EVENT


def outside_text(external: int | None) -> str:
    """``outside PyTorch 1.00 GiB``, or ``outside PyTorch unknown`` (never a dash for it)."""
    return "outside PyTorch unknown" if external is None else f"outside PyTorch {fmt(external)}"


def one_event_verdict() -> Verdict:
    """The trace holds one event: it cannot show that nothing failed."""
    return Verdict(
        UNKNOWN,
        "The trace holds one event: too short to rule out an OOM (the legacy"
        " torch.cuda.memory._record_memory_history(True) keeps one entry), so nothing here"
        " says whether an allocation failed.",
        "Record a history that keeps events: torch.cuda.memory._record_memory_history("
        "max_entries=100000), or memforensics.install(), which records one. If this snapshot"
        " was taken at an OOM, give the failed request: memforensics summary FILE"
        " --requested 2GiB.",
        "one-event trace",
    )


def device_free_text(device_free: int | None) -> str:
    """``1.00 GiB free on the device``, or ``device free unknown`` (never a number for it)."""
    return DEVICE_FREE_UNKNOWN if device_free is None else f"{fmt(device_free)} free on the device"


def room_text(moment: OomMoment) -> str:
    """What the allocator could still reserve at the OOM: ``1.00 GiB free on the device``;
    under a per-process limit ``619.20 MiB left under the per-process limit`` (the
    device had more free, so calling that room the device's free memory would be false)."""
    room = moment.headroom_bytes
    if moment.per_process_limit and room is not None:
        return f"{fmt(room)} left under the per-process limit"
    return device_free_text(room)


def limit_text(bound: LowerBound) -> str:
    """What the bound is measured against: the limit, or the capacity standing in for it."""
    if bound.limit_source == CAPACITY:
        return (
            f"{fmt(bound.limit_bytes)} capacity (reserved + device free at the OOM; no limit"
            " recorded)"
        )
    return f"{fmt(bound.limit_bytes)} limit"


def could_serve_verdict(moment: OomMoment) -> Verdict:
    """The given request fits the recorded state: this is not the state the OOM met. Names
    the route the allocator model took and what that route assumes."""
    route = moment.route or ServeRoute()
    steps: list[str] = []
    assumes: list[str] = []
    if route.waited_for_bytes:
        steps.append(
            f"waiting for {fmt(route.waited_for_bytes)} of pending cross-stream frees"
            " (blocks freed on one stream while another still used them)"
        )
        assumes.append("that the other streams' events complete")
    if route.released_segments:
        plural = "segment" if route.released_segments == 1 else "segments"
        steps.append(
            f"releasing {route.released_segments:,} cached {plural} ({fmt(route.released_bytes)})"
        )
    if route.new_segment_bytes:
        steps.append(f"a new cudaMalloc of {fmt(route.new_segment_bytes)}")
        assumes.append(
            "that the released memory is free for it"
            if moment.device_free_bytes is None
            else f"the {device_free_text(moment.device_free_bytes)} recorded"
        )
    how = (
        "from a cached block of its pool and stream"
        if not steps
        else "only after " + ", then ".join(steps)
    )
    rests = f" This rests on {' and '.join(assumes)}." if assumes else ""
    return Verdict(
        COULD_SERVE,
        f"This state could serve the request: the OOM happened at another moment. The"
        f" allocator, seeded with this snapshot's {fmt(moment.reserved_bytes)} reserved"
        f" ({fmt(moment.allocated_bytes)} allocated) under its recorded settings, serves"
        f" {fmt(moment.requested_bytes)} {how} ({device_free_text(moment.device_free_bytes)})."
        f"{rests}",
        "Judge a snapshot taken at the failure: the OOM dump memforensics writes, or"
        " torch.cuda.memory._snapshot() called from the OOM handler.",
    )


def nothing_reserved_verdict(moment: OomMoment) -> Verdict:
    """A request failed while PyTorch held nothing, and it does not alone exceed what PyTorch
    could get (:func:`request_too_large_verdict` says that): its memory cannot be the cause, so
    memory outside PyTorch, or a device or limit smaller than the request where none is
    recorded, left no room."""
    return Verdict(
        EXTERNAL,
        f"PyTorch's allocator held nothing (0 B reserved), so its live or cached memory cannot"
        f" have stopped the {fmt(moment.requested_bytes)} request: memory outside PyTorch"
        f" filled the device, or the device or its limit is smaller than the request"
        f" ({device_free_text(moment.device_free_bytes)}). Usual suspects:"
        f" {EXTERNAL_SUSPECTS}.",
        "Check torch.cuda.mem_get_info() and nvidia-smi (npu-smi) for other processes, the"
        " device's size, and any set_per_process_memory_fraction limit.",
        "nothing reserved",
    )


REQUEST_OVER_LIMIT = "request over the limit"


def request_too_large_verdict(moment: OomMoment) -> Verdict:
    """The request alone exceeds what PyTorch could get with nothing else live: no allocator
    setting and no memory freed serves it; only a smaller request (or a higher per-process
    limit) does."""
    return Verdict(
        EXHAUSTED,
        request_too_large_text(moment) + context_text(moment),
        request_too_large_advice(moment),
        REQUEST_OVER_LIMIT,
    )


def _fragmentation_advice(*, expandable: bool, predates: bool, history: bool) -> str:
    """What to do about pieces: expandable segments where the release has them; replay only
    where the dump can be replayed."""
    check = " memforensics replay FILE checks it offline." if history else ""
    if expandable:
        where = " (memforensics replay FILE lists them)" if history else ""
        return (
            "Expandable segments are already on: fragmentation remains, so lower the peak"
            f" or release long-lived tensors that pin partly used segments{where}."
        )
    if predates:
        return (
            "This PyTorch predates expandable segments (2.1): lower the peak or release"
            " long-lived tensors that pin partly used segments; on 2.1 or newer,"
            " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow."
        )
    return (
        "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (on Ascend:"
        " PYTORCH_NPU_ALLOC_CONF=expandable_segments:True) so segments can grow instead"
        " of needing one contiguous free block" + (";" + check if history else ".")
    )


def needed_text(bound: LowerBound) -> str:
    """``78.29 GiB live + the 4.94 GiB request = 83.23 GiB needed``: the live bytes never
    count the request, memory outside PyTorch is named only where it is known, and a term of
    0 B is left out (:func:`~memforensics.analysis.oom.text.sum_terms`)."""
    given = [
        (bound.peak_live_bytes, f"{fmt(bound.peak_live_bytes)} live"),
        (bound.request_bytes, f"the {fmt(bound.request_bytes)} request"),
    ]
    if bound.limit_source != CAPACITY:
        given.append((bound.external_bytes, f"{fmt(bound.external_bytes)} outside PyTorch"))
    terms = sum_terms(given)
    if len(terms) == 1:
        return f"{terms[0]} needed"
    return f"{' + '.join(terms)} = {fmt(bound.needed_bytes)} needed"


def proof_text(bound: LowerBound) -> str:
    """Why no allocator setting could have fit: what was needed at once against the limit."""
    return (
        f"at the peak, each block at its least size, {needed_text(bound)}, over the"
        f" {limit_text(bound)} by {fmt(bound.margin_bytes)}: no allocator setting could have fit"
    )


def judge(
    moment: OomMoment,
    *,
    bound: LowerBound | None,
    top_sites: list[tuple[str, int]],
    expandable: bool,
    history: bool = True,
    predates_expandable: bool = False,
) -> Verdict:
    """Decide the verdict from the state at the OOM (see the module docstring); ``history``:
    the dump can be replayed; ``predates_expandable``: written by a release without
    expandable segments."""
    requested = moment.requested_bytes
    if moment.assumed and moment.served:
        return could_serve_verdict(moment)
    if moment.request_too_large:
        return request_too_large_verdict(moment)
    if moment.source == UNKNOWN_STATE:
        return Verdict(
            UNKNOWN,
            f"The allocator state at the OOM cannot be reconstructed: {moment.why_unknown}.",
            "Judge the OOM dump of the same failure instead, which was taken at that moment.",
            "state at the OOM unknown",
        )
    if requested is not None and moment.reserved_bytes == 0 and not moment.served:
        return nothing_reserved_verdict(moment)
    headroom = moment.headroom_bytes or 0
    holes = moment.free_in_reserved_bytes or 0
    usable = moment.usable_free_bytes
    largest = moment.largest_free_block_bytes or 0
    external = moment.unaccounted_external_bytes
    sites = ", ".join(f"{site} ({fmt(size)})" for site, size in top_sites) or "none recorded"
    wanted = fmt(requested) if requested is not None else "an unknown amount"
    if moment.assumed and moment.headroom_bytes is None:
        return Verdict(
            UNKNOWN,
            f"No cached block of its pool and stream serves the {wanted} request"
            f" ({fmt(usable)} free there, largest block {fmt(largest)}), and with"
            f" {DEVICE_FREE_UNKNOWN} whether a new segment would have fit, and so whether the"
            f" device was full, cannot be told. Biggest sites: {sites}.",
            "Give the device's free memory at the failure, or judge the OOM dump memforensics"
            " writes (its sidecar records it).",
            "device free unknown",
        )
    fits = requested is not None and usable + headroom >= requested
    if fits and (moment.served is False or largest < (requested or 0)):
        when = "In this state" if moment.assumed else "At the OOM"
        explanation = (
            f"{when} {fmt(usable)} was free inside reserved segments of its pool and stream"
            f" ({room_text(moment)}), enough for the"
            f" {fmt(requested)} request, but {_unusable_text(largest, requested or 0)}."
            f"{_elsewhere_text(holes - usable, requested or 0)}"
        )
        advice = _fragmentation_advice(
            expandable=expandable, predates=predates_expandable, history=history
        )
        return Verdict(FRAGMENTATION, explanation, advice)
    if moment.outside_makes_room:
        context = f" - the context {fmt(moment.context_bytes)}" if moment.context_bytes else ""
        explanation = (
            f"{fmt(external)} of the device is held outside PyTorch's allocator (limit"
            f" {fmt(moment.device_total_bytes)} - free {fmt(moment.device_free_bytes)} - reserved"
            f" {fmt(moment.reserved_bytes)}{context}); without it the {fmt(requested)} request"
            f" would have fit. Usual suspects: {EXTERNAL_SUSPECTS}."
        )
        advice = (
            "Find who holds it: NCCL_BUFFSIZE / fewer communicators, torch.cuda.mem_get_info"
            " before and after init_process_group, nvidia-smi (npu-smi) for other processes;"
            " or lower set_per_process_memory_fraction so the limit leaves room for it."
        )
        return Verdict(EXTERNAL, explanation, advice)
    proven = bound is not None and bound.proven
    free = sum_terms(
        [
            (usable, f"{fmt(usable)} free in reserved segments of its pool"),
            (moment.headroom_bytes, room_text(moment)),
        ]
    )
    filled = "the device"
    if moment.per_process_limit:  # the device had room beyond it: the limit is what is full
        filled = f"the {fmt(moment.device_total_bytes)} per-process limit"
    explanation = (
        f"Live memory ({fmt(moment.allocated_bytes)} of {fmt(moment.reserved_bytes)} reserved)"
        f" fills {filled}; the request for {wanted} exceeds the {' plus '.join(free)}."
        f" Biggest sites: {sites}."
    )
    if bound is not None and proven:
        explanation += f" Proven: {proof_text(bound)}."
    explanation += context_text(moment)
    advice = "Hold less at the peak in those sites: smaller batches or sequences, activation "
    advice += "checkpointing, or dropping references to tensors that are no longer needed."
    return Verdict(EXHAUSTED, explanation, advice, "proven" if proven else None)


def context_text(moment: OomMoment) -> str:
    """`` The 512.00 MiB outside PyTorch is the CUDA context ...`` where the dump accounts for
    the memory outside PyTorch by its context (a planned dump's), else empty."""
    context, external = moment.context_bytes, moment.external_bytes
    if not context or external is None or external <= 0:
        return ""
    what = f"The {fmt(external)} outside PyTorch is"
    if moment.unaccounted_external_bytes:
        what = f"Of the {fmt(external)} outside PyTorch, {fmt(context)} is"
    return (
        f" {what} the CUDA context the plan allows (--context-memory): every GPU run holds one,"
        " so it is not a cause to remove."
    )


def _elsewhere_text(other: int, requested: int) -> str:
    """The free bytes the request's pool and stream cannot use, and why (empty: none)."""
    if other <= 0:
        return ""
    if requested > K_SMALL_SIZE:
        why = "the small pool never serves a request over 1 MiB, nor another stream's blocks"
    else:
        why = "a request up to 1 MiB takes only the small pool, and only its own stream's"
    return f" The other {fmt(other)} free cannot serve it: {why}."


def _unusable_text(largest: int, requested: int) -> str:
    """Why the free bytes did not serve the request, by the largest block of its pool."""
    if largest < requested:
        return f"the largest free block of its pool was only {fmt(largest)}"
    return (
        f"the allocator model, seeded with this state, serves it from none of them (the largest"
        f" free block of its pool and stream is {fmt(largest)}, but a request under"
        " max_split_size_mb never takes a cached block at or above that size)"
    )


def verdict_at_oom(
    dump: Dump,
    *,
    requested: int | None,
    top_sites: list[tuple[str, int]],
    expandable: bool,
    moment: OomMoment | Literal["find"] | None = "find",
    device_total: int | None = None,
) -> tuple[Verdict, OomMoment | None, LowerBound | None]:
    """The summary's verdict, the state it was judged on, and the lower bound behind it
    (``moment``: the state at the OOM when the caller has looked for it already, None when it
    found none; by default it is looked for here)."""
    if moment == "find":
        moment = oom_moment(dump, requested=requested, device_total=device_total)
    if moment is None:
        if not dump.meta.has_sidecar and not has_history(dump):
            return unknown_no_evidence(dump.shape.history == NOTHING_ALLOCATED), None, None
        if dump.shape.history == ONE_EVENT and dump.meta.kind != "oom":
            return one_event_verdict(), None, None
        return no_oom(), None, None
    bound = lower_bound(dump, moment)
    verdict = judge(
        moment,
        bound=bound,
        top_sites=top_sites,
        expandable=expandable,
        history=replayable(dump),
        predates_expandable=dump.shape.predates_expandable,
    )
    return verdict, moment, bound
