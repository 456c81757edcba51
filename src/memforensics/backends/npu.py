"""The Ascend NPU adapter: ``torch_npu.npu`` and torch_npu's ``_npu_attach_out_of_memory_observer``.

torch_npu's own ``_dump_snapshot`` is never called (released versions start a profiler or write
CSVs from it); the snapshot dict is taken with ``_snapshot()`` and pickled by our writer.

``OOM_SNAPSHOT_ENABLE`` is torch_npu's own OOM dump switch, read as an integer the way its
``OptionsManager::IsOomSnapshotEnable`` does (``strtol``): ``0``, empty or non-numeric is off;
``2`` records state only, any other number full history. When it is on, torch_npu has attached
its own observer and records history itself (``_record_memory_history`` called from C++ with
unbounded entries), so this adapter attaches no second observer and never touches history:
clearing it at a window or stopping it at ``close()`` would take torch_npu's evidence away.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from types import ModuleType

from memforensics._errors import BackendError
from memforensics.backends._protocol import OomObserver
from memforensics.backends._torch import TorchAllocatorBackend

OOM_SNAPSHOT_ENABLE = "OOM_SNAPSHOT_ENABLE"
_STRTOL = re.compile(r"^[ \t\n\v\f\r]*([+-]?\d+)")


def oom_snapshot_enable(environ: Mapping[str, str] | None = None) -> int:
    """``OOM_SNAPSHOT_ENABLE`` as torch_npu reads it: ``strtol(value, nullptr, 10)``, else 0.

    Leading whitespace and a sign are accepted and parsing stops at the first non-digit
    (``"1abc"`` is 1); unset, empty or non-numeric text is 0 (off).
    """
    env = os.environ if environ is None else environ
    match = _STRTOL.match(env.get(OOM_SNAPSHOT_ENABLE, ""))
    return int(match.group(1)) if match else 0


def torch_npu_dumps_on_oom(environ: Mapping[str, str] | None = None) -> bool:
    """True when torch_npu's own OOM snapshot (observer and history) is switched on."""
    return oom_snapshot_enable(environ) != 0


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

    def records_history_itself(self) -> bool:
        """With ``OOM_SNAPSHOT_ENABLE`` on, torch_npu owns history: leave it alone."""
        return torch_npu_dumps_on_oom()

    def attach_oom_observer(self, observer: OomObserver) -> object:
        """Attach unless torch_npu's own OOM snapshot observer is switched on."""
        value = oom_snapshot_enable()
        if value != 0:
            raise BackendError(
                f"npu: {OOM_SNAPSHOT_ENABLE}={os.environ.get(OOM_SNAPSHOT_ENABLE, '')!r} "
                f"(read as {value}), so torch_npu already dumps on OOM with its own observer "
                "and records history itself; memforensics attaches no second observer and "
                "leaves history alone"
            )
        return super().attach_oom_observer(observer)
