"""autocast casts the functions a script calls by ATen's own name (``torch.logsumexp``,
``F.rms_norm``) and ``F.interpolate``'s upsamplings to float32 in the forward, as CUDA's
``AT_FORALL_FP32`` kernels do: a float32 copy of the bfloat16 input, a float32 result; and the
functions whose composite body is a listed operator (``x.square()``, ``torch.arccos``) as it."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import traced_calls

pytestmark = [pytest.mark.integration, pytest.mark.torch]

ROWS, COLUMNS = 64, 1000
IMAGE = 2 * 8 * 16 * 16  # elements of the (2, 8, 16, 16) image, twice as wide and high after

CALLS = """
x = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16)
image = torch.randn(2, 8, 16, 16, device="cuda", dtype=torch.bfloat16)
norm = torch.nn.RMSNorm(1000, device="cuda")
calls = {
    "logsumexp": lambda: torch.logsumexp(x, -1),
    "rms_norm": lambda: norm(x),
    "nearest": lambda: F.interpolate(image, scale_factor=2),
    "bilinear": lambda: F.interpolate(image, scale_factor=2, mode="bilinear"),
    "area": lambda: F.interpolate(image, size=(8, 8), mode="area"),
}
"""


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[object]]:
    """Each call's result dtype and the sizes of the blocks it allocated, planned once."""
    return traced_calls(tmp_path_factory.mktemp("calls"), CALLS)


def test_logsumexp_and_rms_norm_run_on_a_float32_copy(found: dict[str, list[object]]) -> None:
    """``logsumexp`` and ``rms_norm`` first copy the bfloat16 input to float32; ``rms_norm``
    then makes the fused kernel's float32 output and one float32 ``rstd`` a row."""
    whole = ROWS * COLUMNS * 4
    assert found["logsumexp"][:2] == ["torch.float32", whole]
    assert found["rms_norm"] == ["torch.float32", whole, whole, ROWS * 4]


def test_interpolate_casts_as_the_operator_it_reaches(found: dict[str, list[object]]) -> None:
    """The upsamplings copy the image to float32 and make a float32 result four times its
    elements; ``area`` reaches ``adaptive_avg_pool2d``, which autocast leaves alone."""
    assert found["bilinear"] == ["torch.float32", IMAGE * 4, IMAGE * 4 * 4]
    nearest = found["nearest"]
    assert nearest[:2] == ["torch.float32", IMAGE * 4]
    assert nearest[-1] == IMAGE * 4 * 4
    assert found["area"] == ["torch.bfloat16", 2 * 8 * 8 * 8 * 2]


ALIASES = """
x = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16).clamp(-0.5, 0.5)
w = torch.randn(1000, 1000, device="cuda")
calls = {
    "square": lambda: x.square(),
    "arccos": lambda: torch.arccos(x),
    "expm1": lambda: torch.special.expm1(x),
    "matmul": lambda: torch.linalg.matmul(x, w),
}
"""


def test_an_alias_casts_as_the_operator_its_body_calls(tmp_path: Path) -> None:
    """``x.square()`` is ``pow(x, 2)``, ``torch.arccos`` ``acos``, ``torch.special.expm1``
    ``expm1``: a float32 copy of the bfloat16 input and a float32 result, as on a GPU (they
    ran in bfloat16); ``torch.linalg.matmul`` is ``matmul``: a bfloat16 copy of the float32
    weight and a bfloat16 product (it ran in float32)."""
    found = traced_calls(tmp_path, ALIASES)
    whole = ROWS * COLUMNS * 4
    for name in ("square", "arccos", "expm1"):
        assert found[name] == ["torch.float32", whole, whole], name
    assert found["matmul"][:3] == ["torch.bfloat16", COLUMNS * COLUMNS * 2, ROWS * COLUMNS * 2]
