"""``torch.export`` in a plan: the program traced as on a GPU, then run under the plan; and
AOTInductor, which a plan cannot build, refused in one line.

``torch.export.export`` traces the model with fake copies of its inputs and parameters
(``make_fx`` under a fake mode, or dynamo with ``strict=True``), which the emulation's modes
would take for stand-ins and give blocks of symbolic sizes. So the export runs with those modes
set aside, as dynamo's trace of a compiled frame does (:mod:`~memforensics.plan.compiled`): it
allocates nothing on a GPU either. The exported program holds the model's own parameters (the
stand-ins), and ``ep.module()(x)`` runs its graph of aten operators eagerly, node by node, under
the plan, as on a GPU, so every value the graph makes takes its block. While it traces, the
model's own code reads a fake copy's device as ``cuda:0``, as a stand-in's reads in eager code
(dynamo's trace with ``strict=True`` reads so too, :func:`~memforensics.plan.standins.
traced_on_cuda`): ``torch.arange(T, device=x.device)`` is recorded on the planned device, and
runs as a stand-in that takes its block; torch's own code still reads ``meta``.

AOTInductor (``torch._inductor.aoti_compile_and_package``, ``aot_compile``,
``torch._export.aot_compile``) compiles the program into CUDA kernels and a shared library,
with a memory plan of its own for the buffers they share; loading one runs that library. A plan
has neither a CUDA compiler nor a GPU to run it on, so each stops the plan with one line that
says so and what can be planned instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from memforensics.plan import standins
from memforensics.plan.askers import caller_torch_own
from memforensics.plan.compiled import meta_constants, modes_aside

AHEAD_OF_TIME = (
    "{name} compiles the exported program ahead of time into CUDA kernels and a shared library "
    "with its own memory plan, which a plan can neither build nor run; plan the exported "
    "program itself instead (torch.export.export(model, args).module() run on the inputs)"
)


def traced_aside(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.export.export`` (or ``draft_export``): ``original``, its trace on fake copies
    with the plan's modes set aside, so it takes no block; what it returns runs under them."""

    @functools.wraps(original)
    def export(*args: Any, **kwargs: Any) -> Any:
        with modes_aside(), meta_constants(), standins.traced_on_cuda(), _fakes_on_cuda():
            return original(*args, **kwargs)

    return export


@contextmanager
def _fakes_on_cuda() -> Iterator[None]:
    """A fake copy of a stand-in (a fake tensor on ``meta``) answers ``cuda:0`` to ``.device``
    read by code other than torch's, outside a kernel's own invocation."""
    from torch._subclasses.fake_tensor import FakeTensor

    original = vars(FakeTensor)["device"]

    def device(self: FakeTensor) -> torch.device:
        found: torch.device = original.fget(self)
        if found.type == "meta" and not caller_torch_own():
            return standins.PLANNED_DEVICE
        return found

    FakeTensor.device = property(device, original.fset)  # type: ignore[assignment, method-assign, unused-ignore]
    try:
        yield
    finally:
        FakeTensor.device = original  # type: ignore[method-assign, unused-ignore]


def ahead_of_time(name: str, why: Callable[[str], Exception]) -> Callable[..., Any]:
    """AOTInductor's ``name``: raises ``why`` with the line that says a plan cannot build it."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise why(AHEAD_OF_TIME.format(name=name))

    return refused
