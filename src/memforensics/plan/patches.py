"""Attributes a planned run replaces, and puts back after: ``torch.cuda``'s answers, the
stand-ins' own, the few torch functions whose CUDA choices the plan re-makes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_MISSING = object()


def _current(owner: Any, name: str) -> Any:
    """What ``owner.name`` is now: a class's own attribute only (an inherited method is put back
    by deleting the replacement), a module's or config's as reading it gives."""
    if isinstance(owner, type):
        return vars(owner).get(name, _MISSING)
    return getattr(owner, name, _MISSING)


@contextmanager
def replaced(patches: dict[tuple[Any, str], Any]) -> Iterator[None]:
    """Each ``(owner, name)`` set to its value inside; each put back, or deleted where it was
    not there, after."""
    saved = {key: _current(*key) for key in patches}
    for (owner, name), value in patches.items():
        setattr(owner, name, value)
    try:
        yield
    finally:
        for (owner, name), value in saved.items():
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
