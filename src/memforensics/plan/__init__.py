"""Plan a run: the script's GPU memory predicted on the CPU, in PyTorch's own snapshot format.

The script runs unchanged with CUDA emulated (stand-in tensors on ``meta``, CUDA's choices
re-made in Python) and every storage's allocation and free driven through
:mod:`memforensics.allocator`. Imports torch lazily: ``import memforensics.plan`` stays light.
"""

from memforensics.plan.device import DeviceSpec, OutOfScope, PlannedDevice
from memforensics.plan.found import live_models
from memforensics.plan.patches import MissingAttribute
from memforensics.plan.runner import PlanResult, device_spec, planned_device, run_planned

__all__ = [
    "DeviceSpec",
    "MissingAttribute",
    "OutOfScope",
    "PlanResult",
    "PlannedDevice",
    "device_spec",
    "live_models",
    "planned_device",
    "run_planned",
]
