"""A script that fails at a CUDA binding the emulation does not answer, said in one line.

The plan answers ``torch.cuda`` and the bindings behind it (:mod:`~memforensics.plan.table`);
a binding it does not answer is torch's own. On the CPU build torch lacks it
(``AttributeError: module 'torch._C' has no attribute '_cuda_getCurrentBlasHandle'``). On a
CUDA build installed where there is no GPU (a login node) it reaches the CUDA runtime, which
fails as it fails without a driver (``torch.AcceleratorError: CUDA error: CUDA driver version
is insufficient for CUDA runtime version``, or torch's "Found no NVIDIA driver"). Neither error
says that the plan is why the script met it, nor that the GPU run would not: the line does.
"""

from __future__ import annotations

_NO_DEVICE = ("Found no NVIDIA driver", "No CUDA GPUs are available", "no CUDA-capable device")
"""What torch's own checks and the CUDA runtime say where they find no device (a plain
``RuntimeError`` rather than an ``AcceleratorError``)."""


def _binding(exc: BaseException) -> str | None:
    """``torch._C._cuda_...``: the CUDA binding the CPU build lacks, where ``exc`` is that."""
    import torch

    if not isinstance(exc, AttributeError) or exc.obj is not torch._C:
        return None
    name = exc.name or ""
    return f"torch._C.{name}" if name.startswith("_cuda") else None


def _reached_runtime(exc: BaseException) -> bool:
    """Whether ``exc`` is the CUDA runtime failing for want of a device."""
    import torch

    accelerator = getattr(torch, "AcceleratorError", ())
    if isinstance(exc, accelerator):
        return True
    return isinstance(exc, RuntimeError) and any(text in str(exc) for text in _NO_DEVICE)


def unemulated_call(exc: BaseException, where: str) -> str | None:
    """The line said under the traceback of a script that failed at ``where`` (its own line)
    because it reached a CUDA binding the plan does not answer; None for any other failure."""
    import torch

    binding = _binding(exc)
    if binding is not None:
        how = f"{binding}, which the CPU build of torch lacks"
    elif _reached_runtime(exc) and torch.version.cuda is not None:
        how = f"the CUDA runtime (torch {torch.__version__} is a CUDA build), which finds no GPU"
    else:
        return None
    return (
        f"memforensics plan: the script's call at {where} reached {how}; the plan does not "
        "emulate that function, so this failure is the plan's, not one a GPU run would meet"
    )
