"""Training-loop libraries under the real ``memforensics plan``: PyTorch-Ignite's and
skorch's early stopping, whose watched metric is made up in a plan, never end the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch, pytest.mark.extras]

IGNITE = """
import torch
from torch.utils.data import DataLoader, TensorDataset
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import EarlyStopping
from ignite.metrics import Accuracy

torch.manual_seed(0)
data = DataLoader(TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,))), batch_size=16)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda()
trainer = create_supervised_trainer(model, torch.optim.Adam(model.parameters()),
                                    torch.nn.CrossEntropyLoss(), device="cuda")
evaluator = create_supervised_evaluator(model, metrics={"acc": Accuracy()}, device="cuda")
trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda engine: evaluator.run(data))
stop = EarlyStopping(patience=2, min_delta=1.0, trainer=trainer,
                     score_function=lambda engine: engine.state.metrics["acc"])
evaluator.add_event_handler(Events.COMPLETED, stop)
trainer.run(data, max_epochs=10)
print("epochs", trainer.state.epoch)
"""


def test_ignite_early_stopping_runs_to_its_epoch_limit(tmp_path: Path) -> None:
    """Ignite's EarlyStopping on an accuracy that must rise by 1.0 to count (which no accuracy
    does, so its patience of 2 runs out at the third evaluation) trains all 10 epochs, and the
    plan says once that early stopping never ends a planned run."""
    pytest.importorskip("ignite")
    script(tmp_path, IGNITE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "epochs 10" in done.stdout
    assert done.stderr.count("early stopping never ends a planned run") == 1


SKORCH = """
import numpy as np
import torch
from skorch import NeuralNetClassifier
from skorch.callbacks import EarlyStopping

torch.manual_seed(0)
rng = np.random.default_rng(0)
X = rng.standard_normal((200, 16)).astype(np.float32)
y = rng.integers(0, 4, 200).astype(np.int64)
module = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4),
                             torch.nn.Softmax(dim=-1))
net = NeuralNetClassifier(module, device="cuda", max_epochs=8, verbose=0, callbacks=[
    EarlyStopping(monitor="valid_acc", lower_is_better=False, patience=2, threshold=1.0,
                  threshold_mode="abs")])
net.fit(X, y)
print("epochs", len(net.history))
"""


def test_skorch_early_stopping_runs_to_its_epoch_limit(tmp_path: Path) -> None:
    """skorch's EarlyStopping on the validation accuracy (patience 2, an improvement of 1.0
    required, which no accuracy makes: it would stop after 3 epochs) trains all 8 epochs, and
    the plan says once that early stopping never ends a planned run."""
    pytest.importorskip("skorch")
    script(tmp_path, SKORCH)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "epochs 8" in done.stdout
    assert done.stderr.count("early stopping never ends a planned run") == 1
