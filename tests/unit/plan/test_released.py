"""Calls made when a storage is released, against ``weakref.finalize``'s on the same storage."""

from __future__ import annotations

import weakref

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan.released import when_released  # noqa: E402  (after the skip without torch)

pytestmark = pytest.mark.torch


def test_every_call_on_a_storage_runs_once_when_it_is_released_in_finalizes_order() -> None:
    """Two calls on one storage both run, once each, at its release and not before, ordered
    among ``weakref.finalize``'s as finalizers registered in their place would be."""
    calls: list[str] = []
    storage = torch.empty(4, device="meta").untyped_storage()
    weakref.finalize(storage, calls.append, "finalize 1")
    when_released(storage, calls.append, "released 2")
    weakref.finalize(storage, calls.append, "finalize 3")
    when_released(storage, calls.append, "released 4")
    assert calls == []
    expected: list[str] = []
    other = torch.empty(4, device="meta").untyped_storage()
    for name in ("finalize 1", "released 2", "finalize 3", "released 4"):
        weakref.finalize(other, expected.append, name)
    del storage, other
    assert calls == expected


def test_a_storage_a_tensor_still_holds_is_not_released() -> None:
    """The storage object of a live tensor stays: its call waits for the tensor to go."""
    calls: list[int] = []
    tensor = torch.empty(4, device="meta")
    when_released(tensor.untyped_storage(), calls.append, 1)
    assert calls == []
    del tensor
    assert calls == [1]
