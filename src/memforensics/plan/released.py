"""A call made when a storage's Python object is released, at the cost of one weak reference.

The plan follows each stand-in's storage and each host copy of known values to its end: the
block goes back to the planned allocator, the copy is dropped. A small-operator loop makes a
storage or two per operator, and ``weakref.finalize`` costs several times what a bare weak
reference does for each (its registry, its record of the call, its exit hook), which made it a
tenth of such a plan's own work. A callback on a weak reference, held until it fires, runs
the same calls in the same order (a storage's callbacks fire newest first, ``finalize``'s
among them: they are weak reference callbacks too). It does not run them
at interpreter exit: what the plan writes is written before then.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

_HELD: dict[int, weakref.ref[Any]] = {}
"""The weak references whose callbacks have yet to fire, by ``id`` (a dropped reference fires
none; two live references to one object compare equal, so a set would keep one)."""


def when_released(obj: object, callback: Callable[..., object], *args: Any) -> None:
    """Call ``callback(*args)`` once ``obj`` is released."""

    def fire(reference: weakref.ref[Any]) -> None:
        del _HELD[id(reference)]
        callback(*args)

    reference = weakref.ref(obj, fire)
    _HELD[id(reference)] = reference
