"""Device backends: one module per device behind the ``DeviceBackend`` Protocol.

Public because users extend it: a new accelerator is a class that satisfies ``DeviceBackend``.
"""

__all__ = []
