"""Operators CUDA runs as one kernel of their own where the CPU build's ``meta`` runs a composite.

``native_functions.yaml`` gives some operators a ``CUDA`` kernel beside a
``CompositeImplicitAutograd`` one, which every device without a kernel of its own runs, ``meta``
among them. The composite makes temporaries CUDA's kernel never makes, and the plan would count
them:

- ``silu_backward`` (``CPU, CUDA`` beside ``math_silu_backward``) has a structured ``meta``
  kernel, so it reaches the plan whole; only its ``CompositeImplicitAutograd`` entry must not
  send it back into its parts (:data:`OWN_KERNELS`).
- ``mish_backward`` (``CPU, CUDA`` beside ``math_mish_backward``, ``aten/src/ATen/native/
  Activation.cpp``) has no ``meta`` kernel, so the composite ran for it on stand-ins:
  ``tanh(softplus(x))``, ``sigmoid(x)``, and four more input-sized temporaries in every Mish
  backward. CUDA's kernel makes one ``grad_input`` (:func:`mish_backward`).
- ``_fused_rms_norm`` has a ``CUDA`` kernel only (:mod:`~memforensics.plan.fused_norms`).
- ``linalg_lstsq`` is ``CompositeExplicitAutograd`` over ``linalg_lstsq.out``, which has
  ``CPU`` and ``CUDA`` kernels only, so a stand-in stopped there (:mod:`~memforensics.plan.lstsq`).

:func:`on_meta` registers a ``Meta`` kernel for each operator without one for the run: the
dispatcher then sends a stand-in to it and not to the composite, as it sends a CUDA tensor to
CUDA's kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from memforensics.plan import fused_norms, lstsq


def mish_backward(grad_output: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """``mish_backward``'s CUDA kernel's one output: ``grad_input``, made ``at::empty({0},
    input.options())`` and sized by ``TensorIterator::binary_op`` over the gradient and the
    input, so of the input's dtype, broadcast and laid out as a binary operator's output
    (``mul``'s, whose ``meta`` kernel builds the same iterator)."""
    laid_out = torch.ops.aten.mul.Tensor(grad_output, input)
    return torch.empty_like(laid_out, dtype=input.dtype)


_ON_META: dict[str, Callable[..., Any]] = {
    "mish_backward": mish_backward,
    "linalg_lstsq": lstsq.linalg_lstsq,
    **fused_norms.ON_META,
}
"""The operators given CUDA's kernel on ``meta`` for the run, by name."""

OWN_KERNELS = frozenset(
    (
        torch.ops.aten.silu_backward.default,
        *(getattr(torch.ops.aten, name).default for name in _ON_META),
    )
)
"""Operators with a composite that CUDA never runs. They reach the plan's storage mode whole
(a ``Meta`` kernel stops the composite above it), so running them there is CUDA's count, under
``inference_mode`` too, where a composite arrives whole and would otherwise be run in parts."""


@contextmanager
def on_meta() -> Iterator[None]:
    """The operators of :data:`_ON_META` with CUDA's kernel on ``meta`` inside; the CPU
    build's composites again after."""
    library = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call, unused-ignore]  # untyped in torch
    try:
        # ``Library.impl`` refuses a ``Meta`` kernel beside a composite, which is the point
        # here: the dispatcher's own registration (``Library.m``) takes it.
        dispatcher: Any = library.m
        for name, kernel in _ON_META.items():
            dispatcher.impl(name, "Meta", kernel, False)
        yield
    finally:
        library._destroy()  # type: ignore[no-untyped-call, unused-ignore]  # untyped in torch
