"""An expandable segment: one reserved range of address space, backed by device pages on demand.

Mirrors ``struct ExpandableSegment`` in ``c10/cuda/CUDACachingAllocator.cpp``. Under
``expandable_segments:True`` the allocator reserves one such range per stream and pool (9/8 of
the device, as PyTorch reserves it) and maps pages into it as requests need them: 2 MiB pages
in the small pool, ``large_segment_size`` ones in the large pool. The segment knows only its
address space and its pages; which blocks lie in it, and which of them are mapped, the
allocator's blocks say (``Block.mapped``), as PyTorch keeps it.
"""

from __future__ import annotations


class ExpandableSegment:
    """Mirrors ``struct ExpandableSegment``: reserved address space, mapped page by page.

    Mapping needs a page of device memory each; the allocator says how many bytes the device
    can still give (``cuMemCreate`` failing is an OOM).
    """

    __slots__ = ("address", "max_pages", "page_size", "stream")

    def __init__(self, address: int, stream: int, page_size: int, address_space: int) -> None:
        self.address = address
        self.stream = stream
        self.page_size = page_size
        self.max_pages = -(-address_space // page_size)

    def size(self) -> int:
        """Bytes of address space (``ExpandableSegment::size``)."""
        return self.max_pages * self.page_size

    def page_range(self, address: int, size: int, *, inner: bool) -> tuple[int, int]:
        """Pages covering ``[address, address + size)``; ``inner``: only pages wholly inside
        (``segmentLeft`` / ``segmentRight`` the other way round)."""
        start, end = address - self.address, address - self.address + size
        page = self.page_size
        if inner:
            return -(-start // page), end // page
        return start // page, -(-end // page)

    def map(self, address: int, size: int, available: int) -> int:
        """Mirrors ``ExpandableSegment::map``: back the pages covering the range with device
        memory; the bytes mapped from ``address``, 0 when they need more than the ``available``
        bytes the device can still give (``cuMemCreate`` fails: PyTorch releases the pages
        it made and maps none)."""
        begin, end = self.page_range(address, size, inner=False)
        mapped = (end - begin) * self.page_size
        if mapped == 0 or mapped > available:
            return 0
        return mapped

    def unmap(self, address: int, size: int) -> tuple[int, int]:
        """Mirrors ``ExpandableSegment::unmap``: give back the pages wholly inside the range;
        the ``(address, size)`` unmapped, size 0 when no whole page lies inside."""
        begin, end = self.page_range(address, size, inner=True)
        if begin >= end:
            return address, 0
        start = self.address + begin * self.page_size
        unmapped = (end - begin) * self.page_size
        return start, unmapped
