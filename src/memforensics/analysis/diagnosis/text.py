"""The diagnosis's words: each cause's evidence and fixes, the headline, what is missing.

Functions take figures, not the result types, so :mod:`~memforensics.analysis.diagnosis.diagnosis`
can call them while it builds its causes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memforensics._units import format_bytes as fmt
from memforensics.analysis.dump import short_site
from memforensics.analysis.filled import KindSite
from memforensics.analysis.oom import OomMoment, device_free_text

_SITE = 60  # the width a site keeps in a sentence
_LISTED = 40  # the width a site keeps in a list of sites with their bytes
_FOLDERS = re.compile(r"^[^ ]*/(?=[^/ ]+:\d+ )")  # the folders before ``file.py:12 name``

CAUSE_NAMES = {
    "request": "the request alone",
    "growth": "growth",
    "static": "static memory",
    "activations": "activations",
    "optimizer_temporaries": "optimizer temporaries",
    "cache": "a preallocated cache",
    "outside": "memory outside PyTorch",
    "pending_frees": "pending frees",
    "fragmentation": "fragmentation",
}
"""How a cause is called in a sentence."""


def cause_words(name: str, evidence: str) -> str:
    """A cause in a sentence: its name, then its evidence (once, when the evidence already
    starts with the name, or names the kinds it is made of: ``activations 1.01 GiB, inferred
    (...)``, ``temporaries 228.35 MiB, inferred (...)``, or an inference forward's tensors,
    which are no activations)."""
    called = CAUSE_NAMES[name]
    if evidence.startswith(called) or (
        name == "activations" and evidence.startswith((*_KIND_WORDS.values(), _FAILING_FORWARD))
    ):
        return evidence
    return f"{called}: {evidence}"


def _site(site: str) -> str:
    """``demo_train.py:57 keep_metrics``: a site in a sentence keeps its file, line and
    function (the table beside it has the path)."""
    return short_site(_FOLDERS.sub("", site), _SITE)


# the request alone


def request_evidence(requested: int, site: str | None, exceeds: str) -> str:
    """``100.00 GiB asked at big.py:5 <module> exceeds the 79.50 GiB PyTorch could get with
    nothing else live (...); no memory freed makes room``."""
    where = f" at {_site(site)}" if site else ""
    return f"{fmt(requested)} asked{where} exceeds {exceeds}; no memory freed makes room"


def smaller_request(room: int | None, *, site_named: bool) -> str:
    """Make the one allocation smaller, under what was left beside the live memory, at the
    site the evidence names (``there``) or where it is made."""
    under = f", under the {fmt(room)} left beside what was live" if room else ""
    where = "there" if site_named else "where it is made"
    return (
        f"make that one allocation smaller{under}: a smaller batch or sequence {where}, or"
        " compute it in chunks"
    )


# growth


def growth_evidence(
    site: str,
    held: int,
    rate: int,
    first: int,
    windows: int,
    steps_left: int | None,
    callers: Sequence[tuple[str, int]] = (),
) -> str:
    """``demo_train.py:57 keep_metrics holds 143.00 MiB, growing 5.63 MiB a step since step 0``;
    a site reached from several ``callers`` (the user's lines that called it, with the bytes
    each row of the sites table gives it) names them: ``store.py:12 append holds 120.00 MiB
    (80.00 MiB from train.py:30 train_step, 40.00 MiB from train.py:40 evaluate), ...``."""
    split = ", ".join(f"{fmt(size)} from {_site(caller)}" for caller, size in callers)
    from_callers = f" ({split})" if len(callers) > 1 else ""
    where = f"; it rose across {windows} window dumps" if windows else ""
    left = ""
    if steps_left == 0:
        left = "; the headroom left is less than one step of it"
    elif steps_left is not None:
        left = f"; at that rate the headroom lasts about {steps_left:,} more steps"
    return (
        f"{_site(site)} holds {fmt(held)}{from_callers}, growing {fmt(rate)} a step since "
        f"step {first}"
        f"{where}{left}"
    )


def climb_evidence(rate: int, points: int, first: int, last: int) -> str:
    """``allocated grew ≈ 2.56 MiB a step from step 1,700 to step 4,900 (32 journal lines),
    and no window dump names the site``."""
    return (
        f"allocated grew ≈ {fmt(rate)} a step from step {first:,} to step {last:,}"
        f" ({points:,} journal lines), and no window dump names the site"
    )


CLIMB_FIX = "install(steps=N) window dumps name the site that grows"
"""What names the site a journal's climb cannot."""


def growth_fix(site: str) -> str:
    """Stop the site keeping a tensor per step."""
    return f"stop {_site(site)} keeping a tensor every step (drop it, or keep .item())"


# a preallocated cache

KV = "kv"
"""A KV cache no engine's frames name (a model's own, Hugging Face's ``cache_utils``)."""

_CACHES = {
    KV: "the KV cache",
    "vllm": "vLLM's KV cache",
    "sglang": "SGLang's KV cache pool",
    "hf_paged": "Hugging Face's paged KV cache (continuous batching)",
    "megatron": "Megatron's contiguous parameter and gradient buffers",
    "deepspeed": "DeepSpeed's contiguous buffers",
}


def cache_evidence(framework: str, held: int, sites: Sequence[str], total: int | None) -> str:
    """What holds the cache, how much, and of what device."""
    share = f" ({held / total:.0%} of the {fmt(total)} device)" if total else ""
    where = f" at {_site(sites[0])}" if sites else ""
    return f"{_CACHES[framework]}{where} holds {fmt(held)}{share}"


def cache_fixes(
    framework: str, held: int, needed: int | None, total: int | None
) -> list[tuple[str, int | None]]:
    """The knob that sizes the cache, with the bytes lowering it frees."""
    freed = min(needed, held) if needed else None
    if framework == "vllm":
        step = f" by {max(needed / total, 0.01):.2f}" if needed and total else ""
        return [
            (f"lower gpu_memory_utilization{step} (--gpu-memory-utilization; verl:"
             " actor_rollout_ref.rollout.gpu_memory_utilization)", freed),
            ("free the cache engine while the actor trains (verl:"
             " actor_rollout_ref.rollout.free_cache_engine=True)", held),
        ]  # fmt: skip
    if framework == "sglang":
        return [("lower mem_fraction_static (--mem-fraction-static)", freed)]
    if framework == "hf_paged":
        return [
            ("lower max_memory_percent or num_blocks in ContinuousBatchingConfig (generate_batch's"
             " continuous_batching_config=): they size the paged cache, not the batch or"
             " max_new_tokens", freed),
        ]  # fmt: skip
    if framework == KV:
        return [
            ("halve the batch or the tokens kept (max_new_tokens, max_length): the cache"
             " scales with both", held // 2),
            ("offload or quantize the cache (Hugging Face: generate(...,"
             ' cache_implementation="offloaded" or "quantized"))', None),
        ]  # fmt: skip
    if framework == "megatron":
        return [
            ("the buffers are sized by this rank's parameters: spread the model over more ranks"
             " (a larger tensor or pipeline parallel size)", None),
        ]  # fmt: skip
    return [
        ("lower reduce_bucket_size / allgather_bucket_size, or contiguous_gradients=false", None)
    ]


# static memory

LOW_PRECISION_OPTIMIZER = "keep optimizer state in 8 bits (bitsandbytes' Adam8bit)"
OPACUS_PER_SAMPLE = (
    "ghost clipping instead of Opacus' per-sample gradients"
    ' (make_private(..., grad_sample_mode="ghost"); or a smaller physical batch:'
    " BatchMemoryManager's max_physical_batch_size)"
)
"""DP-SGD's per-sample gradients (``p.grad_sample``) and their clipped sum (``p.summed_grad``),
one per example of the physical batch: ghost clipping computes the per-sample norms without
them; a smaller physical batch, with the same logical batch, holds fewer."""
SHARD_MORE_RANKS = (
    "shard parameters, gradients and optimizer state across ranks (FSDP, ZeRO-3): over N"
    " ranks each keeps 1/N"
)
OFFLOAD_OPTIMIZER = "offload optimizer state to the CPU (ZeRO-Offload, FSDP's CPUOffload)"
RESHARD_AFTER_FORWARD = (
    "reshard_after_forward=True in fully_shard (FSDP1: ShardingStrategy.FULL_SHARD instead of"
    " SHARD_GRAD_OP)"
)
"""FSDP holding every module's unsharded parameters from its forward to its backward: each
module then frees them after its forward and gathers them again for its backward."""
SMALLER_WRAP_UNITS = (
    "fully_shard smaller modules (FSDP1: a finer auto_wrap_policy) or prefetch less (FSDP1:"
    " backward_prefetch=None): the unsharded parameters are the running and prefetched units'"
)
"""FSDP resharding after forward, whose unsharded parameters are still a large part of the
moment: one or two wrap units' worth."""


def shard_optimizer(ranks: int) -> str:
    """ZeRO-1/2 over the job's ranks."""
    return f"shard optimizer state and gradients over the {ranks} ranks (ZeRO-2)"


def shard_all(ranks: int) -> str:
    """FSDP / ZeRO-3 over the job's ranks."""
    return f"shard parameters too over the {ranks} ranks (FSDP, ZeRO-3)"


def static_evidence(
    parts: Sequence[tuple[str, int, Sequence[KindSite]]],
    held: int,
    total: int | None,
    known: bool,
    unsharded: tuple[int, int] | None = None,
) -> str:
    """Parameters, gradients and optimizer state (each part shown, biggest first, with its
    biggest site when inferred), and their share of the device; a part the kinds do not show
    is left out unless the process told the kinds. ``unsharded``: FSDP's unsharded parameters
    and the part of them held from the forward into the backward (0: not told), said after
    the parameters (``parameters 5.56 GiB, of which unsharded by FSDP's all-gather 4.75 GiB,
    4.50 GiB held from the forward to the backward``)."""
    share = f", {held / total:.0%} of the {fmt(total)} device" if total else ""
    how = "" if known else ", inferred"
    ordered = sorted(parts, key=lambda part: -part[1])
    words = ", ".join(
        f"{name} {fmt(size)}{f' ({_site(sites[0].site)})' if sites and not known else ''}"
        f"{_unsharded(unsharded) if name == 'parameters' else ''}"
        for name, size, sites in ordered
    )
    return f"{words}{how}{share}"


def _unsharded(unsharded: tuple[int, int] | None) -> str:
    """``, of which unsharded by FSDP's all-gather 4.75 GiB, 4.50 GiB held from the forward to
    the backward``, or nothing."""
    if unsharded is None:
        return ""
    gathered, held = unsharded
    words = f", of which unsharded by FSDP's all-gather {fmt(gathered)}"
    return words + (f", {fmt(held)} held from the forward to the backward" if held else "")


# activations

HALF_BATCH = "halve the micro-batch"
HALF_INFERENCE_BATCH = "halve the batch"
"""The fix where nothing is saved for a backward: an inference forward's batch, which no
training step splits into micro-batches."""
HALF_SEQUENCE = "halve the sequence length"
CHECKPOINTING = "activation checkpointing (keeps only each checkpointed block's inputs)"
CHECKPOINTING_IF_GRAD = (
    "activation checkpointing, if this forward runs with grad (a training step's first "
    "forward: the trace has no backward yet to tell)"
)
"""An OOM in a forward of a trace with no backward: an inference loop's, or a training step's
first forward, which the trace cannot tell apart; checkpointing helps only the second."""
CHECKPOINTING_OR_HALF = "activation checkpointing or half the micro-batch"
"""The peak's fix for activations saved for a backward: either cuts them by about half."""
HALF_NO_BACKWARD = "half the batch or the sequence"
"""The peak's fix for a forward's tensors that no backward will use (no ``activation`` at the
moment, or no backward in the trace: checkpointing frees nothing there)."""
_KIND_WORDS = {"activation": "activations", "input": "input batch", "temporary": "temporaries"}
"""How a kind of the kinds table is called in a cause's evidence."""
_FAILING_STEP = "the failing step's tensors"
_FAILING_FORWARD = "the failing forward's tensors"
"""What an OOM's unwinding freed: a training step's, or a forward's where nothing is saved
for a backward (no activations)."""


def chunk_fix(site: str) -> str:
    """Compute the biggest op in two chunks (attention over halves of the queries...)."""
    return f"compute {_site(site)} in chunks (attention: over blocks of queries)"


def activations_evidence(
    held: int,
    sites: Sequence[tuple[str, int]],
    parts: Sequence[tuple[str, int]],
    *,
    unwound: bool,
    inferred: bool,
    inference: bool = False,
) -> str:
    """The step's tensors at the moment judged, with their biggest sites: proven by the
    unwinding (``the failing step's tensors``, or ``the failing forward's tensors, no backward
    in the trace`` where the trace shows forwards alone: ``inference``), or by inferred kinds,
    each named as the kinds table names it (``temporaries 228.35 MiB``, ``activations 2.00 GiB
    and temporaries 1.00 GiB``, ``activations 2.00 GiB, input batch 1.50 GiB and temporaries
    1.00 GiB``), biggest first."""
    where = _sites(sites)
    if unwound:
        failing = f"{_FAILING_FORWARD}, no backward in the trace" if inference else _FAILING_STEP
        return f"{failing}, {fmt(held)} freed by unwinding right after the OOM{where}"
    how = ", inferred" if inferred else ""
    ordered = sorted(parts, key=lambda part: -part[1]) or [("activation", held)]
    named = [f"{_KIND_WORDS[kind]} {fmt(size)}" for kind, size in ordered]
    words = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 2 else named)
    return f"{words}{how}{where}"


# an optimizer step's temporaries

FUSED_OPTIMIZER = "fused=True in Adam/AdamW (no per-parameter temporaries)"
FOREACH_OFF = "foreach=False in the optimizer (one parameter's temporaries at a time)"


def in_place_step(site: str | None) -> str:
    """A hand-written step's fix: update in place where it makes its temporaries."""
    where = f" at {_site(site)}" if site else ""
    return f"update in place in the optimizer's step{where} (mul_, addcdiv_, out=)"


def optimizer_step_evidence(
    held: int, blocks: int, sites: Sequence[tuple[str, int]], *, inferred: bool
) -> str:
    """``optimizer temporaries 128.00 MiB in 4 blocks inside the optimizer's step, inferred
    (train.py:30 <module> 128.00 MiB)``: what a multi-tensor step holds at the moment judged."""
    how = ", inferred" if inferred else ""
    return (
        f"optimizer temporaries {fmt(held)} in {blocks:,} blocks inside the optimizer's step"
        f"{how}{_sites(sites)}"
    )


def _sites(sites: Sequence[tuple[str, int]], shown: int = 2) -> str:
    """`` (softmax.py:14 softmax 293.00 MiB, …)``: the biggest sites with their bytes."""
    if not sites:
        return ""
    words = ", ".join(
        f"{short_site(_FOLDERS.sub('', site), _LISTED)} {fmt(size)}" for site, size in sites[:shown]
    )
    return f" ({words}{', …' if len(sites) > shown else ''})"


# outside PyTorch, pending frees

OUTSIDE_FIX = (
    "find who holds it: NCCL_BUFFSIZE or fewer communicators, torch.cuda.mem_get_info() around"
    " init_process_group, nvidia-smi for other processes"
)
PENDING_FIX = (
    "free on the stream that uses the tensor, or synchronize before allocating again"
    " (NCCL: TORCH_NCCL_AVOID_RECORD_STREAMS=1)"
)


def outside_evidence(moment: OomMoment, external: int) -> str:
    """limit - device free - reserved (- the context the dump accounts for)."""
    context = f" - the context {fmt(moment.context_bytes)}" if moment.context_bytes else ""
    return (
        f"{fmt(external)} of the device is not PyTorch's (limit {fmt(moment.device_total_bytes)}"
        f" - {device_free_text(moment.device_free_bytes)} - reserved"
        f" {fmt(moment.reserved_bytes)}{context}): NCCL, the CUDA context or another process"
    )


def pending_evidence(pending: int, sites: Sequence[tuple[str, int]]) -> str:
    """Active less allocated: freed on one stream, awaiting another's events."""
    where = ", ".join(f"{_site(site)} ({fmt(size)})" for site, size in sites)
    return (
        f"{fmt(pending)} freed on one stream still awaits another stream's events"
        f" (record_stream){': ' + where if where else ''}"
    )


# fragmentation

EXPANDABLE_FIX = "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def fragmentation_evidence(
    moment: OomMoment, holes: int, steps_bought: int | None, *, planned: bool = False
) -> str:
    """Free inside reserved but in pieces; with expandable segments the request is served (the
    replay's answer, or the plan's own run with them gets past it); with growth, about how many
    steps that buys."""
    bought = ""
    if steps_bought is not None:
        bought = f"; at the growth's rate that buys about {steps_bought:,} more steps"
    served = (
        "the plan's own run with expandable_segments:True gets past it"
        if planned
        else "replayed with expandable_segments the request is served"
    )
    return (
        f"{fmt(holes)} was free inside reserved segments but the largest free block was"
        f" {fmt(moment.largest_free_block_bytes)}; {served}{bought}"
    )


FRAGMENTED_EXPANDABLE_ON = (
    "fragmentation remains with expandable_segments already on: memforensics replay FILE"
    " lists the tensors that pin partly used segments"
)
NO_EXPANDABLE_RELEASE = (
    "the free memory was in pieces, but this dump's torch predates expandable_segments"
    " (2.1): only a newer torch or a lower peak helps"
)
EXPANDABLE_DOES_NOT_SERVE = (
    "the free memory was in pieces, but replayed with expandable_segments the request still"
    " fails: that setting is no fix here"
)
EXPANDABLE_PLANNED_RUNS_OUT = (
    "the free memory was in pieces, but expandable_segments would also run out: the plan's own"
    " run with expandable_segments:True runs out too, so that setting is no fix here"
)


def missing_replay(why: str | None) -> str:
    """Fragmentation without the replay's answer."""
    because = f" ({why})" if why else ""
    return (
        "the free memory was in pieces, but whether expandable_segments would serve the request"
        f" is unproven{because}: memforensics replay FILE asks"
    )


# what is missing

MISSING_HISTORY = (
    "no allocator history and no kinds from the process: growth cannot be seen, and kinds are"
    " inferred from the live blocks' stacks alone; call memforensics.install(steps=N,"
    " model=..., optimizer=...) before the model reaches the device"
)
MISSING_STEPS = (
    "no live block carries a step: growth step after step cannot be seen; memforensics.step()"
    " tags allocations with their step, and window dumps (install(steps=N)) show growth across"
    " steps"
)
MISSING_DEVICE_FREE = (
    "memory outside PyTorch is unknown: the device's free bytes at the failure were not"
    " recorded (memforensics' OOM observer records them in the sidecar; with PyTorch alone,"
    " torch.cuda.mem_get_info() at the failure)"
)
MISSING_DEVICE_TOTAL = (
    "memory outside PyTorch is unknown: the device's size (or the process's limit) was not"
    " recorded, only its free bytes (memforensics' OOM observer records both in the sidecar;"
    " --device-memory gives it by hand)"
)


# the headline


def headline(
    name: str,
    evidence: str,
    freed: int | None,
    sufficient: bool | None,
    needed: int | None,
    fix: str | None,
) -> str:
    """``growth: <evidence>; removing it frees X, the request needed Y → <fix>``."""
    words = cause_words(name, evidence)
    if sufficient and freed is not None and needed:
        words += f"; removing it frees {fmt(freed)}, the request needed {fmt(needed)}"
    elif sufficient is False and needed:
        words += f"; no single cause frees the {fmt(needed)} the request needed"
    return words + (f" → {fix}" if fix else "")


def _where(device_total: int | None) -> str:
    """``on the 8.00 GiB device``, or what is counted when the device's size is not known."""
    if device_total is not None:
        return f"on the {fmt(device_total)} device"
    return (
        "in what is reserved (the device's size is not known: --device-memory SIZE gives it,"
        " and counts what the device has left)"
    )


def served(top: str | None, requested: int | None = None, device_total: int | None = None) -> str:
    """A ``--requested`` request the recorded state serves: it fits (an OOM of it met
    another state, with more live)."""
    words = "this state serves the request"
    if requested is not None:
        words += f": a request of {fmt(requested)} fits {_where(device_total)}"
    return words + (f"; the most memory here: {top}" if top else "")


def does_not_fit(requested: int, device_total: int | None, needed: int) -> str:
    """A ``--requested`` request the state does not serve, and what it lacks."""
    return (
        f"a request of {fmt(requested)} does not fit {_where(device_total)}: it lacks {fmt(needed)}"
    )


def no_cause() -> str:
    """Something failed (or neared the limit) and no cause was found."""
    return "no cause found on this dump's evidence (--verbose names what is missing)"


def failure_unknown(why: str) -> str:
    """Nothing records whether anything failed: the headline says so first."""
    return f"whether anything failed is unknown ({why})"


def empty(unknown: str | None) -> str:
    """A snapshot with nothing live and no allocation in its trace."""
    if unknown:
        return f"none: nothing is allocated in this snapshot; {failure_unknown(unknown)}"
    return "none: nothing is allocated in this snapshot and its trace holds no allocation"


def peak_headline(
    name: str,
    position: int,
    live: int,
    unattributed: int,
    top: tuple[str, int, str] | None,
    fix: tuple[str, int | None] | None,
    unknown: str | None,
    counted: int | None = None,
) -> str:
    """``peak 840.01 MiB at entry 1,156: activations 520.00 MiB (...) → <fix> frees ≈ 260.00
    MiB``; at the snapshot without a trace, with why nothing tells whether anything failed;
    with the bytes of no known kind when they outweigh the top part. ``counted``: the
    allocator's own peak, said when the trace's peak shows less (the trace began after the
    peak, or counts requests where the allocator counts whole blocks)."""
    if name == "snapshot":
        words = f"at the snapshot {fmt(live)}"
    elif counted is not None and counted > live:
        words = f"peak in the trace {fmt(live)} at entry {position:,}"
        words += f" (the allocator's own peak: {fmt(counted)})"
    else:
        words = f"peak {fmt(live)} at entry {position:,}"
    if unknown:
        words = f"{failure_unknown(unknown)}; {words}"
    if top is None:
        return words + ": no part of it has a stack that tells its kind"
    _cause, size, evidence = top
    words += f": {evidence}"
    if fix is not None:
        action, freed = fix
        words += f" → {action}" + (f" frees ≈ {fmt(freed)}" if freed else "")
    if unattributed > size:
        words += f"; {fmt(unattributed)} more has no stack that tells its kind"
    return words
