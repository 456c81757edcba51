"""What the CUDA and Ascend NPU adapters share: PyTorch's caching-allocator Python surface.

torch_npu mirrors ``torch.cuda``'s memory API under ``torch_npu.npu``, so one class drives both;
the subclasses only say where the modules live. The framework is imported inside methods, never
at module import, so ``import memforensics`` stays free of torch.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any, Literal

from memforensics._errors import BackendError
from memforensics.backends._protocol import HistoryMode, OomObserver
from memforensics.backends._stats import journal_stats_from


class TorchAllocatorBackend:
    """A backend over ``<device module>.memory`` and ``<C module>._<dev>_attach_...``."""

    name = "torch"

    def __init__(self) -> None:
        self._history_params: frozenset[str] | None = None
        self._metadata_fn: Any = None

    # -- where the framework keeps things (overridden per device) ------------------------------
    def device_module(self) -> ModuleType:
        """``torch.cuda`` or ``torch_npu.npu``."""
        raise NotImplementedError

    def memory_module(self) -> ModuleType:
        """``torch.cuda.memory`` or ``torch_npu.npu.memory``."""
        raise NotImplementedError

    def c_module(self) -> ModuleType:
        """``torch._C`` or ``torch_npu._C``: where the OOM hook lives."""
        raise NotImplementedError

    def framework_version(self) -> str | None:
        """The torch version string."""
        try:
            import torch
        except Exception:  # noqa: BLE001 - any import failure means "unknown"
            return None
        return str(torch.__version__)

    # -- the DeviceBackend surface -------------------------------------------------------------
    @property
    def hook_name(self) -> str:
        """``_cuda_attach_out_of_memory_observer`` / ``_npu_attach_out_of_memory_observer``."""
        return f"_{self.name}_attach_out_of_memory_observer"

    def available(self) -> bool:
        """True when the framework imports and reports a device."""
        try:
            return bool(self.device_module().is_available())
        except Exception:  # noqa: BLE001 - not importable or broken: not available
            return False

    def device_index(self) -> int | None:
        """The current device index (``current_device()``)."""
        try:
            return int(self.device_module().current_device())
        except Exception:  # noqa: BLE001
            return None

    def _hook(self) -> Any:
        try:
            module = self.c_module()
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"{self.name}: framework not importable ({exc})") from None
        hook = getattr(module, self.hook_name, None)
        if hook is None:
            version = self.framework_version() or "unknown"
            raise BackendError(
                f"{self.name}: this framework (version {version}) has no "
                f"{module.__name__}.{self.hook_name}; OOM dumps fall back to step() errors"
            )
        return hook

    def oom_hook_key(self) -> object:
        """The hook function itself: attaching twice to it would double every dump."""
        try:
            return (self.name, self._hook())
        except BackendError:
            return (self.name, None)

    def attach_oom_observer(self, observer: OomObserver) -> object:
        """Attach through the framework's hook; explain every refusal in the error."""
        hook = self._hook()
        if not self.available():
            raise BackendError(f"{self.name}: no device is available, so no OOM can be observed")
        try:
            hook(observer)
        except Exception as exc:  # noqa: BLE001 - the framework's reason goes into ours
            raise BackendError(
                f"{self.name}: attaching the OOM observer failed ({exc}); allocator backends "
                "such as cudaMallocAsync or a pluggable allocator do not support observers"
            ) from None
        return (self.name, hook)

    def _record_params(self) -> frozenset[str]:
        if self._history_params is None:
            fn = self.memory_module()._record_memory_history
            try:
                self._history_params = frozenset(inspect.signature(fn).parameters)
            except (TypeError, ValueError):
                self._history_params = frozenset()
        return self._history_params

    def record_history(
        self, mode: HistoryMode, *, max_entries: int, stacks: Literal["python", "all"], clear: bool
    ) -> None:
        """Call ``_record_memory_history`` with what this framework version understands."""
        fn = self.memory_module()._record_memory_history
        params = self._record_params()
        if "trace_alloc_max_entries" in params:  # torch < 2.1 spelled it differently
            fn(
                mode is not None,
                trace_alloc_max_entries=max_entries,
                trace_alloc_record_context=mode == "all",
                record_context_cpp=stacks == "all",
            )
            return
        if mode is None:
            fn(enabled=None)
            return
        kwargs: dict[str, Any] = {"enabled": mode, "stacks": stacks, "max_entries": max_entries}
        if clear:
            if "clear_history" in params:
                kwargs["clear_history"] = True
            else:  # older versions: stopping recording is what clears the ring buffer
                fn(enabled=None)
        fn(**kwargs)

    def snapshot(self) -> dict[str, Any]:
        """``<memory module>._snapshot()``: PyTorch's own dict, untouched."""
        snap: dict[str, Any] = self.memory_module()._snapshot()
        return snap

    def mem_get_info(self) -> tuple[int, int] | None:
        """``mem_get_info()`` for the current device (no device synchronize)."""
        free, total = self.device_module().mem_get_info()
        return int(free), int(total)

    def memory_stats(self) -> dict[str, Any]:
        """``memory_stats()`` as a plain dict."""
        return dict(self.device_module().memory_stats())

    def set_step_metadata(self, text: str) -> bool:
        """``_set_memory_metadata(text)`` where this framework version has it.

        Called on every step's enter and exit, so the function is looked up once and kept.
        """
        fn = self._metadata_fn
        if fn is None:
            fn = getattr(self.memory_module(), "_set_memory_metadata", None)
            if fn is None:
                return False
            self._metadata_fn = fn
        fn(text)
        return True

    def journal_stats(self) -> dict[str, int | None]:
        """``memory_stats()`` and ``mem_get_info()`` mapped to the journal's figures.

        Each call failing alone leaves its figures null rather than losing the line.
        """
        module = self.device_module()
        try:
            stats: dict[str, Any] | None = module.memory_stats()
        except Exception:  # noqa: BLE001 - unknown figures are null, never an error
            stats = None
        try:
            free, total = module.mem_get_info()
            info: tuple[int, int] | None = (int(free), int(total))
        except Exception:  # noqa: BLE001
            info = None
        return journal_stats_from(stats, info)
