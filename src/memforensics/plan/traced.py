"""An operator reached under ``torch.jit.trace``: recorded as CUDA's kernel records it.

The tracer records an operator where the dispatcher meets its ``Tracer`` key, above the plan's
dispatch mode, and turns itself off while the kernel runs beneath. A few operators it leaves
to the operators their kernels call (torch's ``DONT_RECORD_TRACE``, in
``torchgen/packaged/autograd/gen_trace_type.py``): ``convolution`` reaches its kernel with
the tracer still on, and CUDA's kernel, ``convolution``'s composite, calls ``_convolution``,
which the graph records. Other operators reach their kernels with the tracer's state kept but
its key skipped (``copy_``'s own tracing records it so), and the kernel records nothing.

Under the plan the kernel is the plan's own Python, beneath the dispatch mode, where torch
skips the tracer's key for every operator. Left as it is, a ``meta`` kernel written in Python
(``meta_conv``) reads each size as a traced tensor (``torch._check`` fails: "cond must be a
bool, but got a Tensor"), and ``convolution``'s output is in no recorded node, so the next
operator's tracing refuses it as a constant that requires grad. So an operator the tracer
leaves to its parts runs its composite kernel with the tracer's key let in and the plan's mode
on, as CUDA's does: ``_convolution`` is recorded, with the flags CUDA's kernel passes, and
runs through the plan. Every other operator runs with the tracer off, and it is put back after.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

_TRACER = "Tracer"
"""The dispatch key the tracer records at, by name (``torch._C.DispatchKey`` does not list it)."""

_COMPOSITE = "CompositeExplicitAutograd"
"""The kernel CUDA runs for an operator written once for every device."""

_LIST = "DONT_RECORD_TRACE"
"""torch's set of the operators the tracer leaves to their parts, by base name."""


def tracing() -> bool:
    """Whether ``torch.jit.trace`` is recording on this thread."""
    return torch._C._get_tracing_state() is not None


@functools.cache
def _left_to_parts() -> frozenset[str]:
    """The operators the tracer records by their parts (base names), read from the
    ``torchgen`` torch ships with; none where it is not installed."""
    spec = importlib.util.find_spec("torchgen")
    if spec is None or spec.origin is None:
        return frozenset()
    source = Path(spec.origin).parent / "packaged" / "autograd" / "gen_trace_type.py"
    if not source.is_file():
        return frozenset()
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == _LIST for target in node.targets
        ):
            return frozenset(ast.literal_eval(node.value))
    return frozenset()


@functools.cache
def _by_parts(func: Any) -> bool:
    """Whether ``func``'s kernel is the composite the tracer records the parts of."""
    name = func.name()  # "aten::convolution"
    base = name.partition("::")[2].rstrip("_")
    if base not in _left_to_parts():
        return False
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, _COMPOSITE))


def run(
    mode: Any,
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    untraced_run: Callable[[], Any],
) -> Any:
    """``func`` reached ``mode`` while the tracer records: its composite kernel run with the
    tracer recording the operators it calls, for an operator the tracer leaves to its parts;
    else ``untraced_run()``, the plan's own run of it, with the tracer off."""
    if _by_parts(func):
        keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
        with _key_let_in(), mode:
            return func.redispatch(keys, *args, **(kwargs or {}))
    with untraced():
        return untraced_run()


@contextmanager
def _key_let_in() -> Iterator[None]:
    """The tracer's key let in on this thread inside, as it was after."""
    skipped = torch._C._dispatch_tls_is_dispatch_key_excluded(_TRACER)
    if skipped:
        torch._C._dispatch_tls_set_dispatch_key_excluded(_TRACER, False)
    try:
        yield
    finally:
        if skipped:
            torch._C._dispatch_tls_set_dispatch_key_excluded(_TRACER, True)


def _set(state: object) -> None:
    """The tracer's state on this thread set to ``state``: torch refuses to set one while its
    key is skipped, so the key is let in for that moment."""
    with _key_let_in():
        torch._C._set_tracing_state(state)  # type: ignore[attr-defined, unused-ignore]  # not in torch's stubs


@contextmanager
def untraced() -> Iterator[None]:
    """This thread's tracer off inside, back on after."""
    state = torch._C._get_tracing_state()
    _set(None)
    try:
        yield
    finally:
        _set(state)
