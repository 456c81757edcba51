"""What a planned run knows it holds: every model and optimizer alive when a dump is written.

A GPU run tells capture its models and optimizers (``install(model=..., optimizer=...)``) so
that a dump knows its parameters, gradients, optimizer state and buffers instead of guessing
them. A planned run need not be told: every object of the script lives in this process, so at
each dump :func:`live_models` finds the ``torch.nn.Module`` and ``torch.optim.Optimizer``
objects alive then, and capture's tracker walks them as it walks tracked ones (a sidecar's
``tensors``). One pass over the garbage collector's objects, paid only when a dump is written;
the tracker bounds what it writes.
"""

from __future__ import annotations

import gc
from typing import Any


def live_models() -> tuple[list[Any], list[Any]]:
    """``(modules, optimizers)`` alive now: the outermost modules (those no other module holds
    as a submodule, so each parameter keeps its full name, ``layers.0.weight``) and every
    optimizer, each in the order the collector lists them."""
    import torch  # lazily: ``import memforensics.plan`` never loads torch

    module_type, optimizer_type = torch.nn.Module, torch.optim.Optimizer
    modules: list[Any] = []
    optimizers: list[Any] = []
    for found in gc.get_objects():
        kind = type(found)  # never ``__class__``: a deprecated object warns when asked it
        if issubclass(kind, module_type):
            modules.append(found)
        elif issubclass(kind, optimizer_type):
            optimizers.append(found)
    held = {id(child) for module in modules for child in module.children()}
    return [module for module in modules if id(module) not in held], optimizers
