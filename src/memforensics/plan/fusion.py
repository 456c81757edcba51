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

A constant (``full``, ``scalar_tensor``) is a pointwise function too, and a ``scatter`` into
a constant is rewritten by Inductor into one (``optimize_scatter_upon_const_tensor``: the
one-hot gradient of ``nll_loss``'s backward is never written).
A functional scatter (``index_put``, ``scatter_add``) is a pointwise copy of its first input
that the scatter then writes into: that input is computed inside the copy's kernel (an
embedding's gradient accumulates into zeros that are never a buffer of their own), or the
copy is written into its buffer where it dies there.

Where a kernel's output has the size and dtype of a buffer it reads that dies there, Inductor
writes the output into that buffer (``inplace_buffers``: the logits' gradient into the saved
logits, GELU's backward into its matmul's output); :func:`in_place` names those pairs, and the
plan hands the dying buffer's block to the output instead of allocating another. A buffer
read by an inlined value lives until the kernel computing that value has run
(:func:`last_reads`). And Inductor orders its kernels to lower the peak
(``reorder_for_peak_memory``): :func:`reorder` puts the graph in its least-peak-first order
where that estimates a lower peak than the graph's own, estimated as Inductor's scheduler does
before code generation, so without the writes into dying inputs (which are chosen afterwards,
in the order kept) and with parameters and incoming gradients never freed; on a tie the
graph's own order stays.

A matrix product reads each operand through one unit stride (``realize_inputs``, then
``require_stride1``): a view with none, as the gradient of a ``sum`` taken inside the graph
arrives (a scalar expanded, and that transposed), is copied into a buffer of its own for each
product that reads it (:func:`copied_operands`). Those copies of one value read the same input
over as many elements, and Inductor's scheduler fuses them into one kernel before it orders
its kernels, so they are made together, where the first of them would be, and ordered as one.

What is not followed: a pointwise value Inductor realises because many reads accumulate in it
(``realize_reads_threshold``; rare in model code); other kernels Inductor fuses side by side (a
bias's gradient summed in the kernel of GELU's backward), which keeps what each reads until
the fused kernel runs; Inductor's other orders (breadth- and depth-first), which it keeps where
they estimate lower still; a large reduction Inductor splits in two, whose partial results are a
small buffer of their own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

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

_GATHERS = frozenset(
    (
        torch.ops.aten.gather.default,
        torch.ops.aten.index.Tensor,
        torch.ops.aten._unsafe_index.Tensor,
        torch.ops.aten.index_select.default,
        torch.ops.aten.embedding.default,
    )
)
"""Operators Inductor lowers to a pointwise value, each element a load of the input at its
index (``gather``, ``embedding`` and ``index_impl`` return ``Pointwise.create``;
``index_select`` decomposes to ``index``), though torch tags none ``pointwise``: a lookup
into a small table (an 8-bit optimizer's quantization map, ``qmap[codes + 64]``) is computed
inside the kernel that reads it. Indexing by a boolean mask falls back to ATen's kernel."""

_HELD_INPUTS = ("primals_", "arg", "fwd_rng_state", "bwd_rng_state", "tangents")
"""Prefixes of the graph inputs Inductor's memory planning never frees: parameters and
inputs the caller holds, random-number states, and the incoming gradients."""

_POINTWISE_PRIMS = frozenset(
    (
        torch.ops.prims.convert_element_type.default,
        torch.ops.aten.full.default,
        torch.ops.aten.scalar_tensor.default,
    )
)
"""Operators Inductor lowers to pointwise functions that torch does not tag ``pointwise``: a
dtype cast, and constants."""
_SCATTERS = frozenset((torch.ops.aten.scatter.value, torch.ops.aten.scatter.src))
"""``scatter``, pointwise where it writes into a constant
(``optimize_scatter_upon_const_tensor``)."""


_SCATTERING = frozenset(
    (
        torch.ops.aten.index_put.default,
        torch.ops.aten._unsafe_index_put.default,
        torch.ops.aten._unsafe_masked_index_put_accumulate.default,
        torch.ops.aten.scatter.src,
        torch.ops.aten.scatter.value,
        torch.ops.aten.scatter_add.default,
        torch.ops.aten.scatter_reduce.two,
    )
)
"""Functional scatters, which Inductor lowers as a pointwise copy of their first input (which
it computes inside that copy's kernel, and whose dying buffer it writes the copy into) that
the scatter then writes into in place: an embedding's gradient, ``index_put`` into zeros, is
one buffer, not the zeros and a copy."""


def _scattered(node: torch.fx.Node) -> torch.fx.Node | None:
    """The buffer a functional scatter copies and writes into (its first input's), or
    ``None`` for any other node."""
    if node.op != "call_function" or node.target not in _SCATTERING or not node.args:
        return None
    first = node.args[0]
    return _base(first) if isinstance(first, torch.fx.Node) else None


def _pointwise(node: torch.fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if target in _SCATTERS:
        first = node.args[0]
        return isinstance(first, torch.fx.Node) and first.target is torch.ops.aten.full.default
    return target in _POINTWISE_PRIMS or torch.Tag.pointwise in target.tags


def _gathered(node: torch.fx.Node) -> bool:
    """Whether ``node`` is a gather Inductor computes pointwise: one of :data:`_GATHERS`,
    indexed by integers (a boolean mask's index is ATen's fallback, a buffer)."""
    if node.op != "call_function" or node.target not in _GATHERS:
        return False
    indices = node.args[1] if len(node.args) > 1 else None
    for index in indices if isinstance(indices, (list, tuple)) else (indices,):
        value = index.meta.get("val") if isinstance(index, torch.fx.Node) else None
        if isinstance(value, torch.Tensor) and value.dtype == torch.bool:
            return False
    return True


def _view(node: torch.fx.Node) -> bool:
    target = node.target
    return (
        node.op == "call_function"
        and isinstance(target, torch._ops.OpOverload)
        and bool(target.is_view)
    )


def _inlines(node: torch.fx.Node, value: torch.fx.Node) -> bool:
    """Whether ``node`` reads ``value`` inside its own kernel (no buffer needed for it)."""
    target = node.target
    if _pointwise(node) or _gathered(node) or target in _LOADING or _scattered(node) is value:
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
    pointwise (gathers included), not returned (through a view or not), and read only by
    pointwise operations, reductions and indirect loads; and the views of those."""
    found = set()
    for node in graph.nodes:
        if _view(node):
            if _base(node) in found:
                found.add(node)
            continue
        if not (_pointwise(node) or _gathered(node)) or not node.users:
            continue
        readers = list(_readers(node))
        if all(reader.op == "call_function" and _inlines(reader, node) for reader in readers):
            found.add(node)
    return frozenset(found)


def _base(node: torch.fx.Node) -> torch.fx.Node:
    """The buffer a view reads (itself for a value that is not a view)."""
    while _view(node) and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


_PRODUCTS: dict[object, tuple[int, ...]] = {
    torch.ops.aten.mm.default: (0, 1),
    torch.ops.aten.addmm.default: (1, 2),
    torch.ops.aten.bmm.default: (0, 1),
    torch.ops.aten.baddbmm.default: (1, 2),
}
"""The matrix products Inductor lowers through ``mm_args``, with the places of the matrices it
realises each with a unit stride."""


def _strideless(node: torch.fx.Node) -> bool:
    """Whether ``node``'s traced value has dimensions but no unit stride (a scalar expanded),
    its sizes known (a symbolic stride is no unit stride to Inductor either, but a symbolic
    size makes no copy here)."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return False
    if not all(type(size) is int for size in value.shape):
        return False
    return not any(type(stride) is int and stride == 1 for stride in value.stride())


def copied_operands(graph: torch.fx.Graph) -> dict[torch.fx.Node, tuple[torch.fx.Node, ...]]:
    """Each matrix product's operand that is a view with no unit stride read through a copy of
    its own, made in ``graph`` just before the product, as Inductor's ``require_stride1``
    realises it; and the copies Inductor fuses into one kernel: the first of each value's
    copies over as many elements, with the others."""
    copies: dict[tuple[torch.fx.Node, int], list[torch.fx.Node]] = {}
    for node in list(graph.nodes):
        places = _PRODUCTS.get(node.target, ()) if node.op == "call_function" else ()
        for place in places:
            operand = node.args[place] if place < len(node.args) else None
            if not isinstance(operand, torch.fx.Node) or not _view(operand):
                continue
            if not _strideless(operand):
                continue
            value = operand.meta["val"]
            with graph.inserting_before(node):
                copy = graph.call_function(
                    torch.ops.aten.clone.default,
                    (operand,),
                    {"memory_format": torch.contiguous_format},
                )
            copy.meta["val"] = torch.empty(value.shape, dtype=value.dtype, device="meta")
            node.update_arg(place, copy)
            copies.setdefault((_base(operand), value.numel()), []).append(copy)
    return {made[0]: tuple(made[1:]) for made in copies.values() if len(made) > 1}


def _read(node: torch.fx.Node, inlined: frozenset[torch.fx.Node]) -> set[torch.fx.Node]:
    """The buffers the kernel that computes ``node`` reads: its inputs' buffers, through the
    values inlined into it."""
    found: set[torch.fx.Node] = set()
    for value in node.all_input_nodes:
        buffer = _base(value)
        if buffer in inlined:
            found |= _read(buffer, inlined)
        else:
            found.add(buffer)
    return found


def in_place(
    graph: torch.fx.Graph,
    inlined: frozenset[torch.fx.Node],
    donated: frozenset[torch.fx.Node] = frozenset(),
) -> dict[torch.fx.Node, torch.fx.Node]:
    """Each pointwise kernel's output that Inductor writes into a buffer its kernel reads: one
    of the output's size and dtype that no later kernel reads and the graph does not return,
    made in the graph or one of its inputs in ``donated`` (a backward's saved tensors that
    AOTAutograd donates: none that is also the forward's output, which the script may hold,
    as the logits a training loop keeps beside its loss)."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    last: dict[torch.fx.Node, int] = {}
    reads: dict[torch.fx.Node, set[torch.fx.Node]] = {}
    for node in graph.nodes:
        if node.op == "output":
            for value in node.all_input_nodes:
                last[_base(value)] = len(order)
        elif node.op == "call_function" and node not in inlined and not _view(node):
            reads[node] = _read(node, inlined)
            for buffer in reads[node]:
                last[buffer] = max(last.get(buffer, -1), order[node])
    found: dict[torch.fx.Node, torch.fx.Node] = {}
    taken: set[torch.fx.Node] = set()
    for node, read in reads.items():
        scattered = _scattered(node)
        if scattered is None and not _pointwise(node):
            continue
        # a scatter's copy reads only the buffer it copies
        candidates = read if scattered is None else read & {scattered}
        for buffer in sorted(candidates, key=order.__getitem__):
            if (
                buffer not in taken
                and last.get(buffer) == order[node]
                and (buffer in donated or buffer.op != "placeholder")
                and _same_layout(buffer, node)
            ):
                found[node] = buffer
                taken.add(buffer)
                break
    return found


def _same_layout(buffer: torch.fx.Node, node: torch.fx.Node) -> bool:
    """Whether ``buffer``'s value and ``node``'s have as many elements of one dtype, both
    contiguous (traced values; a kernel may write a reshaped output into its input)."""
    held, made = buffer.meta.get("val"), node.meta.get("val")
    if not isinstance(held, torch.Tensor) or not isinstance(made, torch.Tensor):
        return False
    return bool(
        held.numel() == made.numel()
        and held.dtype == made.dtype
        and held.is_contiguous()
        and made.is_contiguous()
    )


def last_reads(
    graph: torch.fx.Graph, inlined: frozenset[torch.fx.Node]
) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """For each node, the values whose last reader it is, as Inductor's kernels read them: a
    value read by an inlined one, or through a view, lives until the last kernel reading that
    one has run, not until the inlined value or the view is made (the form of
    ``torch.fx.Interpreter.user_to_last_uses``)."""
    nodes = list(graph.nodes)
    order = {node: i for i, node in enumerate(nodes)}
    until: dict[torch.fx.Node, int] = {}
    for node in reversed(nodes):
        ends = [
            until[user] if user in inlined or _view(user) else order[user] for user in node.users
        ]
        until[node] = max(ends, default=order[node])
    found: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node, end in until.items():
        if node.op != "output":
            found.setdefault(nodes[end], []).append(node)
    return found


def _nbytes(node: torch.fx.Node) -> int:
    """The bytes of ``node``'s traced value, as the caching allocator's blocks hold them. A
    dynamic size is read at its hint, the size of the call that traced it, as Inductor's
    memory planning reads it: without a guard, which would specialize the graph to that size
    and compile it again for every other."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return 0
    nbytes = _hint(value.untyped_storage().nbytes())
    return -(-nbytes // 512) * 512


def _hint(size: int) -> int:
    """``size`` at its hint, read as Inductor reads it (``optimization_hint``). Its module
    imports sympy, a second or more of CPU that only a script which compiles pays
    (``torch.compile`` has imported it by then)."""
    try:
        from torch.fx.experimental.symbolic_shapes import optimization_hint
    except ImportError:  # a torch before the name: the same function, as it was called there
        from torch.fx.experimental.symbolic_shapes import (  # type: ignore[attr-defined, no-redef, unused-ignore]
            hint_int as optimization_hint,
        )
    return int(optimization_hint(size))


class _Schedule:
    """The kernels of a graph as Inductor's memory planning sees them: what each allocates
    (nothing where it is inlined or a view; a kernel that codegen later writes into a dying
    input still counts its own buffer here, as Inductor's estimate does not see that reuse),
    the buffers each reads, and the buffers that can be freed (``donated``: the graph's own
    inputs, but for parameters, tangents and the forward's, which their callers hold:
    Inductor's ``is_nonfreeable_buffers``). Nodes Inductor fuses into one kernel (``fused``:
    the first with the others) are scheduled as one, where the first is."""

    def __init__(
        self,
        graph: torch.fx.Graph,
        inlined: frozenset[torch.fx.Node],
        *,
        donated: bool,
        fused: Mapping[torch.fx.Node, tuple[torch.fx.Node, ...]] | None = None,
    ) -> None:
        fused = fused or {}
        self.kernel = {m: first for first, rest in fused.items() for m in (first, *rest)}
        """The scheduled node each fused node is run with."""
        computed = [n for n in graph.nodes if n.op == "call_function"]
        self.members = {n: (n, *fused.get(n, ())) for n in computed if self._of(n) is n}
        self.nodes = list(self.members)
        self.index = {node: i for i, node in enumerate(self.nodes)}
        own = {n: 0 if n in inlined or _view(n) else _nbytes(n) for n in computed}
        self.size = {n: sum(own[m] for m in self.members[n]) for n in self.nodes}
        self.reads = {
            n: set().union(
                *(set() if m in inlined or _view(m) else _read(m, inlined) for m in self.members[n])
            )
            - set(self.members[n])
            for n in self.nodes
        }
        self.inputs = {
            n: {self._of(p) for m in self.members[n] for p in m.all_input_nodes if p in own} - {n}
            for n in self.nodes
        }
        """The scheduled nodes each must run after."""
        self.users: dict[torch.fx.Node, set[torch.fx.Node]] = {n: set() for n in self.nodes}
        for node, inputs in self.inputs.items():
            for made in inputs:
                self.users[made].add(node)
        returned = {_base(v) for v in graph.output_node().all_input_nodes}
        self.freed: dict[torch.fx.Node, int] = {}
        """Each buffer that dies when its last reader has run, with its bytes."""
        self.held = 0
        """The bytes of the inputs that can be freed, all live when the graph starts."""
        for node in graph.nodes:
            if node in returned or node in inlined or _view(node) or node.op == "output":
                continue
            if node.op == "placeholder":
                if not donated or node.name.startswith(_HELD_INPUTS):
                    continue
                self.held += _nbytes(node)
            self.freed[node] = _nbytes(node)
        self.outputs = sum(
            _nbytes(node)
            for node in returned
            if node.op == "call_function" and node not in inlined and not _view(node)
        )
        """The bytes the graph returns, which Inductor's planning takes as the least peak."""
        self.readers: dict[torch.fx.Node, set[torch.fx.Node]] = {}
        for node, buffers in self.reads.items():
            for buffer in buffers:
                self.readers.setdefault(buffer, set()).add(node)
        self.unread = {
            n: sum(
                self.freed[m] for m in self.members[n] if m not in self.readers and m in self.freed
            )
            for n in self.nodes
        }
        """The bytes each scheduled node makes that nothing reads, freed as soon as made."""

    def _of(self, node: torch.fx.Node) -> torch.fx.Node:
        return self.kernel.get(node, node)

    def _start(self) -> tuple[int, int]:
        """What is live when the graph starts (its freeable inputs) and the least peak Inductor
        plans for (that, or the bytes the graph returns if more)."""
        return self.held, max(self.held, self.outputs)

    def peak(self, order: list[torch.fx.Node]) -> int:
        """The most bytes the graph's own buffers hold at once, run in ``order``."""
        left = {buffer: len(readers) for buffer, readers in self.readers.items()}
        live, top = self._start()
        for node in order:
            live += self.size[node]
            top = max(top, live)
            for buffer in self.reads[node]:
                left[buffer] -= 1
                if left[buffer] == 0:
                    live -= self.freed.get(buffer, 0)
            live -= self.unread[node]
        return top

    def in_graph_order(self) -> list[torch.fx.Node]:
        """The scheduled nodes in the graph's own order, each fused kernel where its first
        node is, after what its others read."""
        order: list[torch.fx.Node] = []
        done: set[torch.fx.Node] = set()

        def run(node: torch.fx.Node) -> None:
            if node in done:
                return
            done.add(node)
            for made in sorted(self.inputs[node], key=self.index.__getitem__):
                run(made)
            order.append(node)

        for node in self.nodes:
            run(node)
        return order

    def least_peak_first(self) -> list[torch.fx.Node]:
        """Inductor's ``topological_sort_lpmf``: among the kernels ready to run, the one that
        raises the peak least, then the one that adds least net of what it frees, then the
        first in the graph."""
        waiting = {node: len(inputs) for node, inputs in self.inputs.items()}
        left = {buffer: len(readers) for buffer, readers in self.readers.items()}
        frees = dict(self.unread)
        for buffer, readers in self.readers.items():
            if len(readers) == 1:
                frees[next(iter(readers))] += self.freed.get(buffer, 0)
        ready = {node for node, count in waiting.items() if count == 0}
        order: list[torch.fx.Node] = []
        done: set[torch.fx.Node] = set()
        live, top = self._start()
        while ready:
            gap = top - live
            node = min(
                ready,
                key=lambda n: (
                    self.size[n] if self.size[n] > gap else 0,
                    self.size[n] - frees[n],
                    self.index[n],
                ),
            )
            ready.remove(node)
            order.append(node)
            done.add(node)
            live += self.size[node]
            top = max(top, live)
            live -= frees[node]
            for user in self.users[node]:
                waiting[user] -= 1
                if waiting[user] == 0:
                    ready.add(user)
            for buffer in self.reads[node]:
                left[buffer] -= 1
                if left[buffer] == 1:
                    for reader in self.readers[buffer]:
                        if reader not in done:
                            frees[reader] += self.freed.get(buffer, 0)
        return order


def reorder(
    graph: torch.fx.Graph,
    inlined: frozenset[torch.fx.Node],
    *,
    donated: bool,
    fused: Mapping[torch.fx.Node, tuple[torch.fx.Node, ...]] | None = None,
) -> None:
    """``graph``'s operations put in the order Inductor runs its kernels in: each group of
    ``fused`` nodes run together, where its first is, and the whole in Inductor's
    least-peak-first order where that lowers the peak (``reorder_for_peak_memory``, kept where
    it estimates a lower peak than the graph's own), so a buffer an earlier-scheduled kernel
    lets die is freed before a large one is made."""
    schedule = _Schedule(graph, inlined, donated=donated, fused=fused)
    order = schedule.in_graph_order()
    lowest = schedule.least_peak_first()
    if len(lowest) == len(schedule.nodes) and schedule.peak(lowest) < schedule.peak(order):
        order = lowest
    ran = [member for node in order for member in schedule.members[node]]
    if ran == [n for n in graph.nodes if n.op == "call_function"]:
        return
    output = graph.output_node()
    for node in ran:
        output.prepend(node)
