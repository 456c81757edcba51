"""Triton as a script's own code meets it in a planned run: kernels it writes and launches,
autotuning, and ``triton.testing``'s benchmarks.

A CUDA build of torch brings Triton with it (its Linux wheels require it), so a script written
for the GPU imports it freely: a FlashAttention-2 forward written in Triton, an autotuned
matmul, ``triton.testing.do_bench`` timing both. The plan runs on a CPU, where Triton is often
not installed and, where it is, launches nothing without a GPU. The script's ``import triton``
is therefore answered by this module's stand-in, whether or not Triton is installed; torch's
own imports of Triton are torch's (the plan runs torch's CPU code, never its Triton
code generation).

What the stand-in does is what Triton does to PyTorch's caching allocator:

- **A launch allocates nothing.** A kernel writes into tensors the script made for it
  (``torch.empty_like(q)``) before the launch; those are the script's allocations and are
  counted as such. The kernel's values are not computed: its outputs keep the values the plan
  made up for them.
- **Autotuning** (``@triton.autotune`` with more than one config) benchmarks each config at the
  first launch of each key, as ``triton.runtime.autotuner.Autotuner`` does: every benchmark is a
  ``do_bench``, and ``restore_value`` clones the named arguments before each timed launch and
  copies them back after.
- **``triton.testing.do_bench``** takes the 256 MiB buffer it clears the L2 cache with
  (``get_empty_cache_for_benchmark``) for as long as it runs, and calls ``fn`` as often as
  Triton's own: once, five times to estimate its time, then as many warm-up and timed calls as
  fit in ``warmup`` and ``rep`` milliseconds of that estimate (the plan's events time the host).

Kernel bodies are never run, on a GPU by Python either, so ``triton.language`` answers every
name a kernel uses with a placeholder; only ``constexpr`` and the dtypes are used outside
kernels (annotations, tables of dtypes).
"""
