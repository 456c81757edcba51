"""``torch.distributed.pipelining``'s warm-up vote in a plan of one rank: the other ranks'
stages are taken to vote as this rank's do.

Before its first step, a schedule of ``PipelineStage``s votes on how the stages learn their
shapes (``_PipelineSchedule._warmup_p2p``): each stage votes static where its script gave it
``input_args`` and ``output_args`` (and, for a ``DTensor``, their gradients' too), the votes
travel down the pipeline and the product back up, on the device, and every stage goes static
only where all voted so. A plan runs one rank: what it receives from its peers is made up, an
integer read as zero, so every stage went dynamic, exchanging its shapes as Python objects with
``recv_object_list``, which a plan cannot receive (it stops there, in one line). Every rank runs
the same script, so the vote's outcome here is this rank's own stages' vote: static where each
of them was given its shapes. The exchange itself still runs, its few bytes allocated as on a
GPU. A pipeline whose ranks give their stages shapes differently (some static, some not) goes
dynamic on a GPU and static in a plan; the dynamic metadata pass's one forward of a microbatch
is then not planned. A stage not given its shapes stays dynamic, and stops at
``recv_object_list`` as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SCHEDULES = "torch.distributed.pipelining.schedules"


def own_vote(original: Callable[..., Any]) -> Callable[..., Any]:
    """``_PipelineSchedule._warmup_p2p``: ``original`` (the vote's sends and receives), then
    each ``PipelineStage`` of this rank in the mode this rank's stages vote for together."""

    def warmup_p2p(self: Any, stages: list[Any], has_backward: bool, p2p_done: bool) -> None:
        from torch.distributed.pipelining._utils import InferenceMode
        from torch.distributed.pipelining.stage import PipelineStage

        original(self, stages, has_backward, p2p_done)
        if not stages or not all(isinstance(stage, PipelineStage) for stage in stages):
            return
        dynamic = any(
            InferenceMode.needs_dynamic(stage._user_meta, has_backward) for stage in stages
        )
        for stage in stages:
            stage._inference_mode = InferenceMode.DYNAMIC if dynamic else InferenceMode.STATIC

    return warmup_p2p
