"""The Ascend NPU adapter: ``torch_npu.npu`` and torch_npu's ``_npu_attach_out_of_memory_observer``.

torch_npu's own ``_dump_snapshot`` is never called (released versions start a profiler or write
CSVs from it); the snapshot dict is taken with ``_snapshot()`` and pickled by our writer. When
``OOM_SNAPSHOT_ENABLE`` is set, torch_npu already dumps on OOM through its own observer, so a
second one is not attached.
"""

from __future__ import annotations

import os
from types import ModuleType

from memforensics._errors import BackendError
from memforensics.backends._protocol import OomObserver
from memforensics.backends._torch import TorchAllocatorBackend


class NpuBackend(TorchAllocatorBackend):
    """torch_npu's caching allocator (Ascend)."""

    name = "npu"

    def device_module(self) -> ModuleType:
        """``torch_npu.npu``."""
        import torch_npu

        module: ModuleType = torch_npu.npu
        return module

    def memory_module(self) -> ModuleType:
        """``torch_npu.npu.memory``."""
        import torch_npu

        module: ModuleType = torch_npu.npu.memory
        return module

    def c_module(self) -> ModuleType:
        """``torch_npu._C``."""
        import torch_npu

        module: ModuleType = torch_npu._C
        return module

    def framework_version(self) -> str | None:
        """``torch <version>, torch_npu <version>``."""
        torch_version = super().framework_version()
        try:
            import torch_npu
        except Exception:  # noqa: BLE001
            return torch_version
        return f"{torch_version}+torch_npu{getattr(torch_npu, '__version__', '?')}"

    def attach_oom_observer(self, observer: OomObserver) -> object:
        """Attach unless torch_npu's own OOM snapshot observer is switched on."""
        if os.environ.get("OOM_SNAPSHOT_ENABLE"):
            raise BackendError(
                "npu: OOM_SNAPSHOT_ENABLE is set, so torch_npu already dumps on OOM with its "
                "own observer; memforensics does not attach a second one"
            )
        return super().attach_oom_observer(observer)
