"""What a block's own frames say about its kind, before its lifetime is asked.

Some code allocates memory of one kind only, however long the block lives, and its frames
say so plainly:

* **workspace**: cuBLAS, cuBLASLt and cuDNN scratch space (``at::cuda::getNewWorkspace()``,
  ``at::cuda::getCurrentCUDABlasHandle()``, any function that names a workspace). PyTorch keeps
  one per handle and stream for the life of the process, so a lifetime rule would call it a
  gradient or an activation.
* **kv_cache**: an inference engine's key/value cache, known by the functions that allocate
  it where its file's other code makes a forward's blocks (:data:`KV_ALLOCATORS`: vLLM's
  ``cache_engine.py`` ``_allocate_kv_cache``, SGLang's ``mem_cache/memory_pool.py``
  ``_create_buffers`` and its unified pool's ``UnifiedKVPool.__init__``, Hugging Face's
  continuous batching's ``PagedAttentionCache.__init__``), by Hugging Face's ``cache_utils.py``,
  or by any file or function that names a KV cache: sized up front, held. A
  file or function of a model's code named for a cache (a ``cache``, ``caches`` or ``cached``
  word, or ``past_key_values``) makes a **model cache**, keys and values kept across tokens
  (a KV cache, unless the block's lifetime says a forward saved it for its backward:
  :mod:`~memforensics.analysis.filled.kinds` asks), where something says it holds keys and
  values: the same frame names them (a ``kv``, ``k``, ``v``, ``key``, ``value``, ``past``,
  ``attn`` or ``attention`` word: ``kv_store.py``, ``update_kv``, ``attention.py``'s
  ``_update_cache``) with a forward or ``generate`` on the stack, or ``generate``, a decoding
  loop, is on the stack (``update_cache`` under it). A cache named for nothing more, under a
  forward with no decoding loop, is a memo of results (GPyTorch's ``@cached`` kernel matrices
  and prediction caches, ``mean_cache``), never keys and values: it only rules a parameter
  out, and its lifetime tells its kind. So does a cache the same frame names for positions (a
  ``rope``, ``rotary``, ``freqs``, ``cos`` or ``sin`` word: ``rope.py``'s ``_reshape_cache``,
  ``_set_cos_sin_cache``, ``build_rope_cache``), which holds rotary or position tables.
  torch's and the standard library's own files (``codecache.py``, ``functools``'
  ``lru_cache``) name caches of code, not of tensors, and are not read so; nor are an
  installed package's, whose KV caches are known by their files and ``kv_cache`` names
  above, and whose other cache-named code holds no keys and values kept across tokens
  (diffusers' ``faster_cache.py``, its ``_get_added_kv_projections``).
* **replica**: ``torch.nn.DataParallel``'s copies of the model (``nn/parallel/replicate.py``,
  ``comm.py`` ``broadcast_coalesced``), made inside each forward, yet parameters.
* **parameters in transit**: FSDP2's all-gather (``fsdp/_fully_shard/_fsdp_collectives.py``'s
  ``foreach_all_gather`` and ``foreach_all_gather_copy_out``, ``_fsdp_param.py``'s
  ``init_all_gather_outputs``, ``alloc_all_gather_outputs`` and ``init_unsharded_param``)
  makes the unsharded parameters a module's forward and backward compute with, inside them
  and freed after them, yet parameters, as DataParallel's replicas are; so does FSDP1's
  (``fsdp/_flat_param.py``'s ``unshard``, ``pre_unshard``).
* **gradients in transit**: FSDP2's reduce-scatter (``_fsdp_collectives.py``'s
  ``foreach_reduce`` and ``foreach_reduce_scatter_copy_in``) makes the unsharded gradients it
  reduces and their shards, as FSDP1's (``fsdp/_runtime_utils.py``'s ``_reduce_grad``) does,
  and DDP's ``Reducer``, built in ``DistributedDataParallel``'s
  ``_ddp_init_helper`` (``nn/parallel/distributed.py``), makes the buckets gradients are
  reduced through (their storage, with ``gradient_as_bucket_view=True``): gradients, whatever
  their lifetime. So are the buckets it makes again in the first forward after the first
  backward, in the order that backward made the gradients (``Reducer::rebuild_buckets``,
  called from DDP's ``_pre_forward``, or the join hook's ``main_hook``): with Python frames
  alone, the blocks whose innermost Python frame is one of those two functions, since the same
  ``_pre_forward`` moves the inputs and syncs the buffers through Python helpers of its own
  (``_to_kwargs``, ``_sync_buffers``), which are nearer their allocations.
* **Megatron's buffers**: ``param_and_grad_buffer.py``'s ``__init__`` allocates the parameter
  buffer (with the distributed optimizer only) and then the gradient buffer, on two lines of
  the same function. Which line is which is told per dump by :func:`buffer_kinds`.
* **a batch moved to the device**: a framework's helper that copies a batch to the device, with
  no forward and no model-building frame on the stack: a function named for moving data to a
  device (Accelerate's ``send_to_device``, Lightning's ``move_data_to_device``,
  ``batch_to_device`` and ``transfer_batch_to_device``), Hugging Face ``Trainer``'s
  ``_prepare_input(s)``, and ``to`` of its batch containers (``BatchEncoding``,
  ``BatchFeature``). It only says where the block came from: whether it is the step's input is
  its lifetime's to say (:mod:`~memforensics.analysis.filled.kinds`). The same helper inside a
  forward (Accelerate's hooks moving activations between devices) is the forward's.

Then what decides between a parameter and the rest:

* **in a forward**: a frame of a module's forward (``forward``, ``Module._call_impl``), or of a
  closure a training step runs its forward and backward in (a function named for one:
  ``optimizer.step(closure)``, Lightning's automatic optimization): a block made there is never
  a parameter (weights are built, moved or loaded, not computed), whatever constructor nearer
  the allocation made it (Lightning's ``ClosureResult`` cloning the loss).
* **a name that rules a parameter out**: a cache, a workspace, cuBLAS or cuDNN.
* **builds a model**: a module's ``__init__`` (with no forward on the stack),
  ``reset_parameters``, ``Module._apply`` (``.to``, ``.cuda``), ``load_state_dict``,
  ``from_pretrained``, ``torch/nn/init.py``...: a block made there and held is a parameter,
  whatever its lifetime looks like, or a buffer where ``Module._apply`` moved it from the line
  that moves buffers (told per dump by :func:`moved_buffer_line`).
* **an optimizer's own**: a function named for an optimizer (``_setup_for_real_optimizer``,
  ``create_optimizer``), with no forward or model-building frame on the stack and nearer the
  allocation than any ``__init__``, makes what the optimizer holds (master weights, the
  buckets it reduces gradients through), never a model's parameter, though an ``__init__``
  is outside it (the optimizer's own constructor, built inside the training engine's).

A snapshot repeats a few thousand frames millions of times: each distinct (file, function) is
judged once (:func:`frame_role`), each distinct stack once (the caller's ``per_stack``).
"""

from __future__ import annotations

import re

from memforensics.analysis.dump import is_native_frame

WORKSPACE = "workspace"
KV_CACHE = "kv_cache"
MODEL_CACHE = "model_cache"  # a model's cache of keys and values: a KV cache by default
REPLICA = "replica"
GATHERED = "gathered"  # parameters FSDP2's all-gather unshards for a module's forward or backward
REDUCED = "reduced"  # gradients FSDP2's reduce-scatter and DDP's buckets reduce
_REBUILDS = "rebuilds"  # DDP's frame that rebuilds its buckets: theirs where it is innermost
BATCH = "batch"  # a framework's helper moving a batch to the device
MEGATRON_BUFFER = "megatron_buffer"
IN_FORWARD = "in_forward"
NOT_PARAMETER = "not_parameter"
_CACHE_NAMED = "cache_named"  # a cache's file or function: a KV cache under ``generate``
_KV_NAMED = "kv_named"  # a cache's file or function naming keys and values: under a forward too
BUILDS = "builds"
NOTHING = ""
_CONSTRUCTOR = "constructor"  # a frame's ``__init__``: builds, unless a forward is on the stack
OPTIMIZER_OWNED = "optimizer_owned"
_OPTIMIZER_NAMED = "optimizer_named"  # a function named for an optimizer
_OPTIMIZER_WORDS = frozenset({"optimizer", "optimizers"})

# The stronger role wins when a stack holds several (a replica is made inside a forward).
_RANK = {
    WORKSPACE: 0,
    KV_CACHE: 1,
    MEGATRON_BUFFER: 2,
    REPLICA: 3,
    GATHERED: 3,
    REDUCED: 3,
    NOTHING: 4,
}

_WORKSPACE_NAMES = ("workspace", "getcurrentcudablashandle", "getcurrentcudablaslthandle")
_KV_NAMES = ("kv_cache", "kvcache", "kv_pool")
_FILE_NAMED_ROLES = frozenset({KV_CACHE, _CACHE_NAMED, _KV_NAMED})
"""Roles a frame may give by its file's name alone, which speaks for the file's own code only
where it runs inside what it is named for, not where it calls a model."""
_MODULE_CALLS = frozenset({"_call_impl", "_wrapped_call_impl"})
_KV_FILES = ("/transformers/cache_utils.py",)
KV_ALLOCATORS: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("vllm", "/cache_engine.py", frozenset({"__init__", "_allocate_kv_cache"})),
    (
        "sglang",
        "/sglang/srt/mem_cache/memory_pool.py",
        frozenset(
            {"__init__", "_create_buffers", "_create_buffers_normal", "_create_quantized_buffers"}
        ),
    ),
    ("sglang", "/sglang/srt/mem_cache/unified_memory_pool.py", frozenset({"__init__"})),
    ("hf_paged", "/transformers/generation/continuous_batching/cache.py", frozenset({"__init__"})),
)
"""The functions that allocate an engine's KV cache, by engine: (engine, the file's path
suffix, the functions' names). Each file's other code makes a forward's or a step's blocks,
which its file's name would make a KV cache too, so only these functions name one. vLLM's
``CacheEngine`` allocates in ``__init__`` through ``_allocate_kv_cache``; its ``swap_in``,
``swap_out`` and ``copy`` move blocks each step. SGLang's pools (``ReqToTokenPool``,
``MHATokenToKVPool``, ``MLATokenToKVPool``, ...) allocate in their constructors and
``_create_buffers`` (``_create_buffers_normal``, ``_create_quantized_buffers``), while
``set_kv_buffer`` casts each forward's keys and values to the cache's dtype and
``get_flat_data`` stacks the blocks it offloads; SGLang's unified memory pool allocates the
byte buffer its sub-pools view in ``UnifiedKVPool.__init__`` (and its pools' own state in
their constructors), and the same file translates each forward's slot ids
(``translate_loc_from_full_to_swa``). Hugging Face's continuous batching allocates its paged
cache in ``PagedAttentionCache.__init__`` (one flat byte tensor, or a key and a value tensor
per layer, by release), and the same file's ``update`` gathers each forward's cached keys and
values into temporaries (itself, or in the allocator it calls). The diagnosis names each
engine's fix from the same table."""
_GATHERS = (
    (
        "/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py",
        frozenset({"foreach_all_gather", "foreach_all_gather_copy_out"}),
    ),
    (
        "/torch/distributed/fsdp/_fully_shard/_fsdp_param.py",
        frozenset({"init_all_gather_outputs", "alloc_all_gather_outputs", "init_unsharded_param"}),
    ),
    (
        "/torch/distributed/fsdp/_flat_param.py",
        frozenset({"pre_unshard", "unshard", "_alloc_padded_unsharded_flat_param"}),
    ),
)
"""torch's functions that unshard parameters, freed after the forward or backward that needed
them: FSDP2's all-gather into each module's unsharded parameters, and FSDP1's
(``FullyShardedDataParallel``) into each unit's padded unsharded flat parameter, and its
low-precision shard where mixed precision casts one (``pre_unshard``). Each row: (a file's
path suffix, its names)."""
_REDUCES = (
    (
        "/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py",
        frozenset({"foreach_reduce", "foreach_reduce_scatter_copy_in"}),
    ),
    ("/torch/distributed/fsdp/_runtime_utils.py", frozenset({"_reduce_grad"})),
    ("/torch/nn/parallel/distributed.py", frozenset({"_ddp_init_helper"})),
)
"""torch's functions that make the memory gradients are reduced through: FSDP2's
reduce-scatter (its unsharded input and sharded output), FSDP1's (``_reduce_grad``) and DDP's
``Reducer``'s buckets, made when ``DistributedDataParallel`` is built (``_ddp_init_helper``)."""
_BUCKET_REBUILDS = (
    ("/torch/nn/parallel/distributed.py", frozenset({"_pre_forward", "main_hook"})),
)
"""DDP's functions that call ``Reducer._rebuild_buckets``: its ``_pre_forward`` and the join
hook's ``main_hook``. They make the new buckets from their own line; everything else they
allocate through Python helpers of their own (the inputs moved by ``_to_kwargs``, the buffers
broadcast by ``_sync_buffers``), so a block whose innermost Python frame is one of them is a
bucket."""
_BUCKET_NATIVE = ("Reducer::initialize_buckets", "Reducer::rebuild_buckets")
"""The ``Reducer``'s C++ functions that make buckets, where a stack records native frames."""
_KV_ALLOCATORS = tuple((path, names) for _engine, path, names in KV_ALLOCATORS)
_FORWARD_NAMES = frozenset({"forward", "_call_impl", "_wrapped_call_impl"})
_GENERATE = "generate"  # Hugging Face's (and most engines') decoding loop: a forward per token
_NOT_PARAMETER_WORDS = ("cache", "workspace", "cublas", "cudnn", "blas")
_CACHE_WORDS = frozenset({"cache", "caches", "kv", "kvcache", "cached"})
_KV_WORDS = frozenset({"kv", "kvcache"})
_KEY_VALUE_WORDS = frozenset(
    {"k", "v", "key", "keys", "value", "values", "past", "attn", "attention"}
)  # fmt: skip
"""Words that name a cache's contents as keys and values, unless it also names positions."""
_POSITION_WORDS = frozenset({"rope", "rotary", "freqs", "freq", "cos", "sin", "sincos"})
"""Words that name a cache's contents as rotary or position tables, not keys and values."""
_WORDS = re.compile(r"[a-z0-9]+")
_CODE_FILES = re.compile(r"(?:^|/)(?:torch|torch_npu|triton)/|(?:^|/)lib/python[0-9.]+t?/|^<")
"""Files whose cache-named code is not a model's cache of keys and values: torch's (Inductor's
``codecache.py``), Triton's and the standard library's (``functools``), caches of code; and
every installed package's (``lib/python3.x/site-packages``). An installed library's KV cache
is known by its file (:data:`_KV_FILES`: Hugging Face's ``cache_utils.py``) or a ``kv_cache``
name (torchtune's ``kv_cache.py``); its other code named for a cache or for keys and values
keeps results or computes a forward's (diffusers' ``faster_cache.py``, which keeps attention
outputs across denoising steps, and ``_get_added_kv_projections``; PEFT's DoRA
``cache_value``), so reading it by its words would make those a KV cache."""
_TORCH_FILES = re.compile(r"(?:^|/)torch/")
"""torch's own files: a closure there is torch's machinery (dynamo's), not a training step's."""
_BUILD_NAMES = frozenset(
    {
        "_apply",
        "to",
        "cuda",
        "npu",
        "to_empty",
        "load_state_dict",
        "_load_from_state_dict",
        "_load_state_dict_into_model",
        "from_pretrained",
        "load_checkpoint",
        "reset_parameters",
        "init_weight",
        "init_weights",
        "_init_weights",
    }
)
_DEVICE_WORDS = frozenset({"device", "gpu", "cuda", "npu"})
_MOVE_WORDS = frozenset({"to", "send", "move", "transfer", "copy"})
_MODEL_WORDS = frozenset(
    {"module", "model", "param", "params", "parameter", "parameters", "weight", "weights",
     "optimizer", "state"}
)  # fmt: skip
"""Words that make a function moving something to a device a model's (Accelerate's
``set_module_tensor_to_device``), not a batch's."""
_BATCH_HELPERS = (
    ("/transformers/trainer.py", frozenset({"_prepare_input", "_prepare_inputs"})),
    ("/transformers/tokenization_utils_base.py", frozenset({"to"})),
    ("/transformers/feature_extraction_utils.py", frozenset({"to"})),
)
"""Hugging Face's batch movers that their names do not tell: ``Trainer`` moving each batch,
and ``to`` of the tokenizer's and feature extractor's outputs (a model's ``to`` builds)."""
_MODULE_FILE = "/torch/nn/modules/module.py"
_BUILD_FILES = ("/torch/nn/parameter.py", "/torch/nn/init.py", "/torch/serialization.py")

_role_cache: dict[tuple[str, str], str] = {}


def frame_role(filename: str, name: str) -> str:
    """The role one frame gives its allocation (see the module docstring), or ``""``."""
    key = (filename, name)
    found = _role_cache.get(key)
    if found is None:
        if len(_role_cache) >= 200_000:
            _role_cache.clear()
        found = _role_cache[key] = _judge_frame(filename.replace("\\", "/"), name)
    return found


def _judge_frame(filename: str, name: str) -> str:
    lowered = name.lower()
    if any(word in lowered for word in _WORKSPACE_NAMES):
        return WORKSPACE
    words = (filename.rsplit("/", 1)[-1] + " " + name).lower()
    if (
        filename.endswith(_KV_FILES)
        or any(word in words for word in _KV_NAMES)
        or _listed(filename, name, _KV_ALLOCATORS)
    ):
        return KV_CACHE
    if filename.endswith("/param_and_grad_buffer.py") and name == "__init__":
        return MEGATRON_BUFFER
    in_transit = _in_transit(filename, name)
    if in_transit:
        return in_transit
    # Native frames are the interpreter's and torch's machinery: ``at::native::to(...,
    # c10::Device, ...)`` names a device and a move under every copy, CPython's
    # ``infinite_lru_cache_wrapper`` a cache of results; neither is a batch or keys and values.
    python = not is_native_frame(filename, name)
    if python and _moves_a_batch(filename, name):
        return BATCH
    if name in _FORWARD_NAMES or (names_a_closure(name) and not _TORCH_FILES.search(filename)):
        return IN_FORWARD
    if python:
        cache = _cache_named_for(filename, name)
        if cache:
            return cache
    if any(word in words for word in _NOT_PARAMETER_WORDS):
        return NOT_PARAMETER
    if name in _BUILD_NAMES or filename.endswith(_BUILD_FILES):
        return BUILDS
    if name == "__init__":
        return _CONSTRUCTOR
    if _OPTIMIZER_WORDS & set(_WORDS.findall(name.lower())):
        return _OPTIMIZER_NAMED
    return NOTHING


def _in_transit(filename: str, name: str) -> str:
    """The role of torch's data-parallel code that copies a model's parameters or reduces its
    gradients, whatever the block's lifetime: DataParallel's replicas, FSDP's unsharded
    parameters (:data:`_GATHERS`), FSDP's and DDP's gradients reduced (:data:`_REDUCES`)."""
    if filename.endswith("/torch/nn/parallel/replicate.py") or (
        filename.endswith("/torch/nn/parallel/comm.py") and name == "broadcast_coalesced"
    ):
        return REPLICA
    if _listed(filename, name, _GATHERS):
        return GATHERED
    if _listed(filename, name, _REDUCES) or any(part in name for part in _BUCKET_NATIVE):
        return REDUCED
    if _listed(filename, name, _BUCKET_REBUILDS):
        return _REBUILDS
    return NOTHING


def _moves_a_batch(filename: str, name: str) -> bool:
    """A framework's helper that moves a batch to the device: named for moving data to a device
    (``send_to_device``, ``move_data_to_device``, ``batch_to_device``), not a model's, or one of
    :data:`_BATCH_HELPERS`. torch's own files move modules and tensors inside its machinery."""
    if _TORCH_FILES.search(filename):
        return False
    words = set(_WORDS.findall(name.lower()))
    if words & _DEVICE_WORDS and words & _MOVE_WORDS and not words & _MODEL_WORDS:
        return True
    return _listed(filename, name, _BATCH_HELPERS)


def _listed(filename: str, name: str, table: tuple[tuple[str, frozenset[str]], ...]) -> bool:
    """Whether a frame is one of ``table``'s functions: (a file's path suffix, its names)."""
    return any(filename.endswith(path) and name in names for path, names in table)


def names_a_closure(name: str) -> bool:
    """Whether a function is named for a closure: what ``optimizer.step(closure)`` calls to run
    a step's forward and backward (Lightning's ``closure``, ``_wrap_closure``)."""
    return "closure" in name.lower()


def _cache_named_for(filename: str, name: str) -> str:
    """What a model's file or function named for a cache holds, by its words: keys and values
    (:data:`_KV_NAMED`: ``kv_store.py``, ``update_kv``, ``_update_past_key_values``, a cache
    of ``attention.py``), anything (:data:`_CACHE_NAMED`: ``update_cache``, GPyTorch's
    ``mean_cache``), or ``""`` where it names no cache or a cache of rotary or position
    tables. torch's and the standard library's files are not a model's."""
    if _CODE_FILES.search(filename):
        return NOTHING
    if "past_key_values" in name:
        return _KV_NAMED
    stem = filename.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    words = set(_WORDS.findall(f"{stem} {name}".lower()))
    if not words & _CACHE_WORDS:
        return NOTHING
    if words & _KV_WORDS:
        return _KV_NAMED
    if words & _POSITION_WORDS:
        return NOTHING
    return _KV_NAMED if words & _KEY_VALUE_WORDS else _CACHE_NAMED


def stack_role(frames: object) -> tuple[str, int]:  # noqa: PLR0912, PLR0915 - one pass over a stack
    """What a stack says, and the line of the frame that said it (Megatron's buffers are told
    apart by it; for a block a model's building made, the line of the innermost
    ``Module._apply``, 0 if none: which of a module's tensors it moved); ``("", 0)`` without
    frames.

    A workspace, a KV cache, a Megatron buffer or a replica wins wherever its frame is; DDP's
    bucket rebuild (:data:`_BUCKET_REBUILDS`) only as the innermost Python frame. Any
    forward on the stack beats an ``__init__`` (an object built inside a forward is that
    forward's; a script that trains inside a constructor still runs forwards). Between a forward
    and a frame that moves or loads a model (``Module._apply``, ``from_pretrained``...), the
    outer one is the context the block was made in. A name that rules a parameter out beats
    building. A cache's file or function naming keys and values with a forward or ``generate``
    on the stack, or any cache's with ``generate`` on it, is a model cache. A file's name speaks
    for its frames only nearer the allocation than any forward, ``generate``, constructor or
    model-building frame: farther out, a frame is the caller's (a script named for the KV cache
    it studies), and only its function's name speaks. A batch-moving
    helper with no forward or model-building frame on the stack makes a batch. A function named
    for an optimizer nearer the allocation than any ``__init__``, with no forward or
    model-building frame, makes the optimizer's own block.
    """
    if not isinstance(frames, list):
        return NOTHING, 0
    strong, line, rank = NOTHING, 0, _RANK[NOTHING]
    context, ruled_out, constructed, optimizer = NOTHING, False, False, False
    cache_named = kv_named = forward = decoding = batch = False
    moved = 0  # the line of the innermost ``Module._apply``: which of a module's tensors it moves
    caller = False  # past a forward, a decoding loop or a model's building: the code calling it
    innermost = True  # no Python frame nearer the allocation yet
    for frame in frames:  # innermost first
        if type(frame) is not dict:
            continue
        filename, name = frame.get("filename"), frame.get("name")
        filename = filename if type(filename) is str else ""
        name = name if type(name) is str else ""
        role = _rebuilt_buckets(frame_role(filename, name), innermost)
        innermost = innermost and is_native_frame(filename, name)
        if caller and role in _FILE_NAMED_ROLES:
            role = _role_by_its_name(filename, name)
        caller = caller or _calls_a_model(role, filename, name)
        if role in (IN_FORWARD, BUILDS):
            context = role
            forward = forward or role == IN_FORWARD
            if not moved and name == "_apply" and _is_module_file(filename):
                found = frame.get("line")
                moved = found if type(found) is int else 0
        elif role in (_CACHE_NAMED, _KV_NAMED):
            cache_named = ruled_out = True
            kv_named = kv_named or role == _KV_NAMED
        elif role == BATCH:
            batch = True
        elif name == _GENERATE:
            forward = decoding = True
        elif role == _CONSTRUCTOR:
            constructed = True
        elif role == _OPTIMIZER_NAMED:
            optimizer = optimizer or not constructed
        elif role == NOT_PARAMETER:
            ruled_out = True
        elif role != NOTHING and _RANK[role] < rank:
            strong, rank = role, _RANK[role]
            found = frame.get("line")
            line = found if type(found) is int else 0
            if rank == 0:
                break
    if strong != NOTHING:
        return strong, line
    if (kv_named and forward) or (cache_named and decoding):
        return MODEL_CACHE, 0
    if context == NOTHING and batch:
        return BATCH, 0
    if context == NOTHING and optimizer:
        context = OPTIMIZER_OWNED
    elif context == NOTHING and constructed:
        context = BUILDS
    if ruled_out and context != IN_FORWARD:
        return NOT_PARAMETER, 0
    return context, moved if context == BUILDS else 0


def _rebuilt_buckets(role: str, innermost: bool) -> str:
    """A frame's role with DDP's bucket rebuild settled: the buckets' (:data:`REDUCED`) where
    the rebuilding function is the innermost Python frame, nothing farther out."""
    if role != _REBUILDS:
        return role
    return REDUCED if innermost else NOTHING


def _calls_a_model(role: str, filename: str, name: str) -> bool:
    """Whether a frame is where a model is run, built or moved, so that the frames farther out
    are its caller's: a module called (``Module._call_impl``), a forward or closure of code
    outside torch (torch's own layers' forwards run inside a module's call), ``generate``, a
    constructor, or a frame that builds or moves a model."""
    if role == IN_FORWARD:
        return name in _MODULE_CALLS or not _TORCH_FILES.search(filename)
    return role in (BUILDS, _CONSTRUCTOR) or name == _GENERATE


def _role_by_its_name(filename: str, name: str) -> str:
    """The role a frame gives with its file's own name set aside: a caller's file (a script
    named ``kv_cache_bench.py`` around ``generate``, ``model.to`` or a model's constructor)
    is named for what it studies, not for the blocks the code it calls makes."""
    head, _, tail = filename.replace("\\", "/").rpartition("/")
    dot = tail.rfind(".")
    return frame_role(f"{head}/_{tail[dot:]}", name) if dot > 0 else frame_role(filename, name)


def _is_module_file(filename: object) -> bool:
    """torch's ``nn/modules/module.py``, whose ``Module._apply`` moves a module's tensors."""
    return type(filename) is str and filename.replace("\\", "/").endswith(_MODULE_FILE)


def moved_buffer_line(moved: list[tuple[int, int]]) -> int | None:
    """The line of ``Module._apply`` that moved buffers in one dump, or None where no block
    says so; ``moved``: each block ``_apply`` made, as (its line, its requested bytes), in
    the order they were made.

    ``Module._apply`` moves each parameter, then that parameter's gradient, and its buffers
    last, from three lines in that order in its source, in every torch release. With three
    lines the last moves buffers. With two, the last moves buffers unless each block it made
    came right after one of the other line's, of the same size (a gradient moved after its
    parameter). With one, nothing tells parameters from buffers: they stay parameters.
    """
    lines = sorted({line for line, _ in moved})
    if len(lines) < 2:
        return None
    last = lines[-1]
    if len(lines) == 2:
        after_own_parameter = all(
            index > 0 and moved[index - 1] == (lines[0], size)
            for index, (line, size) in enumerate(moved)
            if line == last
        )
        if after_own_parameter:
            return None
    return last


def buffer_kinds(lines: set[int]) -> dict[int, str]:
    """Which of Megatron's buffers each ``param_and_grad_buffer.py`` line allocates.

    ``_ParamAndGradBuffer.__init__`` allocates ``param_data`` (only with the distributed
    optimizer) before ``grad_data``, in that order in its source: with two lines, the first
    is the parameter buffer and the other the gradient buffer; with one, there is only the
    gradient buffer (or the one buffer both share).
    """
    first = min(lines) if len(lines) >= 2 else None
    return {line: "parameter" if line == first else "gradient" for line in lines}
