"""The ``sim`` device: an in-process model of PyTorch's CUDA caching allocator.

Demos run on it where no accelerator exists, and tests use it instead of mocks, so it behaves
like the real thing where memforensics can tell: placement is :mod:`memforensics.allocator` (the
same model the replay uses, under the same ``PYTORCH_CUDA_ALLOC_CONF`` settings), an allocation
past the budget retries after releasing the cache and then calls the OOM observers with the lock
released before raising, and ``snapshot()`` returns exactly the dict
``torch.cuda.memory._snapshot()`` does. Plain Python: this module never imports torch.

This module holds the process-wide device and the ``DeviceBackend`` adapter over it; the
device and its tensors are :mod:`~memforensics.backends.sim.device`.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Literal

from memforensics.allocator import AllocatorSettings
from memforensics.backends._protocol import HistoryContext, HistoryMode, OomObserver
from memforensics.backends._torch import journal_stats_from
from memforensics.backends.sim.device import SimDevice

_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"
_default_lock = threading.Lock()
_default: SimDevice | None = None


def get_device() -> SimDevice:
    """The process-wide sim device, created on first use.

    Its size comes from ``MEMFORENSICS_SIM_TOTAL_BYTES`` when set (so a demo run in a
    subprocess can be given a small device), else 1 GiB; its allocator settings from
    ``PYTORCH_CUDA_ALLOC_CONF``, read once as torch reads it.
    """
    global _default  # noqa: PLW0603  # the process-wide device is the point of this function
    with _default_lock:
        if _default is None:
            raw = os.environ.get("MEMFORENSICS_SIM_TOTAL_BYTES", "").strip()
            try:
                total = int(raw) if raw else 1 << 30
            except ValueError:
                message = f"MEMFORENSICS_SIM_TOTAL_BYTES must be a positive byte count, got {raw!r}"
                raise ValueError(message) from None
            _default = SimDevice(total, settings=os.environ.get(_CONF_ENV))
        return _default


def reset_device(
    total_bytes: int = 1 << 30, *, settings: AllocatorSettings | str | None = None
) -> SimDevice:
    """Replace the process-wide sim device with a fresh one and return it.

    ``settings``: an :class:`~memforensics.allocator.AllocatorSettings` or a conf string
    (``"expandable_segments:True"``); None reads ``PYTORCH_CUDA_ALLOC_CONF`` as torch does, so
    a demo run under that variable gets those settings.
    """
    global _default  # noqa: PLW0603  # see get_device
    chosen = os.environ.get(_CONF_ENV) if settings is None else settings
    with _default_lock:
        _default = SimDevice(total_bytes, settings=chosen)
        return _default


class SimBackend:
    """``DeviceBackend`` over the process-wide sim device, looked up on every call.

    Looking it up each time means ``reset_device()`` takes effect for an installed facade too.
    """

    name = "sim"

    def available(self) -> bool:
        """Always True: the sim device needs nothing."""
        return True

    def device_index(self) -> int | None:
        """Index of the current sim device."""
        return get_device().index

    def attach_oom_observer(self, observer: OomObserver) -> object:
        """Attach to the current sim device; the device itself is the hook key."""
        device = get_device()
        device.attach_out_of_memory_observer(observer)
        return device

    def oom_hook_key(self) -> object:
        """The current sim device: one hook per device, as torch has one per process."""
        return get_device()

    def record_history(
        self,
        mode: HistoryMode,
        *,
        max_entries: int,
        stacks: Literal["python", "all"],
        clear: bool,
        context: HistoryContext = "alloc",
    ) -> None:
        """``SimDevice.record_memory_history`` on the current device."""
        get_device().record_memory_history(
            mode, max_entries=max_entries, stacks=stacks, clear_history=clear, context=context
        )

    def snapshot(self) -> dict[str, Any]:
        """The current device's snapshot in torch's format."""
        return get_device().snapshot()

    def mem_get_info(self) -> tuple[int, int] | None:
        """``(free, total)`` of the current device."""
        return get_device().mem_get_info()

    def memory_fraction(self) -> float | None:
        """The current device's per-process fraction, as torch's getter reports it."""
        return get_device().get_per_process_memory_fraction()

    def memory_stats(self) -> dict[str, Any]:
        """The current device's allocator statistics."""
        return dict(get_device().memory_stats())

    def allocator_pressure(self) -> tuple[int, int] | None:
        """The current device's retries and reserved bytes, read directly (no stats dict)."""
        return get_device().allocator_pressure()

    def set_step_metadata(self, text: str) -> bool:
        """Tag later allocations with ``text``; the sim device always supports it.

        Called twice per step, so it skips ``get_device()``'s lock once the device exists.
        """
        device = _default
        (device if device is not None else get_device()).set_memory_metadata(text)
        return True

    def framework_version(self) -> str | None:
        """None: no framework is involved."""
        return None

    def journal_stats(self) -> dict[str, int | None]:
        """The current device's statistics and ``(free, total)``, mapped like torch's."""
        device = get_device()
        return journal_stats_from(device.memory_stats(), device.mem_get_info())
