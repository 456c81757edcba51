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
plan's doing, not the script's: its log record is dropped, as a GPU run never prints it, and
the plan says once that the library is not loaded where a bitsandbytes operator first runs on
the planned device (a script that only imports bitsandbytes, as transformers does through PEFT,
is told nothing). Any other record of bitsandbytes' is left as it is.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from memforensics.plan.values import Notes

LOGGER = "bitsandbytes.cextension"
NAMESPACE = "bitsandbytes::"
"""How bitsandbytes' operators' names begin."""
STAND_IN = "ErrorHandlerMockBNBNativeLibrary"
"""The class of what bitsandbytes keeps for a library that did not load."""
FAILED = "bitsandbytes library load error"
"""How bitsandbytes' log record of the failed load begins."""

NOT_LOADED = (
    "bitsandbytes' native CUDA library links the CUDA runtime, which the machine a plan runs on "
    "lacks, so it is not loaded (bitsandbytes' load error is not shown; a GPU loads it): its "
    "operators on the planned device run their meta kernels"
)


class _FailedLoad(logging.Filter):
    """Drops bitsandbytes' record of its native library's failed load."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(FAILED)


def operator_ran(notes: Notes) -> None:
    """A bitsandbytes operator ran on the planned device: :data:`NOT_LOADED` said once where
    its native library did not load."""
    lib = getattr(sys.modules.get(LOGGER), "lib", None)
    if type(lib).__name__ == STAND_IN:
        notes.once("native", NOT_LOADED)


@contextmanager
def quiet_failed_load() -> Iterator[None]:
    """bitsandbytes' failed load of its CUDA library, inside, logs no error record."""
    logger = logging.getLogger(LOGGER)
    failed = _FailedLoad()
    logger.addFilter(failed)
    try:
        yield
    finally:
        logger.removeFilter(failed)
