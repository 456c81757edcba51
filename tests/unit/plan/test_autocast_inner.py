"""Which calls the plan runs as the composite autocast casts inside, asked of the installed
torch's dispatcher where it can answer."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan.autocast_inner import restated  # noqa: E402

pytestmark = [pytest.mark.torch]

REACHED = (
    ("aten::special_softmax", "aten::softmax.int"),
    ("aten::special_log_softmax", "aten::log_softmax.int"),
    ("aten::conv1d.padding", "aten::convolution"),
    ("aten::conv2d.padding", "aten::convolution"),
    ("aten::conv3d.padding", "aten::convolution"),
    ("aten::_weight_norm", "aten::norm.ScalarOpt_dim"),
    ("aten::norm_except_dim", "aten::norm.Scalar"),
)
"""A function the plan casts where it reaches another operator, and an operator it reaches."""


def _has(name: str, key: str) -> bool:
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, key))


def test_the_functions_cast_inside_have_no_cuda_autocast_kernel_of_their_own() -> None:
    """Each is a ``CompositeImplicitAutograd`` overload CUDA's autocast registers no kernel
    for, so on a GPU the call falls through to its body and the operator it reaches, which
    has one, casts; a convolution's default overload (padding in numbers) has its own."""
    for own, reached in REACHED:
        assert not _has(own, "AutocastCUDA"), own
        assert _has(own, "CompositeImplicitAutograd"), own
        assert _has(reached, "AutocastCUDA"), reached
    assert _has("aten::conv2d", "AutocastCUDA")


def test_a_convolution_is_restated_only_for_a_padding_string_it_accepts() -> None:
    """``"same"`` and ``"valid"`` reach ``_convolution_mode``; numbers are ``conv2d``'s own
    overload, and a strided ``"same"`` is left to torch, which refuses it."""
    x = torch.empty(1, 2, 5, 5, device="meta")
    w = torch.empty(3, 2, 2, 2, device="meta")
    assert restated("conv2d", (x, w, None, 1, "same"), {}) is not None
    assert restated("conv2d", (x, w), {"padding": "valid"}) is not None
    assert restated("conv2d", (x[0], w), {"padding": "same"}) is not None  # unbatched
    assert restated("conv2d", (x, w, None, 1, 1), {}) is None
    assert restated("conv2d", (x, w, None, 1, (1, 0)), {}) is None
    assert restated("conv2d", (x, w, None, 2, "same"), {}) is None
    assert restated("conv1d", (x, w, None, 1, "same"), {}) is None  # a 2-d convolution's input
