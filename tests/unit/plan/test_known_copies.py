"""The host copies the plan keeps of small stand-ins' values, against the same operators run on
the CPU: a copy taken over from an operator's output is that output's alone."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan.known import Known  # noqa: E402  (after the skip without torch)

pytestmark = pytest.mark.torch

aten = torch.ops.aten


def _given(known: Known, values: torch.Tensor) -> torch.Tensor:
    """A stand-in holding ``values``, as a copy from the host makes one."""
    stand_in = torch.empty_like(values, device="meta")
    known.after(aten.copy_.default, (stand_in, values), {}, stand_in)
    return stand_in


def test_an_output_keeps_its_values_when_its_input_is_written_in_place() -> None:
    """``b = a * 2`` then ``a.add_(1)``: b still reads twice a's old values, a its new ones."""
    known = Known()
    host = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    a = _given(known, host)
    b = aten.mul.Tensor(a, 2)
    known.after(aten.mul.Tensor, (a, 2), {}, b)
    known.after(aten.add_.Scalar, (a, 1), {}, a)
    assert torch.equal(known.value(b), host * 2)
    assert torch.equal(known.value(a), host + 1)


def test_an_output_laid_out_unlike_the_cpu_result_reads_its_own_layout() -> None:
    """A stand-in whose strides differ from the CPU kernel's output (transposed) reads the
    values at its own positions, not the CPU result's memory order."""
    known = Known()
    host = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    a = _given(known, host)
    out = torch.empty_strided((2, 3), (1, 2), device="meta")
    known.after(aten.neg.default, (a,), {}, out)
    assert torch.equal(known.value(out), -host)


def test_an_output_of_a_dtype_unlike_the_cpu_result_is_converted() -> None:
    """A stand-in of another dtype than the CPU kernel's result holds the values converted."""
    known = Known()
    host = torch.tensor([1.5, -2.5, 3.0])
    a = _given(known, host)
    out = torch.empty(3, dtype=torch.float64, device="meta")
    known.after(aten.neg.default, (a,), {}, out)
    found = known.value(out)
    assert found.dtype == torch.float64
    assert torch.equal(found, -host.double())


def test_the_host_tensor_an_operator_is_given_is_never_written_through_a_copy() -> None:
    """A host tensor copied onto the device, then the stand-in written in place: the host
    tensor keeps its values, as a GPU's copy leaves them."""
    known = Known()
    host = torch.arange(4, dtype=torch.float32)
    a = torch.empty(4, device="meta")
    known.after(aten._to_copy.default, (host,), {"device": torch.device("meta")}, a)
    known.after(aten.mul_.Scalar, (a, 10), {}, a)
    assert torch.equal(host, torch.arange(4, dtype=torch.float32))
    assert torch.equal(known.value(a), torch.arange(4, dtype=torch.float32) * 10)
