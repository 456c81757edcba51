"""Sizes: what block a request gets and what segment the device is asked for."""

from __future__ import annotations

from memforensics.allocator._blocks import (
    K_MIN_BLOCK_SIZE,
    K_MIN_LARGE_ALLOC,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
)
from memforensics.allocator._settings import AllocatorSettings


def round_size(settings: AllocatorSettings, size: int) -> int:
    """Mirrors ``round_size``: the block size a request of ``size`` bytes gets."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = settings.divisions(size)
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return roundup_power2_next_division(size, divisions)
    return -(-size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE


def get_allocation_size(settings: AllocatorSettings, size: int) -> int:
    """Mirrors ``get_allocation_size``: what ``cudaMalloc`` is asked for a block of ``size``."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return settings.large_segment_size
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """Mirrors ``roundup_power2_next_division``: next of ``divisions`` steps per power of 2."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step
