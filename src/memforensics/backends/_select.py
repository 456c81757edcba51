"""Turn a ``device`` config value into a backend instance (``auto``: cuda, then npu, else none)."""

from __future__ import annotations

import importlib.util

from memforensics.backends._protocol import DeviceBackend


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def create_backend(device: str) -> DeviceBackend:
    """The backend for ``device``; ``auto`` never imports a framework that is not installed."""
    from memforensics.backends.cuda import CudaBackend
    from memforensics.backends.none import NoneBackend
    from memforensics.backends.npu import NpuBackend

    if device == "cuda":
        return CudaBackend()
    if device == "npu":
        return NpuBackend()
    if device == "sim":
        from memforensics.backends.sim import SimBackend

        return SimBackend()
    if device == "none":
        return NoneBackend()
    if device != "auto":
        raise ValueError(f"unknown device {device!r}")
    if _installed("torch"):
        cuda = CudaBackend()
        if cuda.available():
            return cuda
    if _installed("torch_npu"):
        npu = NpuBackend()
        if npu.available():
            return npu
    return NoneBackend()
