"""The random workload the replay tests drive the sim with: one driver, so every test that
checks the replay against the sim exercises the same operations the same way."""

from __future__ import annotations

import contextlib

from memforensics.backends.sim import SimDevice, SimOutOfMemoryError, SimTensor

Op = tuple[str, int, int, int]
"""``(operation, size, stream, pick)``: ``pick`` chooses among the live tensors."""


def drive(device: SimDevice, ops: list[Op], live: list[SimTensor] | None = None) -> None:
    """Run ``ops`` on ``device``, appending what stays allocated to ``live``.

    ``alloc`` asks for ``size`` bytes on ``stream`` (an OOM is caught: the program goes on);
    ``retry`` does the same, and on an OOM frees one live tensor and asks again; ``free`` frees
    one; ``stream`` uses one on the other stream (``record_stream``); ``empty`` empties the cache.
    """
    live = [] if live is None else live
    for op, size, stream, pick in ops:
        if op in ("alloc", "retry"):
            try:
                live.append(device.empty(size, stream=stream))
            except SimOutOfMemoryError:
                if op == "retry" and live:
                    live.pop(pick % len(live)).free()
                    with contextlib.suppress(SimOutOfMemoryError):
                        live.append(device.empty(size, stream=stream))
        elif op == "free" and live:
            live.pop(pick % len(live)).free()
        elif op == "stream" and live:
            live[pick % len(live)].record_stream(1 - stream)
        elif op == "empty":
            device.empty_cache()
