"""autocast runs ``sum``, ``prod``, ``cumsum``, ``softmax`` and the norms with their ``dtype``
set to float32, not with their input cast: the kernel reads the bfloat16 input into a float32
result; a dtype the script gives is kept, and nothing is cast."""

from __future__ import annotations

import pytest
from planned import traced_calls

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, COLUMNS = 64, 1000

CALLS = """
x = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16)


def cumsum_float32():
    with torch.autocast("cuda", enabled=False):
        return x.cumsum(-1, dtype=torch.float32)


calls = {
    "sum": lambda: x.sum(-1),
    "sum_bfloat16": lambda: x.sum(-1, dtype=torch.bfloat16),
    "prod": lambda: torch.prod(x, -1),
    "norm": lambda: x.norm(dim=-1),
    "vector_norm": lambda: torch.linalg.vector_norm(x, dim=-1),
    "cumsum": lambda: x.cumsum(-1),
    "softmax": lambda: torch.nn.functional.softmax(x, -1),
    "cumsum_float32": cumsum_float32,
}
"""


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[object]]:
    """Each call's result dtype and the sizes of the blocks it allocated, planned once."""
    return traced_calls(tmp_path_factory.mktemp("calls"), CALLS)


def test_autocast_sets_float32_as_the_dtype_of_reductions(found: dict[str, list[object]]) -> None:
    """Each call's allocations under bf16 autocast are the GPU's: no float32 copy of the input
    where the kernel reads bfloat16 (sum, prod, the norms), the copy where it converts first."""
    result, whole = ROWS * 4, ROWS * COLUMNS * 4
    assert found["sum"] == ["torch.float32", result]
    assert found["sum_bfloat16"] == ["torch.bfloat16", ROWS * 2]
    assert found["prod"] == ["torch.float32", result]
    assert found["norm"] == ["torch.float32", result]
    assert found["vector_norm"] == ["torch.float32", result]
    assert found["cumsum"] == ["torch.float32", whole, whole]
    assert found["softmax"] == ["torch.float32", whole, whole]


def test_cumsum_converts_its_input_to_another_result_dtype(found: dict[str, list[object]]) -> None:
    """Outside autocast too, ``cumsum`` into float32 converts its bfloat16 input after the
    result (``impl_func_cum_ops``): two float32 blocks of the input's size."""
    assert found["cumsum_float32"] == ["torch.float32", ROWS * COLUMNS * 4, ROWS * COLUMNS * 4]
