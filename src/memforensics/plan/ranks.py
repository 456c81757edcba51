"""``--ranks all``: every rank of a distributed job planned, each in its own process.

Pure: the rows the CLI gathers from each rank's plan, and the answer: which rank runs out first
and why.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA = 1
"""Version of ``plan --ranks all --json``'s keys (docs/json.md)."""


@dataclass(frozen=True)
class RankRow:
    """One rank planned: its peaks, whether it fits (None where its run failed for another
    reason, or SIGTERM or Ctrl-C stopped it before its peaks passed the device), ``oom`` when
    it ran out; ``cause``: why it does not fit, in words; ``interrupted``: where its script was
    (``file:line``) when a signal stopped it, its peaks being those up to there, and
    ``interrupted_by`` which (``SIGTERM`` or ``Ctrl-C``)."""

    rank: int
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    fits: bool | None
    oom: bool = False
    cause: str | None = None
    error: str | None = None
    snapshots: tuple[str, ...] = ()
    interrupted: str | None = None
    interrupted_by: str | None = None


@dataclass(frozen=True)
class RanksAnswer:
    """Every planned rank's row, and the first rank (lowest) that runs out or does not fit;
    ``interrupted_by``: the signal that stopped the plan (``SIGTERM``, then ``terminated`` too,
    or ``Ctrl-C``), the rows being those of the ranks planned so far; ``not_planned``: the
    ranks it stopped before their plans began."""

    world_size: int
    rows: tuple[RankRow, ...]
    first_out: RankRow | None
    terminated: bool = False
    not_planned: tuple[int, ...] = ()
    interrupted_by: str | None = None


def first_out(rows: list[RankRow]) -> RankRow | None:
    """The lowest rank that runs out (a predicted OOM), else the lowest that does not fit."""
    for wanted in (True, False):
        for row in sorted(rows, key=lambda r: r.rank):
            if row.fits is False and row.oom is wanted:
                return row
    return None
