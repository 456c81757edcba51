"""Bookkeeping of the real-GPU check: settings, checks, step reports, time limits, features.

A check either ran and was right (``pass``) or wrong (``FAIL``: the only thing that makes the
script exit non-zero), or could not be judged: ``skipped`` when the feature it checks is not in
the memforensics version under test (so the same script runs before and after a feature lands),
``unjudged`` when the answer came in a shape the script does not know. A step that raises or runs
out of time records the error and the script goes on with the next one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _gpu_rig import GiB, MiB, Rig

PASS, FAIL, SKIPPED, UNJUDGED = "pass", "FAIL", "skipped", "unjudged"


@dataclass(frozen=True)
class Settings:
    """Sizes and repeat counts: ``FULL`` for a real GPU, ``FAST`` for the dry run in tests."""

    width: int
    layers: int
    seq: int
    oom_cap: int
    oom_batch: int
    oom_max_steps: int
    workload_cap: int
    cost_batch: int
    cost_steps: int
    cost_repeats: int
    fork_batch: int
    fork_window: int
    fork_windows: int
    fork_max_entries: int
    cli_sample: bool
    """Step 6 on one dump per step and one report over all folders (the dry run's speed)."""


FULL = Settings(
    width=512,
    layers=4,
    seq=256,
    oom_cap=3 * GiB,
    oom_batch=8,
    oom_max_steps=12,
    workload_cap=GiB + MiB,
    cost_batch=8,
    cost_steps=20,
    cost_repeats=7,
    fork_batch=8,
    fork_window=50,
    fork_windows=3,
    fork_max_entries=2_000_000,
    cli_sample=False,
)
FAST = Settings(
    width=64,
    layers=2,
    seq=32,
    oom_cap=64 * MiB,
    oom_batch=4,
    oom_max_steps=20,
    workload_cap=GiB + MiB,
    cost_batch=2,
    cost_steps=20,
    cost_repeats=3,
    fork_batch=2,
    fork_window=400,
    fork_windows=2,
    fork_max_entries=200_000,
    cli_sample=True,
)


@dataclass
class Check:
    """One verified fact: what was expected, what was seen, and the verdict."""

    name: str
    status: str
    detail: str = ""
    expected: Any = None
    actual: Any = None


class StepTimeout(BaseException):
    """A step ran past its share of the wall-clock budget.

    A ``BaseException``, so that the library's own ``except Exception`` guards, which keep
    training alive, cannot swallow it in the middle of a step.
    """


@dataclass
class Step:
    """The report of one numbered step: its checks, its figures, and how it ended."""

    key: str
    title: str
    status: str = "not run"
    seconds: float = 0.0
    error: str | None = None
    checks: list[Check] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def check(
        self, name: str, ok: bool, *, expected: Any = None, actual: Any = None, detail: str = ""
    ) -> bool:
        """Record a fact that was judged; True when it held."""
        self.checks.append(Check(name, PASS if ok else FAIL, detail, expected, actual))
        return ok

    def skip(self, name: str, feature: str) -> None:
        """Record a check that the version under test cannot answer yet."""
        self.checks.append(
            Check(name, SKIPPED, f"skipped: {feature} not available in this version")
        )

    def unjudged(self, name: str, detail: str, actual: Any = None) -> None:
        """Record a check whose answer the script could not read."""
        self.checks.append(Check(name, UNJUDGED, detail, actual=actual))

    @property
    def wrong(self) -> int:
        """Checks that ran and gave a wrong answer."""
        return sum(check.status == FAIL for check in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass
class Context:
    """What every step gets: the device, the settings, where to write, the clock."""

    rig: Rig
    settings: Settings
    work: Path
    script: Path
    dumps: list[dict[str, Any]] = field(default_factory=list)
    deadline: float = float("inf")

    def left(self) -> float:
        """Seconds until the current step's deadline."""
        return max(self.deadline - time.monotonic(), 0.0)

    def add_dumps(self, step: str, paths: list[Path]) -> None:
        """Remember dumps for the analysis step."""
        for path in paths:
            self.dumps.append({"step": step, "kind": path.parent.name, "path": str(path)})


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``StepTimeout`` in the main thread after ``seconds`` (a blocked C call finishes
    first: the signal is handled between bytecodes)."""

    def expire(signum: int, frame: Any) -> None:
        raise StepTimeout(f"step ran past its {seconds:.0f} s limit")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def prefixed(step: Step, prefix: str) -> Iterator[None]:
    """Name the checks recorded inside the block ``"{prefix}: {name}"`` (one per workload)."""
    start = len(step.checks)
    try:
        yield
    finally:
        for check in step.checks[start:]:
            check.name = f"{prefix}: {check.name}"


def run_step(step: Step, ctx: Context, seconds: float, body: Any) -> None:
    """Run ``body(step, ctx)`` within ``seconds``; an error or timeout is recorded, not raised."""
    start = time.monotonic()
    ctx.deadline = start + seconds
    try:
        with time_limit(seconds):
            body(step, ctx)
        step.status = "ok"
    except StepTimeout as exc:
        step.status, step.error = "timeout", str(exc)
    except Exception as exc:  # noqa: BLE001 - a failing step is recorded and the run goes on
        step.status = "error"
        step.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        step.figures["traceback"] = traceback.format_exc()[-4000:]
    finally:
        step.seconds = round(time.monotonic() - start, 3)
        import memforensics

        memforensics.uninstall()


def has_field(name: str) -> bool:
    """True when ``ForensicsConfig`` has the field ``name`` (the version under test knows it)."""
    import memforensics

    return name in memforensics.ForensicsConfig.model_fields


def has_command(name: str) -> bool:
    """True when the ``memforensics`` CLI of the version under test has the command ``name``."""
    from memforensics.cli._command import all_commands

    return any(command.name == name for command in all_commands())


def run_cli(args: list[str], ctx: Context, limit: float = 120.0) -> dict[str, Any]:
    """``python -m memforensics ARGS`` in a subprocess: exit status, output, seconds."""
    return run_python(["-m", "memforensics", *args], ctx, limit)


def run_python(
    args: list[str], ctx: Context, limit: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """This interpreter on ``args`` within the step's time; a timeout is an exit status of None."""
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            timeout=max(min(limit, ctx.left() - 1.0), 1.0),
            env=env,
            check=False,
        )
        status: int | None = proc.returncode
        out, err = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        status, out, err = None, _text(exc.stdout), _text(exc.stderr) + "\n(timed out)"
    return {
        "exit_status": status,
        "stdout": out,
        "stderr": err,
        "seconds": round(time.monotonic() - start, 3),
    }


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


def read_json(text: str) -> Any:
    """Parse JSON output; None when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def print_table(steps: list[Step]) -> None:
    """The readable form of the JSON: one line per check, figures under their step."""
    rows = [("step", "check", "result", "detail")]
    for index, step in enumerate(steps, 1):
        head = f"{index} {step.key}"
        rows.append((head, f"({step.title})", step.status, f"{step.seconds:.1f} s"))
        if step.error:
            rows.append(("", "error", step.status, step.error.splitlines()[-1][:100]))
        for check in step.checks:
            detail = check.detail
            if not detail and (check.expected is not None or check.actual is not None):
                detail = f"expected {check.expected!r}, got {check.actual!r}"
            rows.append(("", check.name, check.status, detail[:100]))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for index, row in enumerate(rows):
        cells = (cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
        print("  ".join(cells) + "  " + row[3])
        if index == 0:
            print("  ".join("-" * width for width in widths) + "  ------")
    for index, step in enumerate(steps, 1):
        shown = {k: v for k, v in step.figures.items() if k != "traceback"}
        if shown:
            print(f"\n{index} {step.key} figures:")
            for key, value in shown.items():
                print_figure(key, value)


def print_figure(key: str, value: Any) -> None:
    """One figure; a table of rows (a dict or a list of dicts) one row a line."""
    if isinstance(value, list) and value and all(isinstance(row, dict) for row in value):
        value = dict(enumerate(value))
    if not isinstance(value, dict) or not value:
        print(f"  {key}: {json.dumps(value, default=str)[:160]}")
        return
    print(f"  {key}:")
    for name, row in value.items():
        print(f"    {name}: {json.dumps(row, default=str)[:150]}")
