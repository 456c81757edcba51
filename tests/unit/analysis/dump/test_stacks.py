"""Distinct stacks: equal frames lists become one, so a stack is judged once per dump."""

from __future__ import annotations

from typing import Any

from memforensics.analysis.dump import Stacks, per_stack


def _frame(name: str, line: int = 1) -> dict[str, Any]:
    return {"filename": "/job/model.py", "line": line, "name": name}


def test_lists_over_the_same_frame_dicts_become_the_first_list() -> None:
    """Two entries' own lists over the same frame dicts (PyTorch's layout) share one list."""
    inner, outer = _frame("linear"), _frame("train")
    stacks = Stacks()
    first = [inner, outer]
    assert stacks.canonical(first) is first
    assert stacks.canonical([inner, outer]) is first


def test_a_different_stack_under_the_same_innermost_frame_stays_apart() -> None:
    """Stacks that differ only further out keep their own lists."""
    inner = _frame("linear")
    stacks = Stacks()
    forward = [inner, _frame("forward")]
    backward = [inner, _frame("backward")]
    assert stacks.canonical(forward) is forward
    assert stacks.canonical(backward) is backward
    assert stacks.canonical([inner, forward[1]]) is forward
    assert stacks.canonical([inner, backward[1]]) is backward


def test_many_stacks_under_one_innermost_frame_are_all_told_apart() -> None:
    """Past the bucket's size the fallback key still tells every stack apart and finds it again."""
    inner = _frame("linear")
    outers = [_frame("caller", line) for line in range(50)]
    stacks = Stacks()
    firsts = [[inner, outer] for outer in outers]
    assert all(stacks.canonical(item) is item for item in firsts)
    again = [stacks.canonical([inner, outer]) for outer in outers]
    assert all(got is first for got, first in zip(again, firsts, strict=True))


def test_what_is_no_stack_is_returned_as_it_is() -> None:
    """None, an empty list, a string and a self-referencing list pass through unharmed."""
    stacks = Stacks()
    empty: list[Any] = []
    assert stacks.canonical(None) is None
    assert stacks.canonical(empty) is empty
    assert stacks.canonical("frames") == "frames"
    head = _frame("linear")
    first: list[Any] = []
    first.append(first)
    second: list[Any] = []
    second.append(second)  # comparing [head, first] with [head, second] never ends
    assert stacks.canonical([head, first])[1] is first  # type: ignore[index]
    odd = [head, second]
    assert stacks.canonical(odd) is odd


def test_a_stack_is_judged_once_however_many_entries_carry_it() -> None:
    """per_stack over interned lists asks its judge once per distinct stack and gives every
    entry that stack's answer."""
    frame_a, frame_b = {"filename": "a.py", "line": 1}, {"filename": "b.py", "line": 2}
    stacks = Stacks()
    entries = [stacks.canonical([frame_a, frame_b]) for _ in range(5)]
    entries += [stacks.canonical([frame_b]) for _ in range(3)]
    asked: list[object] = []

    def judge(frames: list[dict[str, object]]) -> int:
        asked.append(frames)
        return len(frames)

    depth_of = per_stack(judge)
    assert [depth_of(frames) for frames in entries] == [2] * 5 + [1] * 3
    assert len(asked) == 2
