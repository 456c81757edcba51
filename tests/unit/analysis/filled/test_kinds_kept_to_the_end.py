"""Blocks held to the end of a trace with no backward after them: a forward's own output, or
anything live at an OOM in the forward, is an activation; what a script keeps to the end of a
trace that never ran out (an inference loop's batch, tables, results, outputs, a cache it
made itself) is ``unknown``, unless a batch-moving helper's frame names it ``input``.

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
