"""TorchScript under the plan: a scripted module moved to the device.

A scripted module's parameters are held by its C++ module as well as by Python, so
``torch.utils.swap_tensors`` (which the plan turns on for every ``Module._apply``, so that an
optimizer built before ``.cuda()`` keeps its parameters) refuses them. On a CUDA build a CPU
parameter moved to CUDA is rebound in place (``param.data = ...``); a ``meta`` one cannot be
(the types differ), so a scripted module's parameters are replaced through its parameter dict,
as ``Module._apply`` does for types that differ, and the C++ module holds the stand-ins.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_INSIDE = threading.local()
"""Whether this thread is inside a scripted module's ``_apply``."""


def swaps() -> bool:
    """``torch.__future__.get_swap_module_params_on_conversion``: on, except while a scripted
    module applies a function to its own tensors. A plain function, as torch's own replacement
    of it for ``torch.compile`` requires of what it replaces."""
    return not getattr(_INSIDE, "scripted", False)


def scripted_apply(original: Callable[..., Any]) -> Callable[..., Any]:
    """``ScriptModule._apply`` (scripted and traced modules): ``original``
    (``Module._apply``) without swapping."""

    def _apply(module: Any, fn: Callable[..., Any], recurse: bool = True) -> Any:
        before = getattr(_INSIDE, "scripted", False)
        _INSIDE.scripted = True
        try:
            return original(module, fn, recurse)
        finally:
            _INSIDE.scripted = before

    return _apply
