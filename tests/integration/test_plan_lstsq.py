"""``torch.linalg.lstsq`` on a device tensor plans to the end, with the outputs CUDA's ``gels``
path makes and the blocks it takes on the way (``linalg_lstsq_out`` and
``linalg_lstsq_out_info``, ``aten/src/ATen/native/BatchLinearAlgebra.cpp``)."""

from __future__ import annotations

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

BATCH, TALL, NARROW, RHS = 8, 4096, 256, 64
OPERANDS = {
    "tall": ((BATCH, TALL, NARROW), (BATCH, TALL, RHS)),
    "wide": ((BATCH, NARROW, TALL), (BATCH, NARROW, RHS)),
    "vector": ((TALL, NARROW), (TALL,)),
}
CALLS = """
import json
import torch

found = {{}}
for name, (a_shape, b_shape) in {operands}.items():
    a = torch.randn(*a_shape, device="cuda")
    b = torch.randn(*b_shape, device="cuda")
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = torch.linalg.lstsq(a, b)
    found[name] = {{
        "shapes": [list(t.shape) for t in out],
        "dtypes": [str(t.dtype) for t in out],
        "held": torch.cuda.memory_allocated() - start,
        "peak": torch.cuda.max_memory_allocated() - start,
    }}
    del a, b, out
print(json.dumps(found))
"""


def _block(size: int) -> int:
    """A request as the caching allocator's blocks hold it: 512-byte multiples."""
    return -(-size // 512) * 512


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Per case, the outputs' shapes and dtypes and the memory held and reached, planned once."""
    folder = tmp_path_factory.mktemp("lstsq")
    script(folder, CALLS.format(operands=OPERANDS))
    return printed_facts(folder, "--device-capability", "9.0")


@pytest.mark.parametrize("case", list(OPERANDS))
def test_outputs_are_shaped_as_on_the_cpu(found: dict[str, object], case: str) -> None:
    """The plan runs past lstsq, and its four outputs have the shapes and dtypes the CPU's
    ``gels`` driver (CUDA's only one) gives the same operands."""
    import torch

    a_shape, b_shape = OPERANDS[case]
    expected = torch.linalg.lstsq(torch.zeros(a_shape), torch.zeros(b_shape), driver="gels")
    calls = found[case]
    assert isinstance(calls, dict)
    assert calls["shapes"] == [list(t.shape) for t in expected]
    assert calls["dtypes"] == [str(t.dtype) for t in expected]


@pytest.mark.parametrize("case", list(OPERANDS))
def test_memory_is_the_padded_solution_a_copy_of_a_and_infos(
    found: dict[str, object], case: str
) -> None:
    """lstsq holds the solution's storage, B padded to max(m, n) rows, and the residuals (m > n:
    one float a column of B); at its peak also ``infos`` (one int a matrix) and the
    column-major working copy of A."""
    a_shape, b_shape = OPERANDS[case]
    batch = a_shape[0] if len(a_shape) == 3 else 1
    m, n = a_shape[-2:]
    rhs = b_shape[-1] if len(b_shape) == 3 else 1
    solution = batch * max(m, n) * rhs * 4
    residuals = _block(batch * rhs * 4) if m > n else 0
    copy_of_a = batch * m * n * 4
    infos = _block(batch * 4)
    calls = found[case]
    assert isinstance(calls, dict)
    assert calls["held"] == solution + residuals
    assert calls["peak"] == solution + residuals + copy_of_a + infos
