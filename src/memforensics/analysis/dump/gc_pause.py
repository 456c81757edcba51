"""Python's cyclic garbage collector, held off while a dump is read or walked.

Unpickling a 1,000,000-entry trace makes millions of dicts and lists, and every few hundred new
containers the collector runs; its full passes walk the whole, still growing heap, which costs
more than the unpickling itself (2-3x ``pickle.load``'s time on a real-shaped dump). A snapshot
is a tree of plain containers without cycles and the analysis makes few, so holding the collector
off changes nothing but the time: reference counting still frees everything, and whatever
cycles the work left are collected when the collector resumes.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Hold off the cyclic collector inside (nesting-safe: only the outermost resumes it).

    Also a decorator: ``@paused_gc()``.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
