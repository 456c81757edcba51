"""The plan's answers for normalisation kernels on stand-ins, against torch's own ``meta``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan import fused_norms  # noqa: E402  (after the skip without torch)

pytestmark = pytest.mark.torch

SHAPES = [((4, 7, 16), 1), ((3, 16), 1), ((2, 3, 4, 8), 2), ((5, 8), 2)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def _layout(tensors: tuple[torch.Tensor, ...]) -> list[tuple[object, ...]]:
    return [(t.shape, t.stride(), t.dtype, t.device) for t in tensors]


@pytest.mark.parametrize(("shape", "normalized"), SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_makes_what_the_meta_kernel_makes(
    shape: tuple[int, ...], normalized: int, dtype: torch.dtype, affine: bool
) -> None:
    """native_layer_norm's answer gives the output, mean and rstd torch's reference makes on
    meta: same shapes, strides, dtypes and device, in the same order."""
    x = torch.empty(shape, device="meta", dtype=dtype)
    ns = shape[-normalized:]
    weight = torch.empty(ns, device="meta", dtype=dtype) if affine else None
    expected = torch.ops.aten.native_layer_norm.default(x, ns, weight, weight, 1e-5)
    assert _layout(fused_norms.layer_norm(x, ns, weight, weight, 1e-5)) == _layout(expected)


def test_layer_norm_of_a_strided_input_is_contiguous() -> None:
    """A transposed input's output is contiguous, as layer_norm_cuda's is."""
    x = torch.empty(8, 16, 4, device="meta").transpose(0, 2)
    expected = torch.ops.aten.native_layer_norm.default(x, (8,), None, None, 1e-5)
    assert _layout(fused_norms.layer_norm(x, (8,), None, None, 1e-5)) == _layout(expected)


def test_layer_norm_refuses_what_the_reference_refuses() -> None:
    """A normalized shape the input does not end with raises torch's own error."""
    x = torch.empty(4, 16, device="meta")
    with pytest.raises(RuntimeError, match="normalized_shape"):
        fused_norms.layer_norm(x, (8,), None, None, 1e-5)
