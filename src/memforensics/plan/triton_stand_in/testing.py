"""``triton.testing`` in a planned run: ``do_bench`` calls its function as Triton calls it and
holds the buffer Triton clears the L2 cache with; ``perf_report`` sweeps its grid."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from memforensics.plan.triton_stand_in.driver import empty_cache_for_benchmark
from memforensics.plan.triton_stand_in.kernels import milliseconds


def do_bench(
    fn: Callable[[], Any],
    warmup: float = 25,
    rep: float = 100,
    grad_to_none: Iterable[Any] | None = None,
    quantiles: Sequence[float] | None = None,
    return_mode: str = "mean",
) -> Any:
    """Milliseconds per call of ``fn`` on the host, with ``fn`` called as Triton calls it
    and the L2-clearing buffer held throughout, as on the GPU."""
    import torch

    if return_mode not in ("min", "max", "mean", "median", "all"):
        raise AssertionError(f"return_mode {return_mode!r}")
    fn()
    torch.cuda.synchronize()
    cache = empty_cache_for_benchmark()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        cache.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = start.elapsed_time(end) / 5
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    times = []
    for _ in range(max(1, int(rep / estimate))):
        for tensor in grad_to_none or ():
            tensor.grad = None
        cache.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        times.append((start, end))
    torch.cuda.synchronize()
    del cache
    measured = torch.tensor([s.elapsed_time(e) for s, e in times], dtype=torch.float)
    return _summary(measured, quantiles, return_mode)


def _summary(times: Any, quantiles: Sequence[float] | None, mode: str) -> Any:
    """``do_bench``'s answer from its timings: the quantiles asked for, or one statistic."""
    import torch

    if quantiles is not None:
        found = torch.quantile(times, torch.tensor(quantiles, dtype=torch.float)).tolist()
        return found[0] if len(found) == 1 else found
    if mode == "all":
        return times.tolist()
    return getattr(torch, mode)(times).item()


class Benchmark:
    """``triton.testing.Benchmark``: the grid of arguments a ``perf_report`` sweeps."""

    def __init__(
        self,
        x_names: Sequence[str],
        x_vals: Sequence[Any],
        line_arg: str,
        line_vals: Sequence[Any],
        line_names: Sequence[str],
        plot_name: str,
        args: dict[str, Any],
        xlabel: str = "",
        ylabel: str | tuple[str, str] = "",
        x_log: bool = False,
        y_log: bool = False,
        styles: Any = None,
    ) -> None:
        self.x_names = list(x_names)
        self.x_vals = list(x_vals)
        self.line_arg = line_arg
        self.line_vals = list(line_vals)
        self.line_names = list(line_names)
        self.plot_name = plot_name
        self.args = dict(args)


class Mark:
    """``@triton.testing.perf_report(...)``: ``run`` calls the function at every point of each
    benchmark's grid, as Triton's does, and prints the table it measured where asked. Plots and
    saved files, which need the figures of a GPU, are not made."""

    def __init__(self, fn: Callable[..., Any], benchmarks: Benchmark | Sequence[Benchmark]):
        self.fn = fn
        self.benchmarks = [benchmarks] if isinstance(benchmarks, Benchmark) else list(benchmarks)

    def run(
        self,
        show_plots: bool = False,
        print_data: bool = False,
        save_path: str = "",
        return_df: bool = False,
        **kwargs: Any,
    ) -> Any:
        tables = [self._swept(bench, print_data, kwargs) for bench in self.benchmarks]
        if not return_df:
            return None
        try:
            pandas = importlib.import_module("pandas")
        except ImportError:
            return tables if len(tables) > 1 else tables[0]
        frames = [pandas.DataFrame(rows[1:], columns=rows[0]) for rows in tables]
        return frames if len(frames) > 1 else frames[0]

    def _swept(self, bench: Benchmark, shown: bool, kwargs: dict[str, Any]) -> list[list[Any]]:
        rows: list[list[Any]] = [[*bench.x_names, *bench.line_names]]
        for x in bench.x_vals:
            point = x if isinstance(x, (list, tuple)) else [x] * len(bench.x_names)
            named = dict(zip(bench.x_names, point, strict=False))
            measured = [
                self.fn(**named, **{bench.line_arg: line}, **bench.args, **kwargs)
                for line in bench.line_vals
            ]
            rows.append([*point, *(milliseconds(value) for value in measured)])
        if shown:
            print(f"{bench.plot_name}:")
            for row in rows:
                print("  ".join(str(value) for value in row))
        return rows


def perf_report(benchmarks: Benchmark | Sequence[Benchmark]) -> Callable[..., Mark]:
    """``triton.testing.perf_report``."""
    return lambda fn: Mark(fn, benchmarks)
