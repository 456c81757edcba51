"""``torch.jit.trace`` and ``torch.jit.script`` of modules on the planned device: the trace, its
check and the traced module's runs allocate as the forwards they run do on a GPU, and the graph
recorded is the one the CPU build records. Each runs through the real ``memforensics plan``
console command."""

from __future__ import annotations

import pytest
from planned import printed_facts, printed_on_cpu, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

COUNTED = """
import json
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    torch.cuda.memory._record_memory_history(max_entries=100000)

def made(size):
    '''How many blocks of ``size`` bytes the device allocated so far.'''
    if device == "cpu":
        return 0
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    return sum(1 for e in trace if e["action"] == "alloc" and e["size"] == size)

def kinds(traced):
    return [n.kind() for n in traced.inlined_graph.nodes() if not n.kind().startswith("prim::")]
"""

SCALED = (
    COUNTED
    + """
class Scaled(torch.nn.Module):
    '''As e3nn's normalized activations: a number computed once with ``.item()`` scales the
    output, and a buffer read with ``.item()`` decides a repeat count.'''
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 96)
        self.register_buffer("repeats", torch.tensor(3))
        self.scale = torch.randn(1000, dtype=torch.float64).pow(2).mean().pow(-0.5).item()
    def forward(self, x):
        n = int(self.repeats.item())
        return self.proj(x).mul(self.scale).repeat(n, 1)

model = Scaled().to(device)
x = torch.randn(32, 64, device=device)
REPEATED = 3 * 32 * 96 * 4  # one forward's output (the weight is 24 KiB)
plain = torch.jit.trace(model, x, check_trace=False)
after_plain = made(REPEATED)
checked = torch.jit.trace(model, x)
after_checked = made(REPEATED)
out = checked(x)
print(json.dumps({
    "plain": after_plain, "checked": after_checked - after_plain,
    "run": made(REPEATED) - after_checked, "shape": list(out.shape),
    "device": str(out.device).split(":")[0], "kinds": kinds(checked),
    "constant": "prim::Constant[value={" in str(checked.graph),
}))
"""
)


def test_a_trace_with_its_check_runs_a_module_holding_numbers_read_with_item(tmp_path):
    """``torch.jit.trace`` of a device module that scales by a number read with ``.item()``
    (which the graph holds as a constant tensor that came back to the plan as a float) traces,
    checks and prints its graph as on a GPU: the plain trace runs one forward, the checked one
    five (its trace, the check's trace, and the traced module, the Python module and the
    check's module run on the inputs: ``_check_trace``), and the traced module one more, each
    allocating its 36 KiB output; the graph is the CPU build's."""
    path = script(tmp_path, SCALED)
    facts = printed_facts(tmp_path, "--device-capability", "9.0")
    assert (facts["plain"], facts["checked"], facts["run"]) == (1, 5, 1)
    assert facts["shape"] == [96, 96]
    assert facts["device"] == "cuda"
    assert facts["constant"] is True
    assert facts["kinds"] == printed_on_cpu(path)["kinds"]


CONVOLVED = (
    COUNTED
    + """
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
    torch.nn.ConvTranspose2d(16, 8, 2, stride=2), torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(), torch.nn.Linear(8, 10),
).to(device).eval()
x = torch.rand(4, 3, 32, 32, device=device)
FEATURES = 4 * 16 * 32 * 32 * 4  # the first convolution's output, and the norm's and relu's
traced = torch.jit.trace(model, x)
after_trace = made(FEATURES)
module = torch.jit.trace_module(
    model, {"forward": x}, check_inputs=[{"forward": torch.rand(2, 3, 16, 16, device=device)}]
)
scripted = torch.jit.script(model)
before_runs = made(FEATURES)
outs = [traced(x), module(x), scripted(x)]
with torch.no_grad():
    smaller = traced(torch.rand(2, 3, 16, 16, device=device))
print(json.dumps({
    "trace": after_trace, "runs": made(FEATURES) - before_runs,
    "shapes": [list(o.shape) for o in outs] + [list(smaller.shape)],
    "kinds": kinds(traced), "module": kinds(module),
}))
"""
)


def test_a_convolutional_network_traces_checks_and_runs_as_the_cpu_build_traces_it(tmp_path):
    """A convolution traced on the device is recorded as CUDA's kernel records it
    (``aten::_convolution``, the graph the CPU build records, not the plan's own kernel
    reading traced sizes: "cond must be a bool, but got a Tensor"); ``trace_module`` with
    ``check_inputs`` and ``torch.jit.script`` of the device module run too. The checked trace's
    five forwards each allocate the first convolution's, the norm's and the ReLU's 256 KiB
    outputs (15 blocks), and the traced, trace_module'd and scripted modules three each."""
    path = script(tmp_path, CONVOLVED)
    facts = printed_facts(tmp_path, "--device-capability", "9.0")
    assert facts["trace"] == 5 * 3
    assert facts["runs"] == 3 * 3
    assert facts["shapes"] == [[4, 10], [4, 10], [4, 10], [2, 10]]
    on_cpu = printed_on_cpu(path)
    assert facts["kinds"] == on_cpu["kinds"]
    assert facts["module"] == on_cpu["module"]
    assert "aten::_convolution" in on_cpu["kinds"]
