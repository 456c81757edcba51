"""What the CUDA build of torch says about itself, answered in a planned run.

Scripts and libraries branch on the build's facts: ``torch.version.cuda`` picks the device and
is printed with the environment, ``torch.backends.cudnn.is_available()`` and ``.version()``
decide whether a script sets cuDNN's options and what it logs,
``torch.backends.cuda.is_flash_attention_available()`` picks an attention implementation, and
``torch.cuda.nccl.version()`` decides what DDP's bf16 hook and the profiler's metadata say.

A CUDA build of torch (installed on a machine without a GPU, or without a driver) knows these
itself: the libraries it loads report their versions without a device, so a planned run
answers what a run of the same install on a GPU reports. The CPU build answers each as a
machine without CUDA (None, False, an ``AttributeError``); a planned run there answers as
torch 2.13.0's default CUDA wheel (the one ``pip install torch`` takes from PyPI on Linux) does
on a GPU, from that wheel's published requirements:

- ``cuda-toolkit[...]==13.0.3``: built against CUDA 13.0;
- ``nvidia-cudnn-cu13==9.20.0.48``: cuDNN 9.20.0;
- ``nvidia-nccl-cu13==2.29.7``: NCCL 2.29.7.

The wheel loads those exact libraries, so the runtime versions torch reports are the pinned
ones. Its architecture list (``torch.cuda.get_arch_list()``) is not in the metadata, and is
left as the CPU build answers it.

Answering True never sends torch's own Python into the CUDA build's C calls: it tests a
tensor's ``.device`` before any of them (``torch.backends.cudnn.is_acceptable``, RNNs'
``flatten_parameters``), and a stand-in's device is ``meta``; the C++ dispatch reads the
installed build's own answers.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from memforensics.plan.askers import caller_torch_own


@dataclass(frozen=True)
class BuildFacts:
    """What a CUDA build says about itself: ``torch.version.cuda``, whether cuDNN is in it and
    its version (major * 10000 + minor * 100 + patch, as ``torch.backends.cudnn.version()``
    reports it), NCCL's version (None where the build has no NCCL) and whether it has flash
    attention."""

    cuda: str
    cudnn: int | None
    nccl: tuple[int | str, ...] | None
    flash: bool


WHEEL = BuildFacts(cuda="13.0", cudnn=92000, nccl=(2, 29, 7), flash=True)
"""torch 2.13.0's CUDA wheel: ``cuda-toolkit==13.0.3``, ``nvidia-cudnn-cu13==9.20.0.48`` and
``nvidia-nccl-cu13==2.29.7`` (a release with no suffix, so three numbers)."""

CUDNN_MIN_CAPABILITY = (7, 5)
"""cuDNN from 9.11 runs on capability 7.5 and above: ``torch.backends.cudnn.version()`` raises
on an older device, as ``torch.backends.cudnn._init`` checks."""


@functools.cache
def facts() -> BuildFacts:
    """The installed torch's own facts where it is a CUDA build, read from the libraries it
    loads (``torch._C._cudnn.getVersionInt``, ``torch.cuda.nccl.version``), which answer
    without a device; :data:`WHEEL` on the CPU build."""
    import torch

    if torch.version.cuda is None:
        return WHEEL
    c = torch._C
    cudnn = c._cudnn.getVersionInt() if c._has_cudnn else None  # type: ignore[attr-defined, unused-ignore]
    nccl = (
        torch.cuda.nccl.version()  # type: ignore[no-untyped-call, unused-ignore]
        if hasattr(c, "_nccl_version")
        else None
    )
    return BuildFacts(
        cuda=torch.version.cuda,
        cudnn=int(cudnn) if cudnn is not None else None,
        nccl=tuple(nccl) if nccl is not None else None,
        flash=bool(c._is_flash_attention_available()),
    )


def is_built(installed: Callable[[], bool]) -> Callable[[], bool]:
    """``torch.backends.cuda.is_built``: True, a CUDA build, except to a torch module's own
    import, which asks it to choose which of the installed build's bindings to import
    (``torch._inductor.cudagraph_trees`` imports ``_cuda_CUDAAllocator_AllocatorState`` where it
    is True, and stand-ins of its own where not, so ``torch._dynamo.reset()`` after a compile
    with CUDA graphs failed on the CPU build): that gets ``installed``, the build's own answer."""
    import torch

    torch_files = os.path.join(os.path.dirname(torch.__file__), "")  # not torchvision's

    def built() -> bool:
        caller = sys._getframe(1).f_code
        if caller.co_name == "<module>" and caller.co_filename.startswith(torch_files):
            return installed()
        return True

    return built


def cudnn_version(capability: tuple[int, int]) -> int | None:
    """``torch.backends.cudnn.version()`` on a device of ``capability``: the build's cuDNN
    (None without one), or torch's own error where that cuDNN does not run."""
    version = facts().cudnn
    if version is not None and version >= 91100 and capability < CUDNN_MIN_CAPABILITY:
        raise RuntimeError(
            f"cuDNN version {version} is not compatible with devices with SM < 7.5. "
            "Please install a version of PyTorch with a compatible cuDNN version. "
            "https://github.com/pytorch/pytorch/blob/main/RELEASE.md#release-compatibility-matrix"
        )
    return version


def nccl_available(installed: Callable[[], bool]) -> Callable[[], bool]:
    """``torch.distributed.is_nccl_available``: True where the build has NCCL, to the script
    and its libraries, which check it with ``torch.cuda.nccl.version()`` before they take bf16
    or NCCL (torchtune's ``verify_bf16_support`` refused bf16 on the CPU build); torch's own
    code gets ``installed``, the build's own answer, as it reaches for NCCL's bindings by it."""

    def available() -> bool:
        if caller_torch_own():
            return installed()
        return facts().nccl is not None or installed()

    return available


def nccl_version() -> tuple[int | str, ...]:
    """``torch.cuda.nccl.version()``; a build without NCCL fails as torch does there."""
    version = facts().nccl
    if version is None:
        raise AttributeError("module 'torch._C' has no attribute '_nccl_version'")
    return version
