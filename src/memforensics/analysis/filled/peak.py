"""The peak: the moment of highest live memory in the trace, its kinds and its call tree.

Live bytes at every trace position follow from the allocations' lifetimes
(:mod:`~memforensics.analysis.filled.lifetime`): each ``alloc`` adds, each free subtracts,
starting from what was live before the trace began. The highest point is the peak; an ``oom``
entry marks the OOM's moment. The call tree of what is live then is the answer to "what filled
the device": the user's own frames, outermost first. Framework frames
(:func:`~memforensics.analysis.dump.is_framework_file`: torch's, memforensics' own, runpy's)
are never a level of their own between two of the user's lines, since an engineer changes the
caller, not ``torch/nn/modules/module.py``; those inside the user's innermost line become one
leaf named by the innermost of them (the op that allocated: ``linear.py:125 forward (+2
library frames)``), marked :attr:`CallNode.library`: the text and the page fold it into the
user's line above it (:meth:`CallNode.shown_children`), so that line, not the op, is what a
reader sees holding the bytes. Native frames are dropped
(:func:`~memforensics.analysis.dump.is_native_frame`). A stack without frames is one
``<before recording>`` node, or one ``<no Python frames>`` node when the history recorded its
allocation (:attr:`~memforensics.analysis.filled.lifetime.Allocation.recorded`); one with
native frames only, one ``<no Python frames>`` node: the labels ``summary``'s sites use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from operator import indexOf
from typing import Any

from memforensics.analysis.dump import (
    NATIVE_ONLY,
    ONE_EVENT,
    Dump,
    attribute,
    frame_text,
    is_framework_file,
    is_native_frame,
    per_recorded_stack,
    unframed_site,
)
from memforensics.analysis.dump.load import paused_gc
from memforensics.analysis.filled.gathered import Gathered, gathered_at
from memforensics.analysis.filled.kinds import (
    OPTIMIZER,
    TEMPORARY,
    KindBytes,
    classify,
    kinds_table,
    shows_training,
    unwinding_ends,
)
from memforensics.analysis.filled.known import Known, label_known
from memforensics.analysis.filled.lifetime import BEFORE, Allocation, Lifetimes, lifetimes
from memforensics.analysis.schema import NOT_IN_JSON

MAX_DEPTH = 48
MIN_SHARE = 0.0005  # children under 0.05 % of the moment's bytes are merged into one node


@dataclass(frozen=True)
class CallNode:
    """A frame of the call tree with the live bytes and blocks under it; ``children`` biggest
    first."""

    name: str
    bytes: int = 0
    blocks: int = 0
    children: tuple[CallNode, ...] = ()
    library: bool = False
    """The torch or library frames inside the user's line above this node (the op it
    called): read as part of that line, never as a level of its own."""

    def sorted_children(self) -> list[CallNode]:
        """Children, biggest first."""
        return list(self.children)

    def shown_children(self) -> list[CallNode]:
        """Children as a reader sees them, biggest first: the library frames inside this line
        (:attr:`library`) are folded into it, their bytes this line's own."""
        return [child for child in self.children if not child.library]

    def folded(self) -> list[CallNode]:
        """The library frames folded into this line (:meth:`shown_children` leaves out)."""
        return [child for child in self.children if child.library]


@dataclass
class _Growing:
    """A call tree node while the live allocations are added to it."""

    name: str
    bytes: int = 0
    blocks: int = 0
    children: dict[str, _Growing] | None = None
    library: bool = False

    def child(self, name: str) -> _Growing:
        """The child named ``name``, created empty if new."""
        if self.children is None:
            self.children = {}
        found = self.children.get(name)
        if found is None:
            found = self.children[name] = _Growing(name)
        return found

    def done(self) -> CallNode:
        """The finished node, children biggest first."""
        ordered = sorted((self.children or {}).values(), key=lambda n: (-n.bytes, n.name))
        children = tuple(c.done() for c in ordered)
        return CallNode(self.name, self.bytes, self.blocks, children, self.library)


@dataclass(frozen=True, slots=True)
class KindSite:
    """Live bytes and blocks of one kind made at one site (the innermost frame outside torch).

    ``kind`` is a kind of the kinds table, or :data:`OPTIMIZER_TEMPORARIES` for the
    ``temporary`` blocks an optimizer's step made (a part of that kind a cause names apart).
    """

    kind: str
    site: str
    bytes: int
    blocks: int


OPTIMIZER_TEMPORARIES = "optimizer_temporaries"
"""The sites of ``temporary`` blocks made inside an optimizer's step (``torch/optim``'s and the
others' :mod:`~memforensics.analysis.filled.kinds` knows): a multi-tensor (``foreach``) step's
per-parameter lists, which a batch size does not change."""

SITES_PER_KIND = 5
"""How many of each kind's biggest sites a moment keeps (the causes name them)."""


@dataclass(frozen=True)
class Moment:
    """One moment of the trace: ``peak`` or ``oom`` (or ``snapshot`` without history)."""

    name: str
    position: int  # trace position (the state after that entry); the trace length = snapshot
    time_us: int | None
    live_bytes: int  # block bytes, as PyTorch's allocated counter counts them
    kinds: tuple[KindBytes, ...]
    tree: CallNode
    live_requested_bytes: int = 0  # what the callers of those blocks asked for
    sites: tuple[KindSite, ...] = field(default=(), metadata=NOT_IN_JSON)
    """Each kind's biggest sites then, biggest first within a kind (what a cause names)."""
    optimizer_temporaries: OptimizerTemporaries | None = field(default=None, metadata=NOT_IN_JSON)
    """The ``temporary`` blocks an optimizer's step holds then (None: none)."""
    gathered: Gathered | None = field(default=None, metadata=NOT_IN_JSON)
    """FSDP's unsharded parameters then, and those held from the forward into the backward
    (None: none)."""


@dataclass(frozen=True)
class OptimizerTemporaries:
    """The ``temporary`` blocks live at a moment that an optimizer's step made: their bytes,
    their count, the largest (one parameter's share of a multi-tensor step's lists), and
    whether torch's multi-tensor (``foreach``) implementation made them (a ``_multi_tensor_``
    frame: its ``foreach`` and ``fused`` keywords apply; else a hand-written step did)."""

    bytes: int
    blocks: int
    largest: int
    foreach: bool


def _optimizer_temporary(found: Allocation) -> bool:
    """Whether ``found`` is a ``temporary`` block an optimizer's step made."""
    return found.kind == TEMPORARY and found.phase == OPTIMIZER


def optimizer_temporaries(live: list[Allocation]) -> OptimizerTemporaries | None:
    """What of ``live`` is an optimizer step's temporaries; None when nothing is."""
    found = [a for a in live if _optimizer_temporary(a)]
    if not found:
        return None
    multi: dict[int, bool] = {}  # by stack identity: equal stacks share one frames list
    for block in found:
        key = id(block.frames)
        if key not in multi:
            frames = block.frames if type(block.frames) is list else []
            multi[key] = any(
                type(frame) is dict and str(frame.get("name", "")).startswith(MULTI_TENSOR)
                for frame in frames
            )
    sizes = [a.size for a in found]
    return OptimizerTemporaries(sum(sizes), len(sizes), max(sizes), any(multi.values()))


MULTI_TENSOR = "_multi_tensor_"
"""How torch names its multi-tensor optimizer steps (``_multi_tensor_adamw``, ...)."""


@dataclass(frozen=True)
class Unwound:
    """What the unwinding of a failed step freed: the blocks live at the ``oom`` entry and freed
    between it and the next allocation, their bytes and their biggest sites."""

    bytes: int
    blocks: int
    sites: tuple[KindSite, ...]


def peak_position(lt: Lifetimes) -> int:
    """Trace position of the highest live bytes (first on ties); the snapshot without a trace.

    Live bytes are block sizes, counted as PyTorch's ``allocated_bytes`` counts them, so the
    walk ends on the snapshot's own allocated bytes and the peak is never below them.
    """
    if not lt.has_trace:
        return lt.length
    change = [0] * (lt.length + 1)
    for found in lt.allocations:
        if found.start == BEFORE:
            change[0] += found.size
        else:
            change[found.start] += found.size
        if found.end < lt.length:
            change[max(found.end, 0)] -= found.size
    del change[lt.length :]
    best = max(accumulate(change), default=-1)  # live bytes right after each position
    return indexOf(accumulate(change), best) if best > -1 else lt.length  # the first such


def live_at(lt: Lifetimes, position: int) -> list[Allocation]:
    """Allocations live right after trace position ``position``."""
    if position >= lt.length:
        return lt.at_snapshot()
    return [a for a in lt.allocations if a.start <= position < a.end]


def moment(lt: Lifetimes, name: str, position: int, trace: list[Any]) -> Moment:
    """Kinds and call tree of what is live at ``position`` (kinds must be classified)."""
    live = live_at(lt, position)
    stamp = None
    if 0 <= position < len(trace) and type(trace[position]) is dict:
        value = trace[position].get("time_us")
        stamp = value if type(value) is int else None
    return Moment(
        name=name,
        position=position,
        time_us=stamp,
        live_bytes=sum(a.size for a in live),
        kinds=kinds_table(live),
        tree=call_tree(live),
        live_requested_bytes=sum(a.requested for a in live),
        sites=kind_sites(live),
        optimizer_temporaries=optimizer_temporaries(live),
        gathered=gathered_at(lt, live),
    )


def kind_sites(live: list[Allocation], per_kind: int = SITES_PER_KIND) -> tuple[KindSite, ...]:
    """The biggest sites of each kind among ``live`` (a labelled block counts under its main
    kind; an optimizer step's temporaries under :data:`OPTIMIZER_TEMPORARIES`), ``per_kind`` at
    most, each kind's biggest first."""
    site_of = per_recorded_stack(attribute)
    totals: dict[tuple[str, str], list[int]] = {}
    for found in live:
        kind = OPTIMIZER_TEMPORARIES if _optimizer_temporary(found) else found.kind
        entry = totals.setdefault((kind, site_of(found.frames, found.recorded)[0]), [0, 0])
        entry[0] += found.size
        entry[1] += 1
    ordered = sorted(totals.items(), key=lambda item: (item[0][0], -item[1][0], item[0][1]))
    kept: list[KindSite] = []
    count: dict[str, int] = {}
    for (kind, site), (size, blocks) in ordered:
        if count.get(kind, 0) < per_kind:
            count[kind] = count.get(kind, 0) + 1
            kept.append(KindSite(kind, site, size, blocks))
    return tuple(kept)


def unwound_at(lt: Lifetimes, oom: int) -> Unwound:
    """The blocks live at the ``oom`` entry at trace position ``oom`` that the unwinding freed
    (:func:`~memforensics.analysis.filled.kinds.unwinding_ends`)."""
    end = unwinding_ends(lt).get(oom, oom)
    freed = [a for a in lt.allocations if a.start <= oom < a.end < end]
    sites = kind_sites(freed, per_kind=len(freed))
    merged: dict[str, list[int]] = {}
    for found in sites:
        entry = merged.setdefault(found.site, [0, 0])
        entry[0] += found.bytes
        entry[1] += found.blocks
    by_site = sorted(merged.items(), key=lambda item: (-item[1][0], item[0]))
    return Unwound(
        sum(a.size for a in freed),
        len(freed),
        tuple(KindSite("", site, size, blocks) for site, (size, blocks) in by_site),
    )


def folded_path(frames: object, recorded: bool = False) -> tuple[tuple[str, ...], bool]:
    """Outermost-first node names for ``frames``: the user's frames, then one leaf for the
    framework frames inside the innermost of them (all of them, when there is no user frame);
    and whether that leaf is library frames inside a user's line (:attr:`CallNode.library`).
    Without frames, one node: :func:`~memforensics.analysis.dump.frames.unframed_site` of
    ``recorded``."""
    if not isinstance(frames, list) or not frames:
        return (unframed_site(recorded),), False
    path: list[str] = []
    inside: list[str] = []  # framework frames since the last user frame, outermost first
    for frame in reversed(frames):  # outermost first
        if not isinstance(frame, dict):
            continue
        filename, name = frame.get("filename"), frame.get("name")
        if not isinstance(filename, str):
            continue
        if is_native_frame(filename, name if isinstance(name, str) else ""):
            continue
        if is_framework_file(filename):
            inside.append(frame_text(frame))
            continue
        inside = []  # plumbing between two of the user's lines: no level of its own
        path.append(frame_text(frame))
    library = bool(inside and path) and len(path) < MAX_DEPTH
    if inside:
        path.append(_leaf(inside))
    return tuple(path[:MAX_DEPTH]) or (NATIVE_ONLY,), library


def _leaf(labels: list[str]) -> str:
    """The innermost framework frame, and how many more it stands for."""
    if len(labels) == 1:
        return labels[0]
    return f"{labels[-1]} (+{len(labels) - 1} library frames)"


def call_tree(live: list[Allocation]) -> CallNode:
    """The call tree of ``live``, tiny branches merged so a hostile dump stays bounded."""
    root = _Growing("all live memory")
    path_of = per_recorded_stack(folded_path)
    for found in live:
        node = root
        node.bytes += found.size
        node.blocks += 1
        names, library = path_of(found.frames, found.recorded)
        for name in names:
            node = node.child(name)
            node.bytes += found.size
            node.blocks += 1
        node.library = node.library or library
    _prune(root, max(int(root.bytes * MIN_SHARE), 1))
    return root.done()


def _prune(node: _Growing, floor: int) -> None:
    if not node.children:
        return
    small = [child for child in node.children.values() if child.bytes < floor]
    if len(small) > 1:
        merged = _Growing(f"<{len(small)} smaller callers>")
        for child in small:
            merged.bytes += child.bytes
            merged.blocks += child.blocks
            del node.children[child.name]
        node.children[merged.name] = merged
    for child in node.children.values():
        _prune(child, floor)


# What filled the device: kinds of the live memory, the peak and the OOM moment, in one pass.
#
# ``summary``, ``report`` and the benchmarks all ask the same questions of a dump; this runs the
# trace walk (:mod:`~memforensics.analysis.filled.lifetime`) and the classifier
# (:mod:`~memforensics.analysis.filled.kinds`) once and hands back the answers.

KINDS_TOTAL = "allocated_bytes"  # the kinds add up to this figure of the snapshot


@dataclass(frozen=True)
class Filled:
    """Kinds at the snapshot's moment, the peak, and the OOM's moment when the trace has one;
    ``known``: what the process's tracked tensors labelled (None when the dump lists none)."""

    kinds: tuple[KindBytes, ...]
    peak: Moment
    oom: Moment | None
    lifetimes: Lifetimes
    known: Known | None = None
    unwound: Unwound | None = None
    """What the unwinding after the trace's last ``oom`` entry freed (None without one)."""
    inference: bool = False
    """The trace shows forwards alone, no backward and no optimizer's step
    (:func:`~memforensics.analysis.filled.kinds.shows_training`): nothing in it is saved for a
    backward. False without a trace that shows a peak: nothing tells."""

    def kind_of_blocks(self) -> dict[int, str]:
        """The kind of each block allocated at the snapshot, by its address."""
        return {found.addr: found.kind for found in self.lifetimes.at_snapshot()}


@paused_gc()
def what_filled(dump: Dump) -> Filled:
    """Classify every allocation of ``dump`` and find its peak and OOM moments.

    The kinds the process told (the sidecar's tracked tensors) take precedence over inference.
    """
    lt = lifetimes(dump)
    classify(lt)
    known = label_known(lt, dump.meta.tensors)
    traced = lt.has_trace and dump.shape.history != ONE_EVENT  # one event shows no peak
    position = peak_position(lt) if traced else lt.length
    peak = moment(lt, "peak" if traced else "snapshot", position, dump.trace)
    oom = moment(lt, "oom", lt.oom_positions[-1], dump.trace) if lt.oom_positions else None
    unwound = unwound_at(lt, lt.oom_positions[-1]) if lt.oom_positions else None
    inference = traced and not shows_training(lt)
    return Filled(kinds_table(lt.at_snapshot()), peak, oom, lt, known, unwound, inference)
