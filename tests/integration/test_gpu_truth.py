"""The real-GPU check (benchmarks/gpu_truth.py) dry-run on the sim device, so it cannot rot while
it waits for a GPU: the same seven steps, a real subprocess, the real CLI underneath."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_truth.py"
STEPS = ["oom", "verdicts", "windows", "cost", "forked", "analysis", "plan_distributed"]


def dry_run(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run the script on the sim with fast settings; its exit status and its JSON."""
    out = tmp_path / "gpu_truth.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--device",
            "sim",
            "--fast",
            "--out",
            str(out),
            "--budget",
            "1500",  # generous: a shared CI machine may be slow; the real run keeps 480 s
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, **env},
        check=False,
    )
    report = json.loads(out.read_text()) if out.exists() else None
    return proc, report


def checks_of(report: Any, status: str) -> list[str]:
    """Names of every check with ``status``, prefixed by its step."""
    return [
        f"{step['key']}: {check['name']}"
        for step in report["steps"]
        for check in step["checks"]
        if check["status"] == status
    ]


def test_dry_run_completes_every_step_with_no_wrong_answer(tmp_path: Path) -> None:
    """All seven steps run to the end on the sim, every judged fact holds, the JSON has figures."""
    proc, report = dry_run(tmp_path, "--archive", str(tmp_path / "gpu"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [(s["key"], s["status"], s["error"]) for s in report["steps"]] == [
        (key, "ok", None) for key in STEPS
    ]
    assert checks_of(report, "FAIL") == []
    assert checks_of(report, "unjudged") == []
    assert len(checks_of(report, "pass")) >= 30
    steps = {s["key"]: s for s in report["steps"]}
    oom = steps["oom"]["figures"]
    assert oom["limit_bytes"] == [oom["sidecar"]["device_total_bytes"]]
    assert oom["free_minus_mem_get_info"] == 0  # the sim's free memory does not move
    assert {"history off", "state"} <= set(steps["cost"]["figures"]["rows"])
    assert any(p["forks"] > 0 for p in steps["forked"]["figures"]["passes"])
    if importlib.util.find_spec("torch") is None:  # nox -s tests_notorch: plan needs torch
        assert "plan_distributed: plan of a distributed job" in checks_of(report, "skipped")
    else:
        plan_rows = steps["plan_distributed"]["figures"]["rows"]
        assert set(plan_rows) == {"ddp", "fsdp2"}
        for row in plan_rows.values():  # the script's second-step peaks, as plan answered them
            assert 0 < row["planned"]["peak_allocated"] <= row["planned"]["peak_reserved"]
            assert row["real"] == "skipped: the real run needs CUDA"
        skipped = set(checks_of(report, "skipped"))
        assert "plan_distributed: ddp: plan against the real run" in skipped
    assert report["wrong_answers"] == 0
    assert "1 oom" in proc.stdout  # the table
    assert "0 wrong answer(s)" in proc.stdout
    archived = list((tmp_path / "gpu").glob("*_sim.json"))
    assert len(archived) == 1
    assert json.loads(archived[0].read_text())["machine"]["device"] == "sim"


def test_a_library_that_captures_nothing_is_a_wrong_answer(tmp_path: Path) -> None:
    """With the OOM observer off, step 1 sees only the step() fallback's dump and exits 1."""
    proc, report = dry_run(tmp_path, "--only", "oom", MEMFORENSICS_OOM="0")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    failed = checks_of(report, "FAIL")
    assert "oom: observer attached" in failed
    assert "oom: seen by the observer" in failed
    assert report["wrong_answers"] >= 2
    assert [s["status"] for s in report["steps"][1:]] == ["skipped: not selected"] * 6


def test_a_spent_budget_skips_steps_but_still_writes_the_report(tmp_path: Path) -> None:
    """With no wall-clock budget left every step is recorded as skipped, and nothing is wrong."""
    proc, report = dry_run(tmp_path, "--budget", "1")  # the last --budget wins
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [(s["status"], s["error"]) for s in report["steps"]] == [
        ("skipped", "wall-clock budget spent")
    ] * 7
    assert report["wrong_answers"] == 0
