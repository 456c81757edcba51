"""The Lightning callback against the real Lightning: windows, OOM and the missing-extra error."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memforensics.capture.facade import current
from memforensics.testing import SimOutOfMemoryError, get_device, reset_device

# Lightning 2.6 calls a torch pytree API that torch 2.13 deprecates; not under test, and matched
# narrowly so that any other warning still fails the test.
_quiet = pytest.mark.filterwarnings(
    r"ignore:`isinstance\(treespec, LeafSpec\)` is deprecated:FutureWarning"
)


@pytest.fixture(autouse=True)
def _fresh_sim_device() -> Iterator[None]:
    """Each test starts and ends with a fresh sim device."""
    reset_device()
    yield
    reset_device()


def _module(fail_at: int | None = None) -> Any:
    """A tiny LightningModule whose steps also allocate on the sim device."""
    torch = pytest.importorskip("torch")
    pl = pytest.importorskip("lightning.pytorch")

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.kept: list[Any] = []
            self.error: BaseException | None = None
            self.batches = 0
            self.tracked: Any = None

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.batches += 1
            facade = current()
            self.tracked = facade.tracked if facade is not None else None
            self.kept.append(get_device().empty(1 << 20))
            if fail_at is not None and self.batches == fail_at + 1:
                try:
                    get_device().empty(1 << 40)
                except SimOutOfMemoryError as exc:
                    self.error = exc
                    raise
            (x,) = batch
            return self.layer(x).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> Any:
            data = torch.utils.data.TensorDataset(torch.randn(8, 4))
            return torch.utils.data.DataLoader(data, batch_size=2)

    return Tiny()


def _trainer(callback: Any, **kwargs: Any) -> Any:
    pl = pytest.importorskip("lightning.pytorch")
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=kwargs.pop("max_epochs", 1),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
        **kwargs,
    )


def _callback(**options: Any) -> Any:
    pytest.importorskip("lightning.pytorch")  # skip, rather than fail, where the extra is absent
    lightning = importlib.import_module("memforensics.integrations.lightning")
    return lightning.MemoryForensicsCallback(**options)


def _sidecars(out: Path) -> dict[str, dict[str, Any]]:
    return {path.parent.name: json.loads(path.read_text()) for path in out.glob("*/*.json")}


@pytest.mark.extras
@pytest.mark.torch
@_quiet
def test_fit_writes_a_window_per_two_batches(tmp_path: Path) -> None:
    """trainer.fit over 4 batches with steps=2 writes windows steps0-1 and steps2-3, then closes."""
    callback = _callback(steps=2, device="sim", out_dir=str(tmp_path), keep_last=None)
    _trainer(callback).fit(_module())
    sidecars = _sidecars(tmp_path)
    assert set(sidecars) == {"steps0-1", "steps2-3"}
    assert sidecars["steps2-3"]["steps"] == [2, 3]
    assert not any(sidecar["partial"] for sidecar in sidecars.values())
    assert callback.forensics is None


@pytest.mark.extras
@pytest.mark.torch
@_quiet
def test_steps_count_batches_across_epochs_and_accumulation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With gradient accumulation and two epochs, steps are batch indices 0..7: increasing,
    never repeated, so no step-order warning is logged and windows tile the 8 batches."""
    callback = _callback(steps=4, device="sim", out_dir=str(tmp_path), keep_last=None)
    _trainer(callback, max_epochs=2, accumulate_grad_batches=2).fit(_module())
    assert set(_sidecars(tmp_path)) == {"steps0-3", "steps4-7"}
    assert "step_not_increasing" not in capsys.readouterr().err


@pytest.mark.extras
@pytest.mark.torch
@_quiet
def test_oom_in_training_step_is_dumped_and_propagates(tmp_path: Path) -> None:
    """A sim OOM in training_step leaves trainer.fit as the same object, with an oom/ dump for
    that batch and the open window dumped as partial."""
    module = _module(fail_at=2)
    callback = _callback(steps=4, device="sim", out_dir=str(tmp_path))
    with pytest.raises(SimOutOfMemoryError) as excinfo:
        _trainer(callback).fit(module)
    assert excinfo.value is module.error
    [oom] = (tmp_path / "oom").glob("*.pickle")
    assert "_step2_" in oom.name
    sidecars = _sidecars(tmp_path)
    assert sidecars["oom"]["oom"]["requested_bytes"] >= 1 << 40
    assert sidecars["steps0-2"]["partial"] is True
    assert callback.forensics is None


@pytest.mark.extras
@pytest.mark.torch
@_quiet
def test_the_module_and_its_optimizers_are_tracked(tmp_path: Path) -> None:
    """While training, the facade tracks the LightningModule and trainer.optimizers, so each
    sidecar lists tensors (none on the sim device: this module's are on the CPU)."""
    module = _module()
    callback = _callback(steps=2, device="sim", out_dir=str(tmp_path))
    trainer = _trainer(callback)
    trainer.fit(module)
    modules, optimizers = module.tracked
    assert modules == [module]
    assert optimizers == list(trainer.optimizers)
    assert len(optimizers) == 1
    assert all(sidecar["tensors"] == [] for sidecar in _sidecars(tmp_path).values())


@pytest.mark.extras
@pytest.mark.torch
def test_config_object_and_bad_options() -> None:
    """A ForensicsConfig may be passed as config=; a bad keyword fails when the callback is made."""
    import memforensics

    config = memforensics.ForensicsConfig(steps=3, device="sim")
    callback = _callback(config=config, out_dir="elsewhere")
    assert callback._holder.options["steps"] == 3
    assert callback._holder.options["out_dir"] == "elsewhere"
    with pytest.raises(memforensics.ConfigError, match="steps"):
        _callback(steps=0)


def test_missing_lightning_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Lightning, importing the integration says pip install "memforensics[lightning]"."""
    monkeypatch.setitem(sys.modules, "lightning", None)
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.delitem(sys.modules, "memforensics.integrations.lightning", raising=False)
    with pytest.raises(ImportError, match=r'pip install "memforensics\[lightning\]"'):
        importlib.import_module("memforensics.integrations.lightning")


def test_integrations_package_imports_no_framework() -> None:
    """`import memforensics.integrations` imports neither Lightning nor transformers."""
    import subprocess

    code = (
        "import sys, memforensics.integrations\n"
        "print(any(m.split('.')[0] in {'lightning', 'transformers', 'torch'} for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
