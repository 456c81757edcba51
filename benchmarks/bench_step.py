"""What does ``with mf.step(n):`` cost on a step that opens or closes no window?

Times ``with mf.step(next(c)): pass`` against ``with contextlib.nullcontext(next(c)): pass``
(the same call shape, so only the context managers differ), interleaved over repeats, for
backends ``none``, ``sim`` and a faked CUDA surface on the real CPU torch (steps annotated with
``_set_memory_metadata`` on enter and exit), and for a rank outside ``ranks``. Windows are
configured (``steps=4``) but open only after 10**12 steps, so every timed step is a plain one.

The near-OOM check is measured on the faked CUDA surface against the same facade with
``near_oom=False``: steps that never check (``near_oom_every`` past the run) must cost what a
step without the check costs, and a step that checks (``near_oom_every=1``) at most 20 µs more.

    python benchmarks/bench_step.py [--json PATH] [--quick]
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import tempfile
import timeit
from collections.abc import Callable, Iterator
from typing import Any

from _common import Figure, figure, parse_args, ratio_of, report

import memforensics

NEVER = 10**12


def per_op_ns(stmt: str, namespace: dict[str, Any], number: int) -> Callable[[], float]:
    """A callable timing ``number`` runs of ``stmt`` once; returns nanoseconds per run."""
    timer = timeit.Timer(stmt, globals=namespace)

    def run() -> float:
        return timer.timeit(number) / number * 1e9

    return run


@contextlib.contextmanager
def facade(**config: Any) -> Iterator[memforensics.MemoryForensics]:
    """An installed facade writing to a throwaway folder."""
    with tempfile.TemporaryDirectory() as out:
        mf = memforensics.install(out_dir=out, **config)
        try:
            yield mf
        finally:
            memforensics.uninstall()


def measure(
    name: str, target: str, repeats: int, number: int, **config: Any
) -> tuple[Figure, float]:
    """One row: step() on a facade built from ``config`` against nullcontext()."""
    with facade(**config) as mf:
        counter = itertools.count()
        namespace = {"mf": mf, "c": counter, "contextlib": contextlib}
        subject = per_op_ns("with mf.step(next(c)):\n    pass", namespace, number)
        reference = per_op_ns("with contextlib.nullcontext(next(c)):\n    pass", namespace, number)
        subject()  # warm up
        value, ref, ratio = ratio_of(subject, reference, repeats)
    return figure(
        name,
        "with contextlib.nullcontext():",
        value,
        ref,
        "ns",
        ratio=ratio,
        target=target,
        device=mf.backend.name,
        capturing=mf.capturing,
    ), ref


def paired(
    repeats: int, number: int, subject: dict[str, Any], reference: dict[str, Any]
) -> tuple[float, float, float]:
    """step() on two live facades built from ``subject`` and ``reference``, interleaved: median
    ns of each and the median ratio. Built directly (``install()`` keeps one per process)."""
    from memforensics.capture.config import build_config

    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        mf = memforensics.MemoryForensics(build_config({**subject, "out_dir": one}))
        ref = memforensics.MemoryForensics(build_config({**reference, "out_dir": two}))
        try:
            stmt = "with mf.step(next(c)):\n    pass"
            timer_s = per_op_ns(stmt, {"mf": mf, "c": itertools.count()}, number)
            timer_r = per_op_ns(stmt, {"mf": ref, "c": itertools.count()}, number)
            timer_s()
            timer_r()
            return ratio_of(timer_s, timer_r, repeats)
        finally:
            mf.close()
            ref.close()


def near_oom_figures(repeats: int, number: int, window: dict[str, Any]) -> list[Figure]:
    """The near-OOM rows (inside ``fake_cuda``): a step that never checks, one that always does."""
    base = {"device": "cuda", "journal_every": None, **window}
    off = {**base, "near_oom": False}
    never, off_ns, ratio = paired(repeats, number, {**base, "near_oom_every": NEVER}, off)
    rows = [
        figure(
            "step(), faked cuda, near-OOM on, no check due",
            "the same with near_oom=False",
            never,
            off_ns,
            "ns",
            ratio=ratio,
            target="<= 1.1",
        )
    ]
    every, off_ns, _ = paired(repeats, number, {**base, "near_oom_every": 1}, off)
    cost = max(every - off_ns, 0.0)
    rows.append(
        figure(
            "near-OOM check (near_oom_every=1) over near_oom=False",
            "20 µs budget",
            cost,
            20_000.0,
            "ns",
            target="<= 1",
        )
    )
    return rows


def main() -> int:
    """Measure every row and print the table."""
    args = parse_args(__doc__)
    repeats, number = (5, 20_000) if args.quick else (21, 100_000)
    window = {"steps": 4, "skip_first": NEVER}
    figures = []
    for name, config in (
        ("step(), device none", {"device": "none", **window}),
        ("step(), device sim", {"device": "sim", **window}),
        ("step(), sim, annotate_steps=False", {"device": "sim", "annotate_steps": False, **window}),
    ):
        target = "" if "annotate" in name else "<= 5"
        figures.append(measure(name, target, repeats, number, **config)[0])

    from _fakes import FakeCuda, fake_cuda

    with fake_cuda(FakeCuda()):
        figures.append(
            measure("step(), faked cuda", "<= 5", repeats, number, device="cuda", **window)[0]
        )
        figures += near_oom_figures(repeats, number, window)
    figures.append(
        measure(
            "step(), rank outside ranks", "<= 3", repeats, number, device="sim", rank=0, ranks=[1]
        )[0]
    )
    return report(
        "step() cost on a step that opens or closes no window (median ns per step)",
        figures,
        args.json,
        repeats=repeats,
        number=number,
    )


if __name__ == "__main__":
    sys.exit(main())
