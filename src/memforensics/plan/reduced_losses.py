"""Pointwise losses reduced to a number on stand-ins, allocating what CUDA's kernels allocate on
the way.

torch's ``meta`` kernels make the reduced loss alone, 4 bytes in float32. CUDA's
(``aten/src/ATen/native/Loss.cpp``) compute the elementwise loss first, in blocks of the caching
allocator:

- ``mse_loss`` and ``smooth_l1_loss`` are structured: their ``META`` function builds a binary
  ``TensorIterator`` over the output (``build_borrowing_binary_op``), which allocates it at the
  broadcast shape in the inputs' common dtype, then ``resize_({})`` makes it a number without
  giving back its storage. The ``IMPL`` builds another iterator over an undefined ``loss`` (a
  second block of that size), computes it, ``mean_out`` (``sum_out``) reduces it into the
  output, and frees it as it returns. So the loss holds an input-sized block for as long as it
  lives, and the operator peaks at two. The plan keeps the number on a stand-in of its own
  size, which holds the output's block, so its values are kept as any scalar's (a made-up
  falling loss);
- ``huber_loss`` is not structured: ``at::empty_like(input)``, computed, then
  ``apply_loss_reduction``'s ``mean()`` (``sum()``), a new number, and the elementwise block
  freed as it returns.

Under autocast each runs on its inputs' float32 copies (``AT_FORALL_FP32``), so the blocks are
float32. The reductions take their staging buffers by the storage mode's own rule
(:mod:`~memforensics.plan.reductions`). ``reduction="none"``, ``smooth_l1_loss`` with ``beta``
0 (``l1_loss_out``'s path) and Inductor's graphs (which fuse the loss) run torch's own kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

NONE, MEAN = 0, 1
"""ATen's ``Reduction::None`` and ``Reduction::Mean``."""

_A = torch.ops.aten
MSE, SMOOTH_L1, HUBER = _A.mse_loss.default, _A.smooth_l1_loss.default, _A.huber_loss.default
OPERATORS = (MSE, SMOOTH_L1, HUBER)
"""The losses whose CUDA kernels this module follows."""


class Within(Protocol):
    """The storage mode: each operator run inside it takes its blocks; ``staged`` says whether
    ATen's kernels run (not Inductor's)."""

    staged: bool

    def __enter__(self) -> Any: ...

    def __exit__(self, kind: Any, value: Any, traceback: Any, /) -> Any: ...

    def keeps_block_of(self, made: torch.Tensor, source: torch.Tensor) -> None: ...


def reduced(within: Within, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``original`` (one of :data:`OPERATORS`) as its CUDA kernel allocates, within
    ``within``."""
    names = [argument.name for argument in original._schema.arguments]  # type: ignore[attr-defined]
    bound = dict(zip(names, args, strict=False)) | kwargs
    input, target = bound["self"], bound["target"]
    reduction = bound.get("reduction", MEAN)
    rest = [bound[name] for name in names[3:] if name in bound]
    beta = rest[0] if rest else 1.0
    if reduction == NONE or not within.staged or (original is SMOOTH_L1 and beta == 0):
        return original(*args, **kwargs)
    with torch._C.DisableTorchFunction():
        if original is HUBER:
            with within:
                return _unstructured(input, reduction)
        return _structured(within, original, input, target, reduction, *rest)


def _structured(
    within: Within,
    original: Callable[..., Any],
    input: Any,
    target: Any,
    reduction: int,
    *rest: Any,
) -> torch.Tensor:
    """``mse_loss`` and ``smooth_l1_loss``: the output at the broadcast shape, made a number
    in place; the elementwise loss, reduced into it, freed as the operator returns. The number
    the script holds is a stand-in of its own size (the plan keeps a scalar's values so), which
    holds the output's block."""
    with within:
        output = original(input, target, NONE, *rest)
        loss = original(input, target, NONE, *rest)
    number: torch.Tensor = output.new_empty(())
    within.keeps_block_of(number, output)
    del output
    with within:
        if reduction == MEAN:
            _A.mean.out(loss, None, out=number)
        else:
            _A.sum.IntList_out(loss, None, out=number)
        del loss
    return number


def _unstructured(input: torch.Tensor, reduction: int) -> torch.Tensor:
    """``huber_loss``: the elementwise loss like ``input`` (``empty_like``), then its mean
    (sum), a new block, the elementwise one freed as the operator returns."""
    loss = torch.empty_like(input)
    result: torch.Tensor = loss.mean() if reduction == MEAN else loss.sum()
    del loss
    return result
