"""Samples drawn on the device by ``torch.distributions``, in a plan.

Two things stop a script that samples on the planned device where a GPU would not:

- Some samplers' CUDA kernels have no ``meta`` kernel on the CPU build (``_sample_dirichlet``
  behind ``Dirichlet`` and ``Beta``, ``binomial`` behind ``Binomial``, and the reparameterized
  gradients ``_standard_gamma_grad`` and ``_dirichlet_grad`` behind ``Gamma``'s and
  ``Dirichlet``'s ``rsample``). Each makes one tensor of its first input's shape and dtype, as
  the CUDA kernel's ``at::empty(input.sizes(), input.options())`` does: :data:`DRAWN_LIKE`.
- A sample's values are made up in a plan (:mod:`~memforensics.plan.values`), and so are a
  network's outputs, and a distribution that validates its arguments (the default) checks
  them: its parameters against their constraints when it is made (``probs`` on the simplex),
  a value against its support in ``log_prob`` (a category index in ``[0, n)``). Values the
  plan does not know are not known to satisfy either, so torch's checks read them as invalid
  and raised. On a GPU a sample lies in the support it was drawn from and a softmax sums to
  one, so :func:`validated` and :func:`made` take values the plan does not know as valid; the
  checks of shapes, and of values the script decided, stay torch's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from memforensics.plan.known import Known

DRAWN_LIKE = (
    torch.ops.aten._sample_dirichlet.default,
    torch.ops.aten.binomial.default,
    torch.ops.aten._standard_gamma_grad.default,
    torch.ops.aten._dirichlet_grad.default,
)
"""Sampling operators with no ``meta`` kernel whose result has their first input's shape."""

_OUTSIDE_SUPPORT = "Expected value argument"
"""How torch's ``Distribution._validate_sample`` begins its refusal of a value's values."""
_UNSATISFIED = re.compile(r"Expected parameter (\w+) \(")
"""How ``Distribution.__init__`` begins its refusal of a parameter's values, naming it."""
_VALIDATE_ARGS = 2
"""``validate_args``' position in ``Distribution.__init__``'s arguments, after the shapes."""


def drawn_like(first: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """A sampler of :data:`DRAWN_LIKE` on a stand-in: its result, one tensor like its first
    input, allocated on the planned device."""
    return torch.empty_like(first, memory_format=torch.contiguous_format)


def validated(original: Callable[..., Any], known: Known) -> Callable[..., Any]:
    """``Distribution._validate_sample``: torch's, except that a stand-in whose values the plan
    made up is taken as within the support (a sample drawn from it, on a GPU)."""

    def _validate_sample(distribution: Any, value: Any) -> None:
        try:
            original(distribution, value)
        except ValueError as exc:
            if not str(exc).startswith(_OUTSIDE_SUPPORT):
                raise
            if not _valid(known, distribution.support, value):
                raise

    return _validate_sample


def made(original: Callable[..., Any], known: Known) -> Callable[..., Any]:
    """``Distribution.__init__``: torch's, except that a parameter whose values the plan does
    not know is taken as satisfying its constraint: the distribution is made as torch makes it
    without validation, and validates its samples' values afterwards as asked."""

    def __init__(distribution: Any, *args: Any, **kwargs: Any) -> None:
        try:
            original(distribution, *args, **kwargs)
        except ValueError as exc:
            named = _UNSATISFIED.match(str(exc))
            if named is None:
                raise
            constraint = distribution.arg_constraints.get(named[1])
            if not _valid(known, constraint, getattr(distribution, named[1], None)):
                raise
            asked = args[_VALIDATE_ARGS] if len(args) > _VALIDATE_ARGS else None
            asked = kwargs.pop("validate_args", asked)
            original(distribution, *args[:_VALIDATE_ARGS], validate_args=False, **kwargs)
            distribution._validate_args = (
                type(distribution)._validate_args if asked is None else asked
            )

    return __init__


def _valid(known: Known, constraint: Any, value: Any) -> bool:
    """Whether ``value`` satisfies ``constraint`` as far as the plan knows: a stand-in whose
    values it does not know does, as on a GPU; values it knows (the script's own, or decided by
    them) are checked on the CPU, and one the check cannot decide there (a bound on the
    device) does."""
    if constraint is None or not isinstance(value, torch.Tensor):
        return False
    values: torch.Tensor | None = value
    if value.is_meta:
        values = None if known.made_up(value) else known.value(value)
    if values is None:
        return True
    try:
        checked = constraint.check(values)
    except RuntimeError:
        return True
    return bool(checked.is_meta or checked.all())
