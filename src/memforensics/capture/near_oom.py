"""``NearOomCheck``: a snapshot of the moment memory got tight, before anything failed.

Two signs precede most OOMs. The allocator's ``num_alloc_retries`` rises when a device malloc
failed, the cache was released and the allocation retried (the thrash that comes before the
failure); and reserved plus outside-PyTorch bytes creep up to the limit. At the end of every
``near_oom_every``-th step the facade asks this check whether either happened since the last
one; the first ``max_near_oom_snapshots`` times it did, a ``near-oom`` dump records why.

A check costs one ``allocator_pressure()`` call (``memory_stats_as_nested_dict()`` on CUDA and
NPU). The memory outside PyTorch needs the driver's free bytes (``mem_get_info()``), read on
every ``OUTSIDE_EVERY``-th check and whenever reserved plus the outside bytes last read reach
the fraction: outside memory (contexts, NCCL buffers) moves slowly, and the fraction is judged
on fresh figures before a dump is taken. Neither call synchronizes the device. Nothing here
raises into training.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from memforensics._units import outside_pytorch_bytes
from memforensics.backends._protocol import DeviceBackend
from memforensics.capture.dumps import Dumper
from memforensics.capture.log import safe_log, warn_once

OUTSIDE_EVERY = 10
"""Checks between two reads of the driver's free bytes while memory is far from the fraction."""
NEVER = 1 << 62
"""``next_step`` of a check that will never run (near-OOM off, no dumps allowed)."""


@dataclass(frozen=True, slots=True)
class Tightness:
    """What a check found: why memory counts as tight, and the figures at that moment."""

    trigger: str
    """``"alloc_retries"`` or ``"fraction"``."""
    reason: str
    retries_before: int
    retries: int
    reserved_bytes: int
    device_total_bytes: int | None
    device_free_bytes: int | None

    def record(self, fraction: float, allocator: dict[str, Any] | None) -> dict[str, Any]:
        """The sidecar's ``near_oom`` object."""
        return {
            "reason": self.reason,
            "trigger": self.trigger,
            "alloc_retries_before": self.retries_before,
            "alloc_retries": self.retries,
            "reserved_bytes": self.reserved_bytes,
            "device_total_bytes": self.device_total_bytes,
            "device_free_bytes": self.device_free_bytes,
            "outside_pytorch_bytes": outside_pytorch_bytes(
                self.device_total_bytes, self.device_free_bytes, self.reserved_bytes
            ),
            "fraction": fraction,
            "allocator": allocator,
        }


class NearOomCheck:
    """Decides, at the end of a step, whether memory got tight; takes the dump when it did.

    The facade compares the step number with ``next_step`` (one comparison per step) and calls
    ``check`` when it is due, so steps that do not check cost what they cost without it.
    """

    def __init__(
        self,
        backend: DeviceBackend,
        dumper: Dumper | None,
        *,
        enabled: bool,
        every: int,
        fraction: float,
        max_snapshots: int,
    ) -> None:
        self._backend = backend
        self._dumper = dumper
        self._every = every
        self._fraction = fraction
        self._left = max_snapshots
        self._pid = os.getpid()
        self._retries = 0
        self._limit: int | None = None
        self._over = False
        self._outside = 0
        self._checks = 0
        self._ooms_seen = 0
        self.taken = 0
        """Near-OOM dumps this process has written."""
        on = enabled and dumper is not None and max_snapshots > 0
        self.next_step = 0 if on else NEVER
        """The next step number whose end runs a check (``NEVER``: none will)."""

    def start(self) -> None:
        """Read the retry counter now, so only retries after ``install()`` count."""
        if self.next_step == NEVER:
            return
        try:
            pressure = self._backend.allocator_pressure()
        except Exception as exc:  # noqa: BLE001 - unknown figures disable nothing
            warn_once("near_oom_check_failed", "near_oom_check_failed", error=repr(exc))
            return
        if pressure is not None:
            self._retries = pressure[0]

    def check(self, step: int, ooms: int) -> None:
        """Run the check due at the end of ``step``; ``ooms`` counts OOMs seen so far.

        Retries that came with an OOM are the OOM's: an OOM since the last check moves the
        baseline instead of taking a near-OOM dump after the fact. Never raises.
        """
        every = self._every
        self.next_step = (step // every + 1) * every  # aligned: ranks check the same steps
        try:
            found = self._tightness(step, oom_since=ooms != self._ooms_seen)
            self._ooms_seen = ooms
            if found is not None:
                self._take(step, found)
        except Exception as exc:  # noqa: BLE001 - nothing raises into training
            warn_once("near_oom_check_failed", "near_oom_check_failed", error=repr(exc))

    def _tightness(self, step: int, *, oom_since: bool) -> Tightness | None:
        pressure = self._backend.allocator_pressure()
        if pressure is None:
            return None
        retries, reserved = pressure
        before, self._retries = self._retries, retries
        if retries > before and not oom_since:
            now_free, now_limit = self._free_and_limit()
            return Tightness(
                "alloc_retries",
                f"alloc_retries {before} → {retries} at step {step}",
                before,
                retries,
                reserved,
                now_limit,
                now_free,
            )
        limit = self._limit if self._limit is not None else self._free_and_limit()[1]
        if limit is None or limit <= 0:
            return None
        threshold = self._fraction * limit
        free: int | None = None
        self._checks += 1
        if reserved >= threshold:
            used = reserved
            what = "reserved"
        else:
            if reserved + self._outside >= threshold or self._checks % OUTSIDE_EVERY == 1:
                info = self._backend.mem_get_info()
                if info is None:
                    return None
                free = info[0]
                self._outside = outside_pytorch_bytes(limit, free, reserved) or 0
            used = reserved + self._outside
            what = "reserved + outside PyTorch"
        near = used >= threshold
        rising, self._over = near and not self._over, near
        if not rising or oom_since:
            return None
        if free is None:
            free = self._free_and_limit()[0]  # the dump's figures: read once, when it fires
        share = used / limit * 100
        reason = f"{what} {share:.0f} % of the limit at step {step}"
        return Tightness("fraction", reason, before, retries, reserved, limit, free)

    def _free_and_limit(self) -> tuple[int | None, int | None]:
        """The driver's free bytes and the limit (the per-process fraction of the total, as
        the allocator's own limit is); the limit is kept after the first read."""
        info = self._backend.mem_get_info()
        if info is None:
            return None, self._limit
        free, total = info
        if self._limit is None:
            share = self._backend.memory_fraction()
            self._limit = int(share * total) if share is not None and 0.0 < share < 1.0 else total
        return free, self._limit

    def _take(self, step: int, found: Tightness) -> None:
        dumper = self._dumper
        if dumper is None or self._left <= 0 or os.getpid() != self._pid:
            return
        self._left -= 1
        if self._left <= 0:
            self.next_step = NEVER
        safe_log(
            "warning",
            "near_out_of_memory",
            reason=found.reason,
            step=step,
            rank=dumper.rank,
            reserved_bytes=found.reserved_bytes,
            device_total_bytes=found.device_total_bytes,
        )
        if dumper.near_oom(step, found.record) is not None:
            self.taken += 1
