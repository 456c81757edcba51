"""Known values written into parts of a tensor whose other elements are unknown (an ``empty``
scratch filled column by column, as torchdiffeq's Runge-Kutta step fills its stages) read as
known where a read covers only written elements, and as unknown elsewhere."""

from __future__ import annotations

import json

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

STAGES = """
import json
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
f0 = torch.tensor([[2.0, -3.0]]).to(device)
k = torch.empty(1, 2, 5, device=device)  # one column a stage, written in turn
k.data[..., 0] = f0
sums = []
for i in range(1, 5):
    y = f0 + torch.sum(k[..., :i] * 0.25, dim=-1)
    sums.append(float(y.abs().sum()))
    k.data[..., i] = torch.tanh(y) * i
ints = torch.empty(4, dtype=torch.long, device=device)
ints[:2] = torch.tensor([5, 6]).to(device)
ints[:2] += 1
print(json.dumps({"sums": sums, "stages": k.tolist(), "first": ints[:2].tolist(),
                  "big": int((ints > 3).sum())}))
"""


def _on_cpu() -> dict[str, object]:
    """The same script's values on the CPU."""
    pytest.importorskip("torch")
    scope: dict[str, object] = {}
    printed: list[str] = []
    scope["print"] = printed.append
    on_cpu = STAGES.replace('"cuda" if torch.cuda.is_available() else "cpu"', '"cpu"')
    assert on_cpu != STAGES
    exec(on_cpu, scope)  # the test's own script, on the CPU
    found: dict[str, object] = json.loads(printed[0])
    return found


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """What the script printed, planned once."""
    folder = tmp_path_factory.mktemp("written_parts")
    script(folder, STAGES)
    done = plan(folder, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    printed: dict[str, object] = json.loads(done.stdout.splitlines()[0])
    return printed


def _flat(rows: object) -> list[float]:
    """Nested lists of numbers, flattened in order."""
    if isinstance(rows, list):
        return [x for row in rows for x in _flat(row)]
    assert isinstance(rows, float | int)
    return [float(rows)]


def test_each_stage_reads_the_columns_written_before_it(found: dict[str, object]) -> None:
    """Each stage's state, summed over the columns written so far of an ``empty`` scratch, and
    read to the host, is the CPU's, and so is the whole scratch once every column is written."""
    expected = _on_cpu()
    assert found["sums"] == pytest.approx(expected["sums"], rel=1e-6)
    assert _flat(found["stages"]) == pytest.approx(_flat(expected["stages"]), rel=1e-6)
    assert found["first"] == expected["first"] == [6, 7]


def test_elements_never_written_stay_unknown(found: dict[str, object]) -> None:
    """An in-place update of the written part keeps it known and leaves the elements never
    written unknown: a count of flags over them takes its upper bound, every flag set, where
    a CPU's empty memory would decide it."""
    assert found["first"] == [6, 7]
    assert found["big"] == 4
