"""``torch.export`` through the real ``memforensics plan``: an exported program runs on the
planned device as the model it was exported from does, and AOTInductor stops the plan in one
line."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

EXPORTED = """
import sys
import torch
import torch.nn as nn

class Tagger(nn.Module):
    def __init__(self, d=256, T=128):
        super().__init__()
        self.pos = nn.Embedding(T, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, 10)

    def forward(self, x):  # each value dropped after its last use, as the exported graph does
        h = x + self.pos(torch.arange(x.shape[1], device=x.device))
        h = self.up(h)
        h = nn.functional.gelu(h)
        return self.down(h)

model = Tagger().cuda().eval()
x = torch.randn(32, 128, 256, device="cuda")
peaks = []
with torch.no_grad():
    for run in ("eager", "exported"):
        if run == "exported":
            batch = torch.export.Dim("batch", min=1, max=1024)
            model = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}},
                                        strict="--strict" in sys.argv).module()
        torch.cuda.reset_peak_memory_stats()
        y = model(x)
        peaks.append(torch.cuda.max_memory_allocated())
        del y
print("device", model(x).device, "same peak", peaks[0] == peaks[1], peaks)
"""


@pytest.mark.parametrize("strict", [False, True])
def test_an_exported_program_runs_on_the_device_as_its_model_does(
    tmp_path: Path, strict: bool
) -> None:
    """``torch.export.export`` traces without taking memory, with or without dynamo, and the
    program's module, whose positions come from ``arange(device=x.device)``, runs on the
    planned device to the same peak as the eager model it came from."""
    script(tmp_path, EXPORTED)
    done = plan(tmp_path, "train.py", *(["--strict"] if strict else []))
    assert done.returncode == 0, done.stderr
    assert "device cuda:0 same peak True" in done.stdout


AOTI = """
import os
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1)).cuda()
example = (torch.randn(8, 10, device="cuda"),)
with torch.inference_mode():
    exported = torch.export.export(model, example)
    path = torch._inductor.aoti_compile_and_package(
        exported, package_path=os.path.join(os.getcwd(), "model.pt2"))
    print(torch._inductor.aoti_load_package(path)(*example).shape)
"""


def test_aot_inductor_stops_the_plan_in_one_line(tmp_path: Path) -> None:
    """AOTInductor, which builds CUDA kernels a plan can neither build nor run, stops the plan
    with one line naming the call and what to plan instead, and no traceback."""
    script(tmp_path, AOTI)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 2
    said = [line for line in done.stderr.splitlines() if line.startswith("memforensics plan:")]
    assert said
    assert "torch._inductor.aoti_compile_and_package" in said[0]
    assert "torch.export.export" in said[0]
    assert "Traceback" not in done.stderr
