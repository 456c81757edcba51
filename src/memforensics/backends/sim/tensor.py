"""What the sim device hands out: :class:`SimTensor`, and the error it raises when it cannot.

Split from :mod:`memforensics.backends.sim.device`: a tensor's life (freed explicitly, or by
garbage collection through ``weakref.finalize``, or later after ``record_stream``) is the part
of the sim a test touches directly, apart from the allocator state behind it.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from memforensics.allocator import Block

if TYPE_CHECKING:
    from memforensics.backends.sim.device import SimDevice


class SimOutOfMemoryError(RuntimeError):
    """The sim device's ``torch.OutOfMemoryError``: a ``RuntimeError`` with torch's wording."""


class SimTensor:
    """A device allocation; freed by ``free()`` or when garbage collected, like a tensor."""

    __slots__ = ("__weakref__", "_block", "_device", "_finalizer", "address", "nbytes")

    def __init__(self, device: SimDevice, block: Block | None, nbytes: int) -> None:
        self.nbytes = nbytes
        self.address = block.address if block is not None else 0
        self._device = device
        self._block = block
        self._finalizer = weakref.finalize(self, device._collect, block)
        self._finalizer.atexit = False

    @property
    def freed(self) -> bool:
        """True once the memory went back to the allocator."""
        return not self._finalizer.alive

    def free(self) -> None:
        """Return the memory now; later calls do nothing."""
        if self._finalizer.detach() is not None:
            self._device._release(self._block)

    def record_stream(self, stream: int) -> None:
        """Mark use on another stream: the free then completes later (``Tensor.record_stream``)."""
        if self._block is not None and not self.freed:
            self._device._record_stream(self._block, stream)

    def __repr__(self) -> str:
        state = "freed" if self.freed else "live"
        return f"SimTensor(nbytes={self.nbytes}, address={self.address:#x}, {state})"


# Users and tracebacks know these by their public home (``memforensics.backends.sim``).
SimOutOfMemoryError.__module__ = SimTensor.__module__ = "memforensics.backends.sim"
