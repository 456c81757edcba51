"""What the trace and the frames prove before a lifetime rule guesses: a model's cache of keys
and values under a forward or ``generate`` (not RoPE's, not a memo of results, not one a
backward frees), cuBLAS's workspace by its size and first use (autograd's thread's own too), an
optimizer's state by its code, its set-up or one block per parameter, a forward in the
optimizer's closure, and the blocks an OOM's unwinding freed."""

from __future__ import annotations

import pytest
from test_kinds_by_frames import BODY, CALL, ENGINE, MALLOC, SP, Frame, Trace, cpp, py

MiB = 1 << 20
RUN = py("/users/me/run.py", 9, "main")
MAIN = [RUN, BODY]
"""The script's function, and the program's body where every stack of the main thread starts."""
GENERATE = py(f"{SP}/transformers/generation/utils.py", 2400, "generate")
WORKSPACE = 8_519_680


def _weights(trace: Trace, sizes: list[int]) -> list[int]:
    """Weights made by a module's constructor (parameters by their frames)."""
    built = [MALLOC, py("/users/me/model.py", 20, "__init__"), *MAIN]
    return [trace.alloc(size, built) for size in sizes]


def test_a_cache_file_under_generate_is_a_kv_cache_not_a_parameter() -> None:
    """Keys and values concatenated in a model's cache_utils.py inside generate -> forward are a
    KV cache, as are those of a function named for past_key_values; the same file outside
    any forward only rules a parameter out."""
    trace = Trace()
    forward = [py("/users/me/modeling.py", 300, "forward"), CALL, GENERATE, *MAIN]
    kv = [trace.alloc(64 * MiB, [MALLOC, py("/users/me/cache_utils.py", 88, "update"), *forward])
          for _ in range(8)]  # fmt: skip
    past = trace.alloc(32 * MiB, [MALLOC, py("/users/me/lm.py", 50, "_update_past_key_values"),
                                  GENERATE, *MAIN])  # fmt: skip
    setup = trace.alloc(16 * MiB, [MALLOC, py("/users/me/cache_utils.py", 20, "allocate"), *MAIN])
    found = trace.classified()
    assert {found[addr].kind for addr in kv} == {"kv_cache"}
    assert found[past].kind == "kv_cache"
    assert found[setup].kind != "parameter"


def test_inductor_code_cache_frames_are_no_kv_cache() -> None:
    """torch's codecache.py and functools' lru_cache name caches of code: a forward's tensors
    made under them stay the forward's."""
    trace = Trace()
    stack = [
        MALLOC, py(f"{SP}/torch/_inductor/codecache.py", 900, "call"),
        py("/usr/lib/python3.11/functools.py", 40, "_lru_cache_wrapper"),
        py("/users/me/model.py", 57, "forward"), CALL, *MAIN,
    ]  # fmt: skip
    addr = trace.alloc(64 * MiB, stack)
    found = trace.classified()
    assert found[addr].kind not in ("kv_cache", "parameter")


def test_cpython_s_native_lru_cache_frame_makes_no_kv_cache() -> None:
    """CPython's C ``lru_cache`` (``infinite_lru_cache_wrapper``, a native frame) under a
    compiled forward, as Inductor's ``_sfdp_init`` pattern setup records it on a real GPU: the
    forward's tensors made there stay the forward's, not a KV cache."""
    trace = Trace()
    stack = [
        MALLOC, cpp("infinite_lru_cache_wrapper"),
        py(f"{SP}/torch/_inductor/fx_passes/fuse_attention.py", 913, "_sfdp_init"),
        py("/users/me/model.py", 57, "forward"), CALL, *MAIN,
    ]  # fmt: skip
    addr = trace.alloc(4096, stack)
    trace.free(addr)
    found = trace.classified()
    assert found[addr].kind not in ("kv_cache", "parameter")


def test_cublas_workspace_by_its_size_and_first_use() -> None:
    """An 8,519,680-byte block first made under F.linear and never freed is cuBLAS's
    workspace; the same size made every step by one line and freed is not."""
    trace = Trace()
    linear = [MALLOC, py(f"{SP}/torch/nn/modules/linear.py", 125, "forward"),
              py("/users/me/model.py", 57, "forward"), CALL, *MAIN]  # fmt: skip
    workspace = trace.alloc(WORKSPACE, linear)
    churn = [MALLOC, py("/users/me/model.py", 61, "forward"), CALL, *MAIN]
    for _ in range(3):
        trace.free(trace.alloc(WORKSPACE, churn))
    kept = trace.alloc(WORKSPACE, churn)
    found = trace.classified()
    assert found[workspace].kind == "workspace"
    assert found[kept].kind != "workspace"


def test_moments_made_by_torch_optim_under_a_relative_path_are_optimizer_state() -> None:
    """AdamW's zeros_like, recorded with a relative torch/optim path, made after backward and
    held: optimizer state, never parameters."""
    trace = Trace()
    _weights(trace, [8 * MiB, 8 * MiB])
    trace.alloc(8 * MiB, ENGINE)  # a gradient
    optim = [MALLOC, py("torch/optim/adamw.py", 530, "_init_group"),
             py("torch/optim/optimizer.py", 480, "wrapper"), *MAIN]  # fmt: skip
    moments = [trace.alloc(8 * MiB, optim) for _ in range(4)]
    found = trace.classified()
    assert {found[addr].kind for addr in moments} == {"optimizer_state"}


def test_one_held_block_per_parameter_from_one_stack_is_per_parameter_state() -> None:
    """A hand-written optimizer (no torch/optim frame) makes, once per parameter, a block of
    that parameter's size and keeps it: per-parameter state, not activations."""
    trace = Trace()
    sizes = [4 * MiB, 6 * MiB, 8 * MiB, 10 * MiB]
    _weights(trace, sizes)
    forward = [MALLOC, py("/users/me/model.py", 57, "forward"), CALL, *MAIN]
    trace.free(trace.alloc(40 * MiB, forward))
    for size in sizes:
        trace.alloc(size, ENGINE)  # gradients
    mine = [MALLOC, py("/users/me/train.py", 74, "update"), *MAIN]
    state = [trace.alloc(size, mine) for size in sizes]
    found = trace.classified()
    assert {found[addr].kind for addr in state} == {"optimizer_state"}


def test_blocks_the_unwinding_freed_are_the_step_s_never_parameters() -> None:
    """Blocks ``Module._apply`` made in the failing step (a parameter's frames) and freed right
    after the OOM are that step's activations, whatever the frames would otherwise say."""
    trace = Trace()
    _weights(trace, [8 * MiB] * 4)
    loaded = [MALLOC, py(f"{SP}/torch/nn/modules/module.py", 1326, "convert"),
              py(f"{SP}/torch/nn/modules/module.py", 900, "_apply"), *MAIN]  # fmt: skip
    step = [trace.alloc(64 * MiB, loaded) for _ in range(2)]
    trace.events.append({"action": "oom", "addr": 0, "size": 1 << 30, "stream": 0,
                         "device_free": 0, "frames": loaded})  # fmt: skip
    for addr in step:
        trace.free(addr)
    trace.alloc(MiB, [MALLOC, *MAIN])  # the next step begins
    found = trace.classified()
    assert {found[addr].kind for addr in step} == {"activation"}


def test_a_rotary_cache_read_in_a_forward_is_no_kv_cache() -> None:
    """RoPE's table gathered by rope.py's ``_reshape_cache`` in each layer's forward of a
    decoding loop names a cache of positions, not of keys and values."""
    trace = Trace()
    forward = [py("/users/me/attention.py", 80, "forward"), CALL, GENERATE, *MAIN]
    rope = [MALLOC, py("/users/me/rope.py", 396, "_reshape_for_broadcast"),
            py("/users/me/rope.py", 240, "_reshape_cache"), *forward]  # fmt: skip
    gathers = []
    for _ in range(4):
        gathers.append(trace.alloc(MiB, rope))
        trace.free(trace.alloc(8 * MiB, [MALLOC, *forward]))
        trace.free(gathers[-1])
    gathers.append(trace.alloc(MiB, rope))
    found = trace.classified()
    assert "kv_cache" not in {found[addr].kind for addr in gathers}


def test_a_cache_named_block_its_backward_frees_is_an_activation() -> None:
    """A block a model's cache-named function makes in a forward and its backward frees was
    saved for that backward: an activation, never keys and values kept across tokens."""
    trace = Trace()
    _weights(trace, [8 * MiB])
    forward = [py("/users/me/model.py", 57, "forward"), CALL, *MAIN]
    cached = [MALLOC, py("/users/me/model.py", 30, "_get_cache"), *forward]
    saved = [trace.alloc(MiB, cached) for _ in range(2)]
    for addr in saved:
        trace.alloc(2 * MiB, ENGINE)
        trace.free(addr)
    found = trace.classified()
    assert {found[addr].kind for addr in saved} == {"activation"}


def _backward_thread(trace: Trace, held: int) -> tuple[list[int], int]:
    """A forward whose F.linear takes cuBLAS's workspace, then a backward on autograd's thread
    recorded with Python frames only: its products' outputs of the workspace's size (freed),
    and ``held`` blocks of that size kept; the forward's workspace and the kept blocks."""
    linear = [MALLOC, py(f"{SP}/torch/nn/modules/linear.py", 125, "forward"),
              py("/users/me/model.py", 57, "forward"), CALL, *MAIN]  # fmt: skip
    forward_workspace = trace.alloc(WORKSPACE, linear)
    trace.alloc(4 * MiB, [MALLOC, py("/users/me/model.py", 58, "forward"), CALL, *MAIN])
    for _ in range(3):
        trace.free(trace.alloc(WORKSPACE, []))
    return [trace.alloc(WORKSPACE, []) for _ in range(held)], forward_workspace


def test_the_backward_thread_s_own_cublas_workspace_is_a_workspace() -> None:
    """Autograd's device thread has its own cuBLAS handle: the one block of the workspace's
    size it makes with no frames at all and keeps is that handle's workspace, not a gradient;
    with a held gradient of that size beside it, neither is called one."""
    trace = Trace()
    (kept,), forward_workspace = _backward_thread(trace, held=1)
    found = trace.classified()
    assert found[forward_workspace].kind == "workspace"
    assert found[kept].kind == "workspace"
    trace = Trace()
    both, _ = _backward_thread(trace, held=2)
    found = trace.classified()
    assert {found[addr].kind for addr in both} == {"gradient"}


def test_a_workspace_under_a_dispatch_mode_and_a_library_s_linear_is_a_workspace() -> None:
    """Selective activation checkpointing's ``__torch_dispatch__`` and ``OpOverload.__call__``
    sit between F.linear and the workspace, and ZeRO-3's own linear.py makes its products in
    an autograd Function's forward: both are a matrix product's first use of the workspace."""
    trace = Trace()
    dispatched = [MALLOC, py(f"{SP}/torch/_ops.py", 875, "__call__"),
                  py(f"{SP}/torch/utils/checkpoint.py", 1386, "__torch_dispatch__"),
                  py(f"{SP}/torch/nn/modules/linear.py", 134, "forward"), CALL, *MAIN]  # fmt: skip
    library = [MALLOC, py(f"{SP}/deepspeed/runtime/zero/linear.py", 90, "forward"),
               py(f"{SP}/torch/autograd/function.py", 625, "apply"), CALL, *MAIN]  # fmt: skip
    made = [trace.alloc(WORKSPACE, dispatched), trace.alloc(32 * MiB, library)]
    found = trace.classified()
    assert {found[addr].kind for addr in made} == {"workspace"}


def test_what_an_optimizer_s_set_up_keeps_is_optimizer_state_not_parameters() -> None:
    """A training engine's constructor builds a sharding optimizer: the buckets and master
    copies its ``_setup_for_real_optimizer`` makes are the optimizer's, while the parameter
    shards its own ``__init__`` flattens stay parameters."""
    trace = Trace()
    engine = [py(f"{SP}/deepspeed/runtime/engine.py", 2751, "_configure_zero_optimizer"),
              py(f"{SP}/deepspeed/runtime/engine.py", 682, "__init__"),
              py(f"{SP}/deepspeed/__init__.py", 569, "initialize"), *MAIN]  # fmt: skip
    constructor = py(f"{SP}/deepspeed/runtime/zero/stage3.py", 499, "__init__")
    shards = trace.alloc(8 * MiB, [MALLOC, py(f"{SP}/deepspeed/runtime/zero/utils.py", 237,
                                              "defragment"), constructor, *engine])  # fmt: skip
    setup = [MALLOC, py(f"{SP}/deepspeed/runtime/zero/stage3.py", 782,
                        "_setup_for_real_optimizer"), constructor, *engine]  # fmt: skip
    bucket, master = trace.alloc(2 * MiB, setup), trace.alloc(16 * MiB, setup)
    saved = trace.alloc(32 * MiB, [MALLOC, py("/users/me/model.py", 57, "forward"), CALL, *MAIN])
    trace.alloc(8 * MiB, ENGINE)  # a gradient
    trace.free(saved)
    found = trace.classified()
    assert found[shards].kind == "parameter"
    assert {found[bucket].kind, found[master].kind} == {"optimizer_state"}


def test_the_backward_thread_s_workspace_where_no_forward_product_proved_the_size() -> None:
    """A forward whose products no frame names (a module calling ``torch.addmm``) proves no
    workspace size: one held frameless block of one of cuBLAS's sizes is still the backward
    thread's workspace, but one held of each size leaves both open (one is a gradient)."""
    trace = Trace()
    trace.free(trace.alloc(4 * MiB, [MALLOC, py("/users/me/conv1d.py", 119, "forward"), *MAIN]))
    kept = trace.alloc(32 * MiB, [])
    assert trace.classified()[kept].kind == "workspace"
    trace = Trace()
    trace.free(trace.alloc(4 * MiB, [MALLOC, py("/users/me/conv1d.py", 119, "forward"), *MAIN]))
    both = [trace.alloc(32 * MiB, []), trace.alloc(WORKSPACE, [])]
    found = trace.classified()
    assert "workspace" not in {found[addr].kind for addr in both}


def test_a_forward_in_the_optimizer_s_closure_is_a_forward() -> None:
    """Lightning's automatic optimization runs each step's forward inside
    ``optimizer.step(closure)``: what the closure's forward saves for its backward is an
    activation, not the optimizer's temporary, and the state AdamW makes there is still its."""
    trace = Trace()
    _weights(trace, [8 * MiB])
    step = [py(f"{SP}/torch/optim/adam.py", 227, "step"),
            py(f"{SP}/torch/optim/optimizer.py", 530, "wrapper"), *MAIN]  # fmt: skip
    closure = [py(f"{SP}/lightning/pytorch/loops/optimization/automatic.py", 131, "closure"),
               py(f"{SP}/lightning/pytorch/plugins/precision/precision.py", 109, "_wrap_closure"),
               *step]  # fmt: skip
    forward = [MALLOC, py("/users/me/model.py", 57, "forward"), CALL,
               py("/users/me/model.py", 9, "training_step"), *closure]  # fmt: skip
    saved = [trace.alloc(16 * MiB, forward) for _ in range(2)]
    trace.alloc(8 * MiB, ENGINE)  # a gradient
    for addr in saved:
        trace.free(addr)
    state = trace.alloc(8 * MiB, [MALLOC, py(f"{SP}/torch/optim/adam.py", 178, "_init_group"),
                                  *step])  # fmt: skip
    found = trace.classified()
    assert {found[addr].kind for addr in saved} == {"activation"}
    assert found[state].kind == "optimizer_state"


def test_a_rollout_s_cache_freed_before_training_stays_a_kv_cache() -> None:
    """A model's cache filled under ``generate`` and freed before the training step that
    follows (an RL rollout) was kept across tokens: a KV cache, though a backward comes next."""
    trace = Trace()
    _weights(trace, [8 * MiB])
    decode = [MALLOC, py("/users/me/model.py", 30, "update_cache"),
              py("/users/me/model.py", 57, "forward"), CALL, GENERATE, *MAIN]  # fmt: skip
    cache = [trace.alloc(4 * MiB, decode) for _ in range(2)]
    for addr in cache:
        trace.free(addr)
    saved = trace.alloc(MiB, [MALLOC, py("/users/me/model.py", 57, "forward"), CALL, *MAIN])
    trace.alloc(8 * MiB, ENGINE)
    trace.free(saved)
    found = trace.classified()
    assert {found[addr].kind for addr in cache} == {"kv_cache"}


GP = "/opt/pkgs/gpytorch"  # installed with ``pip install --target``, as a checkout's would be
MEMO = py(f"{GP}/utils/memoize.py", 61, "g")
"""GPyTorch's ``@cached``: the wrapper that keeps a method's result on its object."""


def test_a_memoized_result_under_a_forward_is_no_kv_cache() -> None:
    """GPyTorch's memoized results, made under ``@cached`` functions named for a cache in a
    kernel's forward (a training step's kernel matrix, freed by its backward; an exact GP's
    prediction cache, kept for later predictions), hold no keys and values: neither is a KV
    cache, nor a parameter."""
    trace = Trace()
    _weights(trace, [MiB])
    kernel = [py(f"{GP}/kernels/scale_kernel.py", 118, "forward"),
              py(f"{GP}/module.py", 83, "__call__"), MEMO,
              py(f"{GP}/lazy/lazy_evaluated_kernel_tensor.py", 355, "evaluate_kernel")]  # fmt: skip
    train = [MALLOC, *kernel, py(f"{GP}/mlls/exact_marginal_log_likelihood.py", 84, "forward"),
             CALL, *MAIN]  # fmt: skip
    matrix = trace.alloc(16 * MiB, train)
    trace.alloc(4 * MiB, ENGINE)
    trace.free(matrix)
    strategy = f"{GP}/models/exact_prediction_strategies.py"
    predict = [MALLOC, *kernel, py(strategy, 283, "_mean_cache"), MEMO,
               py(strategy, 273, "mean_cache"), py(strategy, 389, "exact_predictive_mean"),
               py(f"{GP}/models/exact_gp.py", 325, "__call__"), *MAIN]  # fmt: skip
    mean_cache = [trace.alloc(8 * MiB, predict) for _ in range(2)]
    found = trace.classified()
    assert found[matrix].kind == "activation"
    assert not {found[addr].kind for addr in mean_cache} & {"kv_cache", "parameter"}


@pytest.mark.parametrize(
    "cache",
    [
        py("/users/me/model.py", 40, "update_kv_cache"),
        py("/users/me/kv_store.py", 40, "append"),
        py("/users/me/attention.py", 40, "_update_cache"),
        py("/users/me/model.py", 40, "_cache_keys_values"),
    ],
    ids=["kv word", "kv file", "attention's cache", "keys and values"],
)
def test_a_cache_naming_keys_and_values_in_a_forward_is_a_kv_cache(cache: Frame) -> None:
    """A decoding loop the script writes itself (no ``generate``): a cache its forward's frame
    names for keys and values, filled token after token and held, is a KV cache."""
    trace = Trace()
    _weights(trace, [8 * MiB])
    forward = [py("/users/me/model.py", 57, "forward"), CALL, *MAIN]
    kept = []
    for _ in range(3):
        kept.append(trace.alloc(2 * MiB, [MALLOC, cache, *forward]))
        trace.free(trace.alloc(4 * MiB, [MALLOC, *forward]))
    found = trace.classified()
    assert {found[addr].kind for addr in kept} == {"kv_cache"}


def test_workspaces_a_clear_freed_are_workspaces_and_a_freed_gradient_is_not() -> None:
    """A clear frees every workspace at once and the next product takes new ones: all are
    workspaces; a gradient of that size freed while a workspace stays held is no workspace."""
    trace = Trace()
    linear = [MALLOC, py(f"{SP}/torch/nn/modules/linear.py", 125, "forward"),
              py("/users/me/model.py", 57, "forward"), CALL, *MAIN]  # fmt: skip
    output = [MALLOC, py("/users/me/model.py", 58, "forward"), CALL, *MAIN]
    workspaces = [trace.alloc(WORKSPACE, linear), trace.alloc(WORKSPACE, [])]
    gradient = trace.alloc(WORKSPACE, [])
    trace.free(gradient)  # zero_grad(set_to_none=True), then the next forward
    trace.alloc(4 * MiB, output)
    trace.free(workspaces[0])
    trace.free(workspaces[1])  # _cuda_clearCublasWorkspaces()
    workspaces += [trace.alloc(WORKSPACE, linear), trace.alloc(WORKSPACE, [])]
    found = trace.classified()
    assert {found[addr].kind for addr in workspaces} == {"workspace"}
    assert found[gradient].kind != "workspace"


def test_a_workspace_after_its_product_s_output_is_one_a_line_s_second_tensor_is_not() -> None:
    """A forward calling ``torch.addmm`` itself allocates its output, then the workspace, and
    runs again: a workspace; a line that makes two tensors once keeps its second as a tensor."""
    trace = Trace()
    addmm = [MALLOC, py("/users/me/conv1d.py", 104, "forward"), CALL,
             py("/users/me/model.py", 57, "forward"), CALL, *MAIN]  # fmt: skip
    trace.alloc(4 * MiB, addmm)
    workspace = trace.alloc(WORKSPACE, addmm)
    trace.alloc(4 * MiB, addmm)  # the next layer's product
    twice = [MALLOC, py("/users/me/run.py", 12, "main"), BODY]
    trace.alloc(4 * MiB, twice)
    second = trace.alloc(WORKSPACE, twice)  # torch.randn(...).to(torch.float32)
    found = trace.classified()
    assert found[workspace].kind == "workspace"
    assert found[second].kind != "workspace"


def test_an_installed_library_s_cache_named_code_is_no_kv_cache() -> None:
    """An installed package's code named for a cache or for keys and values holds no keys and
    values kept across tokens (diffusers' key/value projections in a forward, its FasterCache
    keeping attention outputs across denoising steps): neither is a KV cache, while Hugging
    Face's installed ``cache_utils.py`` under ``generate`` is one."""
    trace = Trace()
    _weights(trace, [8 * MiB])
    dit = f"{SP}/diffusers/models/transformers/transformer_chronoedit.py"
    hook = f"{SP}/diffusers/hooks/faster_cache.py"
    forward = [py(dit, 300, "forward"), CALL, *MAIN]
    project = [MALLOC, py(dit, 120, "_get_added_kv_projections"), *forward]
    approximate = [
        MALLOC,
        py(hook, 540, "_compute_approximated_attention_output"),
        py(hook, 470, "new_forward"),
        *forward,
    ]
    projections, outputs = [], []
    for _ in range(3):  # denoising steps
        projections.append(trace.alloc(4 * MiB, project))
        outputs.append(trace.alloc(2 * MiB, approximate))
        trace.free(projections[-1])
    llama = py(f"{SP}/transformers/models/llama/modeling_llama.py", 260, "forward")
    update = py(f"{SP}/transformers/cache_utils.py", 120, "update")
    kv = trace.alloc(16 * MiB, [MALLOC, update, llama, CALL, GENERATE, *MAIN])
    found = trace.classified()
    assert "kv_cache" not in {found[addr].kind for addr in projections + outputs}
    assert found[kv].kind == "kv_cache"
