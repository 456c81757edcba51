"""What does ``memforensics plan`` cost on the shared ``small-lm-forward-backward`` workload?

The subject is the whole planned run of the course's script (the 12-layer, d 768 LM at batch 32,
ctx 256: five warm-up steps and one recorded step, forward and backward), measured as the CPU
seconds of its process (user + system: a loaded shared machine stretches wall time, not CPU).
The reference is the CPU cost of the same interpreter importing what the script imports (torch,
einops, einx, jaxtyping, pandas): what any run of the script pays first. Targets: the whole run
within 30 s and the recorded step within 5 s (the script times that step itself); host memory
within 1.1x the peak RSS of the same interpreter building the script's model on the CPU without
planning (what the script itself holds on the host: the move must release the parameters, and
nothing the script puts on "cuda" may be materialised).

A second subject is an inference loop: ``plan_scripts/gpt2_generate.py``, a 4-layer GPT-2's
``generate`` of 64 tokens (some ten thousand small operators on a few shapes), where the cost
of each emulated operator, not its size, decides the time. Its reference is the same
interpreter importing torch and transformers and building the model on the CPU, unplanned: the
difference is what the plan adds, operator by operator. Skipped without ``transformers``.

A third is a reinforcement-learning update loop: ``plan_scripts/policy_steps.py``, a PPO loss
on a policy of 64-unit layers with Adam (some two hundred and fifty tiny operators a step),
against the same script run on the CPU (``--device cpu``): what a user compares a plan with.

A fourth is a Gaussian process's hyperparameter fit: ``plan_scripts/gp_fit.py``, BoTorch's and
GPyTorch's loop (a 64-point kernel matrix from ``cdist`` and ``exp``, its Cholesky factor, a
solve, backward and an Adam step: some 120 small operators an iteration), against the same
script run on the CPU.

A fifth is the stack the planned device records under each allocation: a capture 48 frames
deep (a GPT-2 ``generate`` loop's depth) of a chain of callers seen before, as most captures
are, against the bare walk of ``f_back`` over the same frames (what reading any Python stack
costs), in-process CPU time.

A sixth is what the planned device adds to each allocation the allocator model serves: a
``malloc`` and its ``free`` of 256 KiB with the history recorded (the stack captured, the
events traced, as under every plan), 20 frames above the caller, against the same pair on the
allocator model alone, in-process CPU time.

A seventh is a long allocator trace: ``plan_scripts/long_trace.py``, an ODE solved in many tiny
adaptive Runge-Kutta steps (torchdiffeq's shape) with the allocator's history recorded and a
snapshot dumped at its end, its trace past 100,000 events. Planned at N and 2N steps, against the
same script on the CPU at 2N; and how the plan's time grows: what 2N steps add to a plan of no
step, over twice what N steps add (1 where each operator costs the same however long the trace).

    python benchmarks/bench_plan.py [--json PATH] [--quick]
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from _common import Figure, figure, parse_args, report, shared_data

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = shared_data() / "real-workloads" / "small-lm-forward-backward"
SCRIPT = WORKLOAD / "code" / "cs336_systems" / "benchmarking_script.py"
IMPORTS = "import torch, einops, einx, jaxtyping, pandas"
BUILD = (
    IMPORTS + "; import cs336_basics.model as m; "
    "m.BasicsTransformerLM(10000, 256, 768, 12, 12, 3072, 10000)"
)  # what the script holds on the CPU before its move: the interpreter, the model built there


GENERATE = ROOT / "benchmarks" / "plan_scripts" / "gpt2_generate.py"
POLICY = ROOT / "benchmarks" / "plan_scripts" / "policy_steps.py"
GP_FIT = ROOT / "benchmarks" / "plan_scripts" / "gp_fit.py"
LONG_TRACE = ROOT / "benchmarks" / "plan_scripts" / "long_trace.py"
GENERATE_BUILD = (
    "import torch; from transformers import GPT2Config, GPT2LMHeadModel; "
    "GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=5000, "
    "n_positions=256))"
)  # the generating script less its plan: imports and the model built on the CPU


def child(command: list[str], cwd: Path) -> tuple[float, int, str]:
    """CPU seconds, peak RSS (bytes) and stdout of one child process (its own rusage)."""
    env = dict(os.environ)
    code = WORKLOAD / "code"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(code / "cs336-basics"), str(code)])
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.DEVNULL, text=True
        )
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise subprocess.CalledProcessError(process.returncode, command)
        out.seek(0)
        stdout = out.read()
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, stdout


def main() -> int:
    """One reference run, then the planned run (one each with --quick, else the best of 3)."""
    args = parse_args(__doc__)
    repeats = 1 if args.quick else 3
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        reference, _, _ = min(child([sys.executable, "-c", IMPORTS], cwd) for _ in range(repeats))
        host = min(child([sys.executable, "-c", BUILD], cwd)[1] for _ in range(repeats))
        runs = []
        for _ in range(repeats):
            command = [
                sys.executable,
                "-m",
                "memforensics",
                "plan",
                "--device-capability",
                "8.0",
                str(SCRIPT),
            ]
            runs.append(child(command, cwd))
        cpu, rss, stdout = min(runs)
    timings = [float(x) for x in re.findall(r"^(\d+\.\d+)$", stdout, re.MULTILINE)]
    step = timings[-1] if timings else float("nan")
    figures = [
        figure(
            "whole script planned, CPU",
            "30 s budget",
            cpu,
            30.0,
            "s",
            target="<= 1",
            reference_cpu=reference,
        ),
        figure("of which the fixed start (imports), CPU", "whole run", reference, cpu, "s"),
        figure(
            "recorded step (the script's own timer)", "5 s budget", step, 5.0, "s", target="<= 1"
        ),
        figure(
            "peak host RSS",
            "the script's model built on the CPU, unplanned",
            rss,
            host,
            "B",
            target="<= 1.1",
        ),
    ]
    figures.append(_policy(repeats, 100 if args.quick else 500))
    figures.append(_small_operators(GP_FIT, "GP fit", repeats, 100 if args.quick else 600))
    figures.extend(_long_trace(repeats, 500 if args.quick else 2000))
    figures.append(_stack_capture(repeats))
    figures.append(_device_allocation(repeats))
    if importlib.util.find_spec("transformers") is not None:
        figures.extend(_generate(repeats))
    else:
        print("GPT-2 generate: not run (transformers is not installed)")
    return report("memforensics plan on small-lm-forward-backward", figures, args.json)


def _best_ns(one: Callable[[], object], repeats: int, calls: int) -> float:
    """CPU nanoseconds a call of ``one``: the best of ``repeats`` runs of ``calls`` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            one()
        best = min(best, time.process_time() - start)
    return best / calls * 1e9


def _stack_capture(repeats: int, depth: int = 48, calls: int = 20_000) -> Figure:
    """A capture of a chain seen before, ``depth`` frames deep, against the bare walk."""
    from memforensics.plan.device import _StackCapture

    capture = _StackCapture(())

    def allocate() -> object:
        return capture()

    def bare() -> None:
        frame = sys._getframe(1)
        while frame is not None:
            frame = frame.f_back

    def nested(level: int) -> tuple[float, float]:
        if level:
            return nested(level - 1)
        allocate()
        return _best_ns(allocate, repeats, calls), _best_ns(bare, repeats, calls)

    below = len(traceback.extract_stack())  # the frames under this function's
    captured, walked = nested(depth - below - 2)
    return figure(
        f"stack capture, {depth} frames, chain seen before, CPU",
        "bare f_back walk",
        captured,
        walked,
        "ns",
    )


def _device_allocation(repeats: int, depth: int = 20, pairs: int = 20_000) -> Figure:
    """A planned device's ``malloc`` and ``free``, recorded, against the allocator model's."""
    from memforensics.allocator import DeviceCachingAllocator, parse_conf
    from memforensics.plan.device import DeviceSpec, PlannedDevice

    size = 1 << 18
    device = PlannedDevice(DeviceSpec(1 << 34, (9, 0), 0, parse_conf(None)))
    device.record_history("all", max_entries=100_000, context="alloc", clear=False)
    model = DeviceCachingAllocator(parse_conf(None), capacity=1 << 34, device_total=1 << 34)

    def planned() -> None:
        device.free(device.malloc(size))  # type: ignore[arg-type]  # never None: 16 GiB free

    def modelled() -> None:
        model.free(model.malloc(size))  # type: ignore[arg-type]

    def nested(level: int) -> tuple[float, float]:
        if level:
            return nested(level - 1)
        planned()
        return _best_ns(planned, repeats, pairs), _best_ns(modelled, repeats, pairs)

    on_device, alone = nested(depth)
    return figure(
        "planned device malloc + free, recorded, CPU",
        "the allocator model's alone",
        on_device,
        alone,
        "ns",
    )


def _policy(repeats: int, steps: int) -> Figure:
    """The planned update loop, against the same loop on the CPU, runs alternated."""
    return _small_operators(POLICY, "PPO update loop", repeats, steps)


def _small_operators(path: Path, name: str, repeats: int, steps: int) -> Figure:
    """A planned loop of small operators, against the same loop on the CPU, runs alternated."""
    script = [str(path), "--steps", str(steps)]
    planned, on_cpu = [], []
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        for _ in range(repeats):
            on_cpu.append(child([sys.executable, *script, "--device", "cpu"], cwd)[0])
            planned.append(child([sys.executable, "-m", "memforensics", "plan", *script], cwd)[0])
    return figure(
        f"{name}, {steps} steps, planned, CPU",
        "the same loop run on the CPU",
        min(planned),
        min(on_cpu),
        "s",
    )


def _long_trace(repeats: int, steps: int) -> list[Figure]:
    """The planned ODE loop at no step, ``steps // 2`` and ``steps``, runs alternated, against
    the same loop on the CPU; and the growth of the plan's time past its fixed start."""
    planned: dict[int, list[float]] = {0: [], steps // 2: [], steps: []}
    on_cpu = []
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        for _ in range(repeats):
            cpu_command = [sys.executable, str(LONG_TRACE), "--steps", str(steps)]
            on_cpu.append(child([*cpu_command, "--device", "cpu"], cwd)[0])
            for count, times in planned.items():
                command = [sys.executable, "-m", "memforensics", "plan", str(LONG_TRACE)]
                times.append(child([*command, "--steps", str(count)], cwd)[0])
    start, half, whole = (min(planned[count]) for count in (0, steps // 2, steps))
    return [
        figure(
            f"ODE loop, {steps} steps, long trace, planned, CPU",
            "the same loop run on the CPU",
            whole,
            min(on_cpu),
            "s",
        ),
        figure(
            f"ODE loop planned, what {steps} steps add",
            f"twice what {steps // 2} add",
            whole - start,
            2 * (half - start),
            "s",
            target="<= 1.15",
        ),
    ]


def _generate(repeats: int) -> list[Figure]:
    """The planned ``generate`` loop, against its script's imports and model build unplanned."""
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        unplanned = min(
            child([sys.executable, "-c", GENERATE_BUILD], cwd)[0] for _ in range(repeats)
        )
        command = [sys.executable, "-m", "memforensics", "plan", "--device-capability", "9.0"]
        planned = min(child([*command, str(GENERATE)], cwd)[0] for _ in range(repeats))
    return [
        figure(
            "GPT-2 generate, 64 tokens, planned, CPU",
            "its imports and model build, unplanned",
            planned,
            unplanned,
            "s",
            added=planned - unplanned,
        )
    ]


if __name__ == "__main__":
    sys.exit(main())
