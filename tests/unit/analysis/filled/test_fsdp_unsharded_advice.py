"""A peak FSDP's unsharded parameters fill: the static cause says how much of the parameters
FSDP's all-gather unsharded, and offers what frees them only where the trace shows it:
``reshard_after_forward=True`` where modules held theirs from the forward into the backward,
smaller wrap units where each module resharded after its forward; never sharding, which FSDP
does already. A training step without FSDP keeps its fixes."""

from __future__ import annotations

from event_trace import (
    BODY,
    CALL,
    ENGINE,
    FSDP2_GATHER_BUFFER,
    FSDP2_UNSHARD,
    MALLOC,
    SP,
    Frame,
    MiB,
    Trace,
    py,
)

from memforensics.analysis import summarize
from memforensics.analysis.diagnosis import Cause, Diagnosis
from memforensics.analysis.diagnosis.text import (
    LOW_PRECISION_OPTIMIZER,
    RESHARD_AFTER_FORWARD,
    SHARD_MORE_RANKS,
    SMALLER_WRAP_UNITS,
)
from memforensics.analysis.dump import dump_from_snapshot

BUILT: list[Frame] = [  # a parameter (a shard of it, under FSDP) moved to the device
    MALLOC,
    py(f"{SP}/torch/nn/modules/module.py", 1326, "convert"),
    py(f"{SP}/torch/nn/modules/module.py", 900, "_apply"),
    py(f"{SP}/torch/nn/modules/module.py", 1340, "to"),
    py("/users/me/train.py", 12, "main"),
    BODY,
]
ACTIVATION: list[Frame] = [MALLOC, py("/users/me/model.py", 57, "forward"), CALL, BODY]
MODULES = 5  # the root (embedding and head) and four blocks, gathered in that order
UNSHARDED = 2 * 64 * MiB  # each module's unsharded parameters: two of 64 MiB
SHARDS = MODULES * UNSHARDED // 4  # this rank's shards, over 4 ranks


def _gather(trace: Trace) -> list[int]:
    """One module's all-gather: the flat buffer, its copy-out into two unsharded parameters,
    the buffer freed."""
    buffer = trace.alloc(UNSHARDED, FSDP2_GATHER_BUFFER)
    unsharded = [trace.alloc(UNSHARDED // 2, FSDP2_UNSHARD) for _ in range(2)]
    trace.free(buffer)
    return unsharded


def _fsdp_step(*, reshard: bool) -> Diagnosis:
    """A training step of an FSDP2 model: each module's forward gathers its parameters and
    makes an activation; ``reshard``: each module but the root frees them after its forward
    and gathers them again in its backward, else every module holds them until its backward."""
    trace = Trace()
    for _ in range(MODULES):
        trace.alloc(SHARDS // MODULES, BUILT)
    held: list[list[int]] = []
    activations = []
    for module in range(MODULES):
        held.append(_gather(trace))
        activations.append(trace.alloc(8 * MiB, ACTIVATION))
        if reshard and module > 0:
            for addr in held.pop():
                trace.free(addr)
    trace.free(trace.alloc(MiB, ENGINE))  # the backward begins
    for module in reversed(range(MODULES)):
        if reshard and module > 0:
            held.append([trace.alloc(UNSHARDED // 2, ENGINE) for _ in range(2)])
        for addr in held.pop():
            trace.free(addr)
        trace.free(activations.pop())
    summary = summarize(dump_from_snapshot(trace.snapshot()))
    assert summary.diagnosis is not None
    return summary.diagnosis


def _static(diagnosis: Diagnosis) -> Cause:
    """The static cause."""
    return next(cause for cause in diagnosis.causes if cause.name == "static")


def test_modules_holding_their_parameters_to_the_backward_are_told_to_reshard() -> None:
    """With reshard_after_forward=False the peak ends the forward holding every module's
    unsharded parameters; the fix is reshard_after_forward=True, freeing the modules' that are
    neither the root (never resharded after forward) nor the last one (running): three of
    five. The peak is the last copy-out, the last all-gather's flat buffer still live."""
    diagnosis = _fsdp_step(reshard=False)
    static = _static(diagnosis)
    assert static.fix is not None
    assert static.fix.action == RESHARD_AFTER_FORWARD
    assert static.fix.bytes == 3 * UNSHARDED
    assert "of which unsharded by FSDP's all-gather 768.00 MiB" in static.evidence
    assert "640.00 MiB held from the forward to the backward" in static.evidence
    assert f"{RESHARD_AFTER_FORWARD} frees ≈ 384.00 MiB" in diagnosis.headline


def test_modules_resharding_after_forward_are_not_told_to_reshard_nor_to_shard() -> None:
    """With reshard_after_forward=True the unsharded parameters at the peak are the root's
    and the running module's (with its all-gather's flat buffer): no module holds more to free
    by resharding, FSDP shards already, so the fix is a smaller wrap unit, with no figure the
    dump does not tell."""
    diagnosis = _fsdp_step(reshard=True)
    static = _static(diagnosis)
    actions = [fix.action for fix in static.fixes]
    assert RESHARD_AFTER_FORWARD not in actions
    assert SHARD_MORE_RANKS not in actions
    assert not any("shard" in action.lower() and "FSDP" in action for action in actions[1:])
    assert static.fix is not None
    assert (static.fix.action, static.fix.bytes) == (SMALLER_WRAP_UNITS, None)
    assert "of which unsharded by FSDP's all-gather 384.00 MiB" in static.evidence
    assert "held from the forward to the backward" not in static.evidence


def test_a_training_step_without_fsdp_keeps_its_fixes() -> None:
    """Parameters moved to the device and held, without FSDP: no unsharded parameters are
    named, and sharding is still the fix offered."""
    trace = Trace()
    weights = [trace.alloc(UNSHARDED, BUILT) for _ in range(MODULES)]
    activations = [trace.alloc(8 * MiB, ACTIVATION) for _ in range(MODULES)]
    trace.free(trace.alloc(MiB, ENGINE))
    for addr in activations:
        trace.free(addr)
    assert weights
    summary = summarize(dump_from_snapshot(trace.snapshot()))
    assert summary.diagnosis is not None
    static = _static(summary.diagnosis)
    assert [fix.action for fix in static.fixes] == [SHARD_MORE_RANKS]
    assert "FSDP's all-gather" not in static.evidence
    assert LOW_PRECISION_OPTIMIZER not in summary.diagnosis.headline


def test_a_trace_ending_in_the_forward_names_the_unsharded_parameters_and_no_fsdp_fix() -> None:
    """An OOM in the first forward, every module's parameters gathered so far: whether they
    would be held into the backward is not in the trace, so neither FSDP fix is offered, only
    the bytes."""
    trace = Trace()
    for _ in range(MODULES):
        trace.alloc(SHARDS // MODULES, BUILT)
    for _ in range(MODULES):
        _gather(trace)
        trace.alloc(8 * MiB, ACTIVATION)
    trace.oom(UNSHARDED, FSDP2_GATHER_BUFFER)
    summary = summarize(dump_from_snapshot(trace.snapshot()))
    assert summary.diagnosis is not None
    static = _static(summary.diagnosis)
    actions = [fix.action for fix in static.fixes]
    assert RESHARD_AFTER_FORWARD not in actions
    assert SMALLER_WRAP_UNITS not in actions
    assert "of which unsharded by FSDP's all-gather 640.00 MiB" in static.evidence
