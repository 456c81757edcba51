"""memforensics: make PyTorch out-of-memory failures explainable after the fact."""

from memforensics._errors import BackendError, ConfigError, ForensicsError, SnapshotLoadError
from memforensics._version import __version__

__all__ = ["BackendError", "ConfigError", "ForensicsError", "SnapshotLoadError", "__version__"]
