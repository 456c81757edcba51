"""Byte sizes: how memforensics prints them, how it reads them, and one figure derived from them.

A summary is read at a glance, so GiB/MiB beat raw integers (:func:`format_bytes`). People type
sizes on a command line and PyTorch prints them in its error text; both are read by
:func:`parse_size`. The memory outside PyTorch's allocator is computed by capture (the journal)
and by analysis (an OOM's moment, ``ls``), always by :func:`outside_pytorch_bytes`.
"""

from __future__ import annotations

import re

_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
_SCALES = {
    "": 1, "b": 1, "byte": 1, "bytes": 1,
    "k": 1 << 10, "kb": 1000, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1000**2, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1000**4, "tib": 1 << 40,
}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes in ``2GiB``, ``512 MB``, ``1.5 GiB``, ``2.00 GiB``, ``96 bytes`` or ``4096``.

    ``K``/``M``/``G``/``T`` and ``KiB``... are binary, ``KB``/``MB``... decimal; any case.
    Raises ValueError for anything else.
    """
    match = _SIZE.match(text)
    scale = _SCALES.get(match.group(2).lower()) if match else None
    if match is None or scale is None:
        raise ValueError(f"not a size: {text!r}")
    return int(float(match.group(1)) * scale)


def outside_pytorch_bytes(limit: int | None, free: int | None, reserved: int | None) -> int | None:
    """Device memory PyTorch's allocator does not own (contexts, NCCL/HCCL, other processes):
    ``limit - free - reserved``, never negative; None when any figure is unknown.

    The three figures are read at slightly different moments, so the difference can dip below
    zero; no memory is held then, and a negative figure would only mislead.
    """
    if limit is None or free is None or reserved is None:
        return None
    return max(limit - free - reserved, 0)


def format_bytes(count: int | None) -> str:
    """``3.25 GiB``, ``512.00 MiB``, ``96 B``; ``-`` for unknown; signed input keeps its sign."""
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
