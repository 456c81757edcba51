"""``gpu_paths``: the value-only decompositions ask for vectors as a plain CUDA tensor's would,
under the plan's own modes only, and torch's own composites are back after."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from memforensics.plan.eager_modes import EagerDispatchMode  # noqa: E402
from memforensics.plan.subclass_like import gpu_paths  # noqa: E402

pytestmark = pytest.mark.torch

SVD = torch.ops.aten._linalg_svd.default


def _recorder(base: type) -> Any:
    """A dispatch mode of class ``base`` that notes each ``_linalg_svd``'s ``compute_uv``."""

    class Recorder(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[bool] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func is SVD:
                self.asked.append(bool(args[2]) if len(args) > 2 else True)
            return func(*args, **(kwargs or {}))

    return Recorder()


def _asked(base: type, *, grad: bool = False) -> list[bool]:
    recorder = _recorder(base)
    a = torch.randn(6, 4, device="meta", requires_grad=grad)
    with recorder:
        torch.linalg.svdvals(a)
    return list(recorder.asked)


def test_no_vectors_without_a_gradient_under_the_plans_modes() -> None:
    """A plain tensor without a gradient: no vectors; with one: vectors."""
    with gpu_paths():
        assert _asked(EagerDispatchMode) == [False]
        assert _asked(EagerDispatchMode, grad=True) == [True]


def test_a_mode_of_the_scripts_own_makes_every_tensor_subclass_like() -> None:
    """Under a dispatch mode that is not the plan's, ATen's answer on a GPU is "subclass-like"
    too, so vectors are computed."""
    with gpu_paths():
        assert _asked(TorchDispatchMode) == [True]


def test_torchs_own_composite_is_back_after() -> None:
    """Outside the run torch's kernel answers as it always does under a mode: vectors."""
    with gpu_paths():
        pass
    assert _asked(EagerDispatchMode) == [True]
