"""Tracked models and optimizers on the sim device: what each dump's sidecar says about them."""

from __future__ import annotations

import gc
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import memforensics
from memforensics._errors import ConfigError
from memforensics.analysis.dump import SIDECAR_LIMIT
from memforensics.capture.sidecar import SidecarContext, build_sidecar
from memforensics.capture.track import MAX_NAME, MAX_TENSORS, Tracker, bounded
from memforensics.testing import SimAdam, SimModule, reset_device

MiB = 1 << 20


def _sidecar(snapshot: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(snapshot.with_suffix(".json").read_text())
    return data


def _trained(device: Any) -> tuple[SimModule, SimAdam]:
    """A two-layer sim model with a buffer, after one backward and one Adam step."""
    model = SimModule(
        device,
        {"layers.0.weight": 4 * MiB, "layers.0.bias": 4096, "layers.1.weight": 2 * MiB},
        {"norm.running_mean": 4096},
    )
    optimizer = SimAdam(model.parameters(), device)
    model.backward()
    optimizer.step()
    return model, optimizer


def _expected(model: SimModule, optimizer: SimAdam) -> list[tuple[str, str, int, int, int]]:
    """(kind, name, address, offset, bytes) of every tensor of ``model`` and ``optimizer``."""
    rows = []
    for name, param in model.named_parameters():
        for kind, tensor, label in (
            ("parameter", param, name),
            ("gradient", param.grad, name + ".grad"),
        ):
            assert tensor is not None
            storage = tensor.untyped_storage().data_ptr()
            rows.append((kind, label, storage, tensor.storage_offset(), tensor.nbytes))
        for key in ("exp_avg", "exp_avg_sq"):
            state = optimizer.state[param][key]
            address = state.untyped_storage().data_ptr()
            rows.append(("optimizer_state", f"{name}.{key}", address, 0, state.nbytes))
    for name, buffer in model.named_buffers():
        rows.append(("buffer", name, buffer.untyped_storage().data_ptr(), 0, buffer.nbytes))
    return sorted(rows)


def _entries(sidecar: dict[str, Any]) -> list[tuple[str, str, int, int, int]]:
    return sorted(
        (e["kind"], e["name"], e["address"], e["offset"], e["bytes"]) for e in sidecar["tensors"]
    )


def test_a_manual_dump_lists_every_tracked_tensor(tmp_path: Path) -> None:
    """install(model=, optimizer=): parameters, gradients, Adam state and buffers, each once."""
    device = reset_device(total_bytes=256 * MiB)
    model, optimizer = _trained(device)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), model=model, optimizer=optimizer)
    sidecar = _sidecar(mf.dump())  # type: ignore[arg-type]
    assert _entries(sidecar) == _expected(model, optimizer)
    assert sidecar["tensors_dropped"] == 0


def test_nothing_tracked_writes_null(tmp_path: Path) -> None:
    """Without model= or optimizer=, the sidecar's tensors and tensors_dropped are null."""
    reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path))
    sidecar = _sidecar(mf.dump())  # type: ignore[arg-type]
    assert sidecar["tensors"] is None
    assert sidecar["tensors_dropped"] is None


def test_install_again_with_the_same_config_tracks_the_new_model(tmp_path: Path) -> None:
    """Same config, another model: the same facade, which now tracks both (they are alive)."""
    device = reset_device(total_bytes=64 * MiB)
    first = SimModule(device, {"a.weight": MiB})
    second = SimModule(device, {"b.weight": MiB})
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), model=first)
    again = memforensics.install(device="sim", out_dir=str(tmp_path), model=second)
    assert again is mf
    names = {e["name"] for e in _sidecar(mf.dump())["tensors"]}  # type: ignore[arg-type]
    assert names == {"a.weight", "b.weight"}


def test_a_new_configuration_keeps_tracking_the_model(tmp_path: Path) -> None:
    """install() with another config replaces the facade; the new one still tracks the model."""
    device = reset_device(total_bytes=64 * MiB)
    model = SimModule(device, {"w": MiB})
    first = memforensics.install(device="sim", out_dir=str(tmp_path / "a"), model=model)
    second = memforensics.install(device="sim", out_dir=str(tmp_path / "b"))
    assert second is not first
    assert second.tracked == ([model], [])


def test_tracking_never_keeps_a_model_alive(tmp_path: Path) -> None:
    """A tracked model dropped by the user is collected, and the next dump tracks nothing."""
    device = reset_device(total_bytes=64 * MiB)
    model, optimizer = _trained(device)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), model=model, optimizer=optimizer)
    del model, optimizer
    gc.collect()
    assert mf.tracked == ([], [])
    assert _sidecar(mf.dump())["tensors"] is None  # type: ignore[arg-type]
    assert device.allocated_bytes == 0  # every block of the model went back to the allocator


def test_a_wrong_argument_fails_at_the_call_and_keeps_the_facade(tmp_path: Path) -> None:
    """model="gpt2" is a ConfigError at install(), and the live facade stays the same."""
    reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="model must be a module"):
        memforensics.install(device="sim", out_dir=str(tmp_path / "other"), model="gpt2")
    with pytest.raises(ConfigError, match="optimizer must be an optimizer"):
        mf.track(optimizer=[object()])
    assert memforensics.install(device="sim", out_dir=str(tmp_path)) is mf


def test_iterables_of_models_and_optimizers_are_tracked(tmp_path: Path) -> None:
    """model=[actor, (critic,)] and optimizer=(opt,): every one of them is tracked once."""
    device = reset_device(total_bytes=64 * MiB)
    actor = SimModule(device, {"actor.w": MiB})
    critic = SimModule(device, {"critic.w": MiB})
    optimizer = SimAdam(critic.parameters(), device)
    mf = memforensics.install(
        device="sim", out_dir=str(tmp_path), model=[actor, (critic, actor)], optimizer=(optimizer,)
    )
    assert mf.tracked == ([actor, critic], [optimizer])


def test_a_flat_buffer_keeps_each_tensors_name_and_offset(tmp_path: Path) -> None:
    """Parameters that are views of one allocation: one entry each, same address, own offset."""
    device = reset_device(total_bytes=64 * MiB)
    model = SimModule(device, {"w0": MiB, "w1": 3 * MiB, "w2": 4096}, flat=True)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), model=model)
    entries = _sidecar(mf.dump())["tensors"]  # type: ignore[arg-type]
    assert [(e["name"], e["offset"], e["bytes"]) for e in entries] == [
        ("w0", 0, MiB),
        ("w1", MiB, 3 * MiB),
        ("w2", 4 * MiB, 4096),
    ]
    assert len({e["address"] for e in entries}) == 1


def test_steps_never_walk_the_model(tmp_path: Path) -> None:
    """The walk happens at dumps only: steps that dump nothing never read the model."""
    device = reset_device(total_bytes=64 * MiB)

    class Counting(SimModule):
        walks = 0

        def named_parameters(self) -> Any:
            Counting.walks += 1
            return super().named_parameters()

    model = Counting(device, {"w": MiB})
    mf = memforensics.install(steps=2, every=10, device="sim", out_dir=str(tmp_path), model=model)
    for step in range(5):  # one window (steps 0-1) is dumped, the other steps dump nothing
        with mf.step(step):
            pass
    assert Counting.walks == 1
    mf.dump()
    assert Counting.walks == 2


def test_tensors_on_another_device_are_left_out() -> None:
    """A dump of an accelerator lists no CPU tensor, and a CPU walk no accelerator tensor."""
    device = reset_device(total_bytes=64 * MiB)
    model = SimModule(device, {"w": MiB})
    tracker = Tracker()
    tracker.add(model)
    on_cpu = tracker.tensors("cpu")
    assert on_cpu is not None
    assert on_cpu.entries == []
    sim = tracker.tensors("sim")
    assert sim is not None
    assert [e["name"] for e in sim.entries] == ["w"]


def test_past_the_bound_the_largest_tensors_are_kept() -> None:
    """Over the limit, the smallest entries are left out and counted; order is kept."""
    entries = [{"bytes": size, "name": str(size)} for size in (5, 1, 9, 3, 7)]
    kept = bounded(entries, limit=3)
    assert [e["bytes"] for e in kept.entries] == [5, 9, 7]
    assert kept.dropped == 2


def test_a_full_sidecar_stays_within_what_readers_accept() -> None:
    """MAX_TENSORS entries with the longest names: the sidecar is under the readers' limit."""
    long = "x" * (3 * MAX_NAME)
    entry = {
        "address": 2**48 - 1,
        "offset": 2**40,
        "bytes": 2**40,
        "kind": "optimizer_state",
        "name": ("…" + long)[-MAX_NAME:],
    }
    tensors = bounded([dict(entry) for _ in range(MAX_TENSORS + 5)])
    context = SidecarContext.collect(rank=0, world_size=1, device="cuda", torch_version="2.13")
    sidecar = build_sidecar(
        context,
        kind="manual",
        snapshot_file=Path("x.pickle"),
        snapshot_bytes=1,
        created_at=datetime.now(UTC),
        device_index=0,
        tensors=tensors,
    )
    text = json.dumps(sidecar, indent=2, sort_keys=True)  # as capture/atomic.py writes it
    assert len(text.encode()) < SIDECAR_LIMIT
    assert sidecar["tensors_dropped"] == 5


def test_a_long_name_keeps_its_end(tmp_path: Path) -> None:
    """A name past MAX_NAME characters is cut from the front, so its last parts stay."""
    device = reset_device(total_bytes=64 * MiB)
    name = "blocks." * 40 + "attn.weight"
    model = SimModule(device, {name: 4096})
    tracker = Tracker()
    tracker.add(model)
    found = tracker.tensors("sim")
    assert found is not None
    [entry] = found.entries
    assert len(entry["name"]) == MAX_NAME
    assert entry["name"].endswith(".attn.weight")
    assert entry["name"].startswith("…")


def test_a_finder_adds_what_it_finds_at_each_dump_and_survives_a_new_configuration(
    tmp_path: Path,
) -> None:
    """track(finder=...) lists, in each later dump, the tensors of the models the finder
    returns then (a model made after the call too), each once beside a tracked one, and an
    install() with another configuration keeps the finder."""
    device = reset_device(total_bytes=64 * MiB)
    tracked = SimModule(device, {"a.weight": MiB})
    found: list[SimModule] = [tracked]
    mf = memforensics.install(device="sim", out_dir=str(tmp_path / "a"), model=tracked)
    mf.track(finder=lambda: (list(found), []))
    found.append(SimModule(device, {"b.weight": 2 * MiB}))  # made after the call
    names = [entry["name"] for entry in _sidecar(mf.dump())["tensors"]]  # type: ignore[arg-type]
    assert sorted(names) == ["a.weight", "b.weight"]
    second = memforensics.install(device="sim", out_dir=str(tmp_path / "b"))
    found.append(SimModule(device, {"c.weight": MiB}))
    names = [entry["name"] for entry in _sidecar(second.dump())["tensors"]]  # type: ignore[arg-type]
    assert sorted(names) == ["a.weight", "b.weight", "c.weight"]


def test_a_finder_that_is_not_callable_is_a_config_error(tmp_path: Path) -> None:
    """track(finder="models") fails at the call, naming the argument."""
    reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="finder must be callable"):
        mf.track(finder="models")  # type: ignore[arg-type]
