"""What ``memforensics doctor`` needs from the frameworks: imports, a reason, a probe.

The doctor inspects torch and torch_npu themselves (versions, builds, a real allocation), which
nothing else outside the backends does; those few lazy imports are gathered in this module so
the checks themselves never import a framework.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from memforensics.backends._protocol import DeviceBackend
from memforensics.backends._torch import TorchAllocatorBackend


def import_framework(module: str) -> tuple[Any, str]:
    """``(module, "")`` when it imports, ``(None, why)`` when it is absent or broken."""
    try:
        if importlib.util.find_spec(module) is None:
            return None, "not installed"
    except (ImportError, ValueError):
        return None, "not installed"
    try:
        return importlib.import_module(module), ""
    except Exception as exc:  # noqa: BLE001 - a broken install is a finding, not a crash
        return None, f"installed, but 'import {module}' failed: {type(exc).__name__}: {exc}"


def unavailable_reason(backend: DeviceBackend) -> str:
    """Why a cuda/npu backend sees no device, in the user's terms."""
    if backend.name == "cuda":
        torch, why = import_framework("torch")
        if torch is None:
            return f"cuda: torch {why}"
        if getattr(torch.version, "cuda", None) is None:
            return f"cuda: torch {torch.__version__} is a CPU-only build: no CUDA device"
        return "cuda: torch.cuda.is_available() is False (check the driver, CUDA_VISIBLE_DEVICES)"
    if backend.name == "npu":
        torch_npu, why = import_framework("torch_npu")
        if torch_npu is None:
            return f"npu: torch_npu {why}"
        return "npu: torch_npu.npu.is_available() is False (check CANN, ASCEND_RT_VISIBLE_DEVICES)"
    return f"{backend.name}: not available"


def allocate_probe(backend: DeviceBackend, nbytes: int) -> object:
    """A small allocation on the device, made from this file (so its frame can be found)."""
    if isinstance(backend, TorchAllocatorBackend):
        import torch

        backend.device_module()  # for npu, importing torch_npu registers the device type
        where = f"{backend.name}:{backend.device_index() or 0}"
        return torch.empty(nbytes, dtype=torch.uint8, device=where)
    if backend.name == "sim":
        from memforensics.backends.sim import get_device

        return get_device().empty(nbytes)
    raise NotImplementedError(f"the doctor cannot allocate on a {backend.name!r} backend")


def is_probe_frame(frame: Any) -> bool:
    """True for a frame of this module: the probe allocation was made here."""
    return isinstance(frame, dict) and frame.get("filename") == __file__
