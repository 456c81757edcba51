"""Kinds of memory from lifetimes: parameters, optimizer state, gradients, activations, temporaries.

No hooks are needed, so old dumps can be classified too. A training step has a shape every
framework shares, and an allocation's kind follows from where in that shape it starts and ends:

* **phase** (frames, as tiebreaker of what the trace shows): an allocation made on the autograd
  engine (C++ engine frames, or *no* Python frames at all: CUDA and NPU run backward on a device
  thread) is in backward; one under ``torch/optim`` (or DeepSpeed's, apex's, Megatron's
  optimizers) is in the optimizer; the rest is forward. An entry without frames falls back
  on its step's peak of live memory: forward before it, backward after.
* **lifetime**: a forward allocation freed after the next backward began is an activation, one
  freed before is a temporary; a backward allocation freed before its backward pass ended is a
  temporary, one that outlives it a gradient (that covers gradient accumulation: the first
  micro-batch's gradients persist, later micro-batches' partial gradients die in backward); an
  optimizer allocation that outlives its step is optimizer state; anything made outside every
  step (``step=N`` metadata) that is never freed is a parameter; a live block with no frames
  at all was allocated before recording began.

Each allocation gets a confidence: high where phase and lifetime agree plainly, lower where a
rule had to guess (an allocation the trace never saw freed, no frames, no step tags).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from memforensics.analysis.filled.lifetimes import BEFORE, Allocation, Lifetimes

PARAMETER = "parameter"
OPTIMIZER_STATE = "optimizer_state"
GRADIENT = "gradient"
ACTIVATION = "activation"
TEMPORARY = "temporary"
BEFORE_RECORDING = "before_recording"
UNKNOWN = "unknown"
KINDS = (
    PARAMETER,
    OPTIMIZER_STATE,
    GRADIENT,
    ACTIVATION,
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
)
_BACKWARD_PY = frozenset({"_engine_run_backward", "backward", "run_backward", "grad"})
_BACKWARD_CPP = ("Engine::evaluate_function", "Engine::thread_main", "autograd::engine::")
_NATIVE = (".c", ".cc", ".cpp", ".cxx", ".cu", ".h", ".hpp", ".so")


def is_python_file(filename: str) -> bool:
    """A Python frame's file: C++ frames say ``??``, nothing, or a native source file.

    Not only ``.py``: ``<stdin>``, ``<string>`` and notebook cells are Python too.
    """
    return bool(filename) and filename != "??" and not filename.lower().endswith(_NATIVE)


def phase_of(frames: object) -> str:
    """``forward``, ``backward``, ``optimizer``, or ``none`` when the entry has no frames key.

    Nothing is cached per frames list: in a real snapshot each entry has its own list (over
    shared frame dicts), so such a cache would miss and only pin old dumps in memory.
    """
    if not isinstance(frames, list):
        return NO_FRAMES
    return _phase(frames)


_PYTHON, _NATIVE_FRAME = "python", "native"
_mark_cache: dict[tuple[str, str], str] = {}


def _phase(frames: list[Any]) -> str:
    python = False
    cache = _mark_cache
    for frame in frames:  # innermost first: the nearest phase marker wins
        if type(frame) is not dict:
            continue
        filename, name = frame.get("filename"), frame.get("name")
        key = (filename if type(filename) is str else "", name if type(name) is str else "")
        mark = cache.get(key)
        if mark is None:
            if len(cache) >= 200_000:
                cache.clear()
            mark = cache[key] = _frame_mark(*key)
        if mark == _PYTHON:
            python = True
        elif mark != _NATIVE_FRAME:
            return mark
    return FORWARD if python else BACKWARD  # no Python frame: the autograd engine's thread


def _frame_mark(filename: str, name: str) -> str:
    """What one frame says: backward, optimizer, or merely Python or native code.

    A snapshot repeats the same few thousand frames millions of times, so this runs once per
    distinct (file, function), not once per entry.
    """
    filename = filename.replace("\\", "/")
    if is_python_file(filename):
        if name in _BACKWARD_PY and (
            "/torch/autograd/" in filename or filename.endswith("/torch/_tensor.py")
        ):
            return BACKWARD
        if name != "zero_grad" and any(path in filename for path in _OPTIMIZER_PATHS):
            return OPTIMIZER
        return _PYTHON
    if any(marker in name for marker in _BACKWARD_CPP):
        return BACKWARD
    return _NATIVE_FRAME


@dataclass(frozen=True, slots=True)
class KindBytes:
    """Live bytes of one kind at a moment, with the byte-weighted mean confidence.

    ``bytes`` are block bytes (what PyTorch's ``allocated`` counts); ``requested_bytes`` what
    the callers asked for, to compare with tensor sizes.
    """

    kind: str
    bytes: int
    blocks: int
    confidence: float
    requested_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "kind": self.kind,
            "bytes": self.bytes,
            "requested_bytes": self.requested_bytes,
            "blocks": self.blocks,
            "confidence": round(self.confidence, 3),
        }


def kinds_table(allocations: list[Allocation]) -> tuple[KindBytes, ...]:
    """Bytes per kind over ``allocations`` (already classified), in :data:`KINDS` order."""
    totals: dict[str, list[float]] = {}
    for found in allocations:
        entry = totals.setdefault(found.kind, [0, 0, 0.0, 0])
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
        )
        for kind in KINDS
        if kind in totals
    )


def _mean(entry: list[float]) -> float:
    return entry[2] / entry[0] if entry[0] else 0.0


class _Shape:
    """Where each phase starts in the trace, and the step structure, for the lifetime rules."""

    def __init__(self, lt: Lifetimes, phases: dict[int, str]) -> None:
        traced = [a for a in lt.allocations if a.start != BEFORE]
        self.backward = sorted(a.start for a in traced if phases[id(a)] == BACKWARD)
        self.forward = sorted(a.start for a in traced if phases[id(a)] == FORWARD)
        self.not_backward = sorted(a.start for a in traced if phases[id(a)] != BACKWARD)
        steps = [a.step for a in traced if a.step is not None]
        self.has_steps = bool(steps)
        self.any_tags = any(a.step is not None for a in lt.allocations)
        self.first_step = min(steps) if steps else None
        self.last_step = max(steps) if steps else None
        self.length = lt.length

    @staticmethod
    def after(starts: list[int], position: int) -> int | None:
        index = bisect_right(starts, position)
        return starts[index] if index < len(starts) else None

    def outside_steps(self, found: Allocation) -> bool:
        """Made outside every step: no step tag while the trace has them (or before the first)."""
        if not self.has_steps or self.first_step is None:
            return False
        return found.step is None or found.step < self.first_step

    def outlives_step(self, found: Allocation) -> bool:
        """Still live after the step that made it (or, without step tags, into the next pass)."""
        if found.end >= self.length:
            return True
        if self.has_steps and found.step is not None and found.free_step is not None:
            return found.free_step > found.step
        return self.after(self.forward, found.start) is not None and (
            (self.after(self.forward, found.start) or 0) < found.end
        )


def classify(lt: Lifetimes) -> None:
    """Set ``kind`` and ``confidence`` on every allocation of ``lt`` (see the module docstring)."""
    phases = {id(a): phase_of(a.frames) for a in lt.allocations}
    guessed = {key for key, phase in phases.items() if phase == NO_FRAMES}
    if guessed:
        fallback = _phases_from_peaks(lt)
        phases.update((key, fallback[key]) for key in guessed if key in fallback)
    shape = _Shape(lt, phases)
    for found in lt.allocations:
        phase = phases[id(found)]
        if found.start == BEFORE:
            found.kind, found.confidence = _untraced(found, phase, shape)
        elif phase == BACKWARD:
            found.kind, found.confidence = _backward(found, shape)
        elif phase == OPTIMIZER:
            found.kind, found.confidence = _optimizer(found, shape)
        else:
            found.kind, found.confidence = _forward(found, shape)
        if id(found) in guessed and found.start != BEFORE:
            found.confidence *= 0.6


def _untraced(found: Allocation, phase: str, shape: _Shape) -> tuple[str, float]:
    """Made before the trace: only its own frames and step tag can tell."""
    if not found.frames or found.end < shape.length:
        return BEFORE_RECORDING, 1.0
    if phase == OPTIMIZER:
        return OPTIMIZER_STATE, 0.8
    if phase == BACKWARD:
        return GRADIENT, 0.6
    if found.step is None:  # made outside every step (model set-up) and still held
        # Without a trace and without any step tag (a bare memory_snapshot() list), nothing says
        # the block outlived a step or was made outside one: a guess from frames alone.
        return PARAMETER, 0.8 if shape.length or shape.any_tags else 0.4
    return UNKNOWN, 0.3  # a forward allocation kept from an earlier step: a cache or a leak


def _forward(found: Allocation, shape: _Shape) -> tuple[str, float]:
    backward = shape.after(shape.backward, found.start)
    if found.end < shape.length and not (
        shape.has_steps
        and found.free_step is not None
        and found.step is not None
        and found.free_step > found.step
    ):
        if backward is not None and found.end > backward:
            return ACTIVATION, 0.9
        return TEMPORARY, 0.9
    if shape.outside_steps(found) or (backward is not None and not shape.has_steps):
        return PARAMETER, 0.7 if found.end >= shape.length else 0.4
    if backward is None and found.end >= shape.length:
        return ACTIVATION, 0.6  # live when the trace ends before any backward: at an OOM
    return UNKNOWN, 0.4  # a forward allocation outliving its step: a cache or a leak


def _backward(found: Allocation, shape: _Shape) -> tuple[str, float]:
    ends = shape.after(shape.not_backward, found.start)  # the backward pass ends here
    if found.end < shape.length and (ends is None or found.end < ends):
        return TEMPORARY, 0.85
    return GRADIENT, 0.85 if found.end < shape.length or ends is not None else 0.6


def _optimizer(found: Allocation, shape: _Shape) -> tuple[str, float]:
    if shape.outlives_step(found):
        last = shape.has_steps and found.step == shape.last_step and found.end >= shape.length
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
