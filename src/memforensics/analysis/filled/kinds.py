"""Kinds of memory from lifetimes and frames: parameters, optimizer state, gradients, activations,
the input batch, KV caches, workspaces, temporaries.

No hooks are needed, so old dumps can be classified too. A training step has a shape every
framework shares, and an allocation's kind follows from where in that shape it starts and ends:

* **phase** (frames, as tiebreaker of what the trace shows): an allocation made on the autograd
  engine (C++ engine frames, *no* Python frames at all, or Python that does not start where a
  Python thread starts: CUDA and NPU run backward, with the hooks and custom backwards it
  calls, on a device thread) is in backward; one under ``torch/optim`` (or DeepSpeed's,
  apex's, Megatron's optimizers, torch's gradient clipping, run between backward and the
  step as Megatron's own is, or torch's gradient scaler, whose scale and growth tracker
  are kept across steps, or the ``step`` of a file named for optimizers or of an installed
  package's folder so named: Opacus', timm's, Adafactor's; of the user's own file in a folder
  so named, only where a stack of the dump shows it running a known optimizer) is in the
  optimizer, unless a closure its step called made
  it (a function named for a closure nearer the allocation: Lightning runs each step's
  forward and backward so); the rest is forward. An entry without
  frames falls back on its step's peak of live memory: forward before it, backward after.
* **lifetime**: a forward allocation freed after the next backward began is an activation, one
  freed before is a temporary; a backward allocation freed before its backward pass ended is a
  temporary, one that outlives it a gradient (that covers gradient accumulation: the first
  micro-batch's gradients persist, later micro-batches' partial gradients die in backward); an
  optimizer allocation that outlives its step is optimizer state; anything made outside every
  step (``step=N`` metadata) that is never freed is a parameter; a live block with no frames
  at all was allocated before recording began. A forward allocation held to the end with no
  backward after it is an activation where a module's forward made it and the trace ends in
  that forward (the dump shows training, a backward or an optimizer's step, or the script's
  own code allocated nothing after it), or where the trace ends at an OOM (the forward that
  ran out), and ``unknown`` otherwise: what a script keeps to the end of a trace that never
  ran out (an inference loop's batch, tables, results, the outputs it collects, a ``no_grad``
  forward's outputs it went on holding) is no forward's activation, and its lifetime cannot
  tell which of those it is.

Some code makes memory of one kind only, and its frames say so before the lifetime is asked
(:mod:`~memforensics.analysis.filled.roles`): a cuBLAS, cuBLASLt or cuDNN **workspace**, an
inference engine's **KV cache**, DataParallel's replicas and FSDP's unsharded parameters
(parameters), FSDP's reduce-scatter buffers and DDP's buckets (gradients), Megatron's parameter
and gradient buffers. A frame that builds, moves or loads a model (a module's ``__init__``,
``Module._apply``, ``from_pretrained``...) makes a held block a parameter, whatever its
lifetime says, or a buffer where ``Module._apply`` moved it from its buffers' line (or a
module's ``copy.deepcopy`` copied it by ``Tensor.__deepcopy__`` alone, its parameters by
``Parameter.__deepcopy__``). A
parameter by lifetime needs that evidence, or many blocks of one size made outside any forward
the trace saw; a frame naming a cache or a workspace rules it out, and without either the
block is ``unknown``.

An allocation freed after an ``oom`` entry (the unwinding of the failed step) is judged as the
trace stood at that OOM: the free the OOM caused says nothing about its role. One the unwinding
freed (its free comes after the OOM and before the next allocation) was the failing step's own:
an activation, or a temporary when backward or the optimizer made it, never a parameter,
optimizer state or ``unknown``.

Three more things the trace proves before a lifetime rule guesses:

* **a workspace by its size**: cuBLAS keeps one workspace per handle and stream, of a size
  fixed by ``CUBLAS_WORKSPACE_CONFIG`` (8,519,680 bytes by default before Hopper, 32 MiB on
  it); a block of that size first made under a matrix product (``linear``, ``matmul``,
  ``mm``..., or right after its own stack's output), made once from that stack at a time and
  held until the end or a clear of the workspaces is that workspace;
* **a block made in a forward is never a parameter** (:mod:`~memforensics.analysis.filled.roles`);
* **per-parameter state**: blocks made outside any forward from one stack, as many per
  parameter (each as large as a parameter or gradient held at the end) and alive to the end,
  are what an optimizer keeps per parameter (a hand-written one has no ``torch/optim`` frame
  to say so), even where their sizes alone made them parameters, when made after the first
  backward began;
* **gradients an optimizer writes**: a stack of the optimizer whose parameter-sized blocks
  outlive their step, are freed in a later one and made again writes gradients anew at each
  step (DP-SGD's noisy ``p.grad``), not state, which is made once and kept.

**The input batch** (``input``): what a step is fed, copied to the device (``batch.to("cuda")``,
``.cuda()``, ``torch.tensor(..., device="cuda")``, a pinned batch copied with
``non_blocking=True``) or made there by the script (a benchmark's random batch: with Python
frames alone, as ``stacks="python"`` and ``memforensics plan`` record them, a copy and a
factory read alike). Its frames are outside every forward, backward and optimizer: a
framework's batch-moving helper (:mod:`~memforensics.analysis.filled.roles`: Accelerate's
``send_to_device``, Lightning's ``move_data_to_device``, Hugging Face ``Trainer``'s
``_prepare_inputs``), or a line of the user's own code (the innermost Python frame outside
torch's own files is not an installed package's). Its lifetime is a step's: a module's forward
ran while it was held, and at most one backward pass began in its life (a batch kept across
steps, a fixed benchmark batch or data held on the device, is state, and keeps the kind its
lifetime gives; so does the batch of a forward written as functions, whose every line is the
script's own as the copy is). A line of the script says less than a helper's frame, so its
block must also come before its step's forward (no module's forward ran since the last
backward or optimizer allocation: a loss or an output the script computes after the forward is
not the input) and live into that step's backward, or to the end of a trace that ends at an
OOM in the forward. An inference loop's batches, made between forwards with no backward to
tell a step's start, read as the script's outputs do, and so does one made before the loop
and kept to the end (a table or a results buffer lives so too): they keep their kind unless a
helper's frame names them.

Each allocation gets a confidence: high where phase and lifetime agree plainly, lower where a
rule had to guess (an allocation the trace never saw freed, no frames, no step tags, a free
after an OOM, a parameter known only by its size).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from math import gcd
from typing import Any

from memforensics.allocator import K_MIN_BLOCK_SIZE
from memforensics.analysis.dump import (
    attribute,
    is_installed_file,
    is_library_file,
    is_native_frame,
    per_stack,
)
from memforensics.analysis.filled import roles
from memforensics.analysis.filled.lifetime import BEFORE, Allocation, Lifetimes

PARAMETER = "parameter"
BUFFER = "buffer"
OPTIMIZER_STATE = "optimizer_state"
GRADIENT = "gradient"
ACTIVATION = "activation"
INPUT = "input"
KV_CACHE = "kv_cache"
WORKSPACE = "workspace"
TEMPORARY = "temporary"
BEFORE_RECORDING = "before_recording"
UNKNOWN = "unknown"
KINDS = (
    PARAMETER,
    BUFFER,
    OPTIMIZER_STATE,
    GRADIENT,
    ACTIVATION,
    INPUT,
    KV_CACHE,
    WORKSPACE,
    TEMPORARY,
    BEFORE_RECORDING,
    UNKNOWN,
)

FORWARD, BACKWARD, OPTIMIZER, NO_FRAMES = "forward", "backward", "optimizer", "none"

_OPTIMIZER_PATHS = (
    "/torch/optim/",
    "/torch/distributed/optim/",
    "/deepspeed/ops/adam/",
    "/deepspeed/ops/lamb/",
    "/apex/optimizers/",
    "/megatron/core/optimizer/",
    "/bitsandbytes/optim/",
    "/torch_npu/optim/",
    "/torch/nn/utils/clip_grad.py",
    "/torch/amp/grad_scaler.py",
    "/torch/cuda/amp/grad_scaler.py",
    "/torch/distributed/fsdp/sharded_grad_scaler.py",
)
_BACKWARD_PY = frozenset({"_engine_run_backward", "backward", "run_backward", "grad"})
_BACKWARD_CPP = ("Engine::evaluate_function", "Engine::thread_main", "autograd::engine::")


def phase_of(frames: object, own_steps: frozenset[tuple[str, str]] = frozenset()) -> str:
    """``forward``, ``backward``, ``optimizer``, or ``none`` when the entry has no frames key;
    ``own_steps``: the user's own ``step`` frames the dump shows to be an optimizer's
    (:func:`optimizer_steps`)."""
    if not isinstance(frames, list):
        return NO_FRAMES
    return _phase(frames, own_steps)


def shows_training(lt: Lifetimes) -> bool:
    """Whether the dump shows a training step: a block made in backward or in an optimizer's
    step, as its frames say (a frameless trace's phases guessed from each step's peak count;
    a block from before recording with no frames says nothing). A trace of forwards alone (an
    inference script, ``no_grad`` or ``inference_mode``) shows nothing saved for a backward:
    what its forwards keep is no activation, and activation checkpointing frees none of it."""
    return any(
        found.phase in (BACKWARD, OPTIMIZER) and (found.start != BEFORE or found.frames)
        for found in lt.allocations
    )


_PYTHON, _NATIVE_FRAME, _CLOSURE = "python", "native", "closure"
_OWN_STEP = "own_step"  # the ``step`` of the user's own file in a folder named for optimizers
_OPTIMIZER_CODE = "optimizer_code"  # another frame of a file named for optimizers: no marker
_mark_cache: dict[tuple[str, str], str] = {}


def _marks(frames: list[Any]) -> Iterator[tuple[tuple[str, str], str]]:
    """Each well-formed frame's (file, function) and what it says (:func:`_frame_mark`),
    innermost first."""
    cache = _mark_cache
    for frame in frames:
        if type(frame) is not dict:
            continue
        filename, name = frame.get("filename"), frame.get("name")
        key = (filename if type(filename) is str else "", name if type(name) is str else "")
        mark = cache.get(key)
        if mark is None:
            if len(cache) >= 200_000:
                cache.clear()
            mark = cache[key] = _frame_mark(*key)
        yield key, mark


def _phase(frames: list[Any], own_steps: frozenset[tuple[str, str]]) -> str:
    """The nearest phase marker's phase; an optimizer's frame outside a closure (a function
    named for one: ``optimizer.step(closure)`` runs the step's forward and backward in it, as
    Lightning's automatic optimization does) marks nothing. The user's own ``step`` in a file
    named for optimizers marks the optimizer's phase only where it is one of ``own_steps``."""
    outermost: tuple[str, str] | None = None  # the outermost Python frame
    in_closure = False
    for key, said in _marks(frames):  # innermost first: the nearest phase marker wins
        mark = said
        if said == _OWN_STEP:
            mark = OPTIMIZER if key in own_steps else _PYTHON
        elif said == _OPTIMIZER_CODE:
            mark = _PYTHON
        if mark in (_PYTHON, _CLOSURE) or (mark == OPTIMIZER and in_closure):
            outermost = key
            in_closure = in_closure or mark == _CLOSURE
        elif mark != _NATIVE_FRAME:
            return mark
    if outermost is None:
        return BACKWARD  # no Python frame: the autograd engine's thread
    return FORWARD if _starts_a_thread(*outermost) else BACKWARD


def _starts_a_thread(filename: str, name: str) -> bool:
    """Whether a stack's outermost Python frame is where a Python thread starts: a program's
    body (``<module>``, ``runpy``'s ``python -m``) or a ``threading`` thread's. Python that a
    native thread calls into (autograd's device thread running a tensor hook, a custom
    ``Function``'s backward, a library's backward hook) starts at that function instead."""
    return (
        name == "<module>"
        or filename == "<frozen runpy>"
        or filename.replace("\\", "/").endswith(("/runpy.py", "/threading.py"))
    )


def _frame_mark(filename: str, name: str) -> str:
    """What one frame says: backward, optimizer, or merely Python or native code.

    A snapshot repeats the same few thousand frames millions of times, so this runs once per
    distinct (file, function), not once per entry.
    """
    if not is_native_frame(filename, name):
        filename = filename.replace("\\", "/")
        if name in _BACKWARD_PY and (
            "/torch/autograd/" in filename or filename.endswith("/torch/_tensor.py")
        ):
            return BACKWARD
        if name != "zero_grad" and any(path in f"/{filename}" for path in _OPTIMIZER_PATHS):
            return OPTIMIZER
        code = _is_optimizer_code(filename)
        if name == "step" and (code or _folder_names_an_optimizer(filename)):
            return OPTIMIZER if code else _OWN_STEP
        if roles.names_a_closure(name):
            return _CLOSURE
        return _OPTIMIZER_CODE if code else _PYTHON
    if any(marker in name for marker in _BACKWARD_CPP):
        return BACKWARD
    return _NATIVE_FRAME


_OPTIMIZER_FOLDERS = frozenset({"optim", "optimizer", "optimizers"})
_OPTIMIZER_FILES = _OPTIMIZER_FOLDERS | {"optimization"}


def _names_an_optimizer(filename: str) -> bool:
    """Whether a file or a folder above it is named for optimizers (``opacus/optimizers/``,
    ``timm/optim/``, ``torch_optimizer/``, ``transformers/optimization.py``,
    ``accelerate/optimizer.py``): its ``step`` is an optimizer's, whatever class wraps
    torch's (a DP-SGD optimizer, a library's own Adafactor or LAMB), and what the step's
    helpers allocate is the optimizer's. A folder named ``optimization`` holds a training
    loop's code (Lightning's ``loops/optimization/``), not an optimizer's. Outside an
    installed package, a folder so named says less than a file (a schedule's ``step`` in
    ``myproj/optim/schedule.py``): see :func:`_is_optimizer_code`."""
    return _file_names_an_optimizer(filename) or _folder_names_an_optimizer(filename)


def _is_optimizer_code(filename: str) -> bool:
    """Whether a file named for optimizers is an optimizer's code, whose ``step`` is an
    optimizer's: the file itself is so named (``optimizer.py``, ``optimization.py``,
    ``lamb_optimizer.py``), or an installed package's folder is (``site-packages/timm/optim/``).
    The user's own file in a folder so named (``myproj/optim/``) holds whatever the project
    keeps there; its ``step`` is an optimizer's only where the dump shows it running one
    (:func:`optimizer_steps`)."""
    return _file_names_an_optimizer(filename) or (
        is_installed_file(filename) and _folder_names_an_optimizer(filename)
    )


def _file_names_an_optimizer(filename: str) -> bool:
    stem = filename.lower().rsplit("/", 1)[-1].removesuffix(".py")
    return any(word in _OPTIMIZER_FILES for word in stem.split("_"))


def _folder_names_an_optimizer(filename: str) -> bool:
    folders = filename.lower().split("/")[:-1]
    return any(word in _OPTIMIZER_FOLDERS for folder in folders for word in folder.split("_"))


def optimizer_steps(stacks: Iterable[object]) -> frozenset[tuple[str, str]]:
    """The user's own ``step`` frames (in a folder named for optimizers, outside any installed
    package) that some stack of ``stacks`` shows running an optimizer: one stack holds both
    that ``step`` and a known optimizer's frame (``torch.optim``'s, a library's of
    :data:`_OPTIMIZER_PATHS`, any frame of optimizer code: :func:`_is_optimizer_code`),
    nearer or farther out (a ``Lookahead`` stepping the optimizer it wraps; a subclass of
    ``torch.optim.Optimizer``, whose ``step`` torch's hooks wrap; Opacus' ``DDPOptimizer``
    running ``optimizer.py``'s ``pre_step``). A ``step`` of the user's ``optim/`` folder that
    never meets one (a learning-rate schedule's, a training loop's) is no optimizer's.
    torch's learning-rate schedulers are no evidence: a schedule's ``step`` calls them."""
    found: set[tuple[str, str]] = set()
    for frames in stacks:
        if not isinstance(frames, list):
            continue
        own: list[tuple[str, str]] = []
        known = False
        for key, mark in _marks(frames):
            if mark == _OWN_STEP:
                own.append(key)
            elif mark == _OPTIMIZER_CODE or (
                mark == OPTIMIZER and not key[0].endswith(_SCHEDULER_FILE)
            ):
                known = True
        if own and known:
            found.update(own)
    return frozenset(found)


_SCHEDULER_FILE = "/torch/optim/lr_scheduler.py"


@dataclass(frozen=True, slots=True)
class KindBytes:
    """Live bytes of one kind at a moment, with the byte-weighted mean confidence.

    ``bytes`` are block bytes (what PyTorch's ``allocated`` counts); ``requested_bytes`` what
    the callers asked for, to compare with tensor sizes; ``known_bytes`` the part of ``bytes``
    the process told (the sidecar's tracked tensors), the rest being inferred.
    """

    kind: str
    bytes: int
    blocks: int
    confidence: float
    requested_bytes: int = 0
    known_bytes: int = 0


def kinds_table(allocations: list[Allocation]) -> tuple[KindBytes, ...]:
    """Bytes per kind over ``allocations`` (already classified), in :data:`KINDS` order.

    A block the process labelled (``known``) counts its bytes under each of its kinds, at
    confidence 1, and as a block of its main kind (the first).
    """
    totals: dict[str, list[float]] = {}
    for found in allocations:
        if found.known is not None:
            _add_known(totals, found)
            continue
        entry = totals.setdefault(found.kind, [0, 0, 0.0, 0, 0])
        entry[0] += found.size
        entry[1] += 1
        entry[2] += found.size * found.confidence
        entry[3] += found.requested
    return tuple(
        KindBytes(
            kind,
            int(totals[kind][0]),
            int(totals[kind][1]),
            _mean(totals[kind]),
            int(totals[kind][3]),
            int(totals[kind][4]),
        )
        for kind in KINDS
        if kind in totals
    )


@dataclass(frozen=True, slots=True)
class KindShare:
    """Live bytes of one kind among some blocks (a site row's kinds): block bytes, and the
    blocks counted under that kind (a block the process labelled with several kinds counts its
    bytes under each, and as a block of the first)."""

    kind: str
    bytes: int
    blocks: int


def block_kinds(found: Allocation) -> tuple[tuple[str, int], ...]:
    """A block's bytes by kind: as the process told them, else all of them of its inferred
    kind (how :func:`kinds_table` counts it too)."""
    return found.known or ((found.kind, found.size),)


def kind_split(blocks: Iterable[tuple[tuple[str, int], ...]]) -> tuple[KindShare, ...]:
    """Bytes by kind over some blocks, each given as its bytes by kind (:func:`block_kinds`),
    biggest first; the first is their :func:`main_kind`. A row that shows some bytes with a
    kind reads this, so it never gives one kind bytes of another."""
    totals: dict[str, list[int]] = {}
    for parts in blocks:
        for index, (kind, size) in enumerate(parts):
            entry = totals.setdefault(kind, [0, 0])
            entry[0] += size
            entry[1] += index == 0
    ranked = sorted(totals, key=lambda kind: _biggest_first(kind, totals[kind][0]))
    return tuple(KindShare(kind, totals[kind][0], totals[kind][1]) for kind in ranked)


def main_kind(bytes_by_kind: dict[str, int]) -> str:
    """The kind holding the most of some bytes (a tie: the first in :data:`KINDS`); ``unknown``
    for none."""
    if not bytes_by_kind:
        return UNKNOWN
    return min(bytes_by_kind, key=lambda kind: _biggest_first(kind, bytes_by_kind[kind]))


def _biggest_first(kind: str, size: int) -> tuple[int, int]:
    """Order kinds by bytes, biggest first, a tie in :data:`KINDS` order."""
    return -size, KINDS.index(kind) if kind in KINDS else len(KINDS)


def _add_known(totals: dict[str, list[float]], found: Allocation) -> None:
    """Count a block the process labelled: its bytes split by kind, all of them known."""
    for index, (kind, size) in enumerate(found.known or ()):
        entry = totals.setdefault(kind, [0, 0, 0.0, 0, 0])
        entry[0] += size
        entry[1] += index == 0
        entry[2] += size
        entry[3] += found.requested * size // (found.size or 1)
        entry[4] += size


def _mean(entry: list[float]) -> float:
    return entry[2] / entry[0] if entry[0] else 0.0


class _Shape:
    """Where each phase starts in the trace, and the step structure, for the lifetime rules.

    ``horizon``: a view of the trace as it stood at an ``oom`` entry (nothing after it is
    seen); None for the whole trace. ``ends_at_oom``: the trace, as this view sees it, ends at
    an OOM: the view is at one, the trace's last ``oom`` entry is followed by nothing but its
    unwinding's frees (``unwinding``: :func:`unwinding_ends`), or the snapshot was taken at an
    OOM its sidecar records. A block held to the end of a trace that ran out in its forward is
    that forward's; one held to the end of a trace that never ran out (an inference loop, an
    OOM caught and left behind) is whatever the script kept. ``trains``: the dump shows a
    backward or an optimizer's step (:func:`shows_training`); without one, a module's forward
    output held to the end is that forward's only where the trace ends in it (``script``:
    where the script's own code allocated outside every forward, as it does once the forward
    has returned), and otherwise kept by the script, not saved for a backward.
    """

    def __init__(
        self, lt: Lifetimes, unwinding: dict[int, int], found_roles: list[tuple[str, int]]
    ) -> None:
        traced = [a for a in lt.allocations if a.start != BEFORE]
        self.script = sorted(
            found.start
            for found, (role, _line) in zip(lt.allocations, found_roles, strict=True)
            if found.start != BEFORE and found.phase == FORWARD and role in _SCRIPT_ROLES
        )
        self.backward = sorted(a.start for a in traced if a.phase == BACKWARD)
        self.forward = sorted(a.start for a in traced if a.phase == FORWARD)
        self.not_backward = sorted(a.start for a in traced if a.phase != BACKWARD)
        steps = [a.step for a in traced if a.step is not None]
        self.has_steps = bool(steps)
        self.any_tags = any(a.step is not None for a in lt.allocations)
        self.first_step = min(steps) if steps else None
        self.last_step = max(steps) if steps else None
        self.length = lt.length
        self.trains = shows_training(lt)
        last_oom = lt.oom_positions[-1] if lt.oom_positions else None
        self.ends_at_oom = lt.taken_at_oom or (
            last_oom is not None and unwinding.get(last_oom, -1) >= lt.length
        )
        self.horizon: int | None = None

    def at_oom(self, position: int) -> _Shape:
        """The same trace seen from its ``oom`` entry at ``position``: what was known then."""
        view = _Shape.__new__(_Shape)
        view.__dict__.update(self.__dict__)  # the same phase lists, seen up to the OOM
        view.horizon, view.length, view.ends_at_oom = position, position + 1, True
        return view

    def after(self, starts: list[int], position: int) -> int | None:
        """The first start after ``position`` (within the horizon), or None."""
        index = bisect_right(starts, position)
        if index >= len(starts) or (self.horizon is not None and starts[index] > self.horizon):
            return None
        return starts[index]

    def outside_steps(self, found: Allocation) -> bool:
        """Made outside every step: no step tag while the trace has them (or before the first)."""
        if not self.has_steps or self.first_step is None:
            return False
        return found.step is None or found.step < self.first_step

    def outlives_step(self, found: Allocation, end: int) -> bool:
        """Still live after the step that made it (or, without step tags, into the next pass)."""
        if end >= self.length:
            return True
        if self.has_steps and found.step is not None and found.free_step is not None:
            return found.free_step > found.step
        following = self.after(self.forward, found.start)
        return following is not None and following < end


UNWOUND = 0.7  # confidence kept by a block judged at the OOM, its own free unseen
_SCRIPT_ROLES = frozenset({roles.NOTHING, roles.BATCH})
"""Roles of a forward-phase block made outside every forward: the script's own code, or its
batch-moving helper."""


def classify(lt: Lifetimes) -> None:
    """Set ``kind`` and ``confidence`` on every allocation of ``lt`` (see the module docstring).

    An allocation freed after an ``oom`` entry (the unwinding of the failed step, mostly) is
    judged as the trace stood at that OOM, as if still live, at lower confidence: a free the
    OOM caused says nothing about the block's role.
    """
    guessed, found_roles = _assign_phases(lt)
    unwinding = unwinding_ends(lt)
    shape = _Shape(lt, unwinding, found_roles)
    views: dict[int, _Shape] = {}
    buffers: list[tuple[Allocation, int]] = []
    workspaces = _workspaces(lt, found_roles)
    for found, role in zip(lt.allocations, found_roles, strict=True):
        if id(found) in workspaces:
            found.kind, found.confidence = WORKSPACE, 0.8
            continue
        if role[0] != roles.NOTHING:
            fixed = _BY_FRAMES.get(role[0])
            if fixed is not None:
                found.kind, found.confidence = fixed
                continue
            if role[0] == roles.MEGATRON_BUFFER:
                buffers.append((found, role[1]))
                continue
        view, end = shape, found.end
        oom = _oom_before_free(lt.oom_positions, found, lt.length)
        if oom is not None:
            view = views.get(oom) or views.setdefault(oom, shape.at_oom(oom))
            end = view.length
        phase = found.phase
        found.kind, found.confidence = _by_lifetime(found, end, view, role[0])
        if role[0] == roles.MODEL_CACHE and not _saved_for_backward(found, end, view):
            found.kind, found.confidence = _BY_FRAMES[roles.KV_CACHE]
        elif role[0] == roles.OPTIMIZER_OWNED and found.kind == PARAMETER:
            found.kind, found.confidence = OPTIMIZER_STATE, 0.6  # held since the optimizer's set-up
        if id(found) in guessed and found.start != BEFORE:
            found.confidence *= 0.6
        if oom is not None and found.kind != BEFORE_RECORDING:  # that one is a fact
            found.confidence *= UNWOUND
            if found.end < unwinding.get(oom, -1) and found.kind not in _STEP_KINDS:
                found.kind = ACTIVATION if phase == FORWARD else TEMPORARY
    if buffers:
        _split_buffers(buffers)
    _need_parameter_evidence(lt.allocations, found_roles, shape)
    _moved_buffers(lt.allocations, found_roles)
    _copied_buffers(lt.allocations)
    _per_parameter_state(lt, found_roles, shape)
    _written_gradients(lt)
    _forward_caches(lt, found_roles, shape)
    _inputs(lt, found_roles, shape)


_STEP_KINDS = frozenset({ACTIVATION, INPUT, TEMPORARY, WORKSPACE, KV_CACHE, BEFORE_RECORDING})
"""Kinds a block the unwinding freed keeps; any other is the failing step's activation or
temporary."""


def unwinding_ends(lt: Lifetimes) -> dict[int, int]:
    """For each ``oom`` entry, the trace position where its unwinding ends: the next ``alloc``
    after it (or the trace's end). A block freed between the two was freed by the exception
    unwinding the failed step (or by the handler that caught it)."""
    ends: dict[int, int] = {}
    by_event = lt.by_event
    for oom in lt.oom_positions:
        position = oom + 1
        while position < lt.length:
            event = by_event[position]
            if event is not None and event.start == position:
                break
            position += 1
        ends[oom] = position
    return ends


WORKSPACE_SIZES = frozenset({8_519_680, 32 << 20})
"""cuBLAS's workspace per handle and stream: ``CUBLAS_WORKSPACE_CONFIG``'s default
``:4096:2:16:8`` (8,519,680 bytes) and, on Hopper, ``:4096:8`` (32 MiB)."""
_MATMUL_NAMES = frozenset(
    {"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum", "mv", "addmv",
     "tensordot", "_linear", "scaled_dot_product_attention"}
)  # fmt: skip


def _workspaces(lt: Lifetimes, found_roles: list[tuple[str, int]]) -> set[int]:
    """The ``id`` of each allocation that is cuBLAS's workspace by its size and first use:
    a :data:`WORKSPACE_SIZES` request under a matrix product, the only one of that size its
    stack made at a time, each held to the end or until the workspaces were cleared.

    A product is known by a Python frame named for it (:func:`_under_matmul`), or, where the
    code that called it has none (a module's forward calling ``torch.addmm`` itself), by what
    the operator does: it allocates its output, then its handle's workspace on its first call,
    so the workspace follows an allocation of its own stack, which runs again (:func:`_products`).

    Autograd's device thread has a cuBLAS handle of its own, so its first matrix product takes
    a workspace of its own, on a stack with no frames at all where only Python's are recorded.
    A block of the workspace's size made on such a stack is that thread's workspace when it is
    the only such block at a time: backward's temporaries of that size share the stack but are
    freed in backward, and where a gradient of that size is held too, neither is called one.
    The size is the one a matrix product's workspace has in this trace; where none was proven,
    both sizes kept there leave it open (one is a gradient).

    A workspace is freed only where the workspaces are cleared (``_cuda_clearCublasWorkspaces``,
    as Lightning's teardown calls), which frees every one at once, and the next product takes a
    new one (:func:`_clears`)."""
    by_stack: dict[tuple[int, int], list[Allocation]] = {}
    frameless: dict[int, list[Allocation]] = {}
    pool: list[Allocation] = []  # every block that may be a workspace: what a clear frees
    for found, role in zip(lt.allocations, found_roles, strict=True):
        if role[0] == roles.WORKSPACE:
            pool.append(found)
        if found.requested not in WORKSPACE_SIZES or role[0] not in _OPEN_ROLES:
            continue
        if isinstance(found.frames, list) and found.frames:
            by_stack.setdefault((id(found.frames), found.requested), []).append(found)
        elif found.frames == [] and found.start != BEFORE:
            frameless.setdefault(found.requested, []).append(found)
            pool.append(found)
    candidates = _products(lt, by_stack)
    for made in candidates.values():
        pool.extend(made)
    cleared = _clears(lt, pool)
    found_ids = {
        id(found)
        for made in candidates.values()
        for found in _workspaces_of_stack(lt, made, cleared)
    }
    proven = {
        found.requested for made in candidates.values() for found in made if id(found) in found_ids
    }
    held = {size for size, made in frameless.items() if any(f.end >= lt.length for f in made)}
    sizes = proven or held
    if len(sizes) == 1:
        (size,) = sizes
        kept = [
            found
            for found in frameless.get(size, [])
            if found.end >= lt.length or id(found) in cleared  # not backward's temporaries
        ]
        if kept and _one_at_a_time(kept, cleared, lt.length):
            found_ids.update(id(found) for found in kept)
    return found_ids


def _workspaces_of_stack(
    lt: Lifetimes, made: list[Allocation], cleared: set[int]
) -> list[Allocation]:
    """The workspaces among a product's blocks of a workspace's size (``made``, in trace
    order): all of them where they are one at a time; else, where the product's own outputs
    have that size too (a checkpointed layer's, run again in backward), those made right after
    an output of the same stack (the handle's first call: its output, then its workspace),
    where they are one at a time."""
    if _one_at_a_time(made, cleared, lt.length):
        return made
    first_calls = [found for found in made if _after_own_stack(lt, found)]
    if first_calls and _one_at_a_time(first_calls, cleared, lt.length):
        return first_calls
    return []


def _products(
    lt: Lifetimes, by_stack: dict[tuple[int, int], list[Allocation]]
) -> dict[tuple[int, int], list[Allocation]]:
    """The blocks of ``by_stack`` (a workspace's size, by stack and size) whose stack is a
    matrix product's: one named for it (:func:`_under_matmul`), or one that made such a block
    right after its own output (:func:`_after_own_stack`) and ran again later (the product's
    next call, served by the same workspace; a line that merely makes two tensors once is
    not)."""
    first_matmul = per_stack(_under_matmul)
    products: dict[tuple[int, int], list[Allocation]] = {}
    unnamed: dict[tuple[int, int], list[Allocation]] = {}
    for key, made in by_stack.items():
        if first_matmul(made[0].frames):
            products[key] = made
        elif any(_after_own_stack(lt, found) for found in made):
            unnamed[key] = made
    if unnamed:
        last = _last_starts(lt, {stack for stack, _ in unnamed})
        for key, made in unnamed.items():
            if last[key[0]] > min(found.start for found in made if _after_own_stack(lt, found)):
                products[key] = made
    return products


def _last_starts(lt: Lifetimes, stacks: set[int]) -> dict[int, int]:
    """The last allocation's start of each stack in ``stacks`` (by the frames' identity)."""
    last: dict[int, int] = {}
    for found in lt.allocations:
        stack = id(found.frames)
        if stack in stacks and found.start > last.get(stack, BEFORE):
            last[stack] = found.start
    return last


def _one_at_a_time(made: list[Allocation], cleared: set[int], length: int) -> bool:
    """Whether blocks one stack made (in trace order) are one workspace at a time: none made
    before the one before it was freed, each freed by a clear of the workspaces (the last may
    be held to the end)."""
    for index, found in enumerate(made):
        if found.end < length and id(found) not in cleared:
            return False
        if index and made[index - 1].end > found.start:
            return False
    return True


def _clears(lt: Lifetimes, pool: list[Allocation]) -> set[int]:
    """The ``id`` of each block of ``pool`` freed by a clear of the workspaces: one that frees
    every block of ``pool`` held then, before the next allocation (a free that leaves another
    workspace held is a tensor's, not a clear's)."""
    if all(found.end >= lt.length for found in pool):
        return set()
    starts = sorted(found.start for found in lt.allocations if found.start != BEFORE)
    by_start = sorted(pool, key=lambda found: found.start)
    pool_starts = [found.start for found in by_start]
    last_end: list[int] = []  # the latest end among the first blocks of ``by_start``
    for found in by_start:
        last_end.append(max(found.end, last_end[-1]) if last_end else found.end)
    cleared: set[int] = set()
    for found in pool:
        if found.end >= lt.length:
            continue
        index = bisect_right(starts, found.end)
        following = starts[index] if index < len(starts) else lt.length
        made_before = bisect_left(pool_starts, found.end)  # blocks held when it was freed
        if last_end[made_before - 1] < following:
            cleared.add(id(found))
    return cleared


def _after_own_stack(lt: Lifetimes, found: Allocation) -> bool:
    """Whether the allocation just before ``found`` in the trace (segment events skipped) came
    from the same stack, with Python frames: an operator's output, then its workspace."""
    if not found.frames or found.start == BEFORE:
        return False
    position = found.start - 1
    by_event = lt.by_event
    while position >= 0 and by_event[position] is None:
        position -= 1
    if position < 0:
        return False
    before = by_event[position]
    return before is not None and before.start == position and before.frames is found.frames


_OPEN_ROLES = frozenset({roles.NOTHING, roles.IN_FORWARD, roles.NOT_PARAMETER})


_DISPATCH_NAMES = frozenset({"__torch_dispatch__", "__torch_function__"})
_DISPATCH_FILES = ("/torch/_ops.py", "/torch/utils/_python_dispatch.py", "/torch/overrides.py")


def _dispatches(filename: str, name: str) -> bool:
    """A frame of torch's operator dispatch (``OpOverload.__call__``, a mode's
    ``__torch_dispatch__``, as selective activation checkpointing's): it sits between a product
    and its allocation without being either."""
    return name in _DISPATCH_NAMES or filename.replace("\\", "/").endswith(_DISPATCH_FILES)


def _named_frames(frames: object) -> Iterator[tuple[str, str]]:
    """The file and function of each well-formed frame of a block's stack, innermost first (a
    dump nobody here wrote may hold anything there)."""
    if not isinstance(frames, list):
        return
    for frame in frames:
        if type(frame) is not dict:
            continue
        filename, name = frame.get("filename"), frame.get("name")
        if type(filename) is str and type(name) is str:
            yield filename, name


def _under_matmul(frames: object) -> bool:
    """True when the innermost Python frames (two at most, torch's dispatch frames skipped) are
    a matrix product's: one named for it, or a linear layer's ``linear.py`` (``nn.Linear``'s, or
    a library's own, as ZeRO-3's autograd ``Function``, whose backward is a product too)."""
    seen = 0
    for filename, name in _named_frames(frames):
        if is_native_frame(filename, name) or _dispatches(filename, name):
            continue
        if name in _MATMUL_NAMES or filename.endswith("/linear.py"):
            return True
        seen += 1
        if seen == 2:
            return False
    return False


_PER_PARAMETER_SHARE = 0.5  # a stack making state for at least half the parameters


def _sized_after_training(shape: _Shape) -> Callable[[Allocation, str], bool]:
    """Whether a block (with its stack's role) is a parameter by its size alone (no frame
    builds a model) made after the trace's first backward began: a model is built before it
    is trained, so such a block is something training made (an optimizer's moments, a batch)
    that happens to share its size with several others."""
    trained = shape.backward[0] if shape.backward else None

    def late(found: Allocation, role: str) -> bool:
        return (
            found.kind == PARAMETER
            and role == roles.NOTHING
            and trained is not None
            and found.start > trained
        )

    return late


def _per_parameter_state(lt: Lifetimes, found_roles: list[tuple[str, int]], shape: _Shape) -> None:
    """Blocks one stack made outside any forward, as many per parameter (each the size of a
    parameter or gradient held at the end) and alive to the end: an optimizer's per-parameter
    state, whatever the lifetime rules called them. One line may make several per parameter
    (``m, v = zeros_like(p), zeros_like(p)``): the stack's counts of each size are then all
    multiples of that many.

    A block read as a parameter by its size alone (no frame builds a model) made after the
    first backward began is such state too where its stack is: a model is built before it is
    trained, an optimizer's moments at its first step."""
    late = _sized_after_training(shape)
    sizes: dict[int, int] = {}
    per_kind: dict[str, dict[int, int]] = {PARAMETER: {}, GRADIENT: {}}
    for found, (role, _line) in zip(lt.allocations, found_roles, strict=True):
        if (
            found.kind in per_kind
            and found.end >= lt.length  # a gradient freed at each step is one parameter's
            and found.size > K_MIN_BLOCK_SIZE
            and not late(found, role)
        ):
            seen = per_kind[found.kind]
            seen[found.size] = seen.get(found.size, 0) + 1
    for kind_sizes in per_kind.values():
        for size, count in kind_sizes.items():
            sizes[size] = max(sizes.get(size, 0), count)
    parameters = sum(sizes.values())
    if parameters < 2:
        return
    groups: dict[int, list[Allocation]] = {}
    for found, (role, _line) in zip(lt.allocations, found_roles, strict=True):
        if (
            (found.kind in (ACTIVATION, UNKNOWN) or late(found, role))
            and found.start != BEFORE
            and found.end >= lt.length
            and role != roles.IN_FORWARD
            and found.size in sizes
        ):
            groups.setdefault(id(found.frames), []).append(found)
    for made in groups.values():
        counts: dict[int, int] = {}
        for found in made:
            counts[found.size] = counts.get(found.size, 0) + 1
        each = gcd(*counts.values())  # blocks per parameter
        one_each = all(count // each <= sizes[size] for size, count in counts.items())
        if one_each and len(made) // each >= max(2, _PER_PARAMETER_SHARE * parameters):
            for found in made:
                found.kind, found.confidence = OPTIMIZER_STATE, 0.6


def _written_gradients(lt: Lifetimes) -> None:
    """Blocks an optimizer's step writes anew at each step, each the size of a parameter, are
    the gradients it writes (DP-SGD's noisy ``p.grad``, a gradient the step replaces), not
    its state: state is made once and kept (freed, if ever, when training ends: a teardown
    moving it to the host, ``del optimizer``), while these are freed in a later step (the
    next ``zero_grad``, or the next step's write) and made again. A stack of the optimizer
    that outlived its step, then made a block after one of its blocks was freed (not by an
    OOM's unwinding) makes them, the last step's held to the end included, where each is a
    parameter's size and not every one is a scalar's smallest block (a norm the script keeps
    from step to step is not a gradient). ``torch.optim``'s own steps never write gradients:
    what they make again is a new optimizer's state."""
    sizes = {found.size for found in lt.allocations if found.kind == PARAMETER}
    by_torch = per_stack(_made_by_torch_optimizer)
    groups: dict[int, list[Allocation]] = {}
    for found in lt.allocations:
        if (
            found.kind == OPTIMIZER_STATE
            and found.phase == OPTIMIZER
            and found.start != BEFORE
            and not by_torch(found.frames)
        ):
            groups.setdefault(id(found.frames), []).append(found)
    for made in groups.values():
        freed = [
            found.end
            for found in made
            if found.end < lt.length
            and _oom_before_free(lt.oom_positions, found, lt.length) is None
        ]
        if (
            freed
            and min(freed) < made[-1].start  # it made one anew after freeing one
            and all(found.size in sizes for found in made)
            and any(found.size > K_MIN_BLOCK_SIZE for found in made)  # not a scalar's alone
        ):
            for found in made:
                found.kind, found.confidence = GRADIENT, 0.6


_CACHE_CONFIDENCE = 0.6


def _forward_caches(lt: Lifetimes, found_roles: list[tuple[str, int]], shape: _Shape) -> None:
    """A block a module's forward made once and kept across training steps is a buffer the
    module caches (rotary tables filled in the first forward and kept as an attribute,
    ESM's ``_cos_cached``; a memo of a constant), not an activation nor ``unknown``.

    Across steps: it outlived the backward pass after it, then a second whole backward pass,
    and was not freed inside a backward pass (what a backward frees, it saved). Made once: its
    site (the innermost frame outside torch's files, :func:`attribute`) made blocks in that
    forward pass alone (none before the backward pass before it, none after the backward pass
    after it), though later forwards ran: a leak or a kept output is made again by
    each forward (a layer's output, from its model's line, whatever wraps the call), and a
    cache that is made again (its sequence length changed) is freed by the forward that
    replaces it, as an activation of that step reads. A trace of forwards alone shows no step
    to outlive: what its forwards keep stays what the script keeps."""
    kept = [
        (found, first)
        for found, (role, _line) in zip(lt.allocations, found_roles, strict=True)
        if found.kind in (ACTIVATION, UNKNOWN)
        and found.phase == FORWARD
        and role == roles.IN_FORWARD
        and found.start != BEFORE
        and (first := shape.after(shape.backward, found.start)) is not None
        and _outlives_two_passes(first, found.end, shape)
    ]
    if not kept:
        return
    site_of = per_stack(lambda frames: attribute(frames)[0])
    sites = {site_of(found.frames) for found, _ in kept}
    made: dict[str, tuple[int, int]] = {}  # a site's first and last block's start
    for found in lt.allocations:
        site = site_of(found.frames) if found.start != BEFORE else None
        if site in sites:
            first_made, last_made = made.get(site, (found.start, found.start))
            made[site] = (min(first_made, found.start), max(last_made, found.start))
    for found, first in kept:
        earlier = bisect_left(shape.backward, found.start) - 1
        first_made, last_made = made[site_of(found.frames)]
        if last_made < first and (earlier < 0 or first_made > shape.backward[earlier]):
            found.kind, found.confidence = BUFFER, _CACHE_CONFIDENCE


def _outlives_two_passes(first: int, end: int, shape: _Shape) -> bool:
    """Whether a block freed at ``end`` outlived the backward pass starting at ``first`` and
    the whole backward pass after it, and was not freed inside a later one."""
    ended = shape.after(shape.not_backward, first)
    second = shape.after(shape.backward, ended) if ended is not None else None
    after_second = shape.after(shape.not_backward, second) if second is not None else None
    if after_second is None or after_second > end:
        return False
    if end >= shape.length:
        return True
    began = bisect_right(shape.backward, end) - 1  # the last backward allocation before the free
    following = shape.after(shape.not_backward, shape.backward[began])
    return following is not None and following < end


def _made_by_torch_optimizer(frames: object) -> bool:
    """Whether the innermost Python frame is one of ``torch.optim``'s: its steps read
    gradients and never write them, so what they make and keep is state, even where it is
    freed and made again (a new optimizer made for each stage of training)."""
    for filename, name in _named_frames(frames):
        if not is_native_frame(filename, name):
            return "/torch/optim/" in filename.replace("\\", "/")
    return False


def _assign_phases(lt: Lifetimes) -> tuple[set[int], list[tuple[str, int]]]:
    """Set every allocation's ``phase``, judging each distinct stack once (lifetimes shares one
    frames list per stack); returns the ``id`` of those whose phase is a guess (no frames), and
    each allocation's role (:func:`roles.stack_role`), in the allocations' order."""
    stacks = {id(found.frames): found.frames for found in lt.allocations}
    own_steps = optimizer_steps(stacks.values())
    facts_of_stack = per_stack(lambda frames: _stack_facts(frames, own_steps))
    guessed: set[int] = set()
    found_roles: list[tuple[str, int]] = []
    for found in lt.allocations:
        found.phase, role = facts_of_stack(found.frames)
        found_roles.append(role)
        if found.phase == NO_FRAMES:
            guessed.add(id(found))
    if guessed:
        fallback = _phases_from_peaks(lt)
        for found in lt.allocations:
            if id(found) in guessed and id(found) in fallback:
                found.phase = fallback[id(found)]
    return guessed, found_roles


def _stack_facts(
    frames: object, own_steps: frozenset[tuple[str, str]]
) -> tuple[str, tuple[str, int]]:
    """A stack's phase and its role, in one look per distinct stack."""
    return phase_of(frames, own_steps), roles.stack_role(frames)


_SIMILAR = 4  # this many held blocks of one size look like a model's layers

# Kinds the frames alone give (roles.py), and their confidence: the code that made the block
# does nothing else.
_BY_FRAMES = {
    roles.WORKSPACE: (WORKSPACE, 0.95),
    roles.KV_CACHE: (KV_CACHE, 0.9),
    roles.REPLICA: (PARAMETER, 0.85),
    roles.GATHERED: (PARAMETER, 0.85),
    roles.REDUCED: (GRADIENT, 0.85),
}
_BUFFER_CONFIDENCE = 0.9
_PARAMETER_BY_FRAMES = frozenset(
    {roles.BUILDS, roles.REPLICA, roles.GATHERED, roles.MEGATRON_BUFFER}
)  # fmt: skip
"""Roles whose frames say a block is a parameter, whatever its lifetime and its size."""


def _split_buffers(buffers: list[tuple[Allocation, int]]) -> None:
    """Megatron's buffers, each with the line that allocated it: parameters or gradients by
    which of ``param_and_grad_buffer.py``'s lines made them (:func:`roles.buffer_kinds`)."""
    kind_of_line = roles.buffer_kinds({line for _, line in buffers})
    for found, line in buffers:
        found.kind, found.confidence = kind_of_line[line], _BUFFER_CONFIDENCE


_PARAMETER_COPY, _TENSOR_COPY = "parameter", "tensor"


def _copied_buffers(allocations: list[Allocation]) -> None:
    """A module's ``copy.deepcopy`` (an EMA model's, a frozen reference model's) copies each
    parameter through ``Parameter.__deepcopy__`` and each buffer through ``Tensor.__deepcopy__``
    alone: where the dump shows parameters copied so, a held block copied by a tensor's
    ``__deepcopy__`` alone that the lifetime rules called a parameter (or ``unknown``) is the
    copy's buffer."""
    copy_of = per_stack(_deepcopied)
    copies = [(found, copy_of(found.frames)) for found in allocations]
    if not any(copied == _PARAMETER_COPY for _, copied in copies):
        return
    for found, copied in copies:
        if copied == _TENSOR_COPY and found.kind in (PARAMETER, UNKNOWN):
            found.kind = BUFFER


def _deepcopied(frames: object) -> str | None:
    """What ``copy.deepcopy`` copied where its ``__deepcopy__`` made the block (the innermost
    Python frames): a parameter (``torch/nn/parameter.py``'s), a tensor (``torch/_tensor.py``'s
    alone), or None for a block no ``__deepcopy__`` made."""
    copied = None
    for filename, name in _named_frames(frames):
        if is_native_frame(filename, name):
            continue
        if name != "__deepcopy__":
            break
        path = filename.replace("\\", "/")
        if path.endswith("/torch/nn/parameter.py"):
            return _PARAMETER_COPY
        if path.endswith("/torch/_tensor.py"):
            copied = _TENSOR_COPY
    return copied


def _moved_buffers(allocations: list[Allocation], found_roles: list[tuple[str, int]]) -> None:
    """The parameters ``Module._apply`` moved from the line that moves a module's buffers
    (:func:`roles.moved_buffer_line`) are buffers: model state, never a parameter."""
    moved = [
        (found, line)
        for found, (role, line) in zip(allocations, found_roles, strict=True)
        if role == roles.BUILDS and line and found.kind == PARAMETER
    ]
    buffers = roles.moved_buffer_line([(line, found.requested) for found, line in moved])
    if buffers is None:
        return
    for found, line in moved:
        if line == buffers:
            found.kind = BUFFER


def _need_parameter_evidence(
    allocations: list[Allocation], found_roles: list[tuple[str, int]], shape: _Shape
) -> None:
    """A block held since set-up is a parameter only with evidence; else it is ``unknown``.

    Evidence: a frame that builds, moves or loads a model (a module's ``__init__``, ``_apply``,
    ``to``/``cuda``, ``load_state_dict``, ``from_pretrained``, ``torch/nn/init.py``...), or
    enough blocks of the same size above the 512-byte minimum that every scalar gets (a
    model's layers; lower confidence), unless it was made in a forward (hidden states and
    attention maps come in equal sizes too). A frame that names a cache or a workspace rules
    it out, as does having neither.

    A block made during a forward pass the trace saw (after that pass's first activation, and
    before its backward) is that forward's output, never a parameter, even where no module's
    ``forward`` frame says so (a function, not a module): it is judged as a block made in a
    forward (:func:`_made_in_a_forward_pass`).
    """
    held: list[tuple[Allocation, str]] = []
    saved: list[int] = []  # starts of the forward activations, in trace order
    for found, (role_of, _line) in zip(allocations, found_roles, strict=True):
        kind = found.kind
        if kind == PARAMETER:
            held.append((found, role_of))
        elif kind == ACTIVATION and found.phase == FORWARD and found.start != BEFORE:
            saved.append(found.start)
    if saved:
        held = _made_in_a_forward_pass(held, saved, shape)
    sizes: dict[int, int] = {}
    for found, _ in held:
        sizes[found.size] = sizes.get(found.size, 0) + 1
    for found, role in held:
        if role in _PARAMETER_BY_FRAMES:  # frames say so
            continue
        alike = sizes[found.size] >= _SIMILAR and found.size > K_MIN_BLOCK_SIZE
        if alike and role == roles.NOTHING:
            found.confidence *= 0.75
        else:
            found.kind, found.confidence = UNKNOWN, min(found.confidence, 0.3)


def _made_in_a_forward_pass(
    held: list[tuple[Allocation, str]], saved: list[int], shape: _Shape
) -> list[tuple[Allocation, str]]:
    """Judge each held block that is a parameter by its lifetime, made in forward after an
    activation of the same pass (one that the same backward frees), as made in a forward;
    return the parameters left. ``saved``: the forward activations' starts, sorted."""
    kept: list[tuple[Allocation, str]] = []
    for found, role in held:
        if (
            found.start != BEFORE
            and found.phase == FORWARD
            and found.end >= shape.length
            and role not in _PARAMETER_BY_FRAMES
        ):
            index = bisect_left(saved, found.start) - 1
            backward = shape.after(shape.backward, found.start)
            if (
                index >= 0
                and backward is not None
                and shape.after(shape.backward, saved[index]) == backward
            ):
                found.kind, found.confidence = _forward(found, found.end, shape, roles.IN_FORWARD)
                continue
        kept.append((found, role))
    return kept


_FED_KINDS = frozenset({ACTIVATION, TEMPORARY, UNKNOWN})
"""What the lifetime rules call a step's input: an activation (freed in its backward), a
temporary (freed before it) or ``unknown`` (held to the end, or past its step). A parameter
kept by its evidence (a model's frames, or many blocks of its size made before training
began) stays one."""
_INPUT_CONFIDENCE = {roles.BATCH: 0.85, roles.NOTHING: 0.7}
"""A batch-moving helper's frame says where the block came from; a line of the script does not."""


def _inputs(lt: Lifetimes, found_roles: list[tuple[str, int]], shape: _Shape) -> None:
    """Mark the input batch of each step (see the module docstring): a block a batch-moving
    helper or the script's own line made outside every forward, backward and optimizer,
    that a forward ran on and that lives for a step. One freed after an OOM is judged as the
    trace stood at that OOM, still held."""
    traced = [  # in trace order, as lifetimes lists them
        (found, role)
        for found, (role, _line) in zip(lt.allocations, found_roles, strict=True)
        if found.start != BEFORE
    ]
    by_script = per_stack(_made_by_script)
    late = _sized_after_training(shape)
    candidates = [
        (found, role)
        for found, role in traced
        if (found.kind in _FED_KINDS or late(found, role))
        and found.phase == FORWARD
        and role in _INPUT_CONFIDENCE
        and (role == roles.BATCH or by_script(found.frames))
    ]
    if not candidates:
        return
    steps = _Steps(traced)
    for found, role in candidates:
        oom = _oom_before_free(lt.oom_positions, found, lt.length)
        end = found.end if oom is None else oom
        at_oom = oom is not None or (end >= lt.length and shape.ends_at_oom)
        if steps.feeds(found.start, end, at_oom=at_oom, helper=role == roles.BATCH):
            found.kind = INPUT
            found.confidence = _INPUT_CONFIDENCE[role] * (UNWOUND if oom is not None else 1.0)


class _Steps:
    """Where forwards ran and backward passes began, to ask whether a block lives for a step.

    ``forwards``: where a module's forward allocated (a forward written as functions shows
    none: each of its lines is the script's own, as the batch's copy is). A backward pass
    begins at a backward allocation that follows an allocation of another phase; a step ends
    at a backward or optimizer allocation.
    """

    def __init__(self, traced: list[tuple[Allocation, str]]) -> None:
        self.forwards: list[int] = []
        self.passes: list[int] = []
        self.step_ends: list[int] = []
        before = FORWARD
        for found, role in traced:
            phase = found.phase
            if phase == FORWARD:
                if role == roles.IN_FORWARD:
                    self.forwards.append(found.start)
            elif phase in (BACKWARD, OPTIMIZER):
                self.step_ends.append(found.start)
                if phase == BACKWARD and before != BACKWARD:
                    self.passes.append(found.start)
            before = phase

    def feeds(self, start: int, end: int, *, at_oom: bool, helper: bool) -> bool:
        """Whether a block made at ``start`` and freed at ``end`` fed a forward and lived for
        one step; a line of the script also comes before its step's forward (no module's
        forward since the step began) and lives into its backward, or is held to an OOM
        (``at_oom``: to the end of a trace that ends at one, or to the OOM its free
        followed)."""
        index = bisect_right(self.forwards, start)
        if index == len(self.forwards) or self.forwards[index] >= end:
            return False  # no forward ran while it was held
        first = bisect_right(self.passes, start)
        if first + 1 < len(self.passes) and self.passes[first + 1] < end:
            return False  # held past a second backward: kept across steps
        if helper:
            return True
        backward = self.passes[first] if first < len(self.passes) else None
        if backward is not None and backward < self.forwards[index]:
            return False  # made after its step's forward: a loss, an output
        if (backward is None or backward >= end) and not at_oom:
            return False  # no backward in its life: an inference forward's, or what is kept
        ended = bisect_left(self.step_ends, start) - 1
        began = self.step_ends[ended] if ended >= 0 else -1
        return index == 0 or self.forwards[index - 1] < began


def _made_by_script(frames: object) -> bool:
    """Whether the line that made a block is the user's own: the innermost Python frame outside
    torch's own files (its operator overloads, ``set_default_device``'s dispatch) is not an
    installed package's."""
    for filename, name in _named_frames(frames):
        if is_native_frame(filename, name) or is_library_file(filename):
            continue
        return not is_installed_file(filename)
    return False


def _oom_before_free(ooms: list[int], found: Allocation, length: int) -> int | None:
    """The first ``oom`` entry after the allocation's start when it was freed after that OOM
    (not when it is merely live at the snapshot); else None."""
    if not ooms or found.end >= length:
        return None
    index = bisect_right(ooms, found.start)
    if index >= len(ooms) or ooms[index] >= found.end:
        return None
    return ooms[index]


def _by_lifetime(found: Allocation, end: int, shape: _Shape, role: str) -> tuple[str, float]:
    """The kind and confidence the lifetime rules give, by where the allocation was made."""
    if found.start == BEFORE:
        return _untraced(found, end, found.phase, shape, role)
    if found.phase == BACKWARD:
        return _backward(found, end, shape)
    if found.phase == OPTIMIZER:
        return _optimizer(found, end, shape)
    return _forward(found, end, shape, role)


def _untraced(
    found: Allocation, end: int, phase: str, shape: _Shape, role: str
) -> tuple[str, float]:
    """Made before the trace: only its own frames and step tag can tell."""
    if not found.frames or end < shape.length:
        return BEFORE_RECORDING, 1.0
    if phase == OPTIMIZER:
        return OPTIMIZER_STATE, 0.8
    if phase == BACKWARD:
        return GRADIENT, 0.6
    if role == roles.IN_FORWARD:  # a forward's output, never a weight
        return (UNKNOWN, 0.3) if shape.length > 1 else (ACTIVATION, 0.4)
    if found.step is None:  # made outside every step (model set-up) and still held
        # Without a trace and without any step tag (a bare memory_snapshot() list), nothing says
        # the block outlived a step or was made outside one: a guess from frames alone.
        return PARAMETER, 0.8 if shape.length or shape.any_tags else 0.4
    if role == roles.BUILDS:  # a model built or loaded inside a step, and still held
        return PARAMETER, 0.7
    return UNKNOWN, 0.3  # a forward allocation kept from an earlier step: a cache or a leak


def _forward(found: Allocation, end: int, shape: _Shape, role: str) -> tuple[str, float]:
    """A forward allocation by its lifetime; a frame that builds a model (``role``) makes a
    held one a parameter, and one made in a forward is never a parameter by its lifetime."""
    backward = shape.after(shape.backward, found.start)
    builds = role == roles.BUILDS
    if end < shape.length and not (
        shape.has_steps
        and found.free_step is not None
        and found.step is not None
        and found.free_step > found.step
    ):
        if backward is not None and end > backward:
            return (PARAMETER, 0.8) if builds else (ACTIVATION, 0.9)
        return TEMPORARY, 0.9
    if role != roles.IN_FORWARD and (
        shape.outside_steps(found) or (backward is not None and not shape.has_steps)
    ):
        return PARAMETER, 0.7 if end >= shape.length else 0.4
    if builds:
        return PARAMETER, 0.8
    if backward is None and end >= shape.length:
        if shape.ends_at_oom or (role == roles.IN_FORWARD and _forwards_own(found, shape)):
            return ACTIVATION, 0.6  # a forward's at the trace's end, or live at an OOM in it
        return UNKNOWN, 0.4  # kept to the end of a trace that never ran out: what the script keeps
    if role == roles.IN_FORWARD and end >= shape.length and _in_last_backward(backward, shape):
        return ACTIVATION, 0.6  # its backward began, no forward since: the trace ends in it
    return UNKNOWN, 0.4  # a forward allocation outliving its step: a cache or a leak


def _forwards_own(found: Allocation, shape: _Shape) -> bool:
    """Whether a block a module's forward made, held to the end with no backward after it, is
    that forward's: the dump shows training (the trace ends in a training step's forward), or
    the trace ends in that forward (the script's own code allocated nothing after it). In a
    dump of forwards alone, one the script went on holding after the forward returned is what
    it kept (an embedding script's representations, a ``no_grad`` forward's logits)."""
    return shape.trains or shape.after(shape.script, found.start) is None


def _saved_for_backward(found: Allocation, end: int, shape: _Shape) -> bool:
    """True when a forward saved the block for the backward that freed it (the lifetime rules
    made it an activation, freed in the trace). Keys and values kept across tokens are never
    freed by a backward; one freed before a backward began may be a decoding loop's cache that
    a training step follows (a rollout), so that says nothing."""
    return found.kind == ACTIVATION and end < shape.length


def _in_last_backward(backward: int | None, shape: _Shape) -> bool:
    """True when the backward pass starting at ``backward`` is the trace's last pass: no
    forward allocation follows it."""
    return backward is not None and shape.after(shape.forward, backward) is None


def _backward(found: Allocation, end: int, shape: _Shape) -> tuple[str, float]:
    ends = shape.after(shape.not_backward, found.start)  # the backward pass ends here
    if end < shape.length and (ends is None or end < ends):
        return TEMPORARY, 0.85
    return GRADIENT, 0.85 if end < shape.length or ends is not None else 0.6


def _optimizer(found: Allocation, end: int, shape: _Shape) -> tuple[str, float]:
    if shape.outlives_step(found, end):
        last = shape.has_steps and found.step == shape.last_step and end >= shape.length
        return OPTIMIZER_STATE, 0.6 if last else 0.9
    return TEMPORARY, 0.9


def _phases_from_peaks(lt: Lifetimes) -> dict[int, str]:
    """No frames anywhere: within each step, before its peak of transient memory is forward.

    Transient: made in the step and freed before the step's last allocation, so gradients
    (freed by the next ``zero_grad``, or after the optimizer) and optimizer state do not move
    the peak into backward; what is left peaks when forward has made every activation.
    """
    last: dict[int | None, int] = {}
    for found in lt.allocations:
        if found.start != BEFORE:
            last[found.step] = max(last.get(found.step, -1), found.start)
    live = 0
    best: dict[int | None, tuple[int, int]] = {}
    for index, event in enumerate(lt.by_event):
        if event is None or event.start == BEFORE or event.end > last[event.step]:
            continue
        live += event.size if event.start == index else -event.size
        peak = best.get(event.step)
        if peak is None or live > peak[0]:
            best[event.step] = (live, index)
    phases: dict[int, str] = {}
    for found in lt.allocations:
        if found.start == BEFORE:
            continue
        turn = best.get(found.step, (0, lt.length))[1]
        phases[id(found)] = FORWARD if found.start <= turn else BACKWARD
    return phases
