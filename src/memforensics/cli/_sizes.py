"""Byte sizes as people type them on a command line: ``2GiB``, ``512MB``, ``1.5 GiB``, ``4096``."""

from __future__ import annotations

import argparse
import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1000, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1000**2, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1000**4, "tib": 1 << 40,
}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def byte_size(text: str) -> int:
    """argparse type: a positive size in bytes (binary units for K/M/G/T and *iB)."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 2GiB, 512MiB or 4096)")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return value
