"""``triton.language`` in a planned run: kernel bodies never run in Python, on a GPU either,
so every name a body uses answers a placeholder; only ``constexpr`` and the dtypes are used
outside kernels (annotations, tables of dtypes)."""

from __future__ import annotations

import types
from typing import Any

_SUBMODULES = ("extra", "math", "cuda", "libdevice")
"""Names under ``triton.language`` that are modules in Triton (``from triton.language.extra
import libdevice``)."""


class Language(types.ModuleType):
    """``triton.language`` (and its ``extra``, ``math`` submodules): every name a kernel body
    uses answers a placeholder, since a body never runs outside a kernel."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        found = Language(f"{self.__name__}.{name}") if name in _SUBMODULES else None
        value = found if found is not None else _Builtin(f"{self.__name__}.{name}")
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


class constexpr:
    """``tl.constexpr``: an annotation for compile-time arguments, or a value wrapped as one."""

    def __init__(self, value: Any = None) -> None:
        self.value: Any = value.value if isinstance(value, constexpr) else value

    def __repr__(self) -> str:
        return f"constexpr[{self.value}]"
