"""Outputs of ``meta`` kernels made again (``plan/meta_outputs.py``): checked against what the
kernel itself makes for the same call, and never kept where the kernel's outputs are not new
tensors decided by the call's shapes; in-place calls passed again as the kernel passed them."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from memforensics.plan.meta_outputs import UNSEEN, MetaOutputs  # noqa: E402

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
    assert outputs.made(key, args) is UNSEEN
    ran = func(*args, **kwargs)
    outputs.keep(key, args, kwargs, ran)
    made = outputs.made(outputs.key(func, args, kwargs), args)
    assert made is not UNSEEN
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
    assert outputs.made(outputs.key(aten.neg.default, (turned,), {}), (turned,)) is UNSEEN
    assert outputs.key(aten.neg.default, (turned,), {}) != first


def test_numbers_of_other_types_are_other_calls() -> None:
    """``x + 1`` makes an integer tensor's sum as ``x + 1.0`` does not: they are two calls."""
    outputs = MetaOutputs()
    x = torch.empty(3, dtype=torch.int64, device="meta")
    whole = outputs.key(aten.add.Scalar, (x, 1), {})
    outputs.keep(whole, (x, 1), {}, aten.add.Scalar(x, 1))
    assert outputs.made(outputs.key(aten.add.Scalar, (x, 1.0), {}), (x, 1.0)) is UNSEEN


@pytest.mark.parametrize(
    ("func", "args"),
    [
        (aten.view.default, ((2, 3), [6])),  # a view of its input's storage
        (aten.t_.default, ((2, 3),)),  # changes its input's shape
        (aten.bernoulli.default, ((2, 3),)),  # random
        (aten.nonzero.default, ((2, 3),)),  # sizes its values decide
    ],
)
def test_not_kept_where_outputs_are_not_new_and_decided_by_shapes(func: Any, args: Any) -> None:
    """Views, operators that reshape their input, draws and value-sized outputs run their
    kernels each time."""
    inputs = tuple(torch.empty(a, device="meta") if isinstance(a, tuple) else a for a in args)
    assert MetaOutputs().key(func, inputs, {}) is None


def test_host_tensors_are_not_kept() -> None:
    """An operator on a CPU tensor runs as it does; only ``meta`` inputs key a call."""
    host = torch.ones(2, 2)
    assert MetaOutputs().key(aten.add.Tensor, (host, host), {}) is None


def _passed_twice(func: Any, args: tuple[Any, ...]) -> tuple[Any, Any]:
    """What an in-place kernel handed back, and what the same call hands back when kept."""
    outputs = MetaOutputs()
    key = outputs.key(func, args, {})
    assert key is not None
    assert outputs.made(key, args) is UNSEEN
    ran = func(*args)
    outputs.keep(key, args, {}, ran)
    return ran, outputs.made(outputs.key(func, args, {}), args)


def test_an_in_place_call_passes_again_with_its_input() -> None:
    """``add_`` kept hands back the tensor it writes, as its kernel did, without running."""
    x, y = torch.empty(2, 3, device="meta"), torch.empty(2, 3, device="meta")
    ran, again = _passed_twice(aten.add_.Tensor, (x, y))
    assert ran is x
    assert again is x


def test_an_in_place_foreach_call_passes_again_with_nothing() -> None:
    """An optimizer's ``_foreach_mul_`` kept hands back nothing, as its kernel did."""
    params = [torch.empty(4, device="meta"), torch.empty(2, 2, device="meta")]
    ran, again = _passed_twice(aten._foreach_mul_.Scalar, (params, 0.9))
    assert ran is None
    assert again is None


def test_inputs_sharing_a_storage_are_another_in_place_call() -> None:
    """``x.add_(x)`` is not ``x.add_(y)``: a write that overlaps a read is the kernel's to
    judge."""
    outputs = MetaOutputs()
    x, y = torch.empty(6, device="meta"), torch.empty(6, device="meta")
    apart = outputs.key(aten.add_.Tensor, (x, y), {})
    outputs.keep(apart, (x, y), {}, aten.add_.Tensor(x, y))
    shared = outputs.key(aten.add_.Tensor, (x, x), {})
    assert shared != apart
    assert outputs.made(shared, (x, x)) is UNSEEN


def test_an_out_argument_is_never_passed_again() -> None:
    """An ``out=`` variant may resize its output: it runs each time."""
    x, out = torch.empty(2, 3, device="meta"), torch.empty(0, device="meta")
    assert MetaOutputs().key(aten.add.out, (x, x), {"out": out}) is None


def test_a_kernel_that_resized_its_input_is_not_passed_again() -> None:
    """``_resize_output_`` writes in place and may resize: where it did, it runs again."""
    outputs = MetaOutputs()
    x = torch.empty(0, device="meta")
    args = (x, [4], torch.device("meta"))
    key = outputs.key(aten._resize_output_.default, args, {})
    assert key is not None
    outputs.keep(key, args, {}, aten._resize_output_.default(*args))
    assert outputs.made(key, args) is UNSEEN


def test_in_place_calls_that_never_repeat_stop_being_kept() -> None:
    """An operator whose calls change every time (numbers that change each step) stops being
    kept once its calls have described its budget of tensors."""
    outputs = MetaOutputs()
    x = torch.empty(3, device="meta")
    for step in range(5000):
        args = (x, float(step))
        key = outputs.key(aten.mul_.Scalar, args, {})
        if key is None:
            break
        outputs.keep(key, args, {}, aten.mul_.Scalar(*args))
    assert step < 4999
    assert outputs.key(aten.mul_.Scalar, (x, 0.0), {}) is None
