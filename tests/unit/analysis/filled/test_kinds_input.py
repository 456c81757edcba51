"""The input batch: a block a step is fed, copied to the device by the script or a framework's
batch-moving helper outside every forward, backward and optimizer, and living for one step.

Each dump has the shape a real training or inference loop writes with Python frames (as
``stacks="python"`` and ``memforensics plan`` record them): the copy's own line, then the
module forwards that use it, backward on autograd's thread (no frames), the optimizer.
"""

from __future__ import annotations

from event_trace import BODY, CALL, ENGINE, MALLOC, SP, Frame, MiB, Trace, cpp, py

from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.summary import summarize

BATCH = 96 * MiB
"""A vision batch (32 x 3 x 512 x 512 float32): larger than any one activation below."""
LABELS = 512


def _script(line: int) -> list[Frame]:
    """The training loop's own line, at the program's top level."""
    return [MALLOC, py("/users/me/train.py", line, "<module>")]


FORWARD = [MALLOC, py("/users/me/model.py", 57, "forward"), CALL, BODY]
OPTIMIZER = [MALLOC, py(f"{SP}/torch/optim/adam.py", 300, "_single_tensor_adam"), BODY]
BUILT = [
    MALLOC,
    py(f"{SP}/torch/nn/modules/module.py", 1326, "convert"),
    py(f"{SP}/torch/nn/modules/module.py", 900, "_apply"),
    BODY,
]
SEND_TO_DEVICE = [
    MALLOC,
    py(f"{SP}/accelerate/utils/operations.py", 158, "send_to_device"),
    py(f"{SP}/accelerate/data_loader.py", 577, "__iter__"),
    py("/users/me/eval.py", 20, "<module>"),
]
BATCH_ENCODING_TO = [
    MALLOC,
    py(f"{SP}/transformers/tokenization_utils_base.py", 792, "<dictcomp>"),
    py(f"{SP}/transformers/tokenization_utils_base.py", 792, "to"),
    py("/users/me/train.py", 12, "<module>"),
]


def _step(
    trace: Trace, batch: list[Frame], previous: dict[str, int] | None = None
) -> dict[str, int]:
    """One training step fed ``batch``: the batch and its labels copied (the ``previous``
    step's batch, labels and loss freed as the new ones replace them), a forward saving two
    activations, the loss (the script's line after the forward), backward's temporary and
    (first step) gradients, Adam's state (first step). Returns the step's blocks by name."""
    made = {"batch": trace.alloc(BATCH, batch), "labels": trace.alloc(LABELS, batch)}
    if previous is not None:
        for name in ("batch", "labels", "loss"):
            trace.free(previous[name])
    made["hidden"] = trace.alloc(64 * MiB, FORWARD)
    made["logits"] = trace.alloc(8 * MiB, FORWARD)
    made["loss"] = trace.alloc(512, _script(14))
    scratch = trace.alloc(64 * MiB, ENGINE)
    trace.free(made["hidden"])
    trace.free(scratch)
    trace.free(made["logits"])
    if previous is None:
        made["gradient"] = trace.alloc(4 * MiB, ENGINE)
        made["state"] = trace.alloc(4 * MiB, OPTIMIZER)
    return made


def _training(batch: list[Frame], steps: int = 3) -> tuple[Trace, list[dict[str, int]]]:
    """A model moved to the device, a position table made once by the script and used by
    every step, then ``steps`` steps each fed a new batch from ``batch``."""
    trace = Trace()
    trace.alloc(4 * MiB, BUILT)
    positions = trace.alloc(2 * MiB, _script(8))
    made: list[dict[str, int]] = []
    for _ in range(steps):
        made.append(_step(trace, batch, made[-1] if made else None))
    made[0]["positions"] = positions
    return trace, made


def test_the_script_s_copy_of_each_step_s_batch_is_input_and_nothing_else() -> None:
    """A batch and its labels the training loop's own line copies to the device each step are
    ``input`` (freed in the next step, or held at the end), not activations or ``unknown``;
    the forward's activations, the loss, backward's and the optimizer's blocks and a table
    made once and kept across steps keep their kinds."""
    trace, made = _training(_script(12))
    found = trace.classified()
    batches = {step[name] for step in made for name in ("batch", "labels")}
    assert {addr for addr, a in found.items() if a.kind == "input"} == batches
    assert all(found[addr].confidence == 0.7 for addr in batches)
    first = made[0]
    assert found[first["hidden"]].kind == "activation"
    assert found[first["loss"]].kind != "input"  # made after the forward
    assert found[first["gradient"]].kind == "gradient"
    assert found[first["state"]].kind == "optimizer_state"
    assert found[first["positions"]].kind != "input"  # held across three steps


def test_a_batch_kept_across_steps_is_not_input() -> None:
    """One batch copied once and fed to every step (a fixed benchmark batch) is state kept
    across steps, not a step's input; the steps' own batches still are."""
    trace = Trace()
    trace.alloc(4 * MiB, BUILT)
    fixed = trace.alloc(BATCH, _script(9))
    made: list[dict[str, int]] = []
    for _ in range(3):
        made.append(_step(trace, _script(12), made[-1] if made else None))
    found = trace.classified()
    assert found[fixed].kind != "input"
    assert found[made[-1]["batch"]].kind == "input"


def test_a_helper_s_batch_is_input_in_an_inference_loop() -> None:
    """Accelerate's ``send_to_device`` moving each batch of an evaluation loop (no backward):
    each batch is ``input`` at the helper's confidence, not a temporary; the same helper
    inside a module's forward (Accelerate's hooks moving activations between devices) is the
    forward's."""
    trace = Trace()
    trace.alloc(4 * MiB, BUILT)
    hooked = [MALLOC, *SEND_TO_DEVICE[1:2], py(f"{SP}/accelerate/hooks.py", 170, "pre_forward"),
              CALL, BODY]  # fmt: skip
    batches, moved = [], []
    for _ in range(3):
        batches.append(trace.alloc(BATCH, SEND_TO_DEVICE))
        if len(batches) > 1:
            trace.free(batches[-2])
        moved.append(trace.alloc(8 * MiB, hooked))
        out = trace.alloc(32 * MiB, FORWARD)
        trace.free(moved[-1])
        trace.free(out)
    found = trace.classified()
    assert [found[addr].kind for addr in batches] == ["input"] * 3
    assert all(found[addr].confidence == 0.85 for addr in batches)
    assert {found[addr].kind for addr in moved} == {"temporary"}


def test_torch_s_own_copy_frames_make_no_helper_of_a_script_s_line() -> None:
    """A stack recorded with C++ frames (``stacks="all"``) shows torch's own
    ``at::native::to(..., c10::Device, ...)`` under every copy: an inference loop's batch the
    script's own line copies stays a temporary, as without those frames, not a helper's input."""
    to_device = cpp(
        "at::native::to(at::Tensor const&, c10::Device, c10::ScalarType, bool, bool, "
        "std::optional<c10::MemoryFormat>)"
    )
    kinds = []
    for copy in (_script(12), [MALLOC, to_device, *_script(12)[1:]]):
        trace = Trace()
        trace.alloc(4 * MiB, BUILT)
        batches = []
        for _ in range(3):
            batches.append(trace.alloc(BATCH, copy))
            if len(batches) > 1:
                trace.free(batches[-2])
            trace.free(trace.alloc(32 * MiB, FORWARD))
        found = trace.classified()
        kinds.append([found[addr].kind for addr in batches])
    assert kinds[1] == kinds[0]
    assert "input" not in kinds[1]


def test_a_tokenizer_s_batch_moved_with_to_is_input_not_a_parameter() -> None:
    """``tokenizer(...).to("cuda")`` (Hugging Face's ``BatchEncoding.to``) moves a batch, not a
    model: its blocks are ``input``, never a parameter that a model's ``to`` would make."""
    trace, made = _training(BATCH_ENCODING_TO)
    found = trace.classified()
    kinds = {found[step[name]].kind for step in made for name in ("batch", "labels")}
    assert kinds == {"input"}


def test_the_last_batch_of_a_weight_s_size_is_input_not_a_parameter() -> None:
    """A batch the size of several weights (token ids of a small model), the last step's held
    to the end by the script: made after training began, it is that step's ``input``, not a
    parameter by its size (the weights the model's ``to`` moved stay parameters)."""
    trace = Trace()
    weights = [trace.alloc(2 * MiB, BUILT) for _ in range(4)]
    batches: list[int] = []
    for step in range(3):
        batches.append(trace.alloc(2 * MiB, _script(12)))
        if step:
            trace.free(batches[-2])
        hidden = trace.alloc(64 * MiB, FORWARD)
        scratch = trace.alloc(64 * MiB, ENGINE)
        trace.free(hidden)
        trace.free(scratch)
        if not step:
            for _ in weights:
                trace.alloc(2 * MiB, ENGINE)  # gradients
    found = trace.classified()
    assert [found[addr].kind for addr in batches] == ["input"] * 3
    assert {found[addr].kind for addr in weights} == {"parameter"}


def test_the_activations_cause_counts_the_input_batch() -> None:
    """At the peak of an inference loop, the cause that halving the batch cuts names the input
    batch beside the forward's temporaries, and its chunking fix names the op, not the copy."""
    trace = Trace()
    trace.alloc(4 * MiB, BUILT)
    batch = trace.alloc(BATCH, SEND_TO_DEVICE)
    out = trace.alloc(32 * MiB, FORWARD)
    trace.free(out)
    assert trace.classified()[batch].kind == "input"
    diagnosis = summarize(dump_from_snapshot(trace.snapshot())).diagnosis
    cause = next(cause for cause in diagnosis.causes if cause.name == "activations")
    assert cause.bytes == BATCH + 32 * MiB
    assert "input batch 96.00 MiB" in cause.evidence
    assert any("model.py:57 forward in chunks" in fix.action for fix in cause.fixes)
