"""A number TorchScript handed to the plan's dispatch mode where an operator takes a tensor is
made the wrapped number it was; the tracer's list of operators recorded by their parts is
torch's own."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from memforensics.plan import traced, wrapped_numbers  # noqa: E402

pytestmark = pytest.mark.torch


def test_a_number_where_a_tensor_is_taken_is_a_host_tensor_of_the_wrapped_dtype() -> None:
    """``view``'s and ``_local_scalar_dense``'s ``self`` given as a float, an int or a bool
    (as ``toPyObject`` hands a wrapped number to a dispatch mode) is a 0-dim host tensor of
    float64, int64 or bool holding the value, which the operator then accepts."""
    view = torch.ops.aten.view.default
    (made, shape), _ = wrapped_numbers.as_tensors(view, (1.5, [1]), None)
    assert (made.dtype, made.device.type, made.dim(), made.item()) == (torch.float64, "cpu", 0, 1.5)
    assert shape == [1]
    assert view(made, shape).tolist() == [1.5]
    read = torch.ops.aten._local_scalar_dense.default
    for value, dtype in ((7, torch.int64), (True, torch.bool)):
        (made,), _ = wrapped_numbers.as_tensors(read, (value,), None)
        assert made.dtype == dtype
        assert read(made) == value


def test_an_operator_that_takes_numbers_itself_and_other_arguments_are_left_as_they_are() -> None:
    """``mul`` takes a number for its tensor (torch wraps it again), so its arguments are the
    same objects; a number where ``view`` takes a list of sizes is not a tensor either; a
    list of tensors with a number in it (``index_put``'s) gets that one made a tensor."""
    args = (torch.ones(2), 2.0)
    assert wrapped_numbers.as_tensors(torch.ops.aten.mul.Tensor, args, None)[0] is args
    view_args = (torch.ones(2), [2])
    assert wrapped_numbers.as_tensors(torch.ops.aten.view.default, view_args, None)[0] is view_args
    (_, indices, values, _), _ = wrapped_numbers.as_tensors(
        torch.ops.aten.index_put.default, (torch.zeros(3), [1], 5.0, False), None
    )
    assert [(t.dtype, t.item()) for t in (indices[0], values)] == [
        (torch.int64, 1),
        (torch.float64, 5.0),
    ]


def test_the_operators_the_tracer_records_by_their_parts_are_torchs_list() -> None:
    """The plan reads torch's ``DONT_RECORD_TRACE`` from the ``torchgen`` torch ships with, as
    torchgen itself defines it."""
    gen_trace_type = pytest.importorskip("torchgen.packaged.autograd.gen_trace_type")
    assert traced._left_to_parts() == frozenset(gen_trace_type.DONT_RECORD_TRACE)
    assert "convolution" in traced._left_to_parts()
