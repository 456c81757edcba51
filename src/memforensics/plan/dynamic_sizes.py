"""Data-dependent sizes asked for by a library's own ``meta`` kernel.

An operator a library registers with ``torch.library.register_fake`` runs that fake
implementation as its ``meta`` kernel, which is what a stand-in dispatches to. Where an
output's size depends on values, the implementation asks
``torch.library.get_ctx().new_dynamic_size()``: bitsandbytes' ``int8_vectorwise_quant``
(LLM.int8()'s columns of outliers above its threshold, which a model loaded with
``load_in_8bit`` computes in every 8-bit layer's forward). On ``meta`` torch's context raises,
since a meta tensor cannot carry an unknown size, and the script failed where the GPU runs on.
In a plan the size is an integer: the kernel's upper bound where it gives one (``max``), else
its lower bound (``min``, 0 unless given). The values it depends on are not known; without a
bound the fewest are taken, said once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memforensics.plan.values import Notes

DYNAMIC = (
    "a library operator's output whose size depends on values (bitsandbytes' 8-bit outlier "
    "columns) takes the upper bound its kernel gives, else its lower bound (0 unless given)"
)


class Sizes:
    """The context a library's ``meta`` kernel gets in a plan: data-dependent sizes as
    integers."""

    def __init__(self, notes: Notes) -> None:
        self.notes = notes

    def new_dynamic_size(self, *, min: int = 0, max: int | None = None) -> int:
        """``FakeImplCtx.new_dynamic_size``: ``max`` where given, else ``min``."""
        self.notes.once("dynamic size", DYNAMIC)
        return int(max if max is not None else min)


def get_ctx(original: Callable[[], Any], notes: Notes) -> Callable[[], Any]:
    """``torch.library.get_ctx``: torch's context, except inside a ``meta`` kernel, where
    torch's raises and :class:`Sizes` answers."""

    def get_ctx() -> Any:
        try:
            return original()
        except RuntimeError:
            return Sizes(notes)

    return get_ctx
