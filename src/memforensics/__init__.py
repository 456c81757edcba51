"""memforensics: make PyTorch out-of-memory failures explainable after the fact."""

from memforensics._config import ForensicsConfig
from memforensics._errors import BackendError, ConfigError, ForensicsError, SnapshotLoadError
from memforensics._facade import MemoryForensics, install, uninstall
from memforensics._version import __version__

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
