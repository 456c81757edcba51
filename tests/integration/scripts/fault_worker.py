"""A training process for the fault tests: ``fault_worker.py MODE OUT_DIR [ARGS]``.

Run as a subprocess so that real faults (a file-size limit, ``kill -9``) hit a real process.
Modes:

- ``disk_full OUT_DIR LIMIT...``: windows and OOMs under ``RLIMIT_FSIZE`` (SIGXFSZ ignored, so
  writes fail with EFBIG), then one manual dump per extra LIMIT, then the limit lifted and
  dumps again. Prints one JSON object: what training saw and what was on disk after each fault.
- ``kill OUT_DIR EVENTS``: record EVENTS allocator events, print ``READY``, then dump the whole
  history again and again until killed.
"""

from __future__ import annotations

import json
import resource
import signal
import sys
from pathlib import Path
from typing import Any

import memforensics
from memforensics.backends.sim import SimOutOfMemoryError, reset_device

MiB = 1 << 20


def _stray(root: Path) -> list[str]:
    """Hidden temp files and half-written dumps: what must never outlive a failed write."""
    found = []
    for path in root.rglob("*"):
        temp = path.is_file() and path.name.startswith(".") and ".tmp-" in path.name
        orphan = path.suffix == ".json" and not path.with_suffix(".pickle").exists()
        if temp or orphan:
            found.append(str(path))
    return found


def _churn(device: Any, events: int) -> None:
    """Grow the allocator history by about ``events`` events (alloc, free requested, freed)."""
    for _ in range(events // 3):
        device.empty(4096)


def disk_full(out_dir: Path, limits: list[int]) -> dict[str, Any]:
    """Dumps under a file-size limit fail quietly; once it is lifted they land again."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    device = reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(
        device="sim", out_dir=str(out_dir), steps=2, keep_last=None, max_oom_snapshots=10
    )
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    report: dict[str, Any] = {"steps_done": [], "oom_errors": 0, "stray": [], "returned": []}

    def train(step: int, *, oom: bool) -> None:
        try:
            with mf.step(step):
                _churn(device, 3000)
                if oom:
                    device.empty(1 << 30)
        except SimOutOfMemoryError:
            report["oom_errors"] += 1
        report["steps_done"].append(step)

    resource.setrlimit(resource.RLIMIT_FSIZE, (limits[0], hard))
    train(0, oom=False)
    train(1, oom=False)  # window steps0-1 fails: EFBIG
    train(2, oom=True)  # OOM dump fails: EFBIG
    train(3, oom=False)  # window steps2-3 fails
    report["stray"] += _stray(out_dir)
    report["dumps_under_limit"] = [str(p) for p in mf.dumps]
    for limit in limits[1:]:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        returned = mf.dump()
        report["returned"].append(None if returned is None else str(returned))
        report["stray"] += _stray(out_dir)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space is back
    train(4, oom=False)
    train(5, oom=True)  # window steps4-5 and this OOM land
    report["manual_after"] = str(mf.dump())
    mf.close()
    report["dumps"] = [str(p) for p in mf.dumps]
    return report


def kill_target(out_dir: Path, events: int) -> None:
    """Dump a large history in a loop until someone kills this process."""
    device = reset_device(total_bytes=1 << 30)
    mf = memforensics.install(
        device="sim", out_dir=str(out_dir), oom_history="all", max_entries=events + 100
    )
    _churn(device, events)
    print("READY", flush=True)
    while True:
        mf.dump()


def main(argv: list[str]) -> int:
    """Dispatch on the mode."""
    mode, out_dir = argv[0], Path(argv[1])
    if mode == "disk_full":
        print(json.dumps(disk_full(out_dir, [int(a) for a in argv[2:]])), flush=True)
        return 0
    if mode == "kill":
        kill_target(out_dir, int(argv[2]))
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
