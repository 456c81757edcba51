"""The ``sim`` device: an in-process model of PyTorch's CUDA caching allocator."""

from memforensics.backends.sim.backend import SimBackend, get_device, reset_device
from memforensics.backends.sim.device import SimDevice, SimOutOfMemoryError, SimTensor
from memforensics.backends.sim.model import SimAdam, SimArray, SimModule

__all__ = [
    "SimAdam",
    "SimArray",
    "SimBackend",
    "SimDevice",
    "SimModule",
    "SimOutOfMemoryError",
    "SimTensor",
    "get_device",
    "reset_device",
]
