"""The template arguments of CUDA's reduction kernels, by operator and dtype, and the copy of its
input a reduction reads where it cannot read the input as it lies."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan.reductions import TABLE, Staged, staged  # noqa: E402
from memforensics.plan.scratch import staging_bytes  # noqa: E402

pytestmark = [pytest.mark.torch]

A = torch.ops.aten
F32, BF16, F64 = torch.float32, torch.bfloat16, torch.float64


@pytest.mark.parametrize(
    ("func", "read", "out", "accumulator", "input_vec"),
    [
        (A.sum.dim_IntList, BF16, BF16, 4, 8),  # sum_functor<BFloat16, float>, 16-bit loads
        (A.sum.dim_IntList, BF16, F32, 4, 8),  # gpu_lowp_to_f32: bf16 read, float summed
        (A.sum.default, torch.int64, torch.int64, 8, 4),
        (A.mean.dim, F64, F64, 8, 4),
        (A.nansum.default, BF16, BF16, 4, 4),  # NanSumOps: no 16-bit loads
        (A.linalg_vector_norm.default, BF16, BF16, 4, 4),
        (A.linalg_vector_norm.default, torch.complex64, F32, 4, 4),  # scalar_value_type
        (A.var.correction, BF16, BF16, 16, 2),  # WelfordData<float, int32>, vt0 = 2
        (A.std_mean.correction, F64, F64, 32, 2),  # WelfordData<double, int32>
        (A.amax.default, BF16, BF16, 2, 4),  # acc_t = scalar_t
        (A.max.default, torch.int32, torch.int32, 4, 4),
        (A.argmax.default, BF16, torch.int64, 16, 4),  # pair<float, int64>
        (A.max.dim, torch.float16, torch.float16, 16, 4),  # pair<Half, int64>, aligned
        (A.aminmax.default, BF16, BF16, 4, 4),  # pair<BFloat16, BFloat16>
        (A.any.dims, F32, torch.bool, 1, 4),
    ],
)
def test_template_arguments_by_operator_and_dtype(
    func: object, read: torch.dtype, out: torch.dtype, accumulator: int, input_vec: int
) -> None:
    """Each row gives ``sizeof(arg_t)`` and ``input_vec_size`` of the kernel CUDA launches."""
    row = TABLE[func]
    assert (row.accumulator(read, out), row.input_vec(read)) == (accumulator, input_vec)


def _meta(*shape: int, dtype: torch.dtype = F32) -> torch.Tensor:
    return torch.empty(shape, device="meta", dtype=dtype)


def test_an_integer_sum_reads_its_input_cast_to_int64() -> None:
    """An int32 tensor's sum reads an int64 copy; a bfloat16 one summed into float32 reads the
    input as it lies (``gpu_lowp_to_f32``)."""
    found = staged(
        A.sum.default, (_meta(64, dtype=torch.int32),), {}, _meta(dtype=torch.int64), (9, 0)
    )
    assert found == Staged(64 * 8, None)
    wide = _meta(dtype=F32)
    assert staged(A.sum.default, (_meta(64, dtype=BF16),), {"dtype": F32}, wide, (9, 0)) is None


def test_a_full_argmax_of_a_contiguous_tensor_reads_it_as_it_lies() -> None:
    """``argmax()`` flattens with ``reshape(-1)``: a view where the tensor is contiguous, a
    copy where it is not."""
    out = _meta(dtype=torch.int64)
    assert staged(A.argmax.default, (_meta(64, 64),), {}, out, (9, 0)) is None
    found = staged(A.argmax.default, (_meta(64, 64).t(),), {}, out, (9, 0))
    assert found == Staged(64 * 64 * 4, None)


def test_aminmax_finds_its_dimension_among_the_keywords() -> None:
    """``aminmax(dim=...)`` (a keyword-only argument) reduces that dimension alone, with no
    copy of a transposed input."""
    source = _meta(65536, 64).t()
    outs = (_meta(64), _meta(64))
    found = staged(A.aminmax.default, (source,), {"dim": 1}, outs, (9, 0))
    expected = staging_bytes((64, 65536), (1, 64), frozenset({1}), 8, 0, (9, 0))
    assert expected is not None
    assert found == Staged(0, expected)
