"""An OOM dumped by the user's own ``except`` handler, after the step unwound, with no sidecar:
the diagnosis names what filled the device at the OOM, not what is left after it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "oom_after_unwinding.py"
MiB = 1 << 20
BATCH, DEVICE = 4, 2048 * MiB
STEP = {"nodes": 96 * MiB, "edges": 128 * MiB, "messages": 160 * MiB}  # per unit of batch
WEIGHTS = 4 * 16 * MiB


def _line(marker: str) -> int:
    """The script's line that allocates ``marker`` (its comment)."""
    lines = SCRIPT.read_text().splitlines()
    return next(number for number, text in enumerate(lines, 1) if text.endswith(f"# {marker}"))


def _memforensics(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "memforensics", *args],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip


def test_the_step_that_unwound_is_the_cause_with_its_lines_and_bytes(tmp_path: Path) -> None:
    """The failing step's tensors (1.50 GiB at three lines) head the diagnosis with their
    lines and bytes, removing them frees what the request needed (800 MiB asked, 448 MiB
    free: 352 MiB), and the site rows are those live at the OOM."""
    dump = tmp_path / "oom.pickle"
    subprocess.run([sys.executable, str(SCRIPT), str(dump)], check=True, timeout=120)
    assert not list(tmp_path.glob("*.json"))  # no sidecar
    step = {name: BATCH * size for name, size in STEP.items()}
    freed, needed = sum(step.values()), BATCH * 200 * MiB - (DEVICE - WEIGHTS - sum(step.values()))
    text = _memforensics("summary", str(dump))
    cause = " ".join(" ".join(text.split("  verdict")[0].splitlines()[1:]).split())
    assert "judged at the OOM" in text.splitlines()[0]
    # no backward in the trace: an inference loop's forward, or a training step's first
    assert cause.startswith("cause the failing forward's tensors, no backward in the trace, 1.50")
    assert f"oom_after_unwinding.py:{_line('messages')} update_nodes 640.00 MiB" in cause
    assert f"oom_after_unwinding.py:{_line('edges')} update_nodes 512.00 MiB" in cause
    assert "removing it frees 1.50 GiB, the request needed 352.00 MiB" in cause
    assert (freed, needed) == (1536 * MiB, 352 * MiB)
    facts = json.loads(_memforensics("summary", "--json", str(dump)))
    top = facts["diagnosis"]["causes"][0]
    assert (top["name"], top["bytes"], top["sufficient"], top["inferred"]) == (
        "activations", freed, True, False,
    )  # fmt: skip
    at_oom = {row["site"].rsplit(":", 1)[1]: row["bytes"] for row in facts["oom"]["top_sites"]}
    assert at_oom == {f"{_line(name)} update_nodes": size for name, size in step.items()} | {
        f"{_line('weights')} <listcomp>": WEIGHTS
    }
    rows = text.split("(at the OOM, trace entry")[1].splitlines()[1:4]
    assert [row.split()[0:2] for row in rows] == [
        ["640.00", "MiB"],
        ["512.00", "MiB"],
        ["384.00", "MiB"],
    ]
