"""All-gathers of values the script decides, under a fake process group: the plan runs one
rank and takes the others to be alike, so each rank's part of the gathered tensor holds this
rank's values, as ``all_gather_object`` gives this rank's object in every place
(:mod:`~memforensics.plan.distributed`). A size read from them (Accelerate's
``pad_across_processes`` pads to the longest rank's) is then this rank's, not zero.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

GATHERED_TENSORS = (
    "tensors all-gathered from values the script decides hold this rank's values in every "
    "rank's place: the plan runs one rank and takes the others to be alike, so a size read from "
    "them (Accelerate's pad_across_processes pads to the longest rank's) is this rank's"
)
"""Said once where an all-gather's values are kept so (:func:`own_gathered`)."""


@functools.cache
def all_gathers() -> frozenset[Any]:
    """The all-gather operators whose outputs :func:`own_gathered` fills: the process group's
    (``dist.all_gather_into_tensor``'s ``_allgather_base_``, ``dist.all_gather``'s
    ``allgather_``) and the functional collective (DTensor's, ``funcol.all_gather_tensor``)."""
    import torch

    if not torch.distributed.is_available():
        return frozenset()
    c10d, functional = torch.ops.c10d, torch.ops._c10d_functional
    return frozenset(
        (
            c10d._allgather_base_.default,
            c10d.allgather_.default,
            functional.all_gather_into_tensor.default,
            functional.all_gather_into_tensor_out.default,
        )
    )


def own_gathered(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, value: Callable[[Any], Any]
) -> list[tuple[Any, Any, Any]] | None:
    """What one of :func:`all_gathers` writes, as ``(output, its values, the input they come
    from)``, where ``value`` (a stand-in's values on the CPU, None where unknown) knows every
    input: each rank's part holds this rank's input, the fake group having moved no data.
    None where an input is unknown or ``func`` is not one of them."""
    import torch

    c10d = torch.ops.c10d
    if func is c10d.allgather_.default:
        outputs, inputs = args[0], args[1]
        pairs = [(o, i) for outs, i in zip(outputs, inputs, strict=True) for o in outs]
    elif func is c10d._allgather_base_.default:
        pairs = [(args[0], args[1])]
    else:
        made = kwargs.get("out", out)
        pairs = [(made, args[0])]
    written = []
    for output, given in pairs:
        found = value(given)
        if found is None or output.numel() % max(given.numel(), 1):
            return None
        parts = output.numel() // max(given.numel(), 1)
        written.append((output, found.reshape(-1).repeat(parts).view(output.shape), given))
    return written
