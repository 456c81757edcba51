"""What Inductor materialises of a partitioned graph: the values its fused kernels compute in
registers are never buffers on the GPU.

Inductor lowers each pointwise operation to a function of its inputs' loads, inlined into the
kernel that reads it; a value becomes a buffer only where something needs one: the graph
returns it (an output, or a value the forward saves for the backward), an operation outside
Inductor's own kernels reads it (an extern kernel: ``mm``, ``addmm``, a convolution, attention,
a sort), or a reduction produces it. So ``cross_entropy`` over a batch's logits, compiled, makes
no logits-sized float32 tensor (its upcast, ``x - max``, ``exp`` and ``log_softmax`` are inlined
into the reductions and the gather that read them), where the same graph run op by op makes
three. The plan runs a partitioned graph op by op; the values this module names are made there
without a block of the planned device, as they are never allocated on it.

What is not followed: a pointwise value Inductor realises because many reads accumulate in it
(``realize_reads_threshold``; rare in model code), and Inductor's reuse of a dying input's
buffer for a kernel's output of the same size (``inplace_buffers``), where the plan allocates
the output before that input is freed.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

_LOADING = frozenset(
    (
        torch.ops.aten.gather.default,
        torch.ops.aten.index.Tensor,
        torch.ops.aten.index_select.default,
    )
)
"""Operators Inductor lowers to indirect loads of their input inside the kernel that reads
them, so that input need not be a buffer."""

_POINTWISE_PRIMS = frozenset((torch.ops.prims.convert_element_type.default,))
"""Pointwise operators torch tags without ``pointwise`` (a dtype cast)."""


def _pointwise(node: torch.fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    return target in _POINTWISE_PRIMS or torch.Tag.pointwise in target.tags


def _view(node: torch.fx.Node) -> bool:
    target = node.target
    return (
        node.op == "call_function"
        and isinstance(target, torch._ops.OpOverload)
        and bool(target.is_view)
    )


def _inlines(node: torch.fx.Node) -> bool:
    """Whether ``node`` reads its inputs inside its own kernel (no buffer needed for them)."""
    target = node.target
    if _pointwise(node) or target in _LOADING:
        return True
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.reduction in target.tags


def _readers(node: torch.fx.Node) -> Iterator[torch.fx.Node]:
    """The nodes that read ``node``'s value, through any views of it."""
    for user in node.users:
        if _view(user):
            yield from _readers(user)
        else:
            yield user


def inlined(graph: torch.fx.Graph) -> frozenset[torch.fx.Node]:
    """The nodes of ``graph`` whose values Inductor computes inside the kernels that read them:
    pointwise, not returned (through a view or not), and read only by pointwise operations,
    reductions and indirect loads."""
    found = set()
    for node in graph.nodes:
        if not _pointwise(node) or not node.users:
            continue
        readers = list(_readers(node))
        if all(reader.op == "call_function" and _inlines(reader) for reader in readers):
            found.add(node)
    return frozenset(found)
