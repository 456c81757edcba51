"""Synthetic journals with known truth: a run of many ranks, one of which leaks and fails.

Lines are made by the journal's own ``format_line`` and files named by ``_layout``, so they are
byte for byte what a training process writes. Every rank holds ``base`` bytes plus a little
noise; the leaking rank also keeps ``leak_per_line`` more bytes at each line, until it runs out
of memory at its last line. The damage a real run suffers can be added on request: ranks that
never wrote a line, torn last lines, a bad line, and restarts (a second process for a rank, or
the same pid appending again).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memforensics._layout import journal_folder, journal_name
from memforensics.capture.journal import format_line

GIB = 1 << 30
MIB = 1 << 20
START = 1_796_000_000.0


@dataclass(frozen=True)
class JournalTruth:
    """What ``write_journals`` made, for tests to check the overview against."""

    root: Path
    ranks: int
    lines: int
    every: int
    leak_rank: int | None
    leak_per_line: int
    oom_step: int | None
    """The step at which ``leak_rank`` runs out of memory (its last line)."""
    leaked_at_oom: int
    """Bytes the leaking rank holds beyond a healthy rank at ``oom_step``."""
    missing: tuple[int, ...]
    torn: tuple[int, ...]
    restarted: tuple[int, ...]
    held: dict[int, int]
    """Bytes each rank holds at every line (the leaking rank: before its leak)."""


def write_journals(
    root: Path,
    *,
    ranks: int = 16,
    lines: int = 50,
    every: int = 100,
    base: int = 40 * GIB,
    limit: int = 80 * GIB,
    leak_rank: int | None = 5,
    leak_per_line: int = 256 * MIB,
    missing: Iterable[int] = (),
    torn: Iterable[int] = (),
    restarted: Iterable[int] = (),
    same_pid_restart: Iterable[int] = (),
    seed: int = 0,
    jitter: int = 0,
    leak_fails: bool = True,
) -> JournalTruth:
    """Write ``journal/rank{R}_pid{P}.jsonl`` for every rank not in ``missing``.

    Healthy ranks differ by at most 64 MiB (noise from ``seed``). Ranks in ``restarted`` get a
    second pid whose lines repeat the last ten steps; ranks in ``same_pid_restart`` append that
    second run to the same file (steps go back). ``torn`` ranks end with half a line.
    ``jitter`` adds up to that many bytes of per-line noise to every rank's allocated bytes
    (a steady rank then wobbles around its level without drifting). With ``leak_fails`` False
    the leaking rank is still running: it drifts but has no OOM line yet.
    """
    folder = journal_folder(root)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    skip, torn_set = set(missing), set(torn)
    again, same = set(restarted), set(same_pid_restart)
    oom_step = (lines - 1) * every if leak_rank is not None and leak_fails else None
    held: dict[int, int] = {}
    for rank in range(ranks):
        if rank in skip:
            continue
        pid = 1000 + rank
        noise = rng.randrange(0, 64) * MIB
        held[rank] = base + noise
        wobble = [rng.randrange(0, jitter + 1) if jitter else 0 for _ in range(lines)]
        chunks = [_line(rank, i, every, base + noise + wobble[i], limit, rank == leak_rank,
                        leak_per_line)
                  for i in range(lines)]  # fmt: skip
        if rank == leak_rank and leak_fails:  # the OOM line first; the step's own line at its end
            chunks.insert(-1, _oom_line(rank, lines - 1, every, base + noise, limit, leak_per_line))
        second = [_line(rank, i, every, base + noise, limit, False, 0, restart=True)
                  for i in range(max(lines - 10, 0), lines)]  # fmt: skip
        if rank in same:
            chunks += second
        if rank in torn_set:
            chunks.append(chunks[-1][: len(chunks[-1]) // 2])
        (folder / journal_name(rank, pid)).write_bytes(b"".join(chunks))
        if rank in again:
            (folder / journal_name(rank, pid + 50_000)).write_bytes(b"".join(second))
    return JournalTruth(
        root=root,
        ranks=ranks,
        lines=lines,
        every=every,
        leak_rank=leak_rank,
        leak_per_line=leak_per_line,
        oom_step=oom_step,
        leaked_at_oom=(lines - 1) * leak_per_line if leak_rank is not None else 0,
        missing=tuple(sorted(skip)),
        torn=tuple(sorted(torn_set)),
        restarted=tuple(sorted(again | same)),
        held=held,
    )


def _line(
    rank: int,
    index: int,
    every: int,
    held: int,
    limit: int,
    leaking: bool,
    leak: int,
    *,
    restart: bool = False,
) -> bytes:
    allocated = held + (index * leak if leaking else 0)
    reserved = allocated + 2 * GIB
    peak = held + ((index * leak) if leaking else 0) + 2 * GIB
    stats: dict[str, int | None] = {
        "allocated_bytes": allocated,
        "reserved_bytes": reserved,
        "active_bytes": allocated,
        "peak_allocated_bytes": allocated,
        "peak_reserved_bytes": peak,
        "alloc_retries": index // 10 if leaking else 0,
        "ooms": 0,
        "device_free_bytes": limit - reserved - GIB,
        "device_total_bytes": limit,
    }
    when = START + index * 10.0 + rank * 0.001 + (100_000.0 if restart else 0.0)
    return format_line("step", index * every, rank, stats, when)


def _oom_line(rank: int, index: int, every: int, held: int, limit: int, leak: int) -> bytes:
    allocated = held + index * leak
    stats: dict[str, int | None] = {
        "allocated_bytes": allocated,
        "reserved_bytes": allocated + 2 * GIB,
        "active_bytes": allocated,
        "peak_allocated_bytes": allocated,
        "peak_reserved_bytes": allocated + 2 * GIB,
        "alloc_retries": index // 10 + 1,
        "ooms": 1,
        "device_free_bytes": limit - allocated - 3 * GIB,
        "device_total_bytes": limit,
    }
    return format_line("oom", index * every, rank, stats, START + index * 10.0 + 5.0)
