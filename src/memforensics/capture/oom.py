"""The out-of-memory path: one process-wide observer, a guarded capture, and error sniffing.

Frameworks cannot detach an OOM observer, so memforensics attaches exactly one per hook per
process (``OomRegistry``) and has it consult whichever facade is live. The observer runs inside
the allocator's failing ``malloc`` with the user's OOM error about to be raised: anything that
escaped it would replace that error, so it catches everything, never synchronizes the device,
guards against re-entry, does nothing in a forked child and stops after ``max_oom_snapshots``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from memforensics._errors import BackendError
from memforensics._units import parse_size
from memforensics.backends._protocol import DeviceBackend

OomHandler = Callable[[int, int, int, int], None]

_SIZE_RE = re.compile(r"Tried to allocate (?P<num>[\d.]+) ?(?P<unit>[KMGT]i?B|bytes|B)", re.I)
_DEVICE_RE = re.compile(r"\b(?:GPU|NPU|device)\s*(?:id:\s*)?(?P<index>\d+)\b", re.I)
_OOM_TEXTS = (
    "out of memory",  # torch's CUDA/NPU text, NCCL/HCCL ("Failed to CUDA calloc ... out of memory")
    "el0004",  # CANN's error code for a failed device allocation
    "failed to allocate memory",  # CANN's text beside EL0004
)


class OomRegistry:
    """Which hooks this process attached to, and the handler the single observer calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attached: set[object] = set()
        self._handler: OomHandler | None = None

    def ensure_attached(self, backend: DeviceBackend) -> bool:
        """Attach the dispatcher to ``backend``'s hook unless already done; True if attached now.

        Raises ``BackendError`` when the hook is missing or refuses.
        """
        with self._lock:
            key = backend.oom_hook_key()
            if key in self._attached:
                return False
            backend.attach_oom_observer(self.dispatch)
            self._attached.add(key)
            return True

    def set_handler(self, handler: OomHandler | None) -> None:
        """Route future OOMs to ``handler`` (None: observe nothing)."""
        self._handler = handler

    def clear_handler(self, handler: OomHandler) -> None:
        """Stop routing to ``handler`` unless another facade has taken over since.

        A facade closing late (another thread's ``close()``) must not silence the live one.
        """
        with self._lock:
            if self._handler == handler:
                self._handler = None

    def dispatch(
        self, device: int, allocation_bytes: int, device_total_bytes: int, device_free_bytes: int
    ) -> None:
        """The observer the framework calls; it never raises."""
        handler = self._handler
        if handler is None:
            return
        # Anything escaping here would replace the user's OOM error, so nothing may.
        with contextlib.suppress(BaseException):
            handler(device, allocation_bytes, device_total_bytes, device_free_bytes)

    def forget(self) -> None:
        """Route OOMs nowhere until the next facade (tests, between installs). The attachments
        stay known: a framework keeps its observers forever, so attaching again to a hook
        already attached would double every later dump (a fake framework made anew has a new
        hook, and so a new key)."""
        with self._lock:
            self._handler = None


REGISTRY = OomRegistry()


class OomGuard:
    """Admission control for OOM captures: fork, re-entry and the per-process cap."""

    def __init__(self, max_snapshots: int) -> None:
        self._pid = os.getpid()
        self._max = max_snapshots
        self._local = threading.local()
        self._lock = threading.Lock()
        self.fired = 0
        """Times the OOM path was entered (observer or step fallback), capped or not."""
        self.captured = 0
        """Snapshots this process has taken for OOMs."""

    def admit(self) -> bool:
        """Count the event; True when this call may capture (and must call ``release``)."""
        if os.getpid() != self._pid:
            return False  # a forked child (DataLoader worker) shares no device with us
        if getattr(self._local, "busy", False):
            return False  # re-entered from inside our own capture
        self.fired += 1
        if not self._lock.acquire(timeout=120):
            return False  # another thread's capture is stuck: drop rather than hang training
        if self.captured >= self._max:
            self._lock.release()
            return False
        self.captured += 1
        self._local.busy = True
        return True

    def release(self) -> None:
        """End the capture ``admit`` allowed."""
        self._local.busy = False
        self._lock.release()


def is_oom_error(exc: BaseException) -> bool:
    """True for torch.OutOfMemoryError and for out-of-memory RuntimeErrors (NCCL, HCCL, CANN).

    Judged by class name and message so that the core never imports torch. CANN reports a
    failed device allocation as ``EL0004: Failed to allocate memory.`` without the words
    "out of memory", and those errors never reach the allocator's observer.
    """
    for cls in type(exc).__mro__:
        if cls.__name__ == "OutOfMemoryError":
            return True
    if not isinstance(exc, RuntimeError):
        return False
    text = str(exc).lower()
    return any(marker in text for marker in _OOM_TEXTS)


def device_from_message(message: str) -> int | None:
    """The device an OOM message names (``GPU 3 has a total capacity``, ``(NPU 3; ...``)."""
    match = _DEVICE_RE.search(message)
    return int(match["index"]) if match else None


def allocation_bytes_from_message(message: str) -> int | None:
    """Parse ``Tried to allocate 2.00 GiB`` from an OOM message (None if absent).

    PyTorch prints the allocator's allocation size here (what it asked the driver for after
    rounding), the same figure the OOM observer receives, not the user's request.
    """
    match = _SIZE_RE.search(message)
    if not match:
        return None
    try:
        return parse_size(f"{match['num']} {match['unit']}")
    except ValueError:  # "Tried to allocate 1.2.3 GiB": not a size after all
        return None


def python_stack(skip_prefix: str | None = None) -> list[dict[str, Any]]:
    """The calling thread's Python stack, outermost first, without memforensics' own frames."""
    frames: list[dict[str, Any]] = []
    frame: FrameType | None = sys._getframe(1)
    own = os.path.dirname(os.path.dirname(__file__)) + os.sep  # the whole package
    while frame is not None:
        code = frame.f_code
        if not code.co_filename.startswith(skip_prefix or own):
            frames.append(
                {"filename": code.co_filename, "line": frame.f_lineno, "name": code.co_name}
            )
        frame = frame.f_back
    frames.reverse()
    return frames


def attach_error_reason(exc: BaseException) -> str:
    """A one-line reason for a failed attach, for the structured warning."""
    if isinstance(exc, BackendError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
