"""``triton.language`` in a planned run: kernel bodies never run in Python, on a GPU either,
so every name a body uses answers a placeholder; only ``constexpr``, the dtypes and Triton's
type classes are used outside kernels (annotations such as ``tl.pointer_type(tl.int64)``,
tables of dtypes)."""

from __future__ import annotations

import types
from typing import Any

_SUBMODULES = ("extra", "math", "cuda", "libdevice")
"""Names under ``triton.language`` that are modules in Triton (``from triton.language.extra
import libdevice``)."""

_TYPES = frozenset(
    (
        "dtype",
        "pointer_type",
        "const_pointer_type",
        "block_type",
        "tuple_type",
        "function_type",
        "slice_type",
    )
)
"""Triton's type classes (``triton/language/core.py``): plain Python classes, so a call builds
a type outside a kernel too, as a kernel's annotations do
(``counts: tl.pointer_type(tl.int64)``)."""


class Language(types.ModuleType):
    """``triton.language`` (and its ``extra``, ``math`` submodules): every name a kernel body
    uses answers a placeholder, since a body never runs outside a kernel."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        qualified = f"{self.__name__}.{name}"
        value: Any
        if name in _SUBMODULES:
            value = Language(qualified)
        elif name in _TYPES:
            value = _Type(qualified)
        else:
            value = _Builtin(qualified)
        setattr(self, name, value)
        return value


class _Builtin:
    """A ``triton.language`` function or dtype: usable as a name, refused as a call outside a
    kernel, as Triton refuses it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError(f"Did you forget to add @triton.jit ? ({self.name} is a kernel builtin)")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Builtin(f"{self.name}.{name}")

    def __repr__(self) -> str:
        return self.name


class _Type(_Builtin):
    """One of Triton's type classes: a call builds a type, named by its arguments, anywhere."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        named = [repr(arg) for arg in args] + [f"{key}={value!r}" for key, value in kwargs.items()]
        return _Builtin(f"{self.name}({', '.join(named)})")


class constexpr:
    """``tl.constexpr``: an annotation for compile-time arguments, or a value wrapped as one."""

    def __init__(self, value: Any = None) -> None:
        self.value: Any = value.value if isinstance(value, constexpr) else value

    def __repr__(self) -> str:
        return f"constexpr[{self.value}]"
