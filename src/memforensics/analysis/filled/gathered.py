"""FSDP's unsharded parameters at a moment, and which of them were held from a forward into
the backward.

FSDP (``fully_shard``, and FSDP1's ``FullyShardedDataParallel``) keeps each rank's shard of
the parameters and all-gathers a module's whole parameters before its forward and its backward
(:data:`~memforensics.analysis.filled.roles.GATHERED`, told by torch's frames). With
``reshard_after_forward=True`` (FSDP1: ``ShardingStrategy.FULL_SHARD``) each module frees them
after its forward and gathers them again in the backward; with ``False`` (FSDP1:
``SHARD_GRAD_OP``) they are held from the forward until the module's backward, so every module's
unsharded parameters are live at the end of the forward. The root module is never resharded
after its forward (both FSDPs keep its parameters for the backward, which starts with it).

The trace tells the two apart: a gathered block made in a forward and freed after a backward
began (or still live then) was held into the backward. Blocks of one all-gather are made one
right after another (FSDP2's per-parameter outputs of ``foreach_all_gather_copy_out``, FSDP1's
one flat parameter), so a run of such held blocks with no other allocation between them is one
module's. Held blocks of three modules or more at a moment are more than the root's and the
running module's: the modules not running hold them, and resharding after forward frees them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import pairwise

from memforensics.analysis.dump import per_stack
from memforensics.analysis.filled import roles
from memforensics.analysis.filled.kinds import BACKWARD, FORWARD
from memforensics.analysis.filled.lifetime import BEFORE, Allocation, Lifetimes


@dataclass(frozen=True)
class Gathered:
    """FSDP's unsharded parameters live at a moment.

    ``bytes``: all of them (block bytes); ``held``: the bytes of each module's blocks held
    from the forward into the backward, in the order they were gathered (the first is the
    root's when the forward's first all-gather is among them); ``told``: the trace reaches a
    backward after they were made, so whether they were held into it is known (a trace that
    ends in the forward cannot tell).
    """

    bytes: int
    held: tuple[int, ...] = ()
    told: bool = False

    @property
    def held_bytes(self) -> int:
        """The unsharded parameters held from the forward into the backward."""
        return sum(self.held)

    @property
    def reshard_frees(self) -> int:
        """What resharding after forward frees at the moment: the held parameters less the
        first module's (the root's, which neither FSDP reshards after forward) and the last
        one's (the module running, or gathered ahead of it); 0 with fewer than three modules
        held, where nothing tells them from those two."""
        if len(self.held) < 3:
            return 0
        return sum(self.held[1:-1])


def gathered_at(lt: Lifetimes, live: list[Allocation]) -> Gathered | None:
    """The unsharded parameters among ``live`` (None: none), with the modules' held into the
    backward (see the module)."""
    role_of = per_stack(roles.stack_role)
    found = [a for a in live if role_of(a.frames)[0] == roles.GATHERED]
    if not found:
        return None
    backward = sorted(a.start for a in lt.allocations if a.phase == BACKWARD and a.start != BEFORE)
    held = sorted(
        (a for a in found if a.phase == FORWARD and a.start != BEFORE and _into(backward, a)),
        key=lambda a: a.start,
    )
    told = bool(backward) and backward[-1] >= min(a.start for a in found)
    return Gathered(sum(a.size for a in found), _modules(lt, held), told)


def _into(backward: list[int], found: Allocation) -> bool:
    """Whether a backward began while ``found`` was live (after it was made, before its free)."""
    index = bisect_right(backward, found.start)
    return index < len(backward) and backward[index] < found.end


def _modules(lt: Lifetimes, held: list[Allocation]) -> tuple[int, ...]:
    """The bytes of ``held`` (by start) per module: runs made with no other allocation between."""
    if not held:
        return ()
    starts = sorted(a.start for a in lt.allocations if a.start != BEFORE)
    sizes = [held[0].size]
    for before, after in pairwise(held):
        if bisect_right(starts, before.start) < bisect_left(starts, after.start):
            sizes.append(0)  # something else was made between: another all-gather
        sizes[-1] += after.size
    return tuple(sizes)
