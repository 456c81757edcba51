"""How long does replaying a 1,000,000-event trace take, against ``pickle.load`` of its file?

Builds the trace by driving the allocator model itself with a training-like workload (a few
hundred long-lived blocks, activations of mixed sizes allocated and freed in waves, a few
``empty_cache`` calls), each entry with its own frames list over shared frame dicts, real-shaped
in depth (``_real_shape.stack_templates``, as PyTorch writes them: a list shared by every entry
would let ``pickle`` load the file about twice as fast as a real dump of the same length), and
pickles the snapshot. Then, in fresh interpreters, times plain ``pickle.load`` of the file and one
replay of its trace through the model (the self-check: recorded settings, segment events
compared), the file already loaded; the median of ``--repeats`` each. The target is a ratio of
at most 3.

    python benchmarks/bench_replay.py [--json PATH] [--events N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = 3.0
MiB = 1 << 20


def build(path: Path, events: int) -> None:
    """Write a snapshot whose trace holds about ``events`` entries."""
    from memforensics.allocator import AllocatorSettings, DeviceCachingAllocator, segment_blocks

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _real_shape import stack_templates

    rng = random.Random(11)
    sites = stack_templates(random.Random(12))
    trace: list[dict[str, Any]] = []
    clock = [1_700_000_000_000_000]

    def on_trace(action: str, addr: int, size: int, stream: int) -> None:
        clock[0] += 7
        frames = list(sites[(addr >> 9) % len(sites)])  # its own list, as torch writes it
        trace.append({"action": action, "addr": addr, "size": size, "stream": stream,
                      "time_us": clock[0], "frames": frames, "user_metadata": ""})  # fmt: skip

    model = DeviceCachingAllocator(AllocatorSettings(), capacity=80 << 30, on_trace=on_trace)
    kept = [model.malloc(rng.choice([4, 16, 64]) * MiB) for _ in range(300)]
    while len(trace) < events:
        wave = []
        for _ in range(rng.randint(20, 80)):
            size = rng.choice([rng.randint(1, 1 << 20), rng.randint(1 << 20, 12 * MiB),
                               rng.randint(12 * MiB, 200 * MiB)])  # fmt: skip
            block = model.malloc(size)
            if block is not None:
                wave.append(block)
        rng.shuffle(wave)
        for block in wave:
            model.free(block)
        if rng.random() < 0.01:
            model.empty_cache()
    segments = [
        {"address": head.address, "total_size": sum(b.size for b in segment_blocks(head)),
         "stream": head.stream, "segment_type": "small" if head.pool.is_small else "large",
         "device": 0, "is_expandable": False,
         "blocks": [{"address": b.address, "size": b.size, "requested_size": b.requested_size,
                     "state": "active_allocated" if b.allocated else "inactive", "frames": []}
                    for b in segment_blocks(head)]}
        for head in model.segment_heads()
    ]  # fmt: skip
    del kept
    snapshot = {"segments": segments, "device_traces": [trace],
                "allocator_settings": AllocatorSettings().to_snapshot()}  # fmt: skip
    with path.open("wb") as handle:
        pickle.dump(snapshot, handle, protocol=4)


def measure(path: Path, mode: str, repeats: int) -> dict[str, float]:
    """Child process: time ``mode`` ``repeats`` times; report the median."""
    from memforensics.analysis import load_dump
    from memforensics.analysis.oom import recorded_settings, state_before
    from memforensics.analysis.replay.replay import device_for
    from memforensics.analysis.replay.runner import run

    times, extra = [], {}
    dump = load_dump(path) if mode == "replay" else None
    for _ in range(repeats):
        start = time.perf_counter()
        if mode == "pickle":
            with path.open("rb") as handle:
                result: object = pickle.load(handle)
            del result
        else:
            assert dump is not None
            settings = recorded_settings(dump)
            begin = state_before(dump, 0, settings)
            replayed = run(dump, settings, begin, device_for(dump, None), exact=True,
                           stop_at_oom=False)  # fmt: skip
            extra = {"fidelity": replayed.fidelity or 0.0, "events": float(len(dump.trace))}
        times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times), **extra}


def _child(path: Path, mode: str, repeats: int) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--file", str(path), "--repeats", str(repeats)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result: dict[str, float] = json.loads(proc.stdout)
    return result


def main() -> int:
    """Build, measure both in fresh interpreters, print and optionally write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=["pickle", "replay"])
    parser.add_argument("--file", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.file, args.child, args.repeats)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "replay.pickle"
        build(path, args.events)
        size = path.stat().st_size
        loaded = _child(path, "pickle", args.repeats)
        replayed = _child(path, "replay", args.repeats)
    ratio = replayed["seconds"] / loaded["seconds"]
    figures = {
        "events": replayed.get("events", 0.0),
        "file_bytes": size,
        "pickle_load_seconds": loaded["seconds"],
        "replay_seconds": replayed["seconds"],
        "fidelity": replayed.get("fidelity", 0.0),
        "ratio": ratio,
        "target": TARGET,
        "met": ratio <= TARGET,
    }
    print(f"trace of {figures['events']:,.0f} events, file {size / MiB:,.1f} MiB")
    print(f"pickle.load   {loaded['seconds']:8.2f} s")
    print(f"replay        {replayed['seconds']:8.2f} s   (fidelity {figures['fidelity']:.3f})")
    print(f"ratio         {ratio:8.2f}   (target <= {TARGET})")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if figures["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
