"""``copy.deepcopy`` of device tensors under a plan copies each storage once, whole, as
``Tensor.__deepcopy__`` does on a GPU, checked against the same copies made on the CPU."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from memforensics.allocator import parse_conf  # noqa: E402
from memforensics.plan import device_spec, run_planned  # noqa: E402

pytestmark = [pytest.mark.torch]

SPEC = device_spec(80 << 30, (9, 0), 512 << 20, parse_conf(None))


def _copied(device: str) -> dict[str, Any]:
    """A state dict with a layer shared twice, and a view, deep-copied on ``device``: the bytes
    the copies allocate (planned) and whether the copies alias as the originals do."""
    found: dict[str, Any] = {}

    def run() -> None:
        shared = torch.nn.Linear(256, 256)
        model = torch.nn.Sequential(shared, torch.nn.ReLU(), shared).to(device)
        state = model.state_dict()
        base = torch.zeros(1024, device=device, requires_grad=True)
        base.grad = torch.ones(1024, device=device)
        view = torch.zeros(1024, device=device)[512:]
        before = torch.cuda.memory_allocated() if device == "cuda" else 0
        best, (base_copy, view_copy) = copy.deepcopy((state, (base, view)))
        found["bytes"] = torch.cuda.memory_allocated() - before if device == "cuda" else 0
        found["shared"] = best["0.weight"].data_ptr() == best["2.weight"].data_ptr()
        found["view_storage"] = view_copy.untyped_storage().nbytes()
        found["view_offset"] = view_copy.storage_offset()
        found["grad"] = base_copy.requires_grad, base_copy.grad is not None
        found["device"] = str(best["0.bias"].device)
        found["base"] = best["0.weight"]._base is None, view_copy._base is None
        view_copy.add_(torch.ones(512, device=device, requires_grad=True))  # grad mode, in place
        found["inplace"] = view_copy.requires_grad

    if device == "cuda":
        run_planned(SPEC, run, lambda path, snapshot: None)
    else:
        run()
    return found


def test_a_shared_layer_and_a_view_are_copied_as_on_the_gpu() -> None:
    """The layer shared twice is copied once and its two keys share the copy, as on the CPU; a
    view's copy holds its whole storage at the view's offset; a leaf keeps requires_grad and a
    copy of its gradient; a copy is no view, and is written in place under grad mode. The bytes
    allocated are one weight, one bias, the leaf, its gradient and the view's whole storage,
    each in 512-B blocks."""
    planned, cpu = _copied("cuda"), _copied("cpu")
    assert planned["shared"] is cpu["shared"] is True
    assert planned["view_storage"] == cpu["view_storage"] == 1024 * 4
    assert planned["view_offset"] == cpu["view_offset"] == 512
    assert planned["grad"] == cpu["grad"] == (True, True)
    assert planned["device"] == "cuda:0"
    assert planned["base"] == cpu["base"] == (True, True)
    assert planned["inplace"] is cpu["inplace"] is True
    assert planned["bytes"] == 256 * 256 * 4 + 256 * 4 + 3 * 1024 * 4


def test_copies_read_the_values_their_originals_hold() -> None:
    """A deep copy of device integers and of a view of them reads the originals' values, as on
    the CPU, and the originals keep theirs."""
    found: dict[str, Any] = {}

    def run() -> None:
        counts = torch.arange(8, device="cuda")
        copied, window = copy.deepcopy((counts, counts[2:5]))
        found["values"] = copied.tolist(), window.tolist(), counts.tolist()

    run_planned(SPEC, run, lambda path, snapshot: None)
    assert found["values"] == ([0, 1, 2, 3, 4, 5, 6, 7], [2, 3, 4], [0, 1, 2, 3, 4, 5, 6, 7])
