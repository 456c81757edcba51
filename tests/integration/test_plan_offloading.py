"""Activation offloading under ``memforensics plan``: ``saved_tensors_hooks`` that move what
autograd saves to pinned host memory (``save_on_cpu(pin_memory=True)``, and a hand-written
hook copying on a side stream, torchtune's shape) run as on a GPU, so the forward keeps only
its output on the device and backward brings the saved tensors back. The sizes are worked
out here from the shapes. Each runs through the real ``memforensics plan`` console command."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, WIDTH, LAYERS = 256, 1024, 4
ACTIVATION = ROWS * WIDTH * 4
"""Bytes of one float32 activation, a multiple of the allocator's 512-byte rounding."""

OFFLOAD = f"""
import contextlib, json, sys
import torch
from torch.autograd.graph import save_on_cpu, saved_tensors_hooks

class SideStreamOffload(saved_tensors_hooks):
    def __init__(self):
        self.main = torch.cuda.current_stream()
        self.side = torch.cuda.Stream()
        def pack(tensor):
            self.side.wait_stream(self.main)
            with torch.cuda.stream(self.side):
                host = torch.empty(tensor.size(), dtype=tensor.dtype, pin_memory=True)
                host.copy_(tensor, non_blocking=True)
                tensor.record_stream(self.side)
            return host
        def unpack(host):
            with torch.cuda.stream(self.side):
                back = host.to("cuda", non_blocking=True)
                back.record_stream(self.main)
            self.main.wait_stream(self.side)
            return back
        super().__init__(pack, unpack)

how = sys.argv[1]
offload = {{
    "none": contextlib.nullcontext,
    "save_on_cpu": lambda: save_on_cpu(pin_memory=True),
    "side_stream": SideStreamOffload,
}}[how]
layers = torch.nn.ModuleList(
    torch.nn.Linear({WIDTH}, {WIDTH}, bias=False) for _ in range({LAYERS})
).cuda()
x = torch.randn({ROWS}, {WIDTH}, device="cuda")
with torch.no_grad():
    layers[0](x)  # cuBLAS's workspace, made by the first product, is not the forward's
before = torch.cuda.memory_allocated()
with offload():
    h = x
    for layer in layers:
        h = layer(h)
kept = torch.cuda.memory_allocated() - before
h.sum().backward()
print(json.dumps({{"kept": kept, "grads": [l.weight.grad is not None for l in layers]}}))
"""


def _planned(tmp_path: Path, how: str) -> dict[str, object]:
    script(tmp_path, OFFLOAD)
    return printed_facts(tmp_path, args=(how,))


@pytest.mark.parametrize("how", ["save_on_cpu", "side_stream"])
def test_offloaded_activations_leave_only_the_output_on_the_device(
    tmp_path: Path, how: str
) -> None:
    """Pinned host offloading runs in a plan and keeps only the forward's output on the device,
    where the same forward without it keeps every hidden layer's input for backward too."""
    kept = _planned(tmp_path, "none")["kept"]
    assert kept == LAYERS * ACTIVATION  # the output and the inputs of the last three layers
    found = _planned(tmp_path, how)
    assert found["kept"] == ACTIVATION
    assert found["grads"] == [True] * LAYERS
