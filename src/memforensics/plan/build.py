"""What the CUDA build of torch says about itself, answered on the CPU build for a planned run.

Scripts and libraries branch on the build's facts: ``torch.version.cuda`` picks the device and
is printed with the environment, ``torch.backends.cudnn.is_available()`` and ``.version()``
decide whether a script sets cuDNN's options and what it logs,
``torch.backends.cuda.is_flash_attention_available()`` picks an attention implementation, and
``torch.cuda.nccl.version()`` decides what DDP's bf16 hook and the profiler's metadata say. The
CPU build answers each as a machine without CUDA (None, False, an ``AttributeError``); a
planned run answers as torch 2.13.0's default CUDA wheel (the one ``pip install torch`` takes
from PyPI on Linux) does on a GPU, from that wheel's published requirements:

- ``cuda-toolkit[...]==13.0.3``: built against CUDA 13.0;
- ``nvidia-cudnn-cu13==9.20.0.48``: cuDNN 9.20.0;
- ``nvidia-nccl-cu13==2.29.7``: NCCL 2.29.7.

The wheel loads those exact libraries, so the runtime versions torch reports are the pinned
ones. Its architecture list (``torch.cuda.get_arch_list()``) is not in the metadata, and is
left as the CPU build answers it.

Answering True never sends torch's own Python into the CUDA build's C calls: it tests a
tensor's ``.device`` before any of them (``torch.backends.cudnn.is_acceptable``, RNNs'
``flatten_parameters``), and a stand-in's device is ``meta``; the C++ dispatch reads the CPU
build's own answers.
"""

from __future__ import annotations

CUDA_VERSION = "13.0"
"""``torch.version.cuda``: the CUDA the wheel is built with (``cuda-toolkit==13.0.3``)."""

CUDNN_VERSION = 92000
"""cuDNN 9.20.0, as ``torch.backends.cudnn.version()`` and ``versionRuntimeCuDNN()`` report it
(major * 10000 + minor * 100 + patch): the ``nvidia-cudnn-cu13==9.20.0.48`` the wheel requires."""

NCCL_VERSION = (2, 29, 7)
"""``torch.cuda.nccl.version()``: the ``nvidia-nccl-cu13==2.29.7`` the wheel requires (a release
with no suffix, so three numbers)."""

CUDNN_MIN_CAPABILITY = (7, 5)
"""cuDNN from 9.11 runs on capability 7.5 and above: ``torch.backends.cudnn.version()`` raises
on an older device, as ``torch.backends.cudnn._init`` checks."""


def cudnn_version(capability: tuple[int, int]) -> int:
    """``torch.backends.cudnn.version()`` on a device of ``capability``: :data:`CUDNN_VERSION`,
    or torch's own error where that cuDNN does not run."""
    if CUDNN_VERSION >= 91100 and capability < CUDNN_MIN_CAPABILITY:
        raise RuntimeError(
            f"cuDNN version {CUDNN_VERSION} is not compatible with devices with SM < 7.5. "
            "Please install a version of PyTorch with a compatible cuDNN version. "
            "https://github.com/pytorch/pytorch/blob/main/RELEASE.md#release-compatibility-matrix"
        )
    return CUDNN_VERSION


def nccl_version() -> tuple[int, int, int]:
    """``torch.cuda.nccl.version()``."""
    return NCCL_VERSION
