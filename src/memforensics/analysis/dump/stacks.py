"""Distinct stacks: one frames list stands for every equal one, so a stack is judged once.

PyTorch writes each trace entry with its own ``frames`` list over shared frame dicts: a
million-entry trace holds a million lists but only a few hundred distinct stacks. Whatever is
read from a stack (its phase, its site, its call path) is the same for every equal list, so the
trace walk replaces each list by the first equal one it met, and per-stack answers can then be
kept by that list's identity.

Two lists are equal when their frames are (``==``, which compares shared frame dicts by identity
first): lists are bucketed by the identity of their innermost frame and compared in C. A bucket
that grows past a few lists (a hostile file, or many stacks under one innermost frame) falls
back on the tuple of frame identities, which costs more but never grows quadratically.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

_BUCKET = 8  # lists compared per innermost frame before the tuple key takes over
_Answer = TypeVar("_Answer")


class Stacks:
    """Interns frames lists for the lifetime of one dump's analysis.

    It holds every list it returns, so no identity it keys by is reused while it lives.
    """

    __slots__ = ("_buckets", "_by_ids")

    def __init__(self) -> None:
        self._buckets: dict[int, list[list[Any]]] = {}
        self._by_ids: dict[tuple[int, ...], list[Any]] = {}

    def canonical(self, frames: object) -> object:
        """The first list seen equal to ``frames``; ``frames`` itself when it is the first, empty,
        or no list at all."""
        if type(frames) is not list or not frames:
            return frames
        head = id(frames[0])
        bucket = self._buckets.get(head)
        if bucket is None:
            self._buckets[head] = [frames]
            return frames
        try:
            for seen in bucket:
                if seen == frames:
                    return seen
        except RecursionError:  # a self-referencing list from a hostile pickle: keep it apart
            return frames
        if len(bucket) < _BUCKET:
            bucket.append(frames)
            return frames
        return self._by_ids.setdefault(tuple(map(id, frames)), frames)


def per_stack(judge: Callable[[Any], _Answer]) -> Callable[[Any], _Answer]:
    """``judge``, asked once per distinct frames list and answered from memory after that.

    Keyed by the list's identity: meant for the lists :class:`Stacks` hands out (equal stacks
    share one), while whatever holds them is alive, so no identity is reused meanwhile.
    """
    answers: dict[int, _Answer] = {}

    def answer(frames: Any) -> _Answer:
        key = id(frames)
        if key in answers:
            return answers[key]
        found = answers[key] = judge(frames)
        return found

    return answer
