"""CPU tensors built for a module are deferred under a plan: the predicted figures are those of
the tensors made outright, and a value read on the CPU materialises the right values, with one
warning naming the line that read them."""

from __future__ import annotations

import inspect
import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from memforensics.allocator import parse_conf  # noqa: E402
from memforensics.plan import PlanResult, device_spec, run_planned  # noqa: E402
from memforensics.plan.deferred import MATERIALISED  # noqa: E402

pytestmark = [pytest.mark.torch]

SPEC = device_spec(80 << 30, (9, 0), 512 << 20, parse_conf(None))
nn = torch.nn


class Built(nn.Module):
    """Weights made the ways scripts make them, each over the deferral threshold."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(1024, 512)  # kaiming_uniform_ on torch.empty
        std = 0.02
        truncated = nn.init.trunc_normal_(torch.empty(512, 1024), std=std, a=-2 * std, b=2 * std)
        self.truncated = nn.Parameter(truncated)  # reads its draws: recorded whole
        self.embedding = nn.Embedding(2048, 256, padding_idx=0)  # normal_, then a row zeroed
        self.register_buffer("ones", torch.ones(1024, 512))
        self.full = nn.Parameter(torch.full((512, 1024), 0.5))
        copied = torch.empty(512, 1024)
        copied.copy_(torch.randn(512, 1024))  # copy_ from a fresh tensor
        self.copied = nn.Parameter(copied.mul_(3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) @ self.truncated + self.full.sum(0)


def _planned(run: Any, *, defer: bool = True) -> PlanResult:
    result, _ = run_planned(SPEC, run, lambda path, snapshot: None, defer=defer)
    return result


def test_a_value_read_materialises_the_right_values_with_one_warning_naming_the_line() -> None:
    """A module kept on the CPU reads as if built outright: the ones are ones, the fill is 0.5,
    the truncated draws lie within their bounds with about their deviation, the padding row is
    zero, kaiming's bound holds, a copy scaled in place is 3 x a standard normal; one warning
    names the test's line of the first read of drawn values (the ones and the fill read before
    it are python's own values, said nothing of)."""
    found: dict[str, Any] = {}

    def run() -> None:
        torch.manual_seed(0)
        model = Built()
        with torch.no_grad():
            found["ones"] = float(model.ones.sum())
            found["full"] = float(model.full.mean())
            first_read = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
            found["truncated"] = model.truncated.abs().max().item(), model.truncated.std().item()
            found["padding"] = float(model.embedding.weight[0].abs().sum())
            found["embedding_std"] = float(model.embedding.weight[1:].std())
            found["kaiming"] = float(model.linear.weight.abs().max())
            found["copied_std"] = float(model.copied.std())
            found["out"] = tuple(model(torch.ones(2, 1024)).shape)
        found["line"] = first_read

    result = _planned(run)
    assert found["ones"] == 1024 * 512
    assert found["full"] == 0.5
    assert found["truncated"][0] <= 0.04
    assert 0.015 < found["truncated"][1] < 0.02
    assert found["padding"] == 0.0
    assert 0.95 < found["embedding_std"] < 1.05
    assert found["kaiming"] <= 1 / math.sqrt(1024)
    assert 2.9 < found["copied_std"] < 3.1
    assert found["out"] == (2, 1024)
    said = [w for w in result.warnings if w.startswith(MATERIALISED)]
    assert said == [f"{MATERIALISED} (first at {__file__}:{found['line']})"]


def test_materialised_values_are_deterministic_under_the_scripts_seed() -> None:
    """Two planned runs seeded alike read the same materialised weights; another seed reads
    other ones."""

    def weights(seed: int) -> list[torch.Tensor]:
        got: list[torch.Tensor] = []

        def run() -> None:
            torch.manual_seed(seed)
            model = Built()
            with torch.no_grad():
                got.extend(p.clone() for p in model.parameters())

        _planned(run)
        return got

    first, again, other = weights(0), weights(0), weights(1)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], other[0])


def _train() -> None:
    """A model built on the CPU, part of it cast there to bfloat16, moved, trained two steps
    with AdamW under bf16 autocast."""
    torch.manual_seed(0)
    head = nn.Linear(4096, 1024).to(torch.bfloat16)
    model = nn.Sequential(Built().linear, nn.GELU(), nn.Linear(512, 4096), head)
    model = model.to("cuda")
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 1024).to("cuda")
    for _ in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def test_the_predicted_figures_are_the_same_with_and_without_deferral() -> None:
    """Peaks, segments and everything else the plan reports are identical whether the CPU
    weights were deferred or made and initialised outright, and neither run warns."""
    deferred, outright = _planned(_train), _planned(_train, defer=False)
    assert deferred.peak_allocated_bytes > 3 * 4096 * 1024 * 4  # the weights and AdamW's state
    assert deferred == outright
    assert deferred.warnings == ()


def test_weights_loaded_into_a_cpu_model_are_the_checkpoints_own_without_a_warning() -> None:
    """``load_state_dict`` from a CPU state dict before the move overwrites the deferred weights
    whole: they read back as the checkpoint's values, and nothing is said."""
    found: list[bool] = []

    def run() -> None:
        state = {"weight": torch.arange(1024 * 1024.0).view(1024, 1024), "bias": torch.ones(1024)}
        model = nn.Linear(1024, 1024)
        model.load_state_dict(state)
        with torch.no_grad():
            found.append(torch.equal(model.weight, state["weight"]))
            found.append(torch.equal(model.bias, state["bias"]))

    result = _planned(run)
    assert found == [True, True]
    assert result.warnings == ()


def test_torch_save_writes_the_materialised_values() -> None:
    """``torch.save`` of a CPU model's state dict, which reads storages by their bytes, writes
    the values the weights read as, not the untouched memory behind them."""
    import io

    found: list[bool] = []

    def run() -> None:
        torch.manual_seed(0)
        model = nn.Linear(1024, 1024)
        saved = io.BytesIO()
        torch.save(model.state_dict(), saved)
        saved.seek(0)
        loaded = torch.load(saved)
        with torch.no_grad():
            found.append(torch.equal(loaded["weight"], model.weight))
            found.append(0.017 < float(loaded["weight"].std()) < 0.019)  # 1 / sqrt(3 * 1024)

    _planned(run)
    assert found == [True, True]


def test_cpu_tensors_outside_a_module_are_made_as_python_makes_them() -> None:
    """A large CPU tensor the script makes outside any module's construction is an ordinary
    one: computing with it warns of nothing."""
    found: list[float] = []

    def run() -> None:
        torch.manual_seed(0)
        x = torch.randn(1024, 1024)
        found.append(float((x @ x.t()).diagonal().mean()))

    result = _planned(run)
    assert 0.9 * 1024 < found[0] < 1.1 * 1024
    assert result.warnings == ()


def test_torchs_initialisers_keep_their_names_under_a_plan() -> None:
    """Each ``torch.nn.init`` function a plan records keeps its own name, so a library that
    registers the initialisers by name (class_resolver, under pykeen) finds each one once."""
    found: dict[str, str] = {}

    def run() -> None:
        for name, fn in vars(torch.nn.init).items():
            if name.endswith("_") and not name.startswith("_"):
                found[name] = fn.__name__

    _planned(run)
    assert "kaiming_uniform_" in found
    assert found == {name: name for name in found}
