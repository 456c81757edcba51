"""Kinds known from the process: the blocks that hold a tracked tensor's storage.

When the training process told capture its models and optimizers (``install(model=...,
optimizer=...)``), each dump's sidecar lists their tensors (``tensors``: the storage's address,
the tensor's offset and bytes, its kind and name). Every block live at the snapshot that holds
such a storage is labelled with that kind at confidence 1.0: known, not guessed. A block
holding tensors of several kinds (a flat buffer) is split between them in proportion to their
bytes, and its whole size is shared out, since the block is one storage's allocation. Every
other block keeps the kind inference gave it (:mod:`~memforensics.analysis.filled.kinds`); the
kinds table then says, per kind, how many of its bytes are known (``known_bytes``).

Only blocks live at the snapshot are labelled: the sidecar's addresses are those of the
moment the dump was taken, and an address freed earlier in the trace may have held anything.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from memforensics.analysis.dump import TrackedTensor
from memforensics.analysis.filled.kinds import BUFFER, GRADIENT, OPTIMIZER_STATE, PARAMETER
from memforensics.analysis.filled.lifetime import Allocation, Lifetimes

KNOWN_KINDS = frozenset({PARAMETER, GRADIENT, OPTIMIZER_STATE, BUFFER})
"""The kinds a process can tell; an entry of any other kind is ignored."""

FROM_PROCESS = 1.0
"""The confidence of a kind the process told."""


@dataclass(frozen=True, slots=True)
class Known:
    """What the sidecar's tracked tensors labelled in one dump.

    ``tensors``: entries the sidecar lists; ``matched``: those whose storage is a block live
    at the snapshot (the rest sit on another device or were freed); ``blocks`` and ``bytes``:
    the blocks labelled from the process and their bytes.
    """

    tensors: int
    matched: int
    blocks: int
    bytes: int


def label_known(lt: Lifetimes, tensors: tuple[TrackedTensor, ...] | None) -> Known | None:
    """Label every allocation live at the snapshot that holds a tracked storage (see the module
    docstring); None when the dump lists no tracked tensors.

    Runs after inference and overrides it: what the process knows beats what is guessed.
    """
    if tensors is None:
        return None
    live = sorted((a for a in lt.at_snapshot() if a.size > 0), key=lambda a: a.addr)
    starts = [found.addr for found in live]
    kinds: dict[int, dict[str, int]] = {}
    seen: set[tuple[int, int, int]] = set()
    matched = 0
    for tensor in tensors:
        if tensor.kind not in KNOWN_KINDS:
            continue
        index = bisect_right(starts, tensor.address) - 1
        if index < 0 or tensor.address >= live[index].addr + live[index].size:
            continue
        matched += 1
        region = (tensor.address, tensor.offset, tensor.bytes)
        if region in seen:  # one memory viewed by two tensors: counted once
            continue
        seen.add(region)
        per_kind = kinds.setdefault(index, {})
        per_kind[tensor.kind] = per_kind.get(tensor.kind, 0) + tensor.bytes
    labelled = 0
    for index, per_kind in kinds.items():
        found = live[index]
        _label(found, per_kind)
        labelled += found.size
    return Known(len(tensors), matched, len(kinds), labelled)


def _label(found: Allocation, per_kind: dict[str, int]) -> None:
    """Give ``found`` its kinds: the block's size shared in proportion to the tensors' bytes
    (largest share first; remainders to the largest shares, so the parts add up exactly)."""
    ordered = sorted(per_kind.items(), key=lambda item: (-item[1], item[0]))
    total = sum(size for _, size in ordered)
    shares = [found.size * size // total for _, size in ordered]
    for index in range(found.size - sum(shares)):
        shares[index % len(shares)] += 1
    found.known = tuple((kind, share) for (kind, _), share in zip(ordered, shares, strict=True))
    found.kind = ordered[0][0]
    found.confidence = FROM_PROCESS
