"""torch's Python reference kernels, run as ``meta`` kernels, without importing dynamo.

On ``meta`` the dispatcher runs many operators' kernels in Python: the references of
``torch._refs`` (every elementwise operator's, ``add``, ``mul``, ``relu``...). torch wraps each
in ``torch._disable_dynamo``, whose first call imports ``torch._dynamo`` (about 1.4 s of CPU,
sympy with it) to keep dynamo from tracing the reference. A GPU runs these operators' CUDA
kernels and never calls the references, so the script's first ``a + 1`` would cost its plan an
import its own run never makes: about a third of a small plan's time.

Inside :func:`unwrapped_until_dynamo`, each reference's wrapper finds, where torch caches the
disabled function it makes on its first call, one that calls the reference itself while
``torch._dynamo`` is not imported, which is the same call: no frame hook of dynamo's can be on
before dynamo exists. Once the script imports dynamo (it compiles), the next call makes the
real disabled function and leaves it there, as torch's own first call would. What is left of
the plan's on the way out is taken away. Only the references are treated so: the functions a
GPU run calls too (an optimizer's step, ``checkpoint``) import dynamo as they would there.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

_CACHED = "__dynamo_disable"
"""Where ``torch._disable_dynamo``'s wrapper keeps, on the wrapped function, the disabled
function it makes on its first call (``torch/_compile.py``)."""
_REFERENCES = ("torch._refs", "torch._prims")
"""The packages whose functions are the ``meta`` kernels the dispatcher runs in Python."""
_DEPTH = 8
"""How many wrappers deep to look for ``torch._disable_dynamo``'s (a reference is wrapped by
its out, scalar and type-promotion wrappers)."""
_FUNCTION = types.FunctionType


class _UntilDynamo:
    """The disabled function torch would cache for ``fn``: ``fn`` itself while dynamo is not
    imported; ``torch._dynamo.disable(fn)``, cached in its place, once it is."""

    __slots__ = ("_fn", "_recursive")

    def __init__(self, fn: Callable[..., Any], recursive: bool) -> None:
        self._fn = fn
        self._recursive = recursive

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        dynamo = sys.modules.get("torch._dynamo")
        disable = getattr(dynamo, "disable", None) if dynamo is not None else None
        if disable is None:
            return self._fn(*args, **kwargs)
        disabled = disable(self._fn, self._recursive, wrapping=False)
        setattr(self._fn, _CACHED, disabled)
        return disabled(*args, **kwargs)


def _wrapper_code() -> types.CodeType | None:
    """The code of ``torch._disable_dynamo``'s wrapper, or None where torch has none."""
    disable = getattr(torch, "_disable_dynamo", None)
    if disable is None:
        return None
    made = disable(_wrapper_code)
    code = getattr(made, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def _wrapped_references(code: types.CodeType) -> Iterator[tuple[Callable[..., Any], bool]]:
    """Each reference ``torch._disable_dynamo`` wraps, with its ``recursive``, whose wrapper
    has not made its disabled function yet: found from the references' modules through the
    wrappers around them (``__wrapped__``, and the functions their closures hold: a unary
    reference's outer ``functools.wraps`` points past its inner wrappers)."""
    if "fn" not in code.co_freevars or "recursive" not in code.co_freevars:
        return
    at_fn, at_recursive = code.co_freevars.index("fn"), code.co_freevars.index("recursive")
    seen: set[int] = set()
    modules = [m for name, m in list(sys.modules.items()) if name.startswith(_REFERENCES)]
    for module in modules:
        found = [(value, 0) for value in vars(module).values() if type(value) is _FUNCTION]
        while found:
            value, depth = found.pop()
            if id(value) in seen or depth > _DEPTH:
                continue
            seen.add(id(value))
            cells = value.__closure__ or ()
            if value.__code__ is code:
                fn = cells[at_fn].cell_contents
                if getattr(fn, _CACHED, None) is None:
                    yield fn, bool(cells[at_recursive].cell_contents)
                continue
            inner = [getattr(value, "__wrapped__", None), *(_contents(cell) for cell in cells)]
            found.extend((f, depth + 1) for f in inner if type(f) is _FUNCTION)


def _contents(cell: types.CellType) -> object:
    """A closure cell's value, or None where it is still empty."""
    try:
        return cell.cell_contents
    except ValueError:
        return None


@contextmanager
def unwrapped_until_dynamo() -> Iterator[None]:
    """Inside, torch's references run as ``meta`` kernels without importing dynamo until the
    script does; on the way out, the stand-ins still cached are taken away."""
    code = _wrapper_code() if "torch._dynamo" not in sys.modules else None
    placed: list[tuple[Callable[..., Any], _UntilDynamo]] = []
    if code is not None:
        for fn, recursive in _wrapped_references(code):
            stand_in = _UntilDynamo(fn, recursive)
            setattr(fn, _CACHED, stand_in)
            placed.append((fn, stand_in))
    try:
        yield
    finally:
        for fn, stand_in in placed:
            if getattr(fn, _CACHED, None) is stand_in:
                delattr(fn, _CACHED)
