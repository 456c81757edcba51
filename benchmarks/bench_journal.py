"""What does the per-rank journal cost the training thread?

Times ``with mf.step(next(c)): pass`` on the faked CUDA surface with ``journal_every=1`` (every
step writes a line: ``memory_stats()``, ``mem_get_info()``, formatting and one ``os.write``)
against the same facade with the journal off, interleaved over repeats, in CPU time of the
process (wall time, reported beside it, also counts waiting for a core on a shared machine).
Issue 13's budget is 20 µs per line over a step that writes none; and a step that writes none
must cost what a step costs with the journal off (``journal_every`` far away after the first
line).

Two fakes of ``memory_stats()``: the benchmarks' cheap one, and one that runs torch's real
``torch.cuda.memory_stats`` (its Python flattening of the allocator's nested dict into ~120
sorted keys, which is most of what the call costs on a GPU) over a nested dict of real shape.

    python benchmarks/bench_journal.py [--json PATH] [--quick]
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from _common import Figure, figure, parse_args, ratio_of, report
from _fakes import FakeCuda, fake_cuda
from bench_step import NEVER, per_op_ns

import memforensics
from memforensics.capture.config import build_config

BUDGET_NS = 20_000.0
POOLS = ("all", "large_pool", "small_pool")
FIELDS = ("current", "peak", "allocated", "freed")
STATS = ("active", "active_bytes", "allocated_bytes", "allocation", "inactive_split",
         "inactive_split_bytes", "requested_bytes", "reserved_bytes", "segment")  # fmt: skip


def nested_stats() -> dict[str, Any]:
    """``torch._C._cuda_memoryStats(device)``'s shape, with plausible values."""
    stats: dict[str, Any] = {
        name: {pool: dict.fromkeys(FIELDS, 123_456_789) for pool in POOLS} for name in STATS
    }
    stats.update(
        num_alloc_retries=2, num_ooms=0, num_sync_all_streams=0, num_device_alloc=40,
        num_device_free=3, max_split_size=-1, num_oom_rejections=0,
        oversize_allocations=dict.fromkeys(FIELDS, 0), oversize_segments=dict.fromkeys(FIELDS, 0),
        reserved_bytes_by_private_pools={},
    )  # fmt: skip
    return stats


class RealFlatteningCuda(FakeCuda):
    """``memory_stats`` is torch's own, over a fresh nested dict like the C++ call returns."""

    def __init__(self) -> None:
        super().__init__()
        import torch.cuda.memory

        self._torch_memory_stats = torch.cuda.memory.memory_stats
        self._nested = nested_stats()

    def memory_stats(self, device: Any = None) -> dict[str, Any]:
        import torch.cuda.memory

        nested = {k: (dict(v) if isinstance(v, dict) else v) for k, v in self._nested.items()}
        saved = torch.cuda.memory.memory_stats_as_nested_dict
        torch.cuda.memory.memory_stats_as_nested_dict = lambda device=None: nested
        try:
            result: dict[str, Any] = self._torch_memory_stats(device)
        finally:
            torch.cuda.memory.memory_stats_as_nested_dict = saved
        return result


@contextlib.contextmanager
def facade(**config: Any) -> Iterator[memforensics.MemoryForensics]:
    """A facade on the faked CUDA surface, writing to a throwaway folder.

    Built directly rather than with ``install()``, so that two can be live at once (a second
    ``install()`` would close the first) and be timed interleaved.
    """
    with tempfile.TemporaryDirectory() as out:
        settings = build_config(
            {"out_dir": out, "device": "cuda", "steps": 4, "skip_first": NEVER, **config}
        )
        mf = memforensics.MemoryForensics(settings)
        try:
            yield mf
        finally:
            mf.close()


def step_ns(journal_every: int | None, number: int, *, cpu: bool = False) -> Any:
    """A timer of ``number`` steps of a facade with this journal setting (after one step).

    ``cpu``: CPU time of this process (``time.process_time_ns``) instead of wall time. On a
    shared machine wall time also counts the waits for a core other processes hold, which is
    not a cost the line imposes; on a quiet machine the two agree.
    """
    stack = contextlib.ExitStack()
    mf = stack.enter_context(facade(journal_every=journal_every))
    counter = itertools.count()
    with mf.step(next(counter)):  # the first line (step 0) is written outside the timing
        pass
    if not cpu:
        timer = per_op_ns("with mf.step(next(c)):\n    pass", {"mf": mf, "c": counter}, number)
        return timer, stack

    def cpu_timer() -> float:
        start = time.process_time_ns()
        for _ in range(number):
            with mf.step(next(counter)):
                pass
        return (time.process_time_ns() - start) / number

    return cpu_timer, stack


def line_cost(name: str, fake: FakeCuda, repeats: int, number: int, target: str) -> Figure:
    """A step writing a line against one writing none, in CPU time; the difference against
    the budget. The wall-time difference is reported beside it."""
    with fake_cuda(fake):
        writing, close_a = step_ns(1, number, cpu=True)
        plain, close_b = step_ns(None, number, cpu=True)
        wall_writing, close_c = step_ns(1, number)
        wall_plain, close_d = step_ns(None, number)
        with close_a, close_b, close_c, close_d:
            writing()
            plain()
            value, ref, _ = ratio_of(writing, plain, repeats)
            wall, wall_ref, _ = ratio_of(wall_writing, wall_plain, repeats)
    extra = value - ref
    return figure(
        name,
        "20 µs budget",
        extra,
        BUDGET_NS,
        "ns",
        target=target,
        step_with_line_cpu_ns=value,
        step_without_cpu_ns=ref,
        extra_wall_ns=wall - wall_ref,
    )


def main() -> int:
    """Measure every row and print the table."""
    args = parse_args(__doc__)
    repeats, number = (5, 1_000) if args.quick else (15, 3_000)
    figures = [
        line_cost(
            "journal line, faked CUDA: extra ns per step", FakeCuda(), repeats, number, "<= 1"
        ),
        line_cost(  # torch's own cost, reported beside the budget, not judged by it
            "journal line, torch's memory_stats() flattening",
            RealFlatteningCuda(),
            repeats,
            number // 3,
            "",
        ),
    ]
    with fake_cuda(FakeCuda()):
        idle, close_a = step_ns(NEVER, number * 10)
        off, close_b = step_ns(None, number * 10)
        with close_a, close_b:
            idle()
            off()
            value, ref, ratio = ratio_of(idle, off, repeats * 2)
    figures.append(
        figure(
            "step() writing no line (journal on, faked CUDA)",
            "step() with journal_every=None",
            value,
            ref,
            "ns",
            ratio=ratio,
            target="<= 1.1",
        )
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(f"load average {load} on {os.cpu_count()} CPUs: absolute ns scale with it")
    return report(
        "journal cost on the training thread (median ns)",
        figures,
        args.json,
        repeats=repeats,
        number=number,
        load_average=load,
    )


if __name__ == "__main__":
    sys.exit(main())
