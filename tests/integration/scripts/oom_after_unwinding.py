"""A training loop that runs out of memory on the sim device, catches the error after the step
has unwound and dumps the snapshot itself, with no sidecar (the most common way OOM dumps are
taken): ``python oom_after_unwinding.py OUT.pickle``."""

from __future__ import annotations

import gc
import pickle
import sys

from memforensics.backends.sim import SimOutOfMemoryError, reset_device

MiB = 1 << 20


def build_model(device):
    return [device.empty(16 * MiB) for _ in range(4)]  # weights


def update_nodes(device, batch):
    nodes = device.empty(batch * 96 * MiB)  # nodes
    edges = device.empty(batch * 128 * MiB)  # edges
    messages = device.empty(batch * 160 * MiB)  # messages
    return device.empty(batch * 200 * MiB), (nodes, edges, messages)  # aggregate


def main() -> None:
    device = reset_device(total_bytes=2048 * MiB)
    device.record_memory_history("all", max_entries=100_000)
    weights = build_model(device)
    try:
        for batch in (1, 1, 4):
            update_nodes(device, batch)
    except SimOutOfMemoryError:
        pass  # the step's tensors go with its frames; dump what is left, as users do
    gc.collect()  # the sim's error holds its frames in a cycle; torch's is gone by now
    with open(sys.argv[1], "wb") as out:
        pickle.dump(device.snapshot(), out, protocol=4)
    assert weights


if __name__ == "__main__":
    main()
