"""What an optimizer's step makes, where the optimizer is not torch's own: its phase by the
``step`` of a file named for optimizers, the gradients a step writes (DP-SGD's noisy
``p.grad``) told from the state it keeps, and a hand-written optimizer's moments.

The dumps have the shape of Opacus' ``DPOptimizer`` steps, planned from its MNIST example and
compared with the gradients the process tracked: each step's backward makes ``p.grad``, the
step's ``add_noise`` writes a noisy one in its place, which ``zero_grad`` (``set_to_none`` is
False by default there) keeps until the next step's write replaces it.
"""

from __future__ import annotations

import pytest
from event_trace import BODY, CALL, ENGINE, MALLOC, SP, Frame, MiB, Trace, py

from memforensics.analysis.filled.kinds import FORWARD, OPTIMIZER, phase_of

MAIN = [py("/users/me/train.py", 52, "train"), BODY]
DP = f"{SP}/opacus/optimizers/optimizer.py"
DP_STEP = [py(DP, 558, "pre_step"), py(DP, 569, "step"), *MAIN]
NOISY = [MALLOC, py(DP, 491, "add_noise"), *DP_STEP]
NOISE = [MALLOC, py(DP, 138, "_generate_noise"), py(DP, 485, "add_noise"), *DP_STEP]
MOMENTUM = [MALLOC, py(f"{SP}/torch/optim/sgd.py", 98, "_init_group"),
            py(f"{SP}/torch/optim/optimizer.py", 480, "wrapper"),
            py(DP, 582, "step"), *MAIN]  # fmt: skip
FORWARD_STACK = [MALLOC, py("/users/me/model.py", 57, "forward"), CALL, *MAIN]
SIZES = [4 * MiB, 6 * MiB, 8 * MiB]


def _dp_sgd(steps: int) -> tuple[Trace, list[int], list[int], list[int]]:
    """A model, then ``steps`` DP-SGD steps with momentum; the noisy gradients each step wrote
    (all of them, the last step's held to the end), the momentum buffers, the weights."""
    trace = Trace()
    built = [MALLOC, py("/users/me/model.py", 20, "__init__"), *MAIN]
    weights = [trace.alloc(size, built) for size in SIZES]
    noisy: list[int] = []
    held: list[int | None] = [None] * len(SIZES)  # each parameter's noisy p.grad
    momentum: list[int] = []
    for step in range(steps):
        saved = trace.alloc(32 * MiB, FORWARD_STACK)
        grads = [trace.alloc(size, ENGINE) for size in SIZES]
        trace.free(saved)
        for index, (grad, size) in enumerate(zip(grads, SIZES, strict=True)):
            trace.free(trace.alloc(size, NOISE))
            written = trace.alloc(size, NOISY)  # p.grad = (summed_grad + noise) / batch
            previous, held[index] = held[index], written
            if previous is not None:  # zero_grad() left it; the new p.grad replaces it
                trace.free(previous)
            trace.free(grad)
            noisy.append(written)
        if step == 0:
            momentum = [trace.alloc(size, MOMENTUM) for size in SIZES]
    return trace, noisy, momentum, weights


def test_the_noisy_gradients_a_dp_optimizer_writes_are_gradients() -> None:
    """The noisy ``p.grad`` Opacus' step writes in place of backward's gradients, freed when
    the next step writes its own or held after the last step, are gradients; the momentum its
    wrapped SGD keeps stays optimizer state, and the weights parameters."""
    trace, noisy, momentum, weights = _dp_sgd(3)
    found = trace.classified()
    assert {found[addr].kind for addr in noisy} == {"gradient"}
    assert {found[addr].kind for addr in momentum} == {"optimizer_state"}
    assert {found[addr].kind for addr in weights} == {"parameter"}


def test_what_one_step_writes_and_nothing_frees_stays_optimizer_state() -> None:
    """After one step nothing says the step replaces what it wrote: the blocks it keeps read
    as its state, as a lazily made moment would."""
    trace, noisy, _, _ = _dp_sgd(1)
    found = trace.classified()
    assert {found[addr].kind for addr in noisy} == {"optimizer_state"}


def test_state_freed_when_training_ends_stays_optimizer_state() -> None:
    """Momentum made once and freed after the last step (a teardown moving the optimizer's
    state to the host, ``del optimizer``) was never made again: state, not written gradients."""
    trace, _, momentum, _ = _dp_sgd(3)
    for addr in momentum:
        trace.free(addr)
    trace.alloc(1 * MiB, [MALLOC, py("/users/me/eval.py", 3, "evaluate"), *MAIN])
    found = trace.classified()
    assert {found[addr].kind for addr in momentum} == {"optimizer_state"}


def _frames(filename: str, name: str) -> list[Frame]:
    return [py("/users/me/lib.py", 10, "helper"), py(filename, 100, name), *MAIN]


@pytest.mark.parametrize(
    "filename",
    [
        DP,  # Opacus' DPOptimizer
        f"{SP}/timm/optim/lamb.py",
        f"{SP}/transformers/optimization.py",  # Adafactor
        f"{SP}/torch_optimizer/radam.py",
        f"{SP}/accelerate/optimizer.py",
    ],
)
def test_a_step_in_code_named_for_optimizers_is_the_optimizer_s(filename: str) -> None:
    """What runs under the ``step`` of a file or package named for optimizers is the
    optimizer's phase, the helpers it calls included."""
    assert phase_of(_frames(filename, "step")) == OPTIMIZER


@pytest.mark.parametrize(
    ("filename", "name"),
    [
        ("/users/me/train.py", "step"),  # a training step of the script's
        (f"{SP}/timm/optim/lamb.py", "__init__"),  # not its step
        (f"{SP}/lightning/pytorch/loops/optimization/automatic.py", "step"),  # a closure's caller
    ],
)
def test_a_step_outside_an_optimizer_s_code_is_no_optimizer_s(filename: str, name: str) -> None:
    """A ``step`` whose file names no optimizer, or an optimizer file's other functions, say
    nothing of the phase."""
    assert phase_of(_frames(filename, name)) == FORWARD


def test_a_hand_written_optimizer_s_moments_made_on_one_line_are_its_state() -> None:
    """A hand-written Adam (no optimizer's frame) makes both moments of each parameter on one
    line at its first step, after backward, and keeps them; each step's gradients are set to
    None and made again. Its moments are optimizer state, not parameters (four blocks of one
    size look like a model's layers) nor ``unknown``."""
    trace = Trace()
    sizes = [4 * MiB, 4 * MiB, 16 * 1024, 4 * 1024]
    moved = [MALLOC, py(f"{SP}/torch/nn/modules/module.py", 1326, "convert"),
             py(f"{SP}/torch/nn/modules/module.py", 900, "_apply"), *MAIN]  # fmt: skip
    weights = [trace.alloc(size, moved) for size in sizes]
    update = [MALLOC, py("/users/me/train.py", 10, "update"), *MAIN]
    moments: list[int] = []
    grads: list[int] = []
    for step in range(3):
        for grad in grads:  # p.grad = None
            trace.free(grad)
        saved = trace.alloc(32 * MiB, FORWARD_STACK)
        grads = [trace.alloc(size, ENGINE) for size in sizes]
        trace.free(saved)
        if step == 0:  # state[p] = (torch.zeros_like(p), torch.zeros_like(p))
            moments = [trace.alloc(size, update) for size in sizes for _ in range(2)]
    found = trace.classified()
    assert {found[addr].kind for addr in moments} == {"optimizer_state"}
    assert {found[addr].kind for addr in weights} == {"parameter"}
    assert {found[addr].kind for addr in grads} == {"gradient"}


def test_a_torch_optimizer_made_again_for_each_stage_keeps_its_state_state() -> None:
    """A script that makes a new ``torch.optim.Adam`` for each stage of training drops the old
    one's moments and makes new ones at the new optimizer's first step: torch's own step only
    reads gradients, so what it makes, freed and made again, is still optimizer state."""
    trace = Trace()
    built = [MALLOC, py("/users/me/model.py", 20, "__init__"), *MAIN]
    weights = [trace.alloc(size, built) for size in SIZES]
    adam = f"{SP}/torch/optim/adam.py"
    init = [MALLOC, py(adam, 160, "_init_group"), py(adam, 230, "step"),
            py(f"{SP}/torch/optim/optimizer.py", 480, "wrapper"), *MAIN]  # fmt: skip
    moments: list[int] = []
    for _stage in range(3):
        for moment in moments:  # the old optimizer dropped: optimizer = Adam(...)
            trace.free(moment)
        moments = []
        for step in range(3):
            saved = trace.alloc(32 * MiB, FORWARD_STACK)
            grads = [trace.alloc(size, ENGINE) for size in SIZES]
            trace.free(saved)
            if step == 0:
                moments = [trace.alloc(size, init) for size in SIZES for _ in range(2)]
            for grad in grads:
                trace.free(grad)
    found = trace.classified()
    assert {found[addr].kind for addr in moments} == {"optimizer_state"}
    assert {found[addr].kind for addr in weights} == {"parameter"}


SCHEDULE = "/users/me/myproj/optim/schedule.py"
LOOKAHEAD = "/users/me/myproj/optim/lookahead.py"


def test_a_step_of_the_user_s_optim_folder_alone_is_no_optimizer_s() -> None:
    """A schedule's ``step`` in the user's own ``optim/`` folder that never runs an optimizer
    marks nothing: what it makes is the forward phase's, not the optimizer's."""
    assert phase_of(_frames(SCHEDULE, "step")) == FORWARD
    trace = Trace()
    table = trace.alloc(2 * MiB, [MALLOC, py(SCHEDULE, 30, "warmup"), py(SCHEDULE, 41, "step"),
                                  *MAIN])  # fmt: skip
    saved = trace.alloc(32 * MiB, FORWARD_STACK)
    grad = trace.alloc(4 * MiB, ENGINE)
    trace.free(saved)
    trace.free(grad)
    assert trace.classified()[table].phase == FORWARD


def test_a_step_of_the_user_s_optim_folder_that_runs_an_optimizer_is_the_optimizer_s() -> None:
    """A Lookahead in the user's ``optim/`` folder, whose ``step`` steps the ``torch.optim``
    optimizer it wraps (one stack shows both), is an optimizer: the slow weights its own lines
    make at its first step and keep are optimizer state."""
    trace = Trace()
    built = [MALLOC, py("/users/me/model.py", 20, "__init__"), *MAIN]
    weights = [trace.alloc(size, built) for size in SIZES]
    lookahead = [py(LOOKAHEAD, 52, "step"), *MAIN]
    moments = [MALLOC, py(f"{SP}/torch/optim/adam.py", 160, "_init_group"),
               py(f"{SP}/torch/optim/adam.py", 230, "step"),
               py(f"{SP}/torch/optim/optimizer.py", 480, "wrapper"), *lookahead]  # fmt: skip
    slow_stack = [MALLOC, py(LOOKAHEAD, 40, "_init_slow"), *lookahead]
    slow: list[int] = []
    for step in range(3):
        saved = trace.alloc(32 * MiB, FORWARD_STACK)
        grads = [trace.alloc(size, ENGINE) for size in SIZES]
        trace.free(saved)
        if step == 0:
            [trace.alloc(size, moments) for size in SIZES for _ in range(2)]
            slow = [trace.alloc(size, slow_stack) for size in SIZES]
        for grad in grads:
            trace.free(grad)
    found = trace.classified()
    assert {found[addr].phase for addr in slow} == {OPTIMIZER}
    assert {found[addr].kind for addr in slow} == {"optimizer_state"}
    assert {found[addr].kind for addr in weights} == {"parameter"}


CHECKOUT = "/users/me/opacus/opacus/optimizers"  # a library run from its checkout


def test_a_step_of_a_file_named_for_optimizers_outside_site_packages_is_the_optimizer_s() -> None:
    """Opacus run from a checkout or a ``--target`` folder: its ``optimizer.py`` names the
    optimizer by itself, so ``DPOptimizer.step``'s noise is the optimizer's phase."""
    noise = [MALLOC, py(f"{CHECKOUT}/optimizer.py", 491, "add_noise"),
             py(f"{CHECKOUT}/optimizer.py", 569, "step"), *MAIN]  # fmt: skip
    assert phase_of(noise) == OPTIMIZER


def test_a_step_calling_optimizer_code_in_its_stack_is_the_optimizer_s() -> None:
    """Opacus' ``DistributedDPOptimizer`` from a checkout (``ddpoptimizer.py``, in a folder
    named for optimizers) runs ``optimizer.py``'s ``pre_step`` under its ``step``: that stack
    shows it an optimizer, so what its own line makes is the optimizer's too."""
    ddp = f"{CHECKOUT}/ddpoptimizer.py"
    trace = Trace()
    noisy = trace.alloc(MiB, [MALLOC, py(f"{CHECKOUT}/optimizer.py", 491, "add_noise"),
                              py(f"{CHECKOUT}/optimizer.py", 558, "pre_step"),
                              py(ddp, 64, "step"), *MAIN])  # fmt: skip
    reduced = trace.alloc(MiB, [MALLOC, py(ddp, 40, "reduce_gradients"), py(ddp, 66, "step"),
                                *MAIN])  # fmt: skip
    found = trace.classified()
    assert found[noisy].phase == OPTIMIZER
    assert found[reduced].phase == OPTIMIZER
