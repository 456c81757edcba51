"""A peak Opacus' per-sample gradients fill: they are gradients (one per example of the
physical batch, held from the backward to the optimizer's step), and the static cause's first
fix is ghost clipping or a smaller physical batch, which hold none or fewer, not the 8-bit
optimizer state that frees a fraction of the small state.

The dump has the shape ``memforensics plan`` records for Opacus' ``make_private`` in its
default ``hooks`` mode (Python frames only): the hooks run on autograd's thread, the
``DPOptimizer``'s step on the main one.
"""

from __future__ import annotations

from event_trace import BODY, CALL, ENGINE, MALLOC, SP, Frame, MiB, Trace, py

from memforensics.analysis import summarize
from memforensics.analysis.diagnosis import Cause
from memforensics.analysis.diagnosis.text import OPACUS_PER_SAMPLE
from memforensics.analysis.dump import dump_from_snapshot

GSM = f"{SP}/opacus/grad_sample/grad_sample_module.py"
DP = f"{SP}/opacus/optimizers/optimizer.py"
BUILT: list[Frame] = [MALLOC, py(f"{SP}/torch/nn/modules/module.py", 1326, "convert"),
                      py(f"{SP}/torch/nn/modules/module.py", 900, "_apply"), BODY]  # fmt: skip
ACTIVATION: list[Frame] = [MALLOC, py("/users/me/model.py", 57, "forward"), CALL, BODY]
PER_SAMPLE: list[Frame] = [MALLOC, py(GSM, 61, "create_or_accumulate_grad_sample"),
                           py(GSM, 343, "capture_backprops_hook"),
                           py(f"{SP}/torch/utils/hooks.py", 137, "hook")]  # fmt: skip
STEP: list[Frame] = [py(DP, 558, "pre_step"), py(DP, 569, "step"), BODY]
SUMMED: list[Frame] = [MALLOC, py(f"{SP}/torch/functional.py", 372, "einsum"),
                       py(DP, 468, "clip_and_accumulate"), *STEP]  # fmt: skip
NOISY: list[Frame] = [MALLOC, py(DP, 491, "add_noise"), *STEP]
WEIGHTS = [4 * MiB, 6 * MiB, 8 * MiB]
BATCH = 16  # examples in the physical batch: a per-sample gradient is 16 gradients


def _static(steps: int) -> Cause:
    """The static cause of ``steps`` DP-SGD steps: the batch is moved, ``zero_grad`` frees the
    last step's per-sample gradients and their sum; the backward makes the gradients, frees
    the forward's activation, and its hooks make every parameter's per-sample gradients; the
    step sums them clipped and writes the noisy gradient in place of the last one."""
    trace = Trace()
    for size in WEIGHTS:
        trace.alloc(size, BUILT)
    noisy: list[int] = []
    held: list[int] = []  # p.grad_sample and p.summed_grad, until the next zero_grad
    for _ in range(steps):
        batch = trace.alloc(MiB, [MALLOC, py("/users/me/train.py", 40, "train"), BODY])
        for addr in held:  # optimizer.zero_grad() after the batch is moved
            trace.free(addr)
        saved = trace.alloc(32 * MiB, ACTIVATION)
        grads = [trace.alloc(size, ENGINE) for size in WEIGHTS]
        trace.free(saved)
        held = [trace.alloc(BATCH * size, PER_SAMPLE) for size in WEIGHTS]
        held += [trace.alloc(size, SUMMED) for size in WEIGHTS]
        for addr in [*noisy, *grads, batch]:
            trace.free(addr)
        noisy = [trace.alloc(size, NOISY) for size in WEIGHTS]
    diagnosis = summarize(dump_from_snapshot(trace.snapshot())).diagnosis
    assert diagnosis is not None
    return next(cause for cause in diagnosis.causes if cause.name == "static")


def test_opacus_per_sample_gradients_are_told_to_ghost_clipping() -> None:
    """At the peak (the step's sum of clipped per-sample gradients made), the per-sample
    gradients and their sum are what the first fix frees: 16 gradients of each parameter,
    and one more for the sum."""
    static = _static(3)
    assert static.fix is not None
    assert static.fix.action == OPACUS_PER_SAMPLE
    assert static.fix.bytes == (BATCH + 1) * sum(WEIGHTS)
