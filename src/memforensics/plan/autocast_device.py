"""Autocast asked about a stand-in's device type.

A stand-in is a ``meta`` tensor, so ``x.device.type`` reads ``"meta"`` where the CUDA tensor it
stands for reads ``"cuda"``. Code that keys autocast by a tensor's device type, as
``torch.autocast``'s own docstring suggests (``torch.autocast(x.device.type)``,
``torch.is_autocast_enabled(x.device.type)``, ``torch.get_autocast_dtype(...)``; TRL's chunked
log-probabilities, custom autograd functions), would ask about ``meta``, which has no autocast
state: torch's ``get_autocast_dispatch_key_from_device_type`` (``aten/src/ATen/autocast_mode.h``)
raises "unknown device type for autocast" for it, ``get_autocast_dtype`` raises "unsupported
scalarType", and ``torch.amp.autocast.__init__`` refuses it as "an unsupported autocast
device_type" because ``torch._C._is_autocast_available("meta")`` is False. On a GPU the same
calls ask about CUDA. So in a plan these functions answer ``"meta"`` as ``"cuda"``: the state
read or set is CUDA's, which the emulation's own autocast follows. A script's own ``meta``
tensors ask about CUDA too; on a GPU those calls raise (``is_autocast_available`` says False),
and a ``meta`` tensor holds no memory either way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

CUDA = "cuda"
META = "meta"


def _on_cuda(device_type: Any) -> Any:
    """``"cuda"`` for ``"meta"`` (a stand-in's device type), anything else as it is."""
    return CUDA if device_type == META else device_type


def asked_of_cuda(original: Callable[..., Any], at: int = 0) -> Callable[..., Any]:
    """``original`` with a stand-in's device type taken as CUDA's, whether passed as its
    argument ``at`` or named ``device_type``: ``is_autocast_enabled``, ``get_autocast_dtype``,
    ``set_autocast_enabled``, ``set_autocast_dtype`` and ``is_autocast_available`` (``at=0``),
    and ``torch.autocast.__init__`` (``at=1``, after ``self``), so the context sets and restores
    CUDA's state, as it does on a GPU."""

    @functools.wraps(original)
    def asked(*args: Any, **kwargs: Any) -> Any:
        if len(args) > at:
            args = (*args[:at], _on_cuda(args[at]), *args[at + 1 :])
        if "device_type" in kwargs:
            kwargs["device_type"] = _on_cuda(kwargs["device_type"])
        return original(*args, **kwargs)

    return asked
