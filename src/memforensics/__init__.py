"""memforensics: make PyTorch out-of-memory failures explainable after the fact.

The capture names (``install`` and the rest) load on first use: ``import memforensics`` stays
cheap for the CLI and the analysis, which never need pydantic, structlog or capture.
"""

from typing import TYPE_CHECKING

from memforensics._errors import BackendError, ConfigError, ForensicsError, SnapshotLoadError
from memforensics._version import __version__

if TYPE_CHECKING:
    from memforensics.capture.config import ForensicsConfig
    from memforensics.capture.facade import MemoryForensics, install, uninstall

__all__ = [
    "BackendError",
    "ConfigError",
    "ForensicsConfig",
    "ForensicsError",
    "MemoryForensics",
    "SnapshotLoadError",
    "__version__",
    "install",
    "uninstall",
]

_LAZY = {
    "ForensicsConfig": "memforensics.capture.config",
    "MemoryForensics": "memforensics.capture.facade",
    "install": "memforensics.capture.facade",
    "uninstall": "memforensics.capture.facade",
}


def __getattr__(name: str) -> object:
    """A capture name, imported from its module on first use and kept here after it."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the module's own, as for a module that imported them eagerly."""
    return sorted({*globals(), *__all__})
