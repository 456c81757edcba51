"""Byte sizes as people type them on a command line: ``2GiB``, ``512MB``, ``1.5 GiB``, ``4096``.

Read by :func:`memforensics._units.parse_size`; this adds only what argparse needs.
"""

from __future__ import annotations

import argparse

from memforensics._units import parse_size


def byte_size(text: str) -> int:
    """argparse type: a positive size in bytes (binary units for K/M/G/T and *iB)."""
    try:
        value = parse_size(text)
    except ValueError:
        message = f"not a size: {text!r} (try 2GiB, 512MiB or 4096)"
        raise argparse.ArgumentTypeError(message) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return value
