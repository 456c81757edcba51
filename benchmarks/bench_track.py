"""What does listing the tracked tensors cost a dump?

``install(model=..., optimizer=...)`` makes every dump walk the tracked modules and optimizers
(``capture/track.py``): parameters, gradients, optimizer state and buffers, one sidecar entry
each. Nothing of it runs in ``step()``; this is what a dump pays. Measured on the real CPU torch
(the walk is the same Python on every device; CPU tensors are filtered as CUDA dumps filter
theirs by device type, so the walk here records every tensor, the most it can do):

* the walk of a model with 1,000 parameters after one Adam step (5,000 tensors: parameters,
  gradients, ``exp_avg``, ``exp_avg_sq``, ``step``) against reading ``data_ptr()`` of each of
  those tensors once, the least any walk could do;
* the same walk plus the JSON the sidecar writes of it (``indent=2``, as ``capture/atomic.py``);
* a model with 10,000 parameters against the 1,000-parameter one: the walk is O(tensors), so
  about 10 times (the target leaves room for caches and the collector, which 50,000 fresh entries
  wake).

    python benchmarks/bench_track.py [--json PATH] [--quick]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from _common import figure, parse_args, ratio_of, report

from memforensics.capture.track import Tracker


def trained(parameters: int) -> tuple[Any, Any]:
    """``parameters // 2`` small Linear layers (a weight and a bias each), after one Adam step."""
    import torch

    layers = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(parameters // 2)])
    optimizer = torch.optim.Adam(layers.parameters(), lr=1e-3)
    for param in layers.parameters():
        param.grad = torch.zeros_like(param)
    optimizer.step()
    return layers, optimizer


def seconds(run: Callable[[], object], number: int) -> Callable[[], float]:
    """A callable timing ``number`` runs of ``run``; returns the median seconds of one."""

    def timed() -> float:
        times = []
        for _ in range(number):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return timed


def every_tensor(model: Any, optimizer: Any) -> list[Any]:
    """The tensors the walk records, gathered once (for the floor: a data_ptr() each)."""
    tensors = []
    for param in model.parameters():
        tensors += [param, param.grad]
        tensors += [v for v in optimizer.state[param].values() if hasattr(v, "data_ptr")]
    return tensors


def main() -> int:
    """Measure every row and print the table."""
    args = parse_args(__doc__)
    repeats, number = (5, 5) if args.quick else (15, 20)
    model, optimizer = trained(1_000)
    tracker = Tracker()
    tracker.add(model, optimizer)
    tensors = every_tensor(model, optimizer)
    found = tracker.tensors("cpu")
    assert found is not None
    assert len(found.entries) == len(tensors) == 5_000, (len(found.entries), len(tensors))

    def walk() -> object:
        return tracker.tensors("cpu")

    def floor() -> object:
        return [tensor.data_ptr() for tensor in tensors]

    def walk_and_json() -> object:
        walked = tracker.tensors("cpu")
        assert walked is not None
        return json.dumps({"tensors": walked.entries}, indent=2, sort_keys=True)

    figures = []
    value, ref, ratio = ratio_of(seconds(walk, number), seconds(floor, number), repeats)
    figures.append(
        figure(
            "tensor walk, 1,000 parameters + Adam (5,000 tensors)",
            "data_ptr() of each tensor",
            value,
            ref,
            "s",
            ratio=ratio,
            target="<= 15",
            per_tensor_us=value / len(tensors) * 1e6,
        )
    )
    value, ref, ratio = ratio_of(seconds(walk_and_json, number), seconds(walk, number), repeats)
    figures.append(
        figure(
            "walk + the sidecar's JSON of it",
            "the walk",
            value,
            ref,
            "s",
            ratio=ratio,
            sidecar_bytes=len(walk_and_json()),  # type: ignore[arg-type]
        )
    )
    big_model, big_optimizer = trained(10_000)
    big = Tracker()
    big.add(big_model, big_optimizer)

    def walk_big() -> object:
        return big.tensors("cpu")

    value, ref, ratio = ratio_of(seconds(walk_big, number), seconds(walk, number), repeats)
    figures.append(
        figure(
            "tensor walk, 10,000 parameters + Adam",
            "the same, 1,000 parameters",
            value,
            ref,
            "s",
            ratio=ratio,
            target="<= 15",
        )
    )
    return report("tracked tensors at a dump", figures, args.json)


if __name__ == "__main__":
    sys.exit(main())
