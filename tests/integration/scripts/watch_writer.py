"""A training process for ``watch`` tests: steps on the sim device when told to, journaling each.

    python watch_writer.py OUT_DIR RANK LEAK_BYTES

Reads a number N per stdin line, runs N steps (keeping LEAK_BYTES more each step), then prints
``ok <last step>``; an empty line or end of input closes the facade and exits. The test drives
the pace, so it can read the journals at exactly known moments.
"""

from __future__ import annotations

import sys

import memforensics
from memforensics.backends.sim import reset_device

MiB = 1 << 20


def main(out_dir: str, rank: int, leak: int) -> int:
    """Step on command until told to stop."""
    device = reset_device(total_bytes=1 << 30)
    mf = memforensics.install(device="sim", out_dir=out_dir, rank=rank, journal_every=1)
    held = []
    step = -1
    for command in sys.stdin:
        if not command.strip():
            break
        for _ in range(int(command)):
            step += 1
            with mf.step(step):
                device.empty(MiB).free()
                if leak:
                    held.append(device.empty(leak))
        print(f"ok {step}", flush=True)
    mf.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
