"""Blocks held to the end of a trace with no backward after them: a training forward's own
output, or anything live at an OOM in the forward, is an activation; what a script keeps to the
end of a trace that never ran out (an inference loop's batch, tables, results, outputs, a
``no_grad`` forward's own outputs, a cache it made itself) is ``unknown``, unless a
batch-moving helper's frame names it ``input``. Where the trace shows no backward, the advice
is a smaller batch, a shorter sequence or an op in chunks, never activation checkpointing.

Each dump has the shape ``memforensics plan`` records for such a script (Python frames only):
the script's own lines at the program's top level, the modules' forwards, backward on
autograd's thread (no frames).
"""

from __future__ import annotations

import pytest
from event_trace import BODY, ENGINE, MALLOC, SP, Frame, MiB, Trace, py
from test_kinds_input import BATCH_ENCODING_TO, BUILT, FORWARD

from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.summary import summarize, summary_text

GENERATE = [
    MALLOC,
    py(f"{SP}/transformers/generation/utils.py", 3289, "_sample"),
    py(f"{SP}/transformers/generation/utils.py", 2400, "generate"),
    BODY,
]


def _script(line: int) -> list[Frame]:
    """The script's own line, at the program's top level."""
    return [MALLOC, py("/users/me/infer.py", line, "<module>")]


def _evaluation(trace: Trace) -> dict[str, list[int]]:
    """A model moved to the device; then, made by the script's own lines before the loop, a
    batch, a table, a results buffer and a cache of keys and values it fills itself; then four
    ``no_grad`` forwards, each making and freeing its temporaries, the script keeping each
    forward's predictions, and the last forward's output kept. Returns the blocks by name."""
    trace.alloc(16 * MiB, BUILT)
    made: dict[str, list[int]] = {
        "script": [trace.alloc(size, _script(line)) for line, size in enumerate((64, 4, 2, 8))],
        "output": [],
    }
    for _ in range(4):
        trace.free(trace.alloc(48 * MiB, FORWARD))
        if made["output"]:
            trace.free(made["output"].pop())
        made["output"].append(trace.alloc(8 * MiB, FORWARD))
        made["script"].append(trace.alloc(MiB, _script(20)))  # the predictions it keeps
    return made


def test_what_an_inference_script_keeps_to_the_end_is_unknown() -> None:
    """With no backward and no OOM, the batch, table, results, cache and predictions the
    script's own lines made and kept are ``unknown``, neither activations nor inputs, and so
    is the last ``no_grad`` forward's own output, which the script went on holding while its
    own line made the predictions: nothing saved it for a backward."""
    trace = Trace()
    made = _evaluation(trace)
    found = trace.classified()
    assert {found[addr].kind for addr in made["script"]} == {"unknown"}
    assert [found[addr].kind for addr in made["output"]] == ["unknown"]


def test_a_helper_s_batch_kept_through_generate_is_input_and_its_output_unknown() -> None:
    """``tokenizer(...).to("cuda")`` (``BatchEncoding.to``), kept through ``generate`` with no
    backward and no OOM, is the input its helper's frame names; the tokens ``generate`` returns
    and the script keeps are ``unknown``, not a forward's activation."""
    trace = Trace()
    trace.alloc(16 * MiB, BUILT)
    ids = trace.alloc(MiB, BATCH_ENCODING_TO)
    generated = []
    for _ in range(4):
        trace.free(trace.alloc(8 * MiB, [*FORWARD[:-1], *GENERATE[1:]]))
        generated.append(trace.alloc(MiB, GENERATE))
        if len(generated) > 1:
            trace.free(generated[-2])
    found = trace.classified()
    assert found[ids].kind == "input"
    assert found[generated[-1]].kind == "unknown"


@pytest.mark.parametrize("recorded", ["trace entry", "sidecar"])
def test_blocks_live_at_an_oom_in_the_forward_stay_activations(recorded: str) -> None:
    """A training step that runs out in its forward (an ``oom`` entry, or only the sidecar's
    record of the OOM the snapshot was taken at): the script's own line after the forward and
    the module's blocks are activations, the batch copied before it the input."""
    trace = Trace()
    trace.alloc(16 * MiB, BUILT)
    first = trace.alloc(64 * MiB, _script(12))
    trace.free(trace.alloc(48 * MiB, FORWARD))
    trace.free(trace.alloc(48 * MiB, ENGINE))
    trace.free(first)
    batch = trace.alloc(64 * MiB, _script(12))
    hidden = trace.alloc(48 * MiB, FORWARD)
    scaled = trace.alloc(48 * MiB, _script(14))  # the script's own op on the forward's output
    sidecar = None
    if recorded == "trace entry":
        trace.oom(1 << 30, FORWARD)
    else:
        sidecar = {"schema": 2, "kind": "oom", "rank": 0}
    found = trace.classified(sidecar)
    assert found[batch].kind == "input"
    assert found[hidden].kind == "activation"
    assert found[scaled].kind == "activation"


def test_an_oom_caught_and_left_behind_does_not_end_the_trace() -> None:
    """An evaluation loop that ran out once, caught it and went on: what the script kept to the
    end is ``unknown``, not live at an OOM; the failed forward's blocks its unwinding freed are
    still that forward's activations."""
    trace = Trace()
    trace.alloc(16 * MiB, BUILT)
    table = trace.alloc(4 * MiB, _script(8))
    failed = trace.alloc(48 * MiB, FORWARD)
    trace.oom(1 << 30, FORWARD)
    trace.free(failed)
    trace.free(trace.alloc(24 * MiB, FORWARD))
    kept = trace.alloc(MiB, _script(20))
    found = trace.classified()
    assert found[table].kind == found[kept].kind == "unknown"
    assert found[failed].kind == "activation"


def test_the_peak_of_an_inference_loop_keeping_its_outputs_asks_for_no_checkpointing() -> None:
    """At the end of an inference loop whose kept predictions outweigh the rest, the summary
    counts them as no kind a stack tells and advises no activation checkpointing, which frees
    nothing without a backward."""
    trace = Trace()
    trace.alloc(16 * MiB, BUILT)
    for _ in range(8):
        trace.free(trace.alloc(4 * MiB, FORWARD))
        trace.alloc(32 * MiB, _script(20))
    text = summary_text(summarize(dump_from_snapshot(trace.snapshot())))
    assert "256.00 MiB more has no stack that tells its kind" in text
    assert "checkpointing" not in text


def _one_forward(trace: Trace, *, trained: bool, then_script: bool = True) -> int:
    """A model moved to the device; with ``trained``, a training step first (a forward, its
    backward); then an 8 MiB batch and one forward whose three 64 MiB intermediates die
    within it (the batch after it: 200 MiB of temporaries) and whose 32 MiB output the
    script keeps to the end, as an embedding script does; with ``then_script``, the script's
    own line then makes a 1 MiB mean of it. Returns the output's address."""
    trace.alloc(16 * MiB, BUILT)
    if trained:
        saved = trace.alloc(48 * MiB, FORWARD)
        trace.free(trace.alloc(48 * MiB, ENGINE))
        trace.free(saved)
    batch = trace.alloc(8 * MiB, _script(12))
    intermediates = [trace.alloc(64 * MiB, FORWARD) for _ in range(3)]
    output = trace.alloc(32 * MiB, FORWARD)
    for addr in intermediates:
        trace.free(addr)
    trace.free(batch)
    if then_script:
        trace.alloc(MiB, _script(16))
    return output


def test_a_no_grad_forward_s_kept_output_is_no_activation_and_gets_no_checkpointing() -> None:
    """One forward with no backward anywhere in the trace, its output kept by the script while
    its own code goes on: the output reads ``unknown``, and the peak's fix is half the batch or
    the sequence, without activation checkpointing or a micro-batch (training words)."""
    trace = Trace()
    output = _one_forward(trace, trained=False)
    assert trace.classified()[output].kind == "unknown"
    summary = summarize(dump_from_snapshot(trace.snapshot()))
    assert summary.diagnosis is not None
    headline = summary.diagnosis.headline
    assert headline.startswith("peak 248.00 MiB at entry 5: temporaries 200.00 MiB, inferred")
    assert headline.endswith("→ half the batch or the sequence frees ≈ 100.00 MiB")
    text = summary_text(summary)
    assert "checkpointing" not in text
    assert "micro-batch" not in text


def test_a_training_forward_s_kept_output_stays_an_activation_with_its_advice() -> None:
    """The same forward after a training step (a backward in the trace): its output held to
    the end is still that training forward's activation and the peak keeps activation
    checkpointing; without the training step it is neither."""
    found = {}
    for trained in (True, False):
        trace = Trace()
        output = _one_forward(trace, trained=trained)
        summary = summarize(dump_from_snapshot(trace.snapshot()))
        assert summary.diagnosis is not None
        found[trained] = (trace.classified()[output].kind, summary.diagnosis.headline)
    kind, headline = found[True]
    assert kind == "activation"
    assert "activations 32.00 MiB" in headline
    assert "→ activation checkpointing or half the micro-batch frees ≈ 116.00 MiB" in headline
    kind, headline = found[False]
    assert kind == "unknown"
    assert "checkpointing" not in headline


def _inference_oom(trace: Trace, *, trained: bool) -> None:
    """Three forwards, each fed a batch the script copies, then a fourth that runs out of
    memory after three 48 MiB blocks, its unwinding freeing them; with ``trained``, each
    forward is followed by its backward."""
    trace.alloc(16 * MiB, BUILT)
    for _ in range(3):
        batch = trace.alloc(8 * MiB, _script(12))
        trace.free(trace.alloc(48 * MiB, FORWARD))
        if trained:
            trace.free(trace.alloc(48 * MiB, ENGINE))
        trace.free(batch)
    batch = trace.alloc(8 * MiB, _script(12))
    held = [trace.alloc(48 * MiB, FORWARD) for _ in range(3)]
    trace.oom(1 << 30, FORWARD)
    for addr in [*held, batch]:
        trace.free(addr)


def test_an_oom_in_an_inference_loop_asks_for_a_smaller_batch_first() -> None:
    """An inference loop (no backward in the trace) that runs out in a forward: the headline
    names the failing forward's tensors, no activations, and halving the batch, not the
    micro-batch; computing the biggest op in chunks comes next, and checkpointing only last,
    said to need a forward with grad (the trace cannot tell this loop from a training step's
    first forward)."""
    trace = Trace()
    _inference_oom(trace, trained=False)
    summary = summarize(dump_from_snapshot(trace.snapshot()))
    assert summary.diagnosis is not None
    top = summary.diagnosis.causes[0]
    headline = summary.diagnosis.headline
    assert headline.startswith("the failing forward's tensors, no backward in the trace, 152.00")
    assert headline.endswith("→ halve the batch")
    actions = [fix.action for fix in top.fixes]
    assert actions[:2] == ["halve the batch", "halve the sequence length"]
    assert "model.py:57 forward in chunks" in actions[2]
    assert [a for a in actions if "checkpointing" in a] == [actions[-1]]
    assert "if this forward runs with grad" in actions[-1]


def test_an_oom_in_a_training_step_s_first_forward_still_offers_checkpointing() -> None:
    """A training script that runs out in its very first forward shows no backward yet: its
    trace looks like an inference loop's, so checkpointing stays among the fixes, for a
    forward that runs with grad."""
    trace = Trace()
    trace.alloc(64 * MiB, BUILT)
    batch = trace.alloc(8 * MiB, _script(12))
    saved = [trace.alloc(48 * MiB, FORWARD) for _ in range(3)]
    trace.oom(1 << 30, FORWARD)
    for addr in [*saved, batch]:
        trace.free(addr)
    summary = summarize(dump_from_snapshot(trace.snapshot()))
    assert summary.diagnosis is not None
    actions = [fix.action for fix in summary.diagnosis.causes[0].fixes]
    checkpointing = "activation checkpointing, if this forward runs with grad"
    assert any(action.startswith(checkpointing) for action in actions)


def test_an_oom_in_a_training_loop_s_forward_keeps_checkpointing() -> None:
    """The same loop with a backward after each forward: the failing step's tensors, halving
    the micro-batch, and activation checkpointing among the fixes."""
    trace = Trace()
    _inference_oom(trace, trained=True)
    summary = summarize(dump_from_snapshot(trace.snapshot()))
    assert summary.diagnosis is not None
    headline = summary.diagnosis.headline
    assert headline.startswith("activations: the failing step's tensors, 152.00 MiB")
    assert headline.endswith("→ halve the micro-batch")
    assert any("checkpointing" in fix.action for fix in summary.diagnosis.causes[0].fixes)


def test_a_forward_the_trace_ends_in_keeps_its_activations_but_no_checkpointing() -> None:
    """A trace of forwards alone that ends in a forward (the script allocated nothing after
    it, as a dump taken right after ``model(x)``): the forward's output is its activation, but
    with no backward in the trace the peak's fix is half the batch or the sequence, not
    activation checkpointing."""
    trace = Trace()
    output = _one_forward(trace, trained=False, then_script=False)
    assert trace.classified()[output].kind == "activation"
    summary = summarize(dump_from_snapshot(trace.snapshot()))
    assert summary.diagnosis is not None
    headline = summary.diagnosis.headline
    assert "temporaries 200.00 MiB and activations 32.00 MiB, inferred" in headline
    assert headline.endswith("→ half the batch or the sequence frees ≈ 116.00 MiB")
    assert "checkpointing" not in summary_text(summary)
