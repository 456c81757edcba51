"""Outputs of ``meta`` kernels made again (``plan/meta_outputs.py``): checked against what the
kernel itself makes for the same call, and never kept where the kernel's outputs are not new
tensors decided by the call's shapes."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan.meta_outputs import MetaOutputs  # noqa: E402

pytestmark = pytest.mark.torch

aten = torch.ops.aten


def _layout(tensor: Any) -> tuple[Any, ...]:
    return (
        tensor.dtype,
        tuple(tensor.shape),
        tensor.stride(),
        tensor.storage_offset(),
        tensor.untyped_storage().nbytes(),
        tensor.device.type,
    )


def _twice(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """The kernel's outputs for a call, and the outputs made again for the same call."""
    outputs = MetaOutputs()
    key = outputs.key(func, args, kwargs)
    assert key is not None
    assert outputs.made(key) is None
    ran = func(*args, **kwargs)
    outputs.keep(key, args, kwargs, ran)
    made = outputs.made(outputs.key(func, args, kwargs))
    assert made is not None
    return ran, made


@pytest.mark.parametrize(
    ("func", "args", "kwargs"),
    [
        (aten.add.Tensor, ((2, 3), (2, 3)), {}),
        (aten.mul.Tensor, ((4, 1, 8), (1, 5, 8)), {}),
        (aten.addmm.default, ((16,), (8, 4), (4, 16)), {"beta": 0.5}),
        (aten.native_layer_norm.default, ((2, 7, 32), [32], (32,), (32,), 1e-5), {}),
        (aten._to_copy.default, ((3, 5),), {"dtype": torch.bfloat16}),
    ],
)
def test_outputs_made_again_are_the_kernels(func: Any, args: Any, kwargs: Any) -> None:
    """Each output made again has the kernel's dtype, sizes, strides and storage bytes, on a
    storage of its own."""
    inputs = tuple(torch.empty(a, device="meta") if isinstance(a, tuple) else a for a in args)
    ran, made = _twice(func, inputs, kwargs)
    ran_all = ran if isinstance(ran, (tuple, list)) else (ran,)
    made_all = made if isinstance(made, (tuple, list)) else (made,)
    assert type(made) is type(ran)
    assert [_layout(t) for t in made_all] == [_layout(t) for t in ran_all]
    storages = {t.untyped_storage()._cdata for t in (*ran_all, *made_all)}
    assert len(storages) == 2 * len(ran_all)


def test_strides_of_the_inputs_key_the_call() -> None:
    """A transposed input is another call: its output keeps the input's layout."""
    outputs = MetaOutputs()
    plain = torch.empty(4, 6, device="meta")
    turned = torch.empty(6, 4, device="meta").t()
    first = outputs.key(aten.neg.default, (plain,), {})
    outputs.keep(first, (plain,), {}, aten.neg.default(plain))
    assert outputs.made(outputs.key(aten.neg.default, (turned,), {})) is None
    assert outputs.key(aten.neg.default, (turned,), {}) != first


def test_numbers_of_other_types_are_other_calls() -> None:
    """``x + 1`` makes an integer tensor's sum as ``x + 1.0`` does not: they are two calls."""
    outputs = MetaOutputs()
    x = torch.empty(3, dtype=torch.int64, device="meta")
    whole = outputs.key(aten.add.Scalar, (x, 1), {})
    outputs.keep(whole, (x, 1), {}, aten.add.Scalar(x, 1))
    assert outputs.made(outputs.key(aten.add.Scalar, (x, 1.0), {})) is None


@pytest.mark.parametrize(
    ("func", "args"),
    [
        (aten.view.default, ((2, 3), [6])),  # a view of its input's storage
        (aten.add_.Tensor, ((2, 3), (2, 3))),  # writes its input
        (aten.bernoulli.default, ((2, 3),)),  # random
        (aten.nonzero.default, ((2, 3),)),  # sizes its values decide
    ],
)
def test_not_kept_where_outputs_are_not_new_and_decided_by_shapes(func: Any, args: Any) -> None:
    """Views, in-place operators, draws and value-sized outputs run their kernels each time."""
    inputs = tuple(torch.empty(a, device="meta") if isinstance(a, tuple) else a for a in args)
    assert MetaOutputs().key(func, inputs, {}) is None


def test_host_tensors_are_not_kept() -> None:
    """An operator on a CPU tensor runs as it does; only ``meta`` inputs key a call."""
    host = torch.ones(2, 2)
    assert MetaOutputs().key(aten.add.Tensor, (host, host), {}) is None
