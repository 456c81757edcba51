"""Scratch memory CUDA's libraries take through PyTorch's caching allocator, which the CPU build
never asks for: cuBLAS's workspace, by the rules of the installed torch.

Each rule reads beside the PyTorch source it mirrors; docs/plan.md quotes the lines.
"""

from __future__ import annotations

import os
import re

MiB = 1 << 20

WORKSPACE_ENV = "CUBLAS_WORKSPACE_CONFIG"
_SMALL_WORKSPACE = 4096 * 1024 * 2 + 16 * 1024 * 8
"""``:4096:2:16:8``: 8,519,680 B, cuBLAS's default where torch does not choose 32 MiB."""
_LARGE_WORKSPACE = 4096 * 8 * 1024
"""``:4096:8``: 32 MiB."""
_PAIRS = re.compile(r":([0-9]+):([0-9]+)")
_BLACKWELL_FROM = (2, 12)
"""The first torch whose default gives Blackwell (10.x, 12.x) the 32 MiB Hopper has; torch
2.11 on a B200 and an RTX 50-series took 8,519,680 B."""


def torch_release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a torch version string (``"2.13.0+cpu"`` → ``(2, 13)``)."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"not a torch version: {version!r}")
    return int(found.group(1)), int(found.group(2))


def default_workspace_bytes(capability: tuple[int, int], release: tuple[int, int]) -> int:
    """cuBLAS's workspace with no ``CUBLAS_WORKSPACE_CONFIG``: ``parseChosenWorkspaceSize``'s
    default, 32 MiB for Hopper (and, from torch 2.12, Blackwell: majors 10 and 12), else
    ``:4096:2:16:8``."""
    major = capability[0]
    large = (9, 10, 12) if release >= _BLACKWELL_FROM else (9,)
    return _LARGE_WORKSPACE if major in large else _SMALL_WORKSPACE


def cublas_workspace_bytes(
    capability: tuple[int, int], config: str | None, release: tuple[int, int]
) -> int:
    """cuBLAS's workspace for one handle and stream (``getChosenWorkspaceSize``):
    ``CUBLAS_WORKSPACE_CONFIG``'s ``:KiB:count`` pairs summed, else (unset, or nothing in it
    parses) the default for the capability under torch ``release``."""
    pairs = _PAIRS.findall(config) if config else []
    if not pairs:
        return default_workspace_bytes(capability, release)
    return sum(int(kib) * 1024 * int(count) for kib, count in pairs)


def workspace_bytes_for(capability: tuple[int, int]) -> int:
    """The workspace the planned device's cuBLAS takes per thread: the installed torch's rule,
    the environment included. cuBLASLt shares it (``TORCH_CUBLASLT_UNIFIED_WORKSPACE``, on by
    default), so it takes nothing more."""
    import torch

    release = torch_release(torch.__version__)
    return cublas_workspace_bytes(capability, os.environ.get(WORKSPACE_ENV), release)
