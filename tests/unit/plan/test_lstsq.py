"""The plan's ``linalg_lstsq`` on stand-ins, against what torch's ``gels`` driver returns on the
CPU for the same operands (the driver CUDA runs, through the same ``linalg_lstsq_out_info``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan import lstsq  # noqa: E402  (after the skip without torch)

pytestmark = pytest.mark.torch

OPERANDS = [
    ((5, 3), (5, 2)),  # tall: residuals
    ((3, 5), (3, 2)),  # wide: none
    ((4, 4), (4, 1)),  # square: none
    ((5, 3), (5,)),  # one vector
    ((4, 6, 5), (4, 6)),  # a vector a matrix
    ((1, 6, 5), (3, 6, 2)),  # A's batch broadcast over B's
    ((2, 1, 6, 5), (1, 3, 6, 2)),  # both broadcast
]
DTYPES = [torch.float32, torch.float64, torch.complex64]


def _layout(tensors: tuple[torch.Tensor, ...]) -> list[tuple[object, ...]]:
    """Shape, strides, dtype and storage bytes of each."""
    return [(t.shape, t.stride(), t.dtype, t.untyped_storage().nbytes()) for t in tensors]


@pytest.mark.parametrize(("a_shape", "b_shape"), OPERANDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_outputs_are_those_gels_makes_on_the_cpu(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    """Solution (a view of the padded column-major copy of B, whose storage it keeps),
    residuals, rank and singular values have the shapes, strides, dtypes and storage sizes the
    CPU's ``gels`` gives them."""
    a, b = torch.randn(a_shape, dtype=dtype), torch.randn(b_shape, dtype=dtype)
    expected = torch.linalg.lstsq(a, b, driver="gels")
    made = lstsq.linalg_lstsq(a.to("meta"), b.to("meta"))
    assert _layout(made) == _layout(tuple(expected))


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "driver"),
    [((5, 3), (4, 2), None), ((5, 3), (5,), "gelsd"), ((2, 5, 3), (5,), None)],
)
def test_what_cuda_refuses_is_refused(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...], driver: str | None
) -> None:
    """Mismatched rows, a driver other than ``gels`` (CUDA has no other) and a vector under a
    batch stop with a RuntimeError, as ``linalg_lstsq_out`` stops on CUDA."""
    a, b = torch.empty(a_shape, device="meta"), torch.empty(b_shape, device="meta")
    with pytest.raises(RuntimeError, match=r"torch\.linalg\.lstsq"):
        lstsq.linalg_lstsq(a, b, driver=driver)


def test_scratch_is_infos_then_a_copy_of_a() -> None:
    """``infos`` is one int a matrix of A's batch, and the working copy A's bytes."""
    a = torch.empty(3, 7, 5, device="meta", dtype=torch.float64)
    assert lstsq.before((a, a)) == [3 * 4]
    assert lstsq.after((a, a)) == [3 * 7 * 5 * 8]
