"""A planned script's tensors are freed when the script drops its last reference, as a GPU
frees them, not when Python's cycle collector runs: the plan's own bookkeeping of an operator
keeps no reference cycle that holds a stand-in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

DROPPED = """
import gc, json, weakref
import torch

gc.disable()  # only reference counts free; a cycle would keep its tensors until the end
model = torch.nn.Sequential(
    torch.nn.Embedding(100, 64), torch.nn.LayerNorm(64), torch.nn.Linear(64, 128),
    torch.nn.GELU(), torch.nn.Dropout(0.1), torch.nn.Linear(128, 100),
).cuda()
x = torch.randint(0, 100, (8, 16), device="cuda")
for _ in range(2):
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out.view(-1, 100), x.view(-1))
    loss.backward()
    print(loss.item(), out.argmax(-1)[0, :3].tolist(), bool(torch.isfinite(out).all()))
    model.zero_grad(set_to_none=True)
with torch.no_grad():
    copies = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(copies)
refs = [weakref.ref(p) for p in model.parameters()] + [weakref.ref(v) for v in copies.values()]
del model, x, out, loss, copies
dropped = torch.cuda.memory_allocated()
gc.collect()
print(json.dumps({
    "alive": sum(r() is not None for r in refs),
    "tensors": len(refs),
    "freed_by_collector": dropped - torch.cuda.memory_allocated(),
}))
"""


def test_a_model_the_script_drops_is_freed_without_the_cycle_collector(tmp_path: Path) -> None:
    """Parameters and their clones, read on the CPU by the plan along the way (a loss's item,
    an argmax's list, a finiteness test), are freed at the script's ``del`` with ``gc``
    disabled: nothing is left for the collector to free."""
    script(tmp_path, DROPPED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["tensors"] == 14
    assert facts["alive"] == 0
    assert facts["freed_by_collector"] == 0
