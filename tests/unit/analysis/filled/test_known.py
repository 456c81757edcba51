"""Kinds known from the process, on the sim device: what is tracked and what is not, blocks holding
several kinds, what summary and report say. Every byte of a real model and optimizer is checked
under plan, in tests/integration/test_plan_capture.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import memforensics
from memforensics.analysis import load_dump, summarize, what_filled
from memforensics.analysis.dump import dump_meta
from memforensics.analysis.summary import summary_text
from memforensics.testing import (
    Block,
    SimAdam,
    SimArray,
    SimModule,
    SimOutOfMemoryError,
    SnapshotBuilder,
    make_sidecar,
    reset_device,
    write_dump,
)

MiB = 1 << 20
KiB = 1 << 10


def _model(device: Any) -> tuple[SimModule, SimAdam]:
    layers = {f"layers.{i}.weight": (i + 1) * MiB for i in range(4)}
    layers.update({f"layers.{i}.bias": 4 * KiB for i in range(4)})
    model = SimModule(device, layers, {"norm.running_mean": 4 * KiB, "norm.running_var": 4 * KiB})
    return model, SimAdam(model.parameters(), device)


def _truth(model: SimModule, optimizer: SimAdam) -> dict[int, str]:
    """Block address -> the kind of the tensor it holds, from the model and optimizer."""
    truth: dict[int, str] = {}
    for _, param in model.named_parameters():
        truth[param.untyped_storage().data_ptr()] = "parameter"
        if param.grad is not None:
            truth[param.grad.untyped_storage().data_ptr()] = "gradient"
        for key in ("exp_avg", "exp_avg_sq"):
            state = optimizer.state.get(param, {}).get(key)
            if state is not None:
                truth[state.untyped_storage().data_ptr()] = "optimizer_state"
    for _, buffer in model.named_buffers():
        truth[buffer.untyped_storage().data_ptr()] = "buffer"
    return truth


def _train(tmp_path: Path) -> tuple[memforensics.MemoryForensics, dict[int, str], dict[int, str]]:
    """Two windowed steps of forward (activations), backward, Adam, then an OOM in forward.

    Returns the facade and the truth at the window's dump and at the OOM.
    """
    device = reset_device(total_bytes=160 * MiB)
    mf = memforensics.install(steps=2, max_windows=1, device="sim", out_dir=str(tmp_path))
    model, optimizer = _model(device)
    mf.track(model=model, optimizer=optimizer)
    window_truth: dict[int, str] = {}
    kept = []
    for step in range(3):
        with pytest.raises(SimOutOfMemoryError) if step == 2 else _nothing(), mf.step(step):
            activations = [SimArray.empty(device, size * MiB) for size in (8, 6, 6, 4)]
            kept.append(SimArray.empty(device, 2 * MiB))  # a metric kept per step: inferred
            if step == 2:
                device.empty(1 << 40)
            model.backward()
            del activations
            optimizer.step()
            if step == 1:
                window_truth = _truth(model, optimizer)
            else:
                model.zero_grad()
    return mf, window_truth, _truth(model, optimizer)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_what_is_not_tracked_is_still_inferred(tmp_path: Path) -> None:
    """The kept metrics are no known kind: inferred, below confidence 1, no known bytes."""
    mf, _, truth = _train(tmp_path)
    filled = what_filled(load_dump(mf.dumps[-1]))
    others = [a for a in filled.lifetimes.at_snapshot() if a.addr not in truth]
    assert others
    assert all(a.known is None and a.confidence < 1.0 for a in others)
    inferred = sum(k.bytes - k.known_bytes for k in filled.kinds)
    assert inferred == sum(a.size for a in others)


def test_a_block_holding_several_kinds_is_split_by_bytes(tmp_path: Path) -> None:
    """One storage holding a parameter (2 MiB) and its gradient (1 MiB): split 2:1."""
    device = reset_device(total_bytes=64 * MiB)
    flat = SimArray.empty(device, 3 * MiB)
    weight = flat.view(0, 2 * MiB)
    weight.grad = flat.view(2 * MiB, MiB)

    class Flat:
        def named_parameters(self) -> Any:
            yield "weight", weight

        def named_buffers(self) -> Any:
            return iter(())

    module = Flat()  # tracking holds weak references: the test keeps the module alive
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), model=module)
    filled = what_filled(load_dump(mf.dump()))  # type: ignore[arg-type]
    [block] = [
        a for a in filled.lifetimes.at_snapshot() if a.addr == flat.untyped_storage().data_ptr()
    ]
    third = block.size // 3
    assert block.known == (("parameter", block.size - third), ("gradient", third))
    assert block.kind == "parameter"
    kinds = {k.kind: (k.bytes, k.known_bytes, k.blocks) for k in filled.kinds}
    assert kinds["parameter"] == (block.size - third, block.size - third, 1)
    assert kinds["gradient"] == (third, third, 0)


def test_the_summary_says_which_bytes_are_known(tmp_path: Path) -> None:
    """summary's text names the bytes from the process and its JSON carries known_bytes."""
    mf, _, _ = _train(tmp_path)
    summary = summarize(load_dump(mf.dumps[-1]))
    text = summary_text(summary, verbose=True)
    assert "from the process" in text
    assert "the rest is inferred" in text
    assert summary.known is not None
    assert summary.known.matched == summary.known.tensors  # every tensor is on the sim device
    assert sum(k.known_bytes for k in summary.kinds) == summary.known.bytes


def test_without_tracked_tensors_nothing_is_known(tmp_path: Path) -> None:
    """A dump whose sidecar lists no tensors: no known bytes, no line about the process."""
    device = reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path))
    kept = SimArray.empty(device, MiB)
    summary = summarize(load_dump(mf.dump()))  # type: ignore[arg-type]
    assert summary.known is None
    assert all(k.known_bytes == 0 for k in summary.kinds)
    assert "from the process" not in summary_text(summary)
    assert kept.nbytes == MiB


def test_a_sidecar_entry_that_is_not_well_formed_is_ignored() -> None:
    """Entries without a positive address or bytes, or of no string kind, are dropped."""
    good = {"address": 4096, "offset": 0, "bytes": 512, "kind": "parameter", "name": "w"}
    tensors = [
        good,
        dict(good, address=0),
        dict(good, bytes=-1),
        dict(good, offset="0"),
        dict(good, kind=None),
        "w",
        dict(good, address=True),
    ]
    meta = dump_meta(None, make_sidecar("manual", tensors=tensors))
    assert meta.tensors is not None
    assert [(t.address, t.name) for t in meta.tensors] == [(4096, "w")]
    assert dump_meta(None, make_sidecar("manual")).tensors is None


def test_an_unknown_kind_or_a_freed_address_labels_nothing(tmp_path: Path) -> None:
    """A tensor of a kind analysis does not know, or at no live block, leaves inference alone."""
    builder = SnapshotBuilder()
    address = builder.segment(Block(MiB))
    snapshot = builder.build()
    tensors = [
        {"address": address, "offset": 0, "bytes": MiB, "kind": "activation", "name": "a"},
        {"address": address + 2 * MiB, "offset": 0, "bytes": MiB, "kind": "parameter", "name": "b"},
    ]
    path = write_dump(
        tmp_path / "x.pickle", snapshot, sidecar=make_sidecar("manual", tensors=tensors)
    )
    filled = what_filled(load_dump(path))
    assert filled.known is not None
    assert (filled.known.tensors, filled.known.matched, filled.known.bytes) == (2, 0, 0)
    assert all(k.known_bytes == 0 for k in filled.kinds)


def test_the_report_shows_the_bytes_from_the_process(tmp_path: Path) -> None:
    """The report's kinds table gains a column of the bytes the process told, per kind."""
    from memforensics.analysis.report import ReportBuilder

    mf, _, _ = _train(tmp_path)
    dump = load_dump(mf.dumps[-1])
    builder = ReportBuilder()
    builder.add(dump)
    html = builder.html()
    document = json.loads(html.split('id="mf-data">', 1)[1].split("</script>", 1)[0])
    [kinds] = [
        part for part in document["dumps"][0]["devices"][0]["sections"] if part.get("id") == "kinds"
    ]
    labels = [column["label"] for column in kinds["data"]["columns"]]
    assert labels[-1] == "from the process at the snapshot"
    told = {row[0]: row[-1] for row in kinds["data"]["rows"]}
    now = {k.kind: k.known_bytes for k in what_filled(dump).kinds}
    assert told == {kind: now.get(kind, 0) for kind in told}  # kinds only at the peak: 0
    assert told["optimizer_state"] > 0
    assert told["unknown"] == 0
