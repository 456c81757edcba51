"""The words of a plan: what ``memforensics plan`` prints about a :class:`PlanResult`."""

from __future__ import annotations

import signal

from memforensics._units import format_bytes
from memforensics.plan.ranks import RanksAnswer
from memforensics.plan.runner import PlanResult
from memforensics.plan.vary import EXPANDABLE, VaryAnswer


def _segments(result: PlanResult) -> str:
    """The segments line: PyTorch's count, which expandable segments leave at 0 (they grow in
    place rather than adding segments)."""
    if EXPANDABLE in result.allocator_conf:
        return (
            "expandable: they grow in place, so PyTorch's segment count stays "
            f"{result.segments} (the snapshot shows each one)"
        )
    return f"{result.segments} at the end, {result.peak_segments} at most"


def _outside(result: PlanResult) -> str:
    """What the device holds outside PyTorch's allocator: the CUDA context, where the script
    initialized CUDA, and NCCL's buffers."""
    if result.cuda_initialized:
        context = f"the CUDA context ({format_bytes(result.context_bytes)})"
    else:
        context = "no CUDA context (the script never initialized CUDA)"
    if result.nccl_bytes:
        return f"{context} and NCCL's buffers ({format_bytes(result.nccl_bytes)})"
    return context


def _workers(result: PlanResult) -> list[str]:
    """One line per worker process on the device, then what they and the script held at once."""
    if not result.workers:
        return []
    lines = []
    for w in result.workers:
        context = " and its CUDA context" if w.cuda_initialized else ""
        oom = f"; predicted OOM: {w.oom_message.split('. If ')[0]}" if w.oom_message else ""
        lines.append(
            f"  worker {w.name}: peak allocated {format_bytes(w.peak_allocated_bytes)}, "
            f"peak reserved {format_bytes(w.peak_reserved_bytes)}{context}, "
            f"{w.peak_segments} segments at most{oom}"
        )
    lines.append(
        f"  all processes    {format_bytes(result.device_peak_bytes)} on the device at most "
        "(reserved memory and contexts, the workers' at their peaks at once)"
    )
    return lines


def ranks_text(answer: RanksAnswer) -> str:
    """One row per planned rank, then the first rank to run out and why, and the ranks whose
    script failed (of which nothing says whether they fit); "every planned rank fits" only where
    each did; after SIGTERM or Ctrl-C, the ranks planned so far, each stopped run's figures so
    far, and which ranks were not planned."""
    lines = [f"  {'rank':>5}  {'peak allocated':>14}  {'peak reserved':>14}  fits"]
    for r in answer.rows:
        allocated = (
            format_bytes(r.peak_allocated_bytes) if r.peak_allocated_bytes is not None else "-"
        )
        reserved = format_bytes(r.peak_reserved_bytes) if r.peak_reserved_bytes is not None else "-"
        stopped = answer.interrupted_by is not None and not r.error
        fits = _fits(r.fits, r.oom, bool(r.interrupted) or stopped)
        lines.append(f"  {r.rank:>5}  {allocated:>14}  {reserved:>14}  {fits}")
        if r.error:
            lines.append(f"    {r.error}")
        lines += _stopped_row(r.interrupted, r.interrupted_by)
    first = answer.first_out
    failed = [r.rank for r in answer.rows if r.fits is None and not r.oom and not r.interrupted]
    if answer.interrupted_by is not None:
        lines.append(
            _terminated(answer.interrupted_by, "rank", [str(r) for r in answer.not_planned])
        )
    if first is not None:
        lines.append(f"First rank to run out: {first.rank}: {first.cause}")
    elif all(r.fits for r in answer.rows) and answer.interrupted_by is None:
        lines.append(f"Every planned rank of the world of {answer.world_size} fits.")
    if failed:
        one = len(failed) == 1
        lines.append(
            f"{'Rank' if one else 'Ranks'} {', '.join(map(str, failed))} of the world of "
            f"{answer.world_size} failed ({'its' if one else 'each'} row says where and why): "
            f"the plan does not say whether {'it fits' if one else 'they fit'}."
        )
    for row in answer.rows:
        for path in row.snapshots:
            lines.append(f"Predicted snapshot: {path}")
    return "\n".join(lines)


def _fits(fits: bool | None, oom: bool, stopped: bool) -> str:
    """A table's fits column: OOM where the run ran out, ``interrupted`` where it is not known
    and a signal ``stopped`` the run (or its plan before it began), else yes, no, or failed."""
    if oom:
        return "OOM"
    if fits is None and stopped:
        return "interrupted"
    return {True: "yes", False: "no", None: "failed"}[fits]


def _stopped_row(where: str | None, by: str | None) -> list[str]:
    """The line under a row whose run a signal stopped: where and which."""
    if not where:
        return []
    return [f"    interrupted at {where} ({by}): its figures so far"]


def _terminated(by: str, what: str, not_planned: list[str]) -> str:
    """The line that says signal ``by`` stopped the plans: which were not begun."""
    said = f"Interrupted ({by}): the rows are those planned so far"
    if not not_planned:
        return said + "."
    one = len(not_planned) == 1
    return f"{said}; {what}{'' if one else 's'} {', '.join(not_planned)} not planned."


def plan_text(result: PlanResult) -> str:
    """The plan as a few lines: the figures, whether it fits, and where the snapshots are."""
    conf = result.allocator_conf or "default allocator settings"
    lines = [
        f"Planned on {result.device_name}: {format_bytes(result.device_bytes)}, capability "
        f"{result.capability}, {conf} (predicted, not measured)",
    ]
    if result.world_size > 1:
        lines.append(f"  rank             {result.rank} of a world of {result.world_size}")
    lines += [
        f"  peak allocated   {format_bytes(result.peak_allocated_bytes)}",
        f"  peak reserved    {format_bytes(result.peak_reserved_bytes)}",
        f"  segments         {_segments(result)}",
    ]
    if result.nccl_bytes:
        lines.append(
            f"  NCCL buffers     {format_bytes(result.nccl_bytes)} outside PyTorch (an allowance "
            "from NCCL's defaults: NCCL_BUFFSIZE x channels x ring peers, per communicator)"
        )
    lines += _workers(result)
    lines += _ended(result)
    needed = format_bytes(result.needed_bytes)
    if result.oom_message is not None:
        lines.append(f"Does not fit: predicted OOM. {result.oom_message.split('. If ')[0]}.")
        verdict = result.verdict
        if verdict is not None:
            if verdict.cause:
                lines.append(f"  cause: {verdict.cause}")
            lines.append(f"  verdict: {verdict.label}. {verdict.explanation}")
            if verdict.advice:
                lines.append(f"  → {verdict.advice}")
    elif result.fits:
        lines.append(
            f"Fits: {needed} with {_outside(result)} of {format_bytes(result.device_bytes)}."
        )
    elif any(w.oom_message for w in result.workers):
        lines.append("Does not fit: a worker process runs out (above).")
    else:
        lines.append(
            f"Does not fit: {needed} with {_outside(result)} is more than "
            f"{format_bytes(result.device_bytes)}."
        )
    lines += _caught(result.caught_ooms)
    for path in result.snapshots:
        lines.append(f"Predicted snapshot: {path}")
    return "\n".join(lines)


def interrupted_by(status: int | None) -> str:
    """What interrupted a run, from its exit status (128 + the signal's number, as a shell
    reports it): Ctrl-C for SIGINT, else the signal's name."""
    number = (status or 0) - 128
    if number == signal.SIGINT or number not in signal.valid_signals():
        return "Ctrl-C"
    return signal.Signals(number).name


def _ended(result: PlanResult) -> list[str]:
    """How the script ended where not by running to its end: interrupted, ended by ``--steps``,
    failed, or its own exit status."""
    if result.interrupted is not None:
        by = interrupted_by(result.exit_status)
        return [
            f"Interrupted at {result.interrupted} ({by}): the figures are the run's up to there."
        ]
    if result.ended_at_step is not None:
        taken = result.steps or 0
        return [
            f"Ended at {result.ended_at_step}, where an optimizer came to its step {taken + 1} "
            f"(--steps {taken}): the figures are those of its first {taken} steps."
        ]
    if result.failed is not None:
        return [f"Failed at {result.failed}: the figures are the run's up to there."]
    if result.exit_status:
        return [f"The script exited with status {result.exit_status}."]
    return []


CAUGHT_SHOWN = 4
"""Caught OOMs whose requests are all named; of more (a batch-size search that shrinks its
batch a little at a time), the first two and the last are, and the rest counted."""


def _caught(messages: tuple[str, ...]) -> list[str]:
    """A line on the predicted OOMs the script caught and went on from, with their requests:
    each, or of a long search the first two and the last."""
    if not messages:
        return []
    asked = [_request(message) for message in messages]
    if len(asked) > CAUGHT_SHOWN:
        asked = [*asked[:2], f"{len(asked) - 3} more, the last {asked[-1]}"]
    requests = ", then ".join(asked)
    count = "a predicted OOM" if len(messages) == 1 else f"{len(messages)} predicted OOMs"
    return [f"The script caught {count} and went on ({requests})."]


def _request(message: str) -> str:
    """``tried to allocate 6.00 GiB`` from PyTorch's OOM message (its second sentence)."""
    sentences = message.split(". ")
    request = sentences[1] if len(sentences) > 1 else message
    return request[:1].lower() + request[1:]


def vary_text(answer: VaryAnswer) -> str:
    """One row per value (OOM where the run ran out; after SIGTERM or Ctrl-C, the values planned
    so far, each stopped run's figures so far), then the largest value that fits, as given and with
    expandable segments."""
    name, rows = answer.name, answer.rows
    best, best_expandable = answer.largest, answer.largest_expandable

    def size(value: int | None) -> str:
        return format_bytes(value) if value is not None else "-"

    width = max(len(name), *(len(r.value) for r in rows), 0)
    lines = [
        f"  {name:<{width}}  {'peak allocated':>14}  {'peak reserved':>14}  fits  "
        "fits with expandable_segments"
    ]
    for r in rows:
        stopped = bool(r.interrupted) or (answer.interrupted_by is not None and not r.error)
        lines.append(
            f"  {r.value:<{width}}  {size(r.peak_allocated_bytes):>14}  "
            f"{size(r.peak_reserved_bytes):>14}  {_fits(r.fits, r.oom, stopped):<4}  "
            f"{_fits(r.fits_expandable, r.oom_expandable, stopped)}"
        )
        if r.error:
            lines.append(f"    {r.error}")
        lines += _stopped_row(r.interrupted, r.interrupted_by)
    if any(r.oom or r.oom_expandable for r in rows):
        lines.append("OOM: the run ran out there; its peaks are those before the failed request.")
    if answer.interrupted_by is not None:
        lines.append(_terminated(answer.interrupted_by, f"{name} value", list(answer.not_planned)))
    planned = " of those planned" if answer.interrupted_by is not None else ""
    lines.append(f"Largest {name}{planned} that fits: {best if best is not None else 'none'}")
    lines.append(
        f"Largest {name}{planned} that fits with expandable_segments:True: "
        f"{best_expandable if best_expandable is not None else 'none'}"
    )
    return "\n".join(lines)
