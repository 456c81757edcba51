"""Lightning under the real ``memforensics plan``: the Trainer's early stopping on a metric that
should rise runs to the epoch limit, as one that should fall does; Fabric sets up a model made
on the device."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, script

pytest.importorskip("lightning")

pytestmark = [pytest.mark.integration, pytest.mark.torch, pytest.mark.extras]

ACCURACY = """
import sys
import torch
import lightning as L
from lightning.pytorch.callbacks import EarlyStopping
from torch.utils.data import DataLoader, TensorDataset

class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(),
                                       torch.nn.Linear(1024, 4))
    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)
    def validation_step(self, batch, i):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())
        self.log("val_confidence", logits.softmax(-1).amax(-1).mean())
    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())

monitor, mode = sys.argv[1], sys.argv[2]
data = TensorDataset(torch.randn(64, 64), torch.randint(0, 4, (64,)))
trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=6, logger=False,
                    enable_progress_bar=False, enable_checkpointing=False,
                    callbacks=[EarlyStopping(monitor, mode=mode, patience=2)])
trainer.fit(Classifier(), DataLoader(data, batch_size=16), DataLoader(data, batch_size=16))
print("epochs", trainer.current_epoch)
"""


@pytest.mark.parametrize(
    ("monitor", "mode", "would_stop"),
    [("val_acc", "max", False), ("val_confidence", "max", True), ("val_loss", "min", False)],
)
def test_early_stopping_runs_to_max_epochs_whichever_way_its_metric_improves(
    tmp_path: Path, monitor: str, mode: str, would_stop: bool
) -> None:
    """A real Trainer with EarlyStopping (patience 2) trains all 6 epochs whether it watches an
    accuracy (which rises in a plan), a loss (which falls) or another metric that should rise
    (a mean confidence, made up as a falling value); where the callback would have stopped,
    the plan says once that early stopping never ends a planned run."""
    script(tmp_path, ACCURACY)
    done = plan(tmp_path, "train.py", monitor, mode)
    assert done.returncode == 0, done.stderr
    assert "epochs 6" in done.stdout
    said = done.stderr.count("early stopping never ends a planned run")
    assert said == (1 if would_stop else 0)


FABRIC = """
import torch
import lightning as L

fabric = L.Fabric(accelerator="cuda", devices=1, precision="32-true")
with fabric.init_module(empty_init=True):
    model = torch.nn.Linear(1024, 1024, bias=False)  # 4 MiB of float32 weights
model = fabric.setup(model)
optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters()))
print("setup", torch.cuda.memory_allocated())
loss = model(torch.randn(8, 1024, device=fabric.device)).sum()
fabric.backward(loss)
optimizer.step()
"""


def test_a_fabric_model_set_up_on_the_device_takes_its_optimizer(tmp_path: Path) -> None:
    """``fabric.init_module(empty_init=True)`` on one GPU makes the model on the device: Fabric's
    ``setup`` keeps it (it materialised it again, as if the script had made it on ``meta``) and
    ``setup_optimizers`` takes the optimizer over it, where it refused "the model's meta-device
    parameters" (litgpt's ``pretrain``)."""
    script(tmp_path, FABRIC)
    done = plan(tmp_path, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    [setup] = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("setup")]
    assert int(setup) == 4 * 1024 * 1024  # the weight alone, made once
