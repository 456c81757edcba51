"""Replacing torch's attributes for a planned run, and putting torch back as it was after.

A :class:`Replacement` is one row of the emulation's table: which attribute, its stand-in, and
why. :func:`replaced` applies a table and undoes it. It refuses to start when the installed torch
lacks an attribute the emulation relies on (a renamed attribute is never silently added); a
public function that only some torch releases have is answered where the installed one has it
(a script cannot call it where it does not). :func:`kept_state` puts back what a script
changes in torch through the emulation's stand-ins: the default dtype, the default device and
the device contexts on torch's function-mode stack.

A :class:`LibraryReplacement` is a row for a library the script may import (Accelerate), never
imported for it: :func:`replaced_where_imported` replaces the library's function (or a
class's method) once the script imports its module, and every module-level binding of it (the
class's attribute) is the library's own again after. A library is optional and its releases
differ, so a module without the function is left as it is (no run is refused for a library it
may never import).
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
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


@dataclass(frozen=True)
class LibraryReplacement:
    """``module.name`` of a library the script may import, answered by ``stand_in(original)``
    from the moment the script imports ``module`` to the end of the run, because ``why``.
    ``name`` is a function (``set_module_tensor_to_device``), a class's method
    (``EarlyStopping._evaluate_stopping_criteria``) or class method (``stand_in`` is given it
    bound to its class, as :class:`Replacement` rows take one), or a value the module holds
    (``cpp_extension.CUDA_HOME``), set on the module alone: a value such as None is bound in
    many modules that never meant the library's."""

    module: str
    name: str
    stand_in: Callable[[Any], Any]
    why: str

    @property
    def where(self) -> str:
        """``accelerate.utils.modeling.set_module_tensor_to_device``, as a script names it."""
        return f"{self.module}.{self.name}"


def _rebound(old: Any, new: Any) -> None:
    """Every module-level binding of ``old`` (its own module's, and each ``from ... import``
    of it) made ``new``."""
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict):
            continue
        for key, value in list(names.items()):
            if value is old:
                names[key] = new


class _Then(importlib.abc.Loader):
    """A module's own loader, with ``then(module)`` once the module has run (before any
    importer binds its names)."""

    def __init__(self, loader: Any, then: Callable[[types.ModuleType], None]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: Any) -> types.ModuleType | None:
        made: types.ModuleType | None = self._loader.create_module(spec)
        return made

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = self._loader  # the module keeps its own loader, as imported
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._then(module)


class _Imports(importlib.abc.MetaPathFinder):
    """Replaces each row's function where its module is, or will be, imported; puts every
    binding back on :meth:`undo`."""

    def __init__(self, rows: Sequence[LibraryReplacement]) -> None:
        self._rows: dict[str, list[LibraryReplacement]] = {}
        for row in rows:
            self._rows.setdefault(row.module, []).append(row)
        self._undo: list[Callable[[], None]] = []
        self._finding = threading.local()

    def apply(self, module: types.ModuleType) -> None:
        """Each row for ``module`` applied, where the module has the function or value."""
        for row in self._rows.get(module.__name__, ()):
            owner_name, _, name = row.name.rpartition(".")
            owner = getattr(module, owner_name, None) if owner_name else module
            own = vars(owner).get(name, _MISSING) if isinstance(owner, type) else _MISSING
            if own is not _MISSING and callable(getattr(owner, name)):
                # a method, or a class method bound to its class, as a table's row takes it
                setattr(owner, name, row.stand_in(getattr(owner, name)))
                self._undo.append(partial(setattr, owner, name, own))
                continue
            original = getattr(owner, name, None) if owner is module else None
            if callable(original):
                replacement = row.stand_in(original)
                _rebound(original, replacement)
                self._undo.append(partial(_rebound, replacement, original))
            elif owner is module and name in vars(module):
                setattr(module, name, row.stand_in(original))
                self._undo.append(partial(setattr, module, name, original))

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        """The spec the other finders give a row's module, its loader applying the rows once
        the module has run."""
        if fullname not in self._rows or getattr(self._finding, "on", False):
            return None
        self._finding.on = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is not self and hasattr(finder, "find_spec"):
                    spec = finder.find_spec(fullname, path, target)
                    if spec is not None:
                        break
        finally:
            self._finding.on = False
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Then(spec.loader, self.apply)
        return spec

    def undo(self) -> None:
        """Every binding of a replacement made the library's own function again."""
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


@contextmanager
def replaced_where_imported(rows: Sequence[LibraryReplacement]) -> Iterator[None]:
    """Each row applied inside, now where its module is imported already, else when the script
    imports it; every module-level binding of each replacement the library's own after."""
    imports = _Imports(rows)
    for name in {row.module for row in rows}:
        module = sys.modules.get(name)
        if module is not None:
            imports.apply(module)
    sys.meta_path.insert(0, imports)
    try:
        yield
    finally:
        sys.meta_path.remove(imports)
        imports.undo()
