"""Text for what filled the device: the kinds table and the top of the peak's call tree."""

from __future__ import annotations

from memforensics._units import format_bytes as fmt
from memforensics.analysis.dump import NATIVE_ONLY, native_note, short_site
from memforensics.analysis.filled.kinds import KindBytes
from memforensics.analysis.filled.known import Known
from memforensics.analysis.filled.peak import CallNode, Moment

_MIN_NAME = 24  # a deep frame's name keeps at least this much, however far it is indented


def kinds_lines(kinds: tuple[KindBytes, ...], title: str) -> list[str]:
    """A kinds table: bytes, blocks, share and confidence per kind, biggest first (ties in
    :data:`~memforensics.analysis.filled.kinds.KINDS` order); one line when none is live.

    When the process told some kinds (tracked tensors), a column says how many of each kind's
    bytes are known from the process; the rest of them are inferred.
    """
    if not kinds:
        return ["", f"  {title}: nothing live"]
    total = sum(kind.bytes for kind in kinds) or 1
    known = any(kind.known_bytes for kind in kinds)
    lines = [
        "",
        f"  {title}",
        f"  {'kind':<17}{'bytes':>11} {'blocks':>7} {'share':>6}  confidence"
        + (f"  {'from the process':>16}" if known else ""),
    ]
    for kind in sorted(kinds, key=lambda kind: -kind.bytes):  # stable: ties keep KINDS order
        lines.append(
            f"  {kind.kind:<17}{fmt(kind.bytes):>11} {kind.blocks:>7,} "
            f"{100 * kind.bytes / total:>5.1f}%  {kind.confidence:.2f}"
            + (f"        {_known_cell(kind):>16}" if known else "")
        )
    return lines


def _known_cell(kind: KindBytes) -> str:
    return fmt(kind.known_bytes) if kind.known_bytes else "-"


def known_lines(known: Known | None, kinds: tuple[KindBytes, ...]) -> list[str]:
    """What the process told: known bytes against all, and how many tracked tensors matched."""
    if known is None:
        return []
    total = sum(kind.bytes for kind in kinds)
    return [
        f"  from the process: {fmt(known.bytes)} of {fmt(total)} in {known.blocks:,} blocks "
        "holding tracked tensors; the rest is inferred",
        f"  ({known.matched:,} of {known.tensors:,} tracked tensors lie in live blocks)",
    ]


def moment_lines(found: Moment) -> list[str]:
    """Header, kinds and the top of the call tree of one moment."""
    where = "at the snapshot" if found.name == "snapshot" else f"at trace entry {found.position:,}"
    lines = kinds_lines(found.kinds, f"{found.name}: {fmt(found.live_bytes)} live {where}")
    tree = tree_lines(found.tree)
    if tree:
        lines += ["", f"  call tree at the {found.name} (--json has all of it)"]
        lines += [f"  {line}" for line in tree]
        lines += native_note([NATIVE_ONLY] if any(t.endswith(NATIVE_ONLY) for t in tree) else [])
    return lines


def filled_lines(
    kinds: tuple[KindBytes, ...],
    peak: Moment | None,
    oom: Moment | None,
    known: Known | None = None,
) -> list[str]:
    """What ``summary`` adds on what filled the device: ``kinds`` now (and what of them the
    process told: ``known``), the ``peak``, the ``oom``'s moment (nothing without a peak: the
    dump was not classified)."""
    if peak is None:
        return []
    if not kinds and not peak.live_bytes and oom is None:
        return ["", "  live memory by kind: nothing live, at the snapshot or in the trace"]
    lines = kinds_lines(kinds, "live memory by kind, adding up to allocated (see docs/analysis.md)")
    lines += known_lines(known, kinds)
    lines += moment_lines(peak)
    if oom is not None and oom.position != peak.position:
        lines += moment_lines(oom)
    return lines


def tree_lines(
    root: CallNode, *, limit: int = 14, share: float = 0.05, width: int = 78
) -> list[str]:
    """The top of the tree as indented text: branches with at least ``share`` of the bytes,
    each a user's line (the torch op inside it folded into it: its bytes are the line's), each
    line in ``width`` columns (they are printed indented by two)."""
    lines: list[str] = []
    floor = root.bytes * share

    def walk(node: CallNode, depth: int) -> None:
        for child in node.shown_children():
            if len(lines) >= limit or child.bytes < floor:
                return
            chain = child  # a chain of single callers reads as its deepest user's line
            while len(shown := chain.shown_children()) == 1:
                [only] = shown
                if only.bytes != chain.bytes:
                    break
                chain = only
            name = chain.name if chain is child else f"… {chain.name}"
            name = short_site(name, max(width - 12 - 2 * depth, _MIN_NAME))
            lines.append(f"{fmt(child.bytes):>11} {'  ' * depth}{name}")
            walk(chain, depth + 1)

    walk(root, 0)
    return lines
