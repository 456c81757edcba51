"""memforensics: make PyTorch out-of-memory failures explainable after the fact."""

from memforensics._errors import BackendError, ConfigError, ForensicsError, SnapshotLoadError
from memforensics._version import __version__
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
