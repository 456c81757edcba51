"""Byte sizes for people: a summary is read at a glance, so GiB/MiB beat raw integers."""

from __future__ import annotations

_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def format_bytes(count: int | None) -> str:
    """``3.25 GiB``, ``512.0 MiB``, ``96 B``; ``-`` for unknown; signed input keeps its sign."""
    if count is None:
        return "-"
    sign = "-" if count < 0 else ""
    size = abs(count)
    for unit, scale in _UNITS:
        if size >= scale:
            return f"{sign}{size / scale:.2f} {unit}"
    return f"{sign}{size} B"


def format_signed_bytes(count: int | None) -> str:
    """``+1.50 GiB``, ``-20.00 MiB``, ``0 B``: a change shows its direction; ``-`` for unknown."""
    if count is None:
        return "-"
    return ("+" if count > 0 else "") + format_bytes(count)
