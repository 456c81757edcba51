"""What the CUDA and Ascend NPU adapters share: PyTorch's caching-allocator Python surface.

torch_npu mirrors ``torch.cuda``'s memory API under ``torch_npu.npu``, so one class drives both;
the subclasses only say where the modules live. The framework is imported inside methods, never
at module import, so ``import memforensics`` stays free of torch.

The names below are every framework function an adapter calls: CI checks them against the real
torch (``inspect.signature(...).bind``) and against the newest torch_npu wheel's sources.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Literal

from memforensics._errors import BackendError
from memforensics.backends._protocol import HistoryContext, HistoryMode, OomObserver

# The journal's allocator figures, from ``memory_stats()`` and ``mem_get_info()`` results.
#
# One mapping for every backend that speaks PyTorch's statistic names (cuda, npu and the sim), so
# a journal line means the same on each. Only the ``all`` pool and the counters are read; the
# peaks are the allocator's own since start (``reset_peak_memory_stats`` belongs to the user).

JOURNAL_STATS: tuple[str, ...] = (
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "alloc_retries",
    "ooms",
    "device_free_bytes",
    "device_total_bytes",
)
"""The keys ``DeviceBackend.journal_stats()`` returns, each an int or None."""

_FROM_STATS = (
    ("allocated_bytes", "allocated_bytes.all.current"),
    ("reserved_bytes", "reserved_bytes.all.current"),
    ("active_bytes", "active_bytes.all.current"),
    ("peak_allocated_bytes", "allocated_bytes.all.peak"),
    ("peak_reserved_bytes", "reserved_bytes.all.peak"),
    ("alloc_retries", "num_alloc_retries"),
    ("ooms", "num_ooms"),
)

EMPTY_STATS: dict[str, int | None] = dict.fromkeys(JOURNAL_STATS)


def journal_stats_from(
    stats: Mapping[str, Any] | None, info: tuple[int, int] | None
) -> dict[str, int | None]:
    """Pick the journal's figures out of ``memory_stats()`` and ``(free, total)``.

    Values are passed through as the framework gave them (ints); the journal writes them with
    ``int()``, so this runs once per line with no per-value check.
    """
    get = (stats or EMPTY_STATS).get
    out: dict[str, int | None] = {key: get(name) for key, name in _FROM_STATS}
    if info is None:
        out["device_free_bytes"] = out["device_total_bytes"] = None
    else:
        out["device_free_bytes"], out["device_total_bytes"] = info
    return out


def pressure_from_nested(stats: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(num_alloc_retries, reserved_bytes.all.current)`` of ``memory_stats_as_nested_dict()``;
    None when the allocator reports neither (an uninitialized device gives an empty dict)."""
    try:
        return int(stats["num_alloc_retries"]), int(stats["reserved_bytes"]["all"]["current"])
    except (KeyError, TypeError, ValueError):
        return None


DEVICE_CALLS = (
    "is_available",
    "current_device",
    "mem_get_info",
    "memory_stats",
    "memory_stats_as_nested_dict",
)
"""Called on ``torch.cuda`` / ``torch_npu.npu``."""
OPTIONAL_DEVICE_CALLS = ("get_per_process_memory_fraction",)
"""Called on the device module where the framework version has them."""
MEMORY_CALLS = ("_record_memory_history", "_snapshot")
"""Called on ``torch.cuda.memory`` / ``torch_npu.npu.memory``."""
OPTIONAL_MEMORY_CALLS = ("_set_memory_metadata",)
"""Called on the memory module where the framework version has them."""
HISTORY_KEYWORDS = ("enabled", "context", "stacks", "max_entries")
"""Keywords every ``_record_memory_history`` call passes (``clear_history`` only where known)."""
CLEAR_KEYWORD = "clear_history"


def history_parameters(fn: Callable[..., Any]) -> tuple[str, ...] | None:
    """The parameters ``_record_memory_history`` really accepts; None when they cannot be known.

    torch's function has a plain signature. torch_npu's is ``(enabled="all", *args, **kwargs)``
    and forwards everything to ``_record_memory_history_impl``: the parameters are then that
    implementation's, found among the globals the wrapper's code refers to.
    """
    params = _plain_parameters(fn)
    if params is None:
        return None
    if not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return tuple(p.name for p in params)
    code = getattr(fn, "__code__", None)
    module_globals = getattr(fn, "__globals__", None)
    if code is None or not isinstance(module_globals, dict):
        return None
    for name in code.co_names:
        target = module_globals.get(name)
        if name.startswith(fn.__name__) and name != fn.__name__ and callable(target):
            inner = _plain_parameters(target)
            if inner is not None and not any(
                p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in inner
            ):
                return tuple(p.name for p in inner)
    return None


def _plain_parameters(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


class TorchAllocatorBackend:
    """A backend over ``<device module>.memory`` and ``<C module>._<dev>_attach_...``."""

    name = "torch"

    def __init__(self) -> None:
        self._history_params: tuple[str, ...] | None = None
        self._history_known = False
        self._metadata_fn: Any = None
        self._nested_fn: Any = None

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

    def records_history_itself(self) -> bool:
        """True when the framework records allocator history on its own (then leave it be)."""
        return False

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
        """The current device index (``current_device()``), read now: ranks usually call
        ``set_device(local_rank)`` after ``install()``."""
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

    def history_parameters(self) -> tuple[str, ...] | None:
        """The parameters ``_record_memory_history`` accepts here (None: unknown); cached."""
        if not self._history_known:
            self._history_params = history_parameters(self.memory_module()._record_memory_history)
            self._history_known = True
        return self._history_params

    def record_history(
        self,
        mode: HistoryMode,
        *,
        max_entries: int,
        stacks: Literal["python", "all"],
        clear: bool,
        context: HistoryContext = "alloc",
    ) -> None:
        """Call ``_record_memory_history`` with what this framework version understands."""
        if self.records_history_itself():
            return
        fn = self.memory_module()._record_memory_history
        params = self.history_parameters() or ()
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
        kwargs: dict[str, Any] = {
            "enabled": mode,
            "context": context,
            "stacks": stacks,
            "max_entries": max_entries,
        }
        if clear:
            if CLEAR_KEYWORD in params:
                kwargs[CLEAR_KEYWORD] = True
            else:  # torch_npu, older torch: stopping recording is what clears the ring buffer
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

    def memory_fraction(self) -> float | None:
        """``get_per_process_memory_fraction()`` where this framework version has it."""
        fn = getattr(self.device_module(), "get_per_process_memory_fraction", None)
        if fn is None:
            return None
        return float(fn())

    def memory_stats(self) -> dict[str, Any]:
        """``memory_stats()`` as a plain dict."""
        return dict(self.device_module().memory_stats())

    def allocator_pressure(self) -> tuple[int, int] | None:
        """Retries and reserved bytes from ``memory_stats_as_nested_dict()``.

        ``memory_stats()`` builds that same nested dict and then flattens and sorts it; the
        near-OOM check needs two values, so it reads the nested one, looked up once and kept.
        """
        fn = self._nested_fn
        if fn is None:
            fn = self._nested_fn = self.device_module().memory_stats_as_nested_dict
        return pressure_from_nested(fn())

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
