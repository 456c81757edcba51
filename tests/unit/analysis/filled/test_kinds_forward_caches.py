"""Blocks a module's forward makes once and keeps across training steps: a cache the module
holds as a buffer (rotary tables filled in the first forward, as ESM's ``RotaryEmbedding``
keeps ``_cos_cached`` and ``_sin_cached``), not an activation; what each forward makes again
and keeps (the outputs a script collects) is no such cache.

Each dump has the shape ``memforensics plan`` records for a training loop (Python frames
only): the modules' forwards, backward on autograd's thread (no frames), torch's optimizer.
"""

from __future__ import annotations

from event_trace import BODY, CALL, ENGINE, MALLOC, SP, MiB, Trace, py

ESM = f"{SP}/esm"
LOOP = [py("/users/me/finetune.py", 18, "<module>")]
LAYER = [py(f"{ESM}/multihead_attention.py", 355, "forward"), CALL,
         py(f"{ESM}/model/esm2.py", 112, "forward"), CALL, *LOOP]  # fmt: skip
ROTARY = [py(f"{ESM}/rotary_embedding.py", 64, "forward"), CALL, *LAYER]
COS = [MALLOC, py(f"{ESM}/rotary_embedding.py", 58, "_update_cos_sin_tables"), *ROTARY]
SIN = [MALLOC, py(f"{ESM}/rotary_embedding.py", 59, "_update_cos_sin_tables"), *ROTARY]
SAVED = [MALLOC, py(f"{ESM}/rotary_embedding.py", 20, "apply_rotary_pos_emb"), *ROTARY]
LOGITS = [MALLOC, py(f"{ESM}/model/esm2.py", 140, "forward"), CALL, *LOOP]
BUILT = [MALLOC, py(f"{SP}/torch/nn/modules/module.py", 1326, "convert"),
         py(f"{SP}/torch/nn/modules/module.py", 900, "_apply"), BODY]  # fmt: skip
ADAM = [MALLOC, py(f"{SP}/torch/optim/adam.py", 160, "_init_group"),
        py(f"{SP}/torch/optim/adam.py", 230, "step"), BODY]  # fmt: skip


def _training(steps: int, layers: int = 4) -> tuple[Trace, list[int], list[int], list[int]]:
    """A model, then ``steps`` training steps; each layer's rotary module fills its tables in
    the first forward and keeps them, each forward saves its rotated queries for the backward,
    the script keeps every step's logits, and Adam updates the weights. Returns the tables,
    the saved activations, the logits kept."""
    trace = Trace()
    weights = [trace.alloc(4 * MiB, BUILT) for _ in range(layers)]
    tables: list[int] = []
    saved: list[int] = []
    logits: list[int] = []
    for step in range(steps):
        made = []
        for _ in range(layers):
            if step == 0:
                tables += [trace.alloc(MiB // 8, COS), trace.alloc(MiB // 8, SIN)]
            made.append(trace.alloc(8 * MiB, SAVED))
        logits.append(trace.alloc(2 * MiB, LOGITS))
        grads = [trace.alloc(4 * MiB, ENGINE) for _ in weights]
        for addr in made:
            trace.free(addr)
        saved += made
        if step == 0:
            [trace.alloc(4 * MiB, ADAM) for _ in weights for _ in range(2)]
        trace.free(trace.alloc(4 * MiB, ADAM))  # the foreach update's temporary
        for grad in grads:
            trace.free(grad)
    return trace, tables, saved, logits


def _kinds(trace: Trace, blocks: list[int]) -> set[str]:
    found = trace.classified()
    return {found[addr].kind for addr in blocks}


def test_rotary_tables_filled_in_the_first_forward_and_kept_are_buffers() -> None:
    """Tables the first forward makes once and every later step uses are buffers, held to the
    end or freed when training ends; the activations the same module saves each step stay
    activations."""
    trace, tables, saved, _ = _training(3)
    assert _kinds(trace, tables) == {"buffer"}
    assert _kinds(trace, saved) == {"activation"}
    for addr in tables:  # the model dropped after training
        trace.free(addr)
    trace.alloc(MiB, [MALLOC, py("/users/me/finetune.py", 30, "<module>")])
    assert _kinds(trace, tables) == {"buffer"}


def test_what_each_forward_makes_again_and_keeps_is_no_buffer() -> None:
    """Logits each step's forward makes and the script keeps across steps are made again by
    the same line at every step: a collection, not a module's cache."""
    trace, _, _, logits = _training(3)
    assert "buffer" not in _kinds(trace, logits)


def test_tables_seen_through_their_own_step_alone_are_no_buffers() -> None:
    """With no step after the one whose forward made them, nothing shows the tables used again:
    the trace cannot tell them from what that step's forward kept, so they are not buffers."""
    trace, tables, _, _ = _training(1)
    assert "buffer" not in _kinds(trace, tables)


def test_tables_used_by_one_later_step_are_buffers() -> None:
    """One step after the one that made them, run whole while they were held, is enough."""
    trace, tables, _, _ = _training(2)
    assert _kinds(trace, tables) == {"buffer"}
