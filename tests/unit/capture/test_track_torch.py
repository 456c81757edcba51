"""The tensor walk on the real (CPU) torch: CPU tensors' data pointers are real addresses."""

from __future__ import annotations

from typing import Any

import pytest

from memforensics.capture.track import Tracker

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


def _trained() -> tuple[Any, Any]:
    """Linear + BatchNorm after one Adam step: parameters, gradients, state and buffers."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(16, 8)).pow(2).mean().backward()
    optimizer.step()
    return model, optimizer


def _row(kind: str, name: str, tensor: Any) -> tuple[str, str, int, int, int]:
    storage = tensor.untyped_storage().data_ptr()
    size = tensor.element_size()
    return (kind, name, storage, tensor.storage_offset() * size, tensor.numel() * size)


def _walked(model: Any = None, optimizer: Any = None) -> list[tuple[str, str, int, int, int]]:
    tracker = Tracker()
    tracker.add(model, optimizer)
    found = tracker.tensors("cpu")
    assert found is not None
    return sorted(
        (e["kind"], e["name"], e["address"], e["offset"], e["bytes"]) for e in found.entries
    )


def test_parameters_gradients_adam_state_and_buffers_are_recorded() -> None:
    """Every tensor of the model and of Adam's state, with its storage's real address."""
    model, optimizer = _trained()
    expected = []
    for name, param in model.named_parameters():
        expected.append(_row("parameter", name, param))
        expected.append(_row("gradient", f"{name}.grad", param.grad))
        for key, value in optimizer.state[param].items():  # step, exp_avg, exp_avg_sq
            expected.append(_row("optimizer_state", f"{name}.{key}", value))
    for name, buffer in model.named_buffers():  # running_mean, running_var, num_batches_tracked
        expected.append(_row("buffer", name, buffer))
    assert _walked(model, optimizer) == sorted(expected)
    assert len(expected) == 4 * 5 + 3


def test_views_of_one_storage_keep_their_offsets() -> None:
    """Parameters made as views of one flat tensor share its address, each at its offset."""
    flat = torch.zeros(30)
    model = torch.nn.Module()
    model.a = torch.nn.Parameter(flat[0:10])
    model.b = torch.nn.Parameter(flat[10:30])
    rows = _walked(model)
    assert [(name, offset, size) for _, name, _, offset, size in rows] == [
        ("a", 0, 40),
        ("b", 40, 80),
    ]
    assert {address for _, _, address, _, _ in rows} == {flat.untyped_storage().data_ptr()}


def test_an_optimizer_alone_records_its_parameters() -> None:
    """optimizer= without model=: its parameters, their gradients and state, named by place."""
    model, optimizer = _trained()
    rows = _walked(optimizer=optimizer)
    first = next(iter(model.parameters()))
    assert ("parameter", "optimizer0.group0.0", *_row("p", "n", first)[2:]) in rows
    assert (
        "optimizer_state",
        "optimizer0.group0.0.exp_avg",
        *_row("p", "n", optimizer.state[first]["exp_avg"])[2:],
    ) in rows
    assert not any(kind == "buffer" for kind, *_ in rows)


def test_a_dtensor_parameter_records_its_local_shard() -> None:
    """An FSDP2-style DTensor parameter is recorded by the shard this rank holds."""
    dist = pytest.importorskip("torch.distributed")
    tensor_api = pytest.importorskip("torch.distributed.tensor")
    mesh_api = pytest.importorskip("torch.distributed.device_mesh")
    if not dist.is_available():
        pytest.skip("torch built without torch.distributed")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = mesh_api.DeviceMesh("cpu", [0])
        model = torch.nn.Linear(4, 8, bias=False)
        model.weight = torch.nn.Parameter(
            tensor_api.distribute_tensor(model.weight.detach(), mesh, [tensor_api.Shard(0)])
        )
        local = model.weight.to_local()
        assert _walked(model) == [_row("parameter", "weight", local)]
    finally:
        dist.destroy_process_group()


def test_a_cuda_dump_leaves_cpu_tensors_out() -> None:
    """Walking for an accelerator's dump skips CPU tensors (Adam's step counts, a CPU model)."""
    model, optimizer = _trained()
    tracker = Tracker()
    tracker.add(model, optimizer)
    found = tracker.tensors("cuda")
    assert found is not None
    assert found.entries == []


def test_a_module_s_tensor_attributes_are_buffers_listed_last() -> None:
    """A tensor a submodule holds as a plain attribute is a buffer, named by its place, listed
    after every parameter, buffer and state (so a region listed before keeps its kind)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    model[0].cos = torch.ones(8)
    tracker = Tracker()
    tracker.add(model)
    found = tracker.tensors("cpu")
    assert found is not None
    last = found.entries[-1]
    assert (last["kind"], last["name"]) == ("buffer", "0.cos")
    assert last["address"] == model[0].cos.untyped_storage().data_ptr()
    assert [e["name"] for e in found.entries[:-1]] == ["0.weight", "0.bias"]
