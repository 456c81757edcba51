"""Training-loop libraries under the real ``memforensics plan``: PyTorch-Ignite's and
skorch's early stopping, whose watched metric is made up in a plan, never end the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch, pytest.mark.extras]

IGNITE = """
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import EarlyStopping
from ignite.metrics import Accuracy, Loss

data = DataLoader(TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,))), batch_size=16)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda()
criterion = torch.nn.CrossEntropyLoss()
trainer = create_supervised_trainer(model, torch.optim.Adam(model.parameters()), criterion,
                                    device="cuda")
evaluator = create_supervised_evaluator(model, device="cuda",
                                        metrics={"acc": Accuracy(), "loss": Loss(criterion)})
trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda engine: evaluator.run(data))
if sys.argv[1] == "acc":
    stop = EarlyStopping(patience=2, min_delta=0.01, trainer=trainer,
                         score_function=lambda engine: engine.state.metrics["acc"])
else:
    stop = EarlyStopping(patience=2, trainer=trainer,
                         score_function=lambda engine: -engine.state.metrics["loss"])
evaluator.add_event_handler(Events.COMPLETED, stop)
trainer.run(data, max_epochs=10)
print("epochs", trainer.state.epoch)
"""


@pytest.mark.parametrize("watched", ["acc", "loss"])
def test_ignite_early_stopping_runs_to_its_epoch_limit(tmp_path: Path, watched: str) -> None:
    """Ignite's EarlyStopping (patience 2) trains all 10 epochs whether it watches an accuracy
    that must rise by 0.01 (which the made-up values do not: it would stop after 3 epochs) or
    the negated validation loss (which improves as made-up values fall); the plan says once
    that early stopping never ends a planned run where the patience would have run out."""
    pytest.importorskip("ignite")
    script(tmp_path, IGNITE)
    done = plan(tmp_path, "train.py", watched)
    assert done.returncode == 0, done.stderr
    assert "epochs 10" in done.stdout
    said = done.stderr.count("early stopping never ends a planned run")
    assert said == (1 if watched == "acc" else 0)


SKORCH = """
import numpy as np
import torch
from skorch import NeuralNetClassifier
from skorch.callbacks import EarlyStopping

rng = np.random.default_rng(0)
X = rng.standard_normal((200, 16)).astype(np.float32)
y = rng.integers(0, 4, 200).astype(np.int64)
module = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4),
                             torch.nn.Softmax(dim=-1))
net = NeuralNetClassifier(module, device="cuda", max_epochs=8, verbose=0, callbacks=[
    EarlyStopping(monitor="valid_acc", lower_is_better=False, patience=2, threshold=0.5,
                  threshold_mode="abs")])
net.fit(X, y)
print("epochs", len(net.history))
"""


def test_skorch_early_stopping_runs_to_its_epoch_limit(tmp_path: Path) -> None:
    """skorch's EarlyStopping on the validation accuracy (patience 2, an improvement of 0.5
    required, which no made-up accuracy makes: it would stop after 3 epochs) trains all 8
    epochs, and the plan says once that early stopping never ends a planned run."""
    pytest.importorskip("skorch")
    script(tmp_path, SKORCH)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "epochs 8" in done.stdout
    assert done.stderr.count("early stopping never ends a planned run") == 1
