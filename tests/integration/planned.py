"""Running the real ``memforensics plan`` console command on a script of a test's own."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def plan(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m memforensics plan ARGS`` in ``folder``, with this checkout's package first
    on the path (the caller's own path after it), no memforensics or allocator settings from
    the caller's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFORENSICS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return subprocess.run(
        [sys.executable, "-m", "memforensics", "plan", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def script(folder: Path, body: str, name: str = "train.py") -> Path:
    """``body`` (dedented) written to ``folder/name``."""
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def printed_facts(folder: Path, *options: str, args: tuple[str, ...] = ()) -> dict[str, object]:
    """Plan ``folder/train.py`` (with ``options`` before it and the script's own ``args``
    after); the JSON line the script printed first."""
    done = plan(folder, *options, "train.py", *args)
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout.splitlines()[0])
    return found


def allocated(snapshot: Path) -> list[int]:
    """The sizes of the blocks the trace of the snapshot at ``snapshot`` allocated, in order."""
    trace = pickle.loads(snapshot.read_bytes())["device_traces"][0]
    return [e["size"] for e in trace if e["action"] == "alloc"]


def printed_on_cpu(path: Path) -> dict[str, object]:
    """Run the script at ``path`` with plain Python (no plan: the CPU where no GPU is); the
    JSON line it printed first."""
    done = subprocess.run(
        [sys.executable, str(path)],
        cwd=path.parent, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    found: dict[str, object] = json.loads(done.stdout.splitlines()[0])
    return found


def summary_kinds(path: Path, at: str = "snapshot") -> dict[str, int]:
    """``memforensics summary --json PATH``'s requested bytes per kind, at the snapshot or (``at
    ="peak"``) at the peak."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFORENSICS_")}
    env["PYTHONPATH"] = str(SRC)
    done = subprocess.run(
        [sys.executable, "-m", "memforensics", "summary", "--json", "--no-cache", str(path)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    kinds = found["kinds"] if at == "snapshot" else found["peak"]["kinds"]
    return {row["kind"]: row["requested_bytes"] for row in kinds}


EACH_TRACED_ALONE = """
traces, outs = [], []
for call in calls:
    torch.cuda.memory._record_memory_history(max_entries=100000)
    outs.append(call())  # held, so that no trace holds another call's frees
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    torch.cuda.memory._record_memory_history(enabled=None)
    kept = {"alloc": "a", "free_completed": "f"}
    events = [kept[e["action"]] + str(e["size"]) for e in trace if e["action"] in kept]
    traces.append(" ".join(events))
"""
"""Script lines tracing each of ``calls`` (a list of zero-argument functions) alone into
``traces``: its allocations (``a``) and completed frees (``f``) with their sizes, each result
held so that no trace holds another call's frees."""


TRACED_CALLS = """
import json

import torch
import torch.nn.functional as F

{calls}
torch.cuda.memory._record_memory_history()
found, seen = {{}}, 0
for name, call in calls.items():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = call()
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    found[name] = [str(out.dtype)] + [e["size"] for e in trace[seen:] if e["action"] == "alloc"]
    del out
    seen = len(torch.cuda.memory._snapshot()["device_traces"][0])
print(json.dumps(found))
"""


def traced_calls(folder: Path, calls: str, *options: str) -> dict[str, list[object]]:
    """Plan a script whose ``calls`` (source that defines ``calls``, a dict of zero-argument
    functions, with ``torch`` and ``F`` imported) each run under bfloat16 autocast on the
    planned device of capability 9.0; each call's result dtype, then the sizes of the blocks
    it allocated, in order."""
    script(folder, TRACED_CALLS.format(calls=textwrap.dedent(calls)))
    done = plan(folder, "--device-capability", "9.0", *options, "train.py")
    assert done.returncode == 0, done.stderr
    found: dict[str, list[object]] = json.loads(done.stdout.splitlines()[0])
    return found
