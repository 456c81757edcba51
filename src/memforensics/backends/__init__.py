"""Device backends: one module per device behind the ``DeviceBackend`` Protocol.

Public because users extend it: a new accelerator is a class that satisfies ``DeviceBackend``.
"""

from memforensics.backends._protocol import DeviceBackend, HistoryMode, OomObserver
from memforensics.backends._select import create_backend

__all__ = ["DeviceBackend", "HistoryMode", "OomObserver", "create_backend"]
