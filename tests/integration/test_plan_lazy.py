"""Lazy modules under ``plan``: a model of ``nn.LazyConv2d``, ``nn.LazyBatchNorm2d`` and
``nn.LazyLinear`` moved to the device holds nothing there until its first forward, which makes
its parameters on the device at their inferred sizes, so from then on it holds what the same
model built with explicit sizes holds, compiled or not. Each runs through the real
``memforensics plan`` console command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

pytestmark = [pytest.mark.integration, pytest.mark.torch]

BLOCK = 512  # the caching allocator's smallest block

MODELS = """
from torch import nn


def lazy():
    return nn.Sequential(
        nn.LazyConv2d(16, 3), nn.LazyBatchNorm2d(), nn.ReLU(), nn.Flatten(), nn.LazyLinear(10)
    )


def explicit():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 30 * 30, 10),
    )
"""
"""The same model twice: its sizes inferred at the first forward, and written out."""

TRAIN = (
    MODELS
    + """
import json, sys
import torch

built, how = sys.argv[1], sys.argv[2]
model = lazy() if built == "lazy" else explicit()
model = model.to("cuda") if how == "to" else model.cuda()
moved = torch.cuda.memory_allocated()
run = torch.compile(model) if how == "compile" else model
out = run(torch.randn(8, 3, 32, 32, device="cuda"))
first = torch.cuda.memory_allocated()
optimizer = torch.optim.Adam(model.parameters())
out.sum().backward()
optimizer.step()
tensors = [*model.parameters(), *model.buffers()]
print(json.dumps({
    "moved": moved,
    "first": first,
    "stepped": torch.cuda.memory_allocated(),
    "shapes": [list(t.shape) for t in tensors],
    "devices": [t.get_device() for t in tensors],
    "addresses": len({t.data_ptr() for t in tensors} - {0}),
}))
"""
)


def _held(model: torch.nn.Module) -> int:
    """Bytes the caching allocator gives a model's tensors on the device: each in whole blocks."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(-(-t.nbytes // BLOCK) * BLOCK for t in tensors)


def _planned(folder: Path, built: str, how: str) -> dict[str, object]:
    """The facts :data:`TRAIN` prints, planned with the model ``built`` and moved ``how``."""
    done = plan(folder, "train.py", built, how)
    assert done.returncode == 0, done.stderr
    facts: dict[str, object] = json.loads(done.stdout.splitlines()[0])
    return facts


@pytest.mark.parametrize("how", ["cuda", "to", "compile"])
def test_a_lazy_model_makes_its_parameters_on_the_device_at_its_first_forward(
    tmp_path: Path, how: str
) -> None:
    """A lazy model moved to the device holds only its one initialized buffer there; after its
    first forward it holds exactly what the explicit model does, every tensor on device 0."""
    script(tmp_path, TRAIN)
    namespace: dict[str, object] = {}
    exec(MODELS, namespace)  # the models, built on the CPU for their true sizes
    explicit = namespace["explicit"]()  # type: ignore[operator]
    counter = 8  # LazyBatchNorm2d's num_batches_tracked, a real int64 buffer from the start
    lazy = _planned(tmp_path, "lazy", how)
    known = _planned(tmp_path, "explicit", how)
    assert known["moved"] == _held(explicit)
    assert lazy["moved"] == -(-counter // BLOCK) * BLOCK
    assert lazy["shapes"] == [list(t.shape) for t in (*explicit.parameters(), *explicit.buffers())]
    assert lazy["devices"] == [0] * len(lazy["shapes"])  # type: ignore[arg-type]
    assert lazy["addresses"] == len(lazy["shapes"])  # type: ignore[arg-type]
    assert lazy["first"] == known["first"]
    assert lazy["stepped"] == known["stepped"]


def test_a_checkpoint_loaded_into_a_lazy_model_on_the_device_lands_there(tmp_path: Path) -> None:
    """``load_state_dict`` into a lazy layer on the device makes its parameters there, at the
    checkpoint's sizes, without torch's "copying into a meta parameter is a no-op" warning."""
    script(
        tmp_path,
        """
        import json
        import torch
        from torch import nn

        state = nn.Linear(128, 256).state_dict()
        layer = nn.LazyLinear(256).cuda()
        layer.load_state_dict(state)
        held = torch.cuda.memory_allocated()
        print(json.dumps({"held": held, "shape": list(layer.weight.shape)}))
        """,
    )
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts == {"held": 256 * 128 * 4 + 256 * 4, "shape": [256, 128]}
    assert "no-op" not in done.stderr
