"""Replacing torch's attributes for a planned run, and putting torch back as it was after.

A :class:`Replacement` is one row of the emulation's table: which attribute, its stand-in, and
why. :func:`replaced` applies a table and undoes it. It refuses to start when the installed torch
lacks an attribute the emulation relies on (a renamed attribute is never silently added); a
public function that only some torch releases have is answered where the installed one has it
(a script cannot call it where it does not). :func:`kept_state` puts back what a script
changes in torch through the emulation's stand-ins: the default dtype, the default device and
the device contexts on torch's function-mode stack.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

_MISSING = object()


@dataclass(frozen=True)
class Replacement:
    """``owner.name`` answered by ``value`` for the run, because ``why``. ``needed``: the
    emulation relies on it, so a torch without it cannot be planned on; else a public function
    of some torch releases only, answered where the installed torch has it. ``added``: a CUDA
    build's binding the CPU build lacks, set for the run (and deleted after) where it is
    absent."""

    owner: Any
    name: str
    value: Any
    why: str
    needed: bool = True
    added: bool = False

    @property
    def where(self) -> str:
        """``torch.cuda.memory.memory_stats``: the attribute as a script would name it."""
        owner = self.owner
        if isinstance(owner, types.ModuleType):
            return f"{owner.__name__}.{self.name}"
        if isinstance(owner, type):
            return f"{owner.__module__}.{owner.__qualname__}.{self.name}"
        return f"{type(owner).__name__}.{self.name}"


class MissingAttribute(RuntimeError):
    """The installed torch lacks attributes the plan replaces: it cannot emulate CUDA there."""


def _current(owner: Any, name: str) -> Any:
    """What ``owner.name`` is now: a class's own attribute only (an inherited method is put back
    by deleting the replacement), a module's or config's as reading it gives."""
    if isinstance(owner, type):
        return vars(owner).get(name, _MISSING)
    return getattr(owner, name, _MISSING)


def applicable(table: Iterable[Replacement]) -> list[Replacement]:
    """The rows of ``table`` the installed torch has; MissingAttribute naming every attribute
    the emulation relies on that it lacks."""
    rows = list(table)
    missing = [
        row.where
        for row in rows
        if row.needed and not row.added and not hasattr(row.owner, row.name)
    ]
    if missing:
        import torch

        raise MissingAttribute(
            f"torch {torch.__version__} lacks what the plan replaces to emulate CUDA: "
            + ", ".join(missing)
        )
    return [row for row in rows if row.added or hasattr(row.owner, row.name)]


@contextmanager
def replaced(table: Iterable[Replacement]) -> Iterator[None]:
    """Each row of ``table`` the installed torch has applied inside; each attribute put back (an
    inherited one by deleting the replacement) after."""
    rows = applicable(table)
    saved = [(row.owner, row.name, _current(row.owner, row.name)) for row in rows]
    for row in rows:
        setattr(row.owner, row.name, row.value)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


@contextmanager
def kept_state() -> Iterator[None]:
    """Torch's defaults as they were before, after: the default dtype (``set_default_dtype``,
    ``set_default_tensor_type``), the default device (``set_default_device``) and the function
    modes on torch's stack (device contexts a script entered and never left)."""
    import torch
    import torch.utils._device as device_module
    from torch.overrides import _get_current_function_mode_stack, _pop_mode, _push_mode

    holder = torch._GLOBAL_DEVICE_CONTEXT
    dtype = torch.get_default_dtype()
    context = getattr(holder, "device_context", None)
    current = device_module.CURRENT_DEVICE
    stack = list(_get_current_function_mode_stack())
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)
        left = getattr(holder, "device_context", None)
        if left is not context:
            torch.set_default_device(None)  # leaves the script's default device's context
            holder.device_context = context
        if list(_get_current_function_mode_stack()) != stack:
            while torch._C._len_torch_function_stack():
                _pop_mode()
            for mode in stack:
                _push_mode(mode)
        device_module.CURRENT_DEVICE = current
