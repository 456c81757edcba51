"""The allocator's statistics and the record of its last failure (``struct Stat``)."""

from __future__ import annotations

from dataclasses import dataclass


class Stat:
    """Mirrors ``struct Stat``: current, peak, and cumulative allocated / freed."""

    __slots__ = ("allocated", "current", "freed", "peak")

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def increase(self, amount: int) -> None:
        """Mirrors ``increase_stat``."""
        self.current += amount
        self.allocated += amount
        if self.current > self.peak:  # noqa: PLR1730  # max() costs a call on every allocation
            self.peak = self.current

    def decrease(self, amount: int) -> None:
        """Mirrors ``decrease_stat``."""
        self.current -= amount
        self.freed += amount


@dataclass(frozen=True, slots=True)
class OomInfo:
    """The last failed request: rounded size, what was asked of the device, device free."""

    size: int
    alloc_size: int
    device_free: int
