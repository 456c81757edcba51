"""Text for what filled the device: the kinds table and the top of the peak's call tree."""

from __future__ import annotations

from typing import Any

from memforensics._units import format_bytes as fmt
from memforensics.analysis.filled.kinds import KindBytes
from memforensics.analysis.filled.peak import Moment, tree_lines
from memforensics.analysis.filled.what_filled import Filled


def kinds_lines(kinds: tuple[KindBytes, ...], title: str) -> list[str]:
    """A kinds table: bytes, blocks, share and confidence per kind."""
    total = sum(kind.bytes for kind in kinds) or 1
    lines = [
        "",
        f"  {title}",
        f"  {'kind':<17}{'bytes':>11} {'blocks':>7} {'share':>6}  confidence",
    ]
    for kind in kinds:
        lines.append(
            f"  {kind.kind:<17}{fmt(kind.bytes):>11} {kind.blocks:>7,} "
            f"{100 * kind.bytes / total:>5.1f}%  {kind.confidence:.2f}"
        )
    return lines


def moment_lines(found: Moment) -> list[str]:
    """Header, kinds and the top of the call tree of one moment."""
    where = "at the snapshot" if found.name == "snapshot" else f"at trace entry {found.position:,}"
    lines = kinds_lines(found.kinds, f"{found.name}: {fmt(found.live_bytes)} live {where}")
    tree = tree_lines(found.tree)
    if tree:
        lines += ["", f"  call tree at the {found.name} (--json has all of it)"]
        lines += [f"  {line}" for line in tree]
    return lines


def filled_lines(filled: Filled | None) -> list[str]:
    """What ``summary`` adds for issue 12: kinds now, the peak, the OOM moment."""
    if filled is None:
        return []
    lines = kinds_lines(filled.kinds, "live memory by kind (from lifetimes; see docs/analysis.md)")
    lines += moment_lines(filled.peak)
    if filled.oom is not None and filled.oom.position != filled.peak.position:
        lines += moment_lines(filled.oom)
    return lines


def kinds_change_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The kinds part of ``diff``: before, after and change per kind."""
    if not rows:
        return []
    lines = ["", f"  {'kind':<17}{'before':>11} {'after':>11} {'change':>11}"]
    for row in rows:
        lines.append(
            f"  {row['kind']:<17}{fmt(row['before_bytes']):>11} {fmt(row['after_bytes']):>11} "
            f"{fmt(row['delta_bytes']):>11}"
        )
    return lines
