"""bitsandbytes' native CUDA library, which cannot load on the machine a plan runs on.

bitsandbytes loads its compiled library when it is imported (``bitsandbytes.cextension``, run
by ``import peft`` and so by transformers where PEFT is installed): the CUDA build of it
(``libbitsandbytes_cuda130.so`` for the ``torch.version.cuda`` the planned build reports) where
``torch.cuda.is_available()``, as it is in a plan. That library links the CUDA runtime and
cuBLAS, which a CPU machine does not have, so its load fails; bitsandbytes then logs
``bitsandbytes library load error: libcublas.so.13: cannot open shared object file`` with the
loader's traceback at ``ERROR`` and keeps a stand-in library that raises only when a native
function is called (``ErrorHandlerMockBNBNativeLibrary``). On a GPU the library loads and
nothing is logged. In a plan no native function is reached for the device: bitsandbytes'
operators on a stand-in run their ``meta`` kernels (:mod:`~memforensics.plan.dynamic_sizes`) and
its paged memory is the plan's (:mod:`~memforensics.plan.paged`). So that failed load is the
plan's doing, not the script's: its log record is said once as a plan's note instead of a
traceback a GPU run never prints. Any other record of bitsandbytes' is left as it is.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from memforensics.plan.values import Notes, where

LOGGER = "bitsandbytes.cextension"
FAILED = "bitsandbytes library load error"
"""How bitsandbytes' log record of the failed load begins."""

NOT_LOADED = (
    "bitsandbytes' native CUDA library links the CUDA runtime, which the machine a plan runs on "
    "lacks, so it is not loaded (bitsandbytes' load error is not shown; a GPU loads it): its "
    "operators on the planned device run their meta kernels"
)


def _logging_frame(pathname: str) -> FrameType | None:
    """The frame that made the record (in ``pathname``), from the filter's caller outward."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename != pathname:
        frame = frame.f_back
    return frame


class _FailedLoad(logging.Filter):
    """Drops bitsandbytes' record of its native library's failed load, said as a note."""

    def __init__(self, notes: Notes) -> None:
        super().__init__()
        self.notes = notes

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(FAILED):
            return True
        frame = _logging_frame(record.pathname)
        if "native" not in self.notes.said:
            self.notes.said.add("native")
            self.notes.kept.append(f"{NOT_LOADED} (first at {where(frame)})")
        return False


@contextmanager
def quiet_failed_load(notes: Notes) -> Iterator[None]:
    """bitsandbytes' failed load of its CUDA library a note inside, not an error record."""
    logger = logging.getLogger(LOGGER)
    failed = _FailedLoad(notes)
    logger.addFilter(failed)
    try:
        yield
    finally:
        logger.removeFilter(failed)
