"""DeepSpeed's fused optimizers on the planned device.

DeepSpeed's ``FusedAdam`` (its default ``Adam``/``AdamW`` on CUDA) and ``FusedLion`` run one
CUDA kernel over lists of tensors (``multi_tensor_adam``, ``multi_tensor_lion``), from an
extension DeepSpeed compiles with nvcc the first time the optimizer is made
(``FusedAdamBuilder().load()`` in ``deepspeed/ops/adam/fused_adam.py``). The machine a plan runs
on has no CUDA toolkit, so the build fails ("CUDA_HOME environment variable is not set") where a
GPU machine builds it. Those kernels update parameters and states in place and allocate nothing
through PyTorch's allocator (the states are the ``zeros_like`` DeepSpeed's Python makes before
the first step), so the plan loads a stand-in whose multi-tensor function does nothing: the
device holds what it holds on a GPU, and the values are not updated, said once.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from memforensics.plan.patches import LibraryReplacement
from memforensics.plan.values import Notes

BUILDER = "deepspeed.ops.op_builder.builder"
"""Where DeepSpeed's ``OpBuilder`` is, whose ``load`` every op's builder inherits."""

KERNELS = {"fused_adam": "multi_tensor_adam", "fused_lion": "multi_tensor_lion"}
"""The builders of multi-tensor optimizer kernels, by their ``NAME``: the one function the
optimizer takes from what their ``load`` gives."""

NOT_BUILT = (
    "DeepSpeed's fused optimizer kernels ({name}) are a CUDA extension built at first use, which "
    "the planning machine cannot build: they update in place and allocate nothing on the device, "
    "so its step keeps the device's memory as on a GPU and updates no values"
)


def loaded_in_place(notes: Notes) -> Callable[[Callable[..., Any]], Any]:
    """``OpBuilder.load``: for a multi-tensor optimizer's builder (:data:`KERNELS`), a module
    whose kernel function does nothing, said once; any other op's own ``load``."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        def load(builder: Any, *args: Any, **kwargs: Any) -> Any:
            function = KERNELS.get(getattr(builder, "NAME", ""))
            if function is None:
                return original(builder, *args, **kwargs)
            notes.once("deepspeed fused", NOT_BUILT.format(name=function))
            return SimpleNamespace(**{function: _in_place})

        return load

    return stand_in


def _in_place(*args: Any, **kwargs: Any) -> None:
    """A multi-tensor kernel run on stand-ins: in place, no allocation, no values."""


def rows(notes: Notes) -> list[LibraryReplacement]:
    """DeepSpeed's op loading, answered where the script imports it."""
    why = "fused optimizer kernels are a CUDA extension DeepSpeed builds with nvcc at first use"
    return [LibraryReplacement(BUILDER, "OpBuilder.load", loaded_in_place(notes), why)]
