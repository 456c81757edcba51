"""Does planning cost host memory and time that grow with the model?

Three scripts in ``benchmarks/plan_scripts/`` are planned by the real ``memforensics plan``
command, each in its own process, measured by that process's own rusage: peak resident memory
(``ru_maxrss``), CPU seconds (user + system) and wall seconds.

* ``gpt_train.py``: one training step (AdamW, bf16 autocast, batch 4, context 512) of a
  2.79B-parameter GPT-style model built on the CPU and moved to CUDA, as the cs336 assignment's
  scripts do: 11.2 GB of float32 weights, were they made.
* ``llama_hf.py``: Llama 3 70B's shape built by Hugging Face's ``from_config`` on the CPU,
  moved with ``.to("cuda", torch.bfloat16)``, one forward pass: 282 GB of float32 weights.
  Needs ``transformers`` (its row says so where it is absent).
* ``llama_titan.py``: the same shape built as torchtitan builds it (meta device, then
  ``to_empty(device="cuda")`` and ``init_weights()``), one training step.

Targets: peak host memory within 2 GiB for each; the 2.79B step within 60 s of CPU.

    python benchmarks/bench_plan_scale.py [--json PATH] [--quick]
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Figure, figure, parse_args, report

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "benchmarks" / "plan_scripts"
GiB = 1 << 30

RUNS = (
    ("2.79B GPT training step, built on the CPU", "gpt_train.py", ()),
    ("70B Llama, Hugging Face from_config", "llama_hf.py", ("--device-memory", "192GiB")),
    ("70B Llama, torchtitan meta init", "llama_titan.py", ("--device-memory", "2TiB")),
)


def child(command: list[str], cwd: Path) -> tuple[float, float, int]:
    """CPU seconds, wall seconds and peak RSS (bytes) of one child process (its own rusage)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src")
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise subprocess.CalledProcessError(code, command)
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss * 1024


def main() -> int:
    """Each script planned once with --quick, else the best of 3."""
    args = parse_args(__doc__)
    repeats = 1 if args.quick else 3
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        for name, script, options in RUNS:
            if script == "llama_hf.py" and importlib.util.find_spec("transformers") is None:
                print(f"{name}: not run (transformers is not installed)")
                continue
            where = str(SCRIPTS / script)
            command = [sys.executable, "-m", "memforensics", "plan", *options, where]
            cpu, wall, rss = min(child(command, cwd) for _ in range(repeats))
            figures.append(
                figure(f"{name}: peak host RSS", "2 GiB budget", rss, GiB * 2, "B", target="<= 1")
            )
            if script == "gpt_train.py":
                figures.append(
                    figure(f"{name}: CPU", "60 s budget", cpu, 60.0, "s", target="<= 1", wall=wall)
                )
            else:
                figures.append(figure(f"{name}: CPU", "60 s budget", cpu, 60.0, "s", wall=wall))
    return report("memforensics plan at scale", figures, args.json)


if __name__ == "__main__":
    sys.exit(main())
