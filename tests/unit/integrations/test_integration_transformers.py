"""The Hugging Face callback against a real ``transformers.Trainer`` on a tiny CPU model."""

from __future__ import annotations

import importlib
import json
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memforensics.capture.facade import current
from memforensics.testing import SimOutOfMemoryError, get_device, reset_device


@pytest.fixture(autouse=True)
def _fresh_sim_device() -> Iterator[None]:
    """Each test starts and ends with a fresh sim device."""
    reset_device()
    yield
    reset_device()


def _model(fail_at: int | None = None) -> Any:
    """A one-layer regression model that returns a loss and allocates on the sim device."""
    torch = pytest.importorskip("torch")

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.kept: list[Any] = []
            self.error: BaseException | None = None
            self.calls = 0
            self.tracked: Any = None

        def forward(self, x: Any, labels: Any) -> dict[str, Any]:
            self.calls += 1
            facade = current()
            self.tracked = facade.tracked if facade is not None else None
            self.kept.append(get_device().empty(1 << 20))
            if fail_at is not None and self.calls == fail_at:
                try:
                    get_device().empty(1 << 40)
                except SimOutOfMemoryError as exc:
                    self.error = exc
                    raise
            loss = (self.layer(x).squeeze(-1) - labels).pow(2).mean()
            return {"loss": loss}

    return Tiny()


def _trainer(tmp_path: Path, model: Any, callback: Any, **kwargs: Any) -> Any:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        report_to=[],
        use_cpu=True,
        per_device_train_batch_size=2,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        **kwargs,
    )
    data = [{"x": torch.randn(4), "labels": torch.tensor(1.0)} for _ in range(16)]
    return transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])


def _callback(**options: Any) -> Any:
    pytest.importorskip("transformers")  # skip, rather than fail, where the extra is absent
    integration = importlib.import_module("memforensics.integrations.transformers")
    return integration.MemoryForensicsCallback(**options)


def _sidecars(out: Path) -> dict[str, dict[str, Any]]:
    return {path.parent.name: json.loads(path.read_text()) for path in out.glob("*/*.json")}


@pytest.mark.extras
@pytest.mark.torch
def test_train_writes_windows_numbered_like_the_trainer(tmp_path: Path) -> None:
    """Four optimizer steps with steps=2 give windows steps1-2 and steps3-4 (HF's 1-based
    step numbers), and the facade is closed when training ends."""
    out = tmp_path / "mf"
    callback = _callback(steps=2, device="sim", out_dir=str(out), keep_last=None)
    _trainer(tmp_path, _model(), callback, max_steps=4).train()
    sidecars = _sidecars(out)
    assert set(sidecars) == {"steps1-2", "steps3-4"}
    assert not any(sidecar["partial"] for sidecar in sidecars.values())
    assert callback.forensics is None


@pytest.mark.extras
@pytest.mark.torch
def test_a_step_spans_all_accumulated_micro_batches(tmp_path: Path) -> None:
    """With gradient_accumulation_steps=2, one step holds both micro-batches' allocations."""
    out = tmp_path / "mf"
    model = _model()
    callback = _callback(steps=1, device="sim", out_dir=str(out), keep_last=None)
    _trainer(tmp_path, model, callback, max_steps=2, gradient_accumulation_steps=2).train()
    assert model.calls == 4
    assert set(_sidecars(out)) == {"step1", "step2"}
    [dump] = (out / "step2").glob("*.pickle")
    trace = pickle.loads(dump.read_bytes())["device_traces"][0]
    sizes = [event["size"] for event in trace if event["action"] == "alloc"]
    assert sizes.count(1 << 20) == 2


@pytest.mark.extras
@pytest.mark.torch
def test_the_model_and_optimizer_are_tracked(tmp_path: Path) -> None:
    """While training, the facade tracks the Trainer's model and its optimizer (unwrapped from
    accelerate's), so each sidecar lists tensors (none on the sim device: these are on the CPU)."""
    out = tmp_path / "mf"
    model = _model()
    callback = _callback(steps=2, device="sim", out_dir=str(out))
    trainer = _trainer(tmp_path, model, callback, max_steps=2)
    trainer.train()
    modules, optimizers = model.tracked
    assert modules == [model]
    assert len(optimizers) == 1
    inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    assert optimizers[0] in (trainer.optimizer, inner)
    assert all(sidecar["tensors"] == [] for sidecar in _sidecars(out).values())


@pytest.mark.extras
@pytest.mark.torch
def test_oom_in_forward_is_dumped_and_propagates(tmp_path: Path) -> None:
    """A sim OOM inside the model leaves trainer.train() as the same object, with an oom/ dump
    tagged with the step the Trainer was running."""
    out = tmp_path / "mf"
    model = _model(fail_at=3)
    callback = _callback(steps=10, device="sim", out_dir=str(out))
    with pytest.raises(SimOutOfMemoryError) as excinfo:
        _trainer(tmp_path, model, callback, max_steps=4).train()
    assert excinfo.value is model.error
    [oom] = (out / "oom").glob("*.pickle")
    assert "_step3_" in oom.name


def test_missing_transformers_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without transformers, the integration's ImportError says how to install the extra."""
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.delitem(sys.modules, "memforensics.integrations.transformers", raising=False)
    with pytest.raises(ImportError, match=r'pip install "memforensics\[transformers\]"$'):
        importlib.import_module("memforensics.integrations.transformers")
