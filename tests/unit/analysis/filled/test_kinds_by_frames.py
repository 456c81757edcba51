"""Kinds the frames give, whatever the lifetime: parameters built or moved, workspaces, KV
caches, DataParallel's replicas, Megatron's buffers; and forward blocks never parameters by size.

Each dump here has the shape of a real one that was misread (the real files stay outside the
repository): the allocations, their frames, their order and what is live at the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from event_trace import (
    BODY,
    CALL,
    ENGINE,
    FSDP2,
    FSDP2_GATHER_BUFFER,
    FSDP2_UNSHARD,
    MALLOC,
    SP,
    Frame,
    MiB,
    Trace,
    cpp,
    py,
)

from memforensics.analysis import load_dump
from memforensics.analysis.filled import roles
from memforensics.analysis.filled.kinds import BACKWARD, FORWARD, classify, phase_of
from memforensics.analysis.filled.lifetime import lifetimes
from shared_data import REAL_SNAPSHOTS, REAL_WORKLOADS, real_params, real_snapshots


def _model(trace: Trace, frames: list[Frame], count: int = 3) -> list[int]:
    return [trace.alloc((4 + index) * MiB, frames) for index in range(count)]


def _forward(trace: Trace, count: int = 3) -> list[int]:
    stack = [
        MALLOC,
        py("/users/me/model.py", 57, "forward"),
        CALL,
        py("/users/me/run.py", 9, "main"),
        BODY,
    ]
    return [trace.alloc((6 + index) * MiB, stack) for index in range(count)]


BUILDERS = {
    "module constructor": [
        MALLOC,
        py("/users/me/cs336/linear.py", 19, "__init__"),
        py("/users/me/cs336/model.py", 40, "__init__"),
        py("/users/me/run.py", 5, "main"),
        BODY,
    ],
    "reset_parameters": [
        MALLOC,
        py(f"{SP}/torch/nn/init.py", 459, "kaiming_uniform_"),
        py(f"{SP}/torch/nn/modules/linear.py", 116, "reset_parameters"),
        py("/users/me/run.py", 5, "main"),
        BODY,
    ],
    "Module._apply / .to": [
        MALLOC,
        py(f"{SP}/torch/nn/modules/module.py", 1326, "convert"),
        py(f"{SP}/torch/nn/modules/module.py", 900, "_apply"),
        py(f"{SP}/torch/nn/modules/module.py", 1340, "to"),
        py("/users/me/fl/client.py", 77, "reset_model"),
        BODY,
    ],
    "from_pretrained": [
        MALLOC,
        py(f"{SP}/transformers/modeling_utils.py", 4100, "_load_state_dict_into_meta_model"),
        py(f"{SP}/transformers/modeling_utils.py", 3900, "from_pretrained"),
        py("/users/me/run.py", 5, "main"),
        BODY,
    ],
    "load_state_dict": [
        MALLOC,
        py(f"{SP}/torch/nn/modules/module.py", 2100, "_load_from_state_dict"),
        py(f"{SP}/torch/nn/modules/module.py", 2200, "load_state_dict"),
        py("/users/me/run.py", 5, "main"),
        BODY,
    ],
}


@pytest.mark.parametrize("builder", list(BUILDERS))
def test_a_block_a_model_builder_made_is_a_parameter_at_a_forward_dump(builder: str) -> None:
    """A forward-only dump (no backward after anything): what a module's constructor,
    reset_parameters, Module._apply, from_pretrained or load_state_dict made is a parameter,
    not an activation; the forward's own blocks stay activations."""
    trace = Trace()
    weights = _model(trace, BUILDERS[builder])
    outputs = _forward(trace)
    found = trace.classified()
    assert {found[a].kind for a in weights} == {"parameter"}
    assert {found[a].kind for a in outputs} == {"activation"}


def test_a_constructor_block_freed_after_backward_is_a_parameter() -> None:
    """A model built inside the trace and dropped after a training pass (a federated round):
    its blocks outlived a backward, yet they are parameters, not activations."""
    trace = Trace()
    weights = _model(trace, BUILDERS["module constructor"])
    outputs = _forward(trace)
    for index in range(3):
        trace.free(trace.alloc(MiB, ENGINE))
        trace.free(outputs[index])
    for addr in weights:
        trace.free(addr)
    found = trace.classified()
    assert {found[a].kind for a in weights} == {"parameter"}
    assert {found[a].kind for a in outputs} == {"activation"}


FORWARD_STACKS = {
    "LLM hidden states": [
        MALLOC,
        py(f"{SP}/torch/nn/functional.py", 2264, "embedding"),
        py(f"{SP}/transformers/models/llama/modeling_llama.py", 920, "forward"),
        CALL,
        py("/users/me/finetune.py", 88, "train"),
        BODY,
    ],
    "diffusers attention maps": [
        MALLOC,
        py(f"{SP}/diffusers/models/attention_processor.py", 1230, "__call__"),
        py(f"{SP}/diffusers/models/attention_processor.py", 490, "forward"),
        CALL,
        py(f"{SP}/diffusers/models/unets/unet_2d_condition.py", 1200, "forward"),
        py("/users/me/train_dreambooth.py", 900, "main"),
        BODY,
    ],
}


@pytest.mark.parametrize("stack", list(FORWARD_STACKS))
def test_same_sized_forward_blocks_are_never_parameters(stack: str) -> None:
    """No step tags, a backward under way at the end: eight equal blocks the trace saw made
    in a forward are activations, not parameters by the "many blocks of one size" rule, while
    the model built before them stays parameters."""
    trace = Trace()
    weights = _model(trace, BUILDERS["module constructor"])
    hidden = [trace.alloc(16 * MiB, FORWARD_STACKS[stack]) for _ in range(8)]
    trace.free(trace.alloc(MiB, ENGINE))
    trace.alloc(2 * MiB, ENGINE)  # the backward is still running when the dump is taken
    found = trace.classified()
    assert {found[a].kind for a in hidden} == {"activation"}
    assert {found[a].kind for a in weights} == {"parameter"}


def test_same_sized_forward_blocks_kept_across_passes_are_not_parameters() -> None:
    """Equal forward blocks the trace saw made, held through a backward and into the next
    forward (a kept tensor, a cache): 'unknown', never parameters by their sizes."""
    trace = Trace()
    kept = [trace.alloc(16 * MiB, FORWARD_STACKS["LLM hidden states"]) for _ in range(8)]
    trace.free(trace.alloc(MiB, ENGINE))
    _forward(trace)
    found = trace.classified()
    assert {found[a].kind for a in kept} == {"unknown"}


CUBLAS = [
    MALLOC,
    cpp("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"),
    cpp("at::cuda::getNewWorkspace()"),
    cpp("at::cuda::getCurrentCUDABlasHandle()"),
    cpp("void at::cuda::blas::gemm<float>(char, char, long, long, long, float, float const*)"),
]
WORKSPACES = {
    "cuBLAS": CUBLAS,
    "cuBLASLt": [MALLOC, cpp("at::cuda::getCUDABlasLtWorkspace()"), cpp("at::cuda::blas::gemm")],
    "cuDNN": [
        MALLOC,
        cpp("c10::cuda::CUDACachingAllocator::raw_alloc(unsigned long)"),
        cpp("at::native::(anonymous namespace)::Workspace::Workspace(unsigned long)"),
        cpp("at::native::raw_cudnn_convolution_forward_out_32bit(at::Tensor const&)"),
    ],
}


@pytest.mark.parametrize("library", list(WORKSPACES))
@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_a_library_workspace_is_a_workspace(library: str, phase: str) -> None:
    """The 8,519,680-byte block cuBLAS (or cuBLASLt, or cuDNN) makes for its handle, first in
    a forward or on the autograd thread, is a workspace: never a gradient nor an activation."""
    trace = Trace()
    _model(trace, BUILDERS["module constructor"])
    outputs = _forward(trace)
    stack = WORKSPACES[library]
    if phase == "backward":
        stack = stack + ENGINE[1:]
        trace.free(trace.alloc(MiB, ENGINE))
    else:
        stack = [*stack, py("/users/me/model.py", 57, "forward"), CALL]
    workspace = trace.alloc(8_519_680, stack)
    for addr in outputs:
        trace.free(addr)
    found = trace.classified()
    assert (found[workspace].kind, found[workspace].confidence) == ("workspace", 0.95)


def test_dataparallel_replicas_are_parameters() -> None:
    """DataParallel copies the model to each GPU inside its forward (replicate.py →
    comm.py broadcast_coalesced) and drops the copies after backward: they are parameters."""
    trace = Trace()
    replicate = [
        MALLOC,
        py(f"{SP}/torch/nn/parallel/comm.py", 66, "broadcast_coalesced"),
        py(f"{SP}/torch/nn/parallel/_functions.py", 22, "forward"),
        py(f"{SP}/torch/nn/parallel/replicate.py", 126, "_broadcast_coalesced_reshape"),
        py(f"{SP}/torch/nn/parallel/replicate.py", 130, "replicate"),
        py(f"{SP}/torch/nn/parallel/data_parallel.py", 187, "replicate"),
        py(f"{SP}/torch/nn/parallel/data_parallel.py", 180, "forward"),
        CALL,
        py("/users/me/train.py", 50, "main"),
        BODY,
    ]
    replicas = [trace.alloc(40 * MiB, replicate) for _ in range(6)]
    outputs = _forward(trace)
    trace.free(trace.alloc(MiB, ENGINE))
    for addr in outputs + replicas:
        trace.free(addr)
    found = trace.classified()
    assert {found[a].kind for a in replicas} == {"parameter"}
    assert {found[a].kind for a in outputs} == {"activation"}


KV_CACHES = {
    "vLLM": [
        MALLOC,
        py(f"{SP}/vllm/worker/cache_engine.py", 83, "_allocate_kv_cache"),
        py(f"{SP}/vllm/worker/cache_engine.py", 66, "__init__"),
        py(f"{SP}/vllm/worker/worker.py", 300, "_init_cache_engine"),
        py(f"{SP}/verl/workers/rollout/vllm_rollout/vllm_rollout.py", 120, "__init__"),
    ],
    "SGLang": [
        MALLOC,
        py(f"{SP}/sglang/srt/mem_cache/memory_pool.py", 310, "_create_buffers"),
        py(f"{SP}/sglang/srt/mem_cache/memory_pool.py", 280, "__init__"),
        py(f"{SP}/sglang/srt/model_executor/model_runner.py", 900, "init_memory_pool"),
    ],
}


@pytest.mark.parametrize("engine", list(KV_CACHES))
def test_a_kv_cache_is_a_kv_cache(engine: str) -> None:
    """vLLM's cache engine and SGLang's KV pool, allocated during the trace and held: a KV
    cache, neither a parameter nor an activation (their frames hold ``__init__``)."""
    trace = Trace()
    weights = _model(trace, BUILDERS["Module._apply / .to"])
    cache = [trace.alloc(512 * MiB, KV_CACHES[engine]) for _ in range(4)]
    _forward(trace)
    found = trace.classified()
    assert {found[a].kind for a in cache} == {"kv_cache"}
    assert {found[a].kind for a in weights} == {"parameter"}


_CB = f"{SP}/transformers/generation/continuous_batching"
_GENERATION_THREAD = [
    CALL,
    py(f"{_CB}/model_runner.py", 195, "_forward_process_and_sample"),
    py(f"{_CB}/model_runner.py", 145, "compute_batch"),
    py(f"{_CB}/continuous_api.py", 643, "_generation_step"),
    py(f"{_CB}/continuous_api.py", 1134, "_run_generation_loop"),
    py("/usr/lib/python3.11/threading.py", 982, "run"),
]
"""Where Hugging Face's continuous batching runs each batch's forward: its generation thread."""


def test_hugging_face_s_paged_cache_is_a_kv_cache_and_its_reads_are_not() -> None:
    """The paged cache ``PagedAttentionCache.__init__`` allocates for ``generate_batch`` is a
    KV cache though freed when generation ends; the keys and values its ``update`` gathers in
    each forward stay temporaries."""
    trace = Trace()
    weights = _model(trace, BUILDERS["Module._apply / .to"])
    paged = [
        MALLOC,
        py(f"{_CB}/cache.py", 207, "__init__"),
        py(f"{_CB}/continuous_api.py", 1174, "_create_batch_processor"),
        py(f"{_CB}/continuous_api.py", 797, "warmup"),
        py(f"{_CB}/continuous_api.py", 1363, "continuous_batching_context_manager"),
        py(f"{_CB}/continuous_api.py", 1454, "generate_batch"),
        BODY,
    ]
    cache = trace.alloc(256 * MiB, paged)
    gather = [
        MALLOC,
        py(f"{_CB}/cache_allocators/full_attention.py", 225, "update"),
        py(f"{_CB}/cache.py", 448, "update"),
        py(f"{SP}/transformers/models/llama/modeling_llama.py", 252, "forward"),
        *_GENERATION_THREAD,
    ]
    reads = []
    for _ in range(3):
        keys, values = trace.alloc(8 * MiB, gather), trace.alloc(8 * MiB, gather)
        trace.free(keys)
        trace.free(values)
        reads += [keys, values]
    trace.free(cache)
    found = trace.classified()
    assert found[cache].kind == "kv_cache"
    assert {found[a].kind for a in reads} == {"temporary"}
    assert {found[a].kind for a in weights} == {"parameter"}


def test_sglang_s_unified_pool_is_a_kv_cache_and_its_slot_translation_is_not() -> None:
    """The byte buffer SGLang's ``UnifiedKVPool.__init__`` allocates for its sub-pools is a KV
    cache; the slot ids the same file translates in each forward stay temporaries."""
    pool = f"{SP}/sglang/srt/mem_cache/unified_memory_pool.py"
    trace = Trace()
    weights = _model(trace, BUILDERS["Module._apply / .to"])
    built = [MALLOC, py(pool, 181, "__init__"), py(pool, 735, "init_unified_mamba_pools"), BODY]
    cache = trace.alloc(1024 * MiB, built)
    translate = [
        MALLOC,
        py(pool, 898, "translate_loc_from_full_to_swa"),
        py(f"{SP}/sglang/srt/models/llama.py", 470, "forward"),
        CALL,
        py(f"{SP}/sglang/srt/model_executor/model_runner.py", 2100, "forward_decode"),
        BODY,
    ]
    slots = [trace.alloc(MiB, translate) for _ in range(3)]
    for addr in slots:
        trace.free(addr)
    found = trace.classified()
    assert found[cache].kind == "kv_cache"
    assert {found[a].kind for a in slots} == {"temporary"}
    assert {found[a].kind for a in weights} == {"parameter"}


def _megatron(line: int) -> list[Frame]:
    return [
        MALLOC,
        py(f"{SP}/megatron/core/distributed/param_and_grad_buffer.py", line, "__init__"),
        py(f"{SP}/megatron/core/distributed/distributed_data_parallel.py", 160, "_allocate"),
        py(f"{SP}/megatron/core/distributed/distributed_data_parallel.py", 200, "__init__"),
        py(f"{SP}/megatron/training/training.py", 500, "get_model"),
    ]


@pytest.mark.parametrize(("param_line", "grad_line"), [(586, 592), (301, 309)])
def test_megatron_buffers_split_into_parameters_and_gradients(
    param_line: int, grad_line: int
) -> None:
    """With the distributed optimizer, _ParamAndGradBuffer allocates the parameter buffer and
    then, on a later line, the gradient buffer (twice its bytes: fp32 beside bf16): the first
    line's blocks are parameters, the second's gradients, whatever the line numbers."""
    trace = Trace()
    params, grads = [], []
    for _ in range(2):
        params.append(trace.alloc(471 * MiB, _megatron(param_line)))
        grads.append(trace.alloc(942 * MiB, _megatron(grad_line)))
    _forward(trace)
    found = trace.classified()
    assert {found[a].kind for a in params} == {"parameter"}
    assert {found[a].kind for a in grads} == {"gradient"}


def test_megatron_without_the_distributed_optimizer_has_a_gradient_buffer_only() -> None:
    """Without the distributed optimizer only grad_data is allocated: one line, gradients."""
    trace = Trace()
    grads = [trace.alloc(942 * MiB, _megatron(592)) for _ in range(2)]
    _forward(trace)
    found = trace.classified()
    assert {found[a].kind for a in grads} == {"gradient"}


def _says(frames: object, word: str) -> bool:
    return isinstance(frames, list) and any(
        isinstance(f, dict) and word in str(f.get("name", "")) for f in frames
    )


@pytest.mark.parametrize("name", real_params(path.name for path in real_snapshots()))
def test_real_snapshots_constructors_and_workspaces(name: str) -> None:
    """On each real snapshot: no block a constructor made outside a forward is an activation,
    and no block made under a workspace frame is a gradient."""
    found = lifetimes(load_dump(REAL_SNAPSHOTS / name))
    classify(found)
    built = [
        a
        for a in found.allocations
        if _says(a.frames, "__init__") and not _says(a.frames, "forward")
    ]
    scratch = [a for a in found.allocations if _says(a.frames, "Workspace")]
    assert all(a.kind != "activation" for a in built)
    assert all(a.kind == "workspace" for a in scratch)


def test_a_constructor_around_or_inside_a_forward_is_the_forwards() -> None:
    """A script that trains inside a class's __init__, and an object a forward builds (its own
    __init__): their blocks are the forward's (activations), never parameters; a model moved by
    Module._apply stays parameters."""
    trace = Trace()
    weights = _model(trace, BUILDERS["Module._apply / .to"])
    outer = [
        MALLOC,
        py("/users/me/model.py", 57, "forward"),
        CALL,
        py("/users/me/experiment.py", 30, "__init__"),
        py("/users/me/run.py", 5, "main"),
        BODY,
    ]
    inner = [MALLOC, py("/users/me/noise.py", 12, "__init__"), *outer[1:]]
    activations = [trace.alloc(6 * MiB, outer), trace.alloc(7 * MiB, inner)]
    trace.free(trace.alloc(MiB, ENGINE))
    for addr in activations:
        trace.free(addr)
    found = trace.classified()
    assert {found[a].kind for a in activations} == {"activation"}
    assert {found[a].kind for a in weights} == {"parameter"}


def test_a_function_forwards_output_is_never_a_parameter() -> None:
    """Attention written as functions (no module's forward on the stack): Q, K and V made in
    main, scores saved for backward, then the output of an einsum, as large as Q and held to
    the end through the backward. Made after an activation of the pass that backward ends, the
    output is that forward's (an activation), never a parameter by its size, though with the
    inputs it makes four blocks of one size."""
    trace = Trace()
    main = [py("/users/me/attn.py", 43, "main"), py("/users/me/attn.py", 98, "<module>")]
    inputs = [trace.alloc(2 * MiB, [MALLOC, py("/users/me/attn.py", 35 + i, "main"), *main[1:]])
              for i in range(3)]  # fmt: skip
    attention = [py("/users/me/attn.py", 12, "attention"), *main]
    trace.free(trace.alloc(512 * MiB, [MALLOC, *attention]))  # the scores, freed in forward
    saved = trace.alloc(512 * MiB, [MALLOC, py("/users/me/attn.py", 7, "softmax"), *attention])
    einsum = [
        py(f"{SP}/torch/functional.py", 407, "einsum"),
        py(f"{SP}/einops/_backends.py", 288, "einsum"),
        py("/users/me/attn.py", 20, "attention"),
        *main,
    ]
    output = trace.alloc(2 * MiB, [MALLOC, *einsum])
    trace.free(trace.alloc(512 * MiB, ENGINE))
    trace.free(saved)
    found = trace.classified()
    assert found[output].kind == "activation"
    assert found[saved].kind == "activation"
    assert all(found[a].kind != "activation" for a in inputs)


@pytest.mark.parametrize(
    "path", real_params([REAL_WORKLOADS / "attention-forward-backward" / "snapshot.pickle"])
)
def test_the_real_attention_output_is_no_parameter(path: Path) -> None:
    """The real attention workload: the raw trace makes its output at the script's line 20
    (an einsum) after the softmax's saved blocks and before the backward; it is held to the
    end, and it is no parameter."""
    found = lifetimes(load_dump(path))
    classify(found)
    made = [
        a
        for a in found.allocations
        if any(
            f.get("filename", "").endswith("trace_peak_memory.py") and f.get("line") == 20
            for f in a.frames or []
        )
    ]
    assert [a.end >= found.length for a in made] == [True]
    assert made[0].kind == "activation"


HOOK = [
    py(f"{SP}/deepspeed/runtime/zero/stage_1_and_2.py", 3266, "setup_buckets"),
    py(f"{SP}/deepspeed/runtime/zero/stage_1_and_2.py", 1390, "reduce_ready_partitions"),
]
"""A backward hook's Python as ``stacks="python"`` records it: autograd's device thread called
it, so no frame of the script's is below it."""


def test_python_a_backward_hook_runs_is_in_backward() -> None:
    """With Python-only stacks (memforensics' capture records them so), a stack that does not
    start at the program's body or a thread's start is autograd's device thread running a hook
    or a custom backward: its phase is backward. The main thread's and a threading thread's
    stay forward."""
    assert phase_of(HOOK) == BACKWARD
    assert phase_of([py("/users/me/model.py", 57, "forward"), BODY]) == FORWARD
    runpy = py("<frozen runpy>", 88, "_run_module_as_main")
    assert phase_of([py("/users/me/model.py", 57, "forward"), runpy]) == FORWARD
    worker = py("/usr/lib/python3.11/threading.py", 1002, "_bootstrap")
    assert phase_of([py("/users/me/loader.py", 12, "pin"), worker]) == FORWARD


def test_a_bucket_a_backward_hook_keeps_across_steps_is_a_gradient() -> None:
    """A gradient bucket a backward hook allocates (DeepSpeed ZeRO's ``setup_buckets``), kept
    through the next forward and replaced at the next backward, is a gradient, not an
    activation, in a dump of Python-only stacks; the forward's own blocks stay activations."""
    trace = Trace()
    body = [py("/users/me/model.py", 57, "forward"), CALL, py("/users/me/run.py", 9, "main"), BODY]
    bucket = None
    kept = []
    for _ in range(2):
        outputs = [trace.alloc((6 + i) * MiB, body) for i in range(3)]
        if bucket is not None:
            trace.free(bucket)
        bucket = trace.alloc(100 * MiB, HOOK)
        kept.append(bucket)
        trace.free(trace.alloc(MiB, []))  # a backward kernel's temporary
        for addr in outputs:
            trace.free(addr)
    outputs = [trace.alloc((6 + i) * MiB, body) for i in range(3)]
    found = trace.classified()
    assert {found[a].kind for a in kept} == {"gradient"}
    assert {found[a].kind for a in outputs} == {"activation"}


def _moved(line: int) -> list[Frame]:
    """A ``.cuda()`` that ``Module._apply`` runs, its tensor moved from ``line``."""
    return [
        MALLOC,
        py(f"{SP}/torch/nn/modules/module.py", 1096, "<lambda>"),
        py(f"{SP}/torch/nn/modules/module.py", line, "_apply"),
        py(f"{SP}/torch/nn/modules/module.py", 933, "_apply"),
        py(f"{SP}/torch/nn/modules/module.py", 1096, "cuda"),
        py("/users/me/run.py", 5, "main"),
        BODY,
    ]


def test_what_module_apply_moves_last_is_a_buffer_unless_it_follows_its_parameter() -> None:
    """``Module._apply`` moves parameters, their gradients, then buffers: blocks from its last
    line are buffers, unless each came right after a parameter of its size (a gradient)."""
    trace = Trace()
    weights = [trace.alloc(size, _moved(964)) for size in (4 * MiB, 4096)]
    buffers = [trace.alloc(size, _moved(1034)) for size in (4096, 4096, 8)]
    found = trace.classified()
    assert {found[addr].kind for addr in weights} == {"parameter"}
    assert {found[addr].kind for addr in buffers} == {"buffer"}
    trace = Trace()
    moved = [trace.alloc(size, _moved(line)) for size in (4 * MiB, 4096) for line in (964, 1008)]
    found = trace.classified()
    assert {found[addr].kind for addr in moved} == {"parameter"}


def test_a_constructor_inside_an_optimizer_s_closure_builds_no_model() -> None:
    """Lightning clones each loss in a dataclass's ``__init__`` inside the closure
    ``optimizer.step`` runs: that stack is the step's forward, not a model being built; the
    same constructor outside a closure (or under a closure of torch's own) still builds."""
    loop = f"{SP}/lightning/pytorch/loops/optimization/automatic.py"
    cloned = [MALLOC, py(loop, 59, "_clone_loss"), py("<string>", 5, "__init__")]
    step = [py(f"{SP}/torch/optim/adam.py", 227, "step"), BODY]
    assert roles.stack_role([*cloned, py(loop, 131, "closure"), *step]) == (roles.IN_FORWARD, 0)
    assert roles.stack_role([*cloned, *step]) == (roles.BUILDS, 0)
    torch_own = py(f"{SP}/torch/_dynamo/utils.py", 10, "closure")
    assert roles.stack_role([*cloned, torch_own, *step]) == (roles.BUILDS, 0)


@pytest.mark.parametrize("script", ["kv_cache_bench.py", "kv.py", "cache_sweep.py"])
def test_a_script_named_for_a_cache_holds_no_kv_cache_of_its_own_making(script: str) -> None:
    """A script whose file names a cache (``kv_cache_bench.py``) that moves a model and runs its
    forwards holds parameters and activations, as any script does: its name says what it
    studies; a model file named so (``kv_store.py``) still makes a KV cache inside a forward."""
    trace = Trace()
    caller = [py(f"/users/me/{script}", 30, "main"), py(f"/users/me/{script}", 90, "<module>")]
    moved = [*BUILDERS["Module._apply / .to"][:4], *caller]
    weights = _model(trace, moved)
    forward = [MALLOC, py("/users/me/model.py", 57, "forward"), CALL, *caller]
    outputs = [trace.alloc((6 + index) * MiB, forward) for index in range(3)]
    stored = [MALLOC, py("/users/me/kv_store.py", 40, "append"), *forward[1:]]
    cache = [trace.alloc(64 * MiB, stored) for _ in range(2)]
    trace.free(trace.alloc(MiB, ENGINE))
    for addr in outputs:
        trace.free(addr)
    found = trace.classified()
    assert {found[a].kind for a in weights} == {"parameter"}
    assert {found[a].kind for a in outputs} == {"activation"}
    assert {found[a].kind for a in cache} == {"kv_cache"}


def test_sglang_s_pool_buffers_are_a_kv_cache_and_its_forward_casts_are_not() -> None:
    """The buffers SGLang's pool allocates in ``_create_buffers_normal`` are a KV cache; the
    keys and values its ``set_kv_buffer`` casts to the cache's dtype in each forward (the same
    file) stay temporaries."""
    pool = f"{SP}/sglang/srt/mem_cache/memory_pool.py"
    trace = Trace()
    weights = _model(trace, BUILDERS["Module._apply / .to"])
    built = [
        MALLOC,
        py(pool, 330, "_create_buffers_normal"),
        py(pool, 310, "_create_buffers"),
        py(pool, 280, "__init__"),
        py(f"{SP}/sglang/srt/model_executor/model_runner.py", 900, "init_memory_pool"),
        BODY,
    ]
    cache = [trace.alloc(512 * MiB, built) for _ in range(2)]
    cast = [
        MALLOC,
        py(pool, 640, "set_kv_buffer"),
        py(f"{SP}/sglang/srt/layers/radix_attention.py", 108, "forward"),
        CALL,
        py(f"{SP}/sglang/srt/models/llama.py", 170, "forward"),
        py(f"{SP}/sglang/srt/model_executor/model_runner.py", 2100, "forward_decode"),
        BODY,
    ]
    casts = [trace.alloc(MiB, cast) for _ in range(3)]
    for addr in casts:
        trace.free(addr)
    found = trace.classified()
    assert {found[a].kind for a in cache} == {"kv_cache"}
    assert {found[a].kind for a in casts} == {"temporary"}
    assert {found[a].kind for a in weights} == {"parameter"}


_REDUCE_SCATTER = [  # FSDP2's post-backward reduce-scatter input, made in backward
    MALLOC,
    py(f"{FSDP2}/_fsdp_collectives.py", 59, "allocate"),
    py(f"{FSDP2}/_fsdp_collectives.py", 597, "foreach_reduce"),
    py(f"{FSDP2}/_fsdp_param_group.py", 688, "post_backward"),
    py(f"{FSDP2}/_fsdp_param_group.py", 1126, "backward"),
    *ENGINE[1:],
]


def test_fsdp2_unsharded_parameters_are_parameters_and_its_reduce_scatter_gradients() -> None:
    """FSDP2's all-gathered parameters, made in a module's forward and freed after backward
    (``reshard_after_forward=False``) or within its forward, are parameters in transit, not
    activations or temporaries; the reduce-scatter input backward makes and frees is a
    gradient."""
    trace = Trace()
    buffer = trace.alloc(48 * MiB, FSDP2_GATHER_BUFFER)
    unsharded = [trace.alloc(32 * MiB, FSDP2_UNSHARD) for _ in range(4)]
    trace.free(buffer)
    outputs = _forward(trace)
    trace.free(trace.alloc(MiB, ENGINE))
    reduced = trace.alloc(48 * MiB, _REDUCE_SCATTER)
    trace.free(reduced)
    for addr in outputs + unsharded:
        trace.free(addr)
    found = trace.classified()
    assert {found[a].kind for a in [buffer, *unsharded]} == {"parameter"}
    assert found[reduced].kind == "gradient"
    assert {found[a].kind for a in outputs} == {"activation"}


def test_fsdp1_unsharded_flat_parameters_are_parameters() -> None:
    """FSDP1's padded unsharded flat parameter, all-gathered in a unit's pre-forward and
    freed after its backward, is a parameter in transit, not an activation."""
    fsdp = f"{SP}/torch/distributed/fsdp"
    unshard = [
        MALLOC,
        py(f"{SP}/torch/storage.py", 1270, "_resize_"),
        py(f"{SP}/torch/distributed/utils.py", 184, "_alloc_storage"),
        py(f"{fsdp}/_flat_param.py", 1408, "_alloc_padded_unsharded_flat_param"),
        py(f"{fsdp}/_flat_param.py", 1381, "unshard"),
        py(f"{fsdp}/_runtime_utils.py", 305, "_unshard"),
        py(f"{fsdp}/_runtime_utils.py", 421, "_pre_forward_unshard"),
        py(f"{fsdp}/fully_sharded_data_parallel.py", 850, "forward"),
        CALL,
        py("/users/me/train.py", 40, "main"),
        BODY,
    ]
    trace = Trace()
    flat = [trace.alloc(64 * MiB, unshard) for _ in range(3)]
    outputs = _forward(trace)
    trace.free(trace.alloc(MiB, ENGINE))
    for addr in outputs + flat:
        trace.free(addr)
    found = trace.classified()
    assert {found[a].kind for a in flat} == {"parameter"}


def test_ddp_buckets_are_gradients() -> None:
    """DDP's Reducer allocates its gradient buckets when DistributedDataParallel is built
    (``_ddp_init_helper``) and holds them: gradients, not parameters."""
    ddp = f"{SP}/torch/nn/parallel/distributed.py"
    bucket_stack = [
        MALLOC,
        py(ddp, 1437, "_ddp_init_helper"),
        py(ddp, 1079, "__init__"),
        py("/users/me/train.py", 9, "main"),
        BODY,
    ]
    trace = Trace()
    weights = _model(trace, BUILDERS["Module._apply / .to"])
    bucket = trace.alloc(192 * MiB, bucket_stack)
    outputs = _forward(trace)
    trace.free(trace.alloc(MiB, ENGINE))
    for addr in outputs:
        trace.free(addr)
    found = trace.classified()
    assert found[bucket].kind == "gradient"
    assert {found[a].kind for a in weights} == {"parameter"}


def _ddp_steps(pre_forward: list[Frame]) -> tuple[Trace, int, int, list[int], list[int]]:
    """A model wrapped in DDP, then two steps whose ``_pre_forward`` moves each batch and, in
    the second, rebuilds the buckets from ``pre_forward``'s stack (the first ones freed); the
    first and rebuilt buckets, the batches moved, the weights."""
    ddp = f"{SP}/torch/nn/parallel/distributed.py"
    outer = [py(ddp, 1893, "forward"), CALL, py("/users/me/train.py", 14, "main"), BODY]
    moved = [MALLOC, py(f"{SP}/torch/distributed/utils.py", 240, "to_map"),
             py(f"{SP}/torch/distributed/utils.py", 282, "_recursive_to"),
             py(f"{SP}/torch/distributed/utils.py", 300, "_to_kwargs"),
             py(ddp, 1789, "_pre_forward"), *outer]  # fmt: skip
    built = [MALLOC, py(ddp, 1437, "_ddp_init_helper"), py(ddp, 1079, "__init__"),
             py("/users/me/train.py", 9, "main"), BODY]  # fmt: skip
    trace = Trace()
    weights = _model(trace, BUILDERS["Module._apply / .to"])
    first = trace.alloc(192 * MiB, built)
    batches: list[int] = []
    rebuilt = 0
    for step in range(2):
        if step == 1:  # Reducer._rebuild_buckets(): the new buckets, then the old freed
            rebuilt = trace.alloc(192 * MiB, [*pre_forward, py(ddp, 1775, "_pre_forward"), *outer])
            trace.free(first)
        batch = trace.alloc(2 * MiB, moved)
        batches.append(batch)
        outputs = _forward(trace)
        grads = [trace.alloc(MiB, ENGINE) for _ in range(2)]
        for addr in [*outputs, batch]:
            trace.free(addr)
        for grad in grads:
            trace.free(grad)
    return trace, first, rebuilt, batches, weights


REBUILD_NATIVE = [
    MALLOC,
    cpp("c10d::Reducer::initialize_buckets(std::vector<c10d::Reducer::Bucket>)"),
    cpp("c10d::Reducer::rebuild_buckets()"),
]


@pytest.mark.parametrize("native", [[MALLOC], REBUILD_NATIVE], ids=["python", "native"])
def test_ddp_buckets_rebuilt_in_the_forward_are_gradients(native: list[Frame]) -> None:
    """The buckets DDP's ``_pre_forward`` makes again in the second step's forward are
    gradients, as the first ones were; the batches the same ``_pre_forward`` moves through its
    ``_to_kwargs`` are not, nor are the weights."""
    trace, first, rebuilt, batches, weights = _ddp_steps(native)
    found = trace.classified()
    assert found[first].kind == "gradient"
    assert found[rebuilt].kind == "gradient"
    assert "gradient" not in {found[a].kind for a in batches}
    assert {found[a].kind for a in weights} == {"parameter"}


def test_a_helper_under_ddp_s_pre_forward_makes_no_bucket() -> None:
    """A block a Python helper of DDP's ``_pre_forward`` made (a buffer broadcast, an input
    cast) is that helper's, not a bucket: only ``_pre_forward``'s own line rebuilds them."""
    ddp = f"{SP}/torch/nn/parallel/distributed.py"
    helper = [MALLOC, py(ddp, 2210, "_default_broadcast_coalesced")]
    trace, _, made, _, _ = _ddp_steps(helper)
    found = trace.classified()
    assert found[made].kind != "gradient"
