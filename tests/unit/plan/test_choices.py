"""How the plan's autocast model reads a library operator's autocast kernel."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan.choices import Autocast  # noqa: E402

pytestmark = [pytest.mark.torch]


def test_an_operator_only_torchscript_registers_has_no_autocast_kernel() -> None:
    """``prim::device``, which TorchScript holds and the dispatcher does not (a compiled
    flex attention's traced backward calls it), reads as having no autocast kernel, where
    asking the dispatcher raised "operator prim::device does not exist" inside autograd's
    engine and aborted the plan."""
    assert Autocast().library(torch.ops.prim.device.default) == (None, False)


def test_a_library_operator_with_an_autocast_kernel_reads_as_having_one() -> None:
    """A library operator the plan does not follow, with a CUDA autocast kernel registered for
    it, reads as having one (run uncast, said once)."""
    library = torch.library.Library("mf_choices_test", "DEF")  # type: ignore[no-untyped-call]
    try:
        library.define("scale(Tensor x) -> Tensor")
        library.impl("scale", lambda x: x * 2, "AutocastCUDA")
        op = torch.ops.mf_choices_test.scale.default
        assert Autocast().library(op) == (None, True)
    finally:
        library._destroy()  # type: ignore[no-untyped-call]
