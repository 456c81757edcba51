"""Only the training process captures: its DataLoader workers and pool children stay inert.

A real script (scripts/worker_children.py) installs at module level and runs a CPU DataLoader
with two workers and three ProcessPoolExecutor children, under each start method, once also
with ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` set as torchrun sets them (workers inherit
them, so they cannot tell a worker from a rank).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from evidence import SCRIPTS

pytest.importorskip("torch.utils.data")

pytestmark = [pytest.mark.integration, pytest.mark.torch]

TORCHRUN = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}


def _run(
    tmp_path: Path, method: str, extra: dict[str, str], *flags: str
) -> tuple[Path, list[dict[str, Any]]]:
    out, reports = tmp_path / "run", tmp_path / "reports"
    reports.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMFORENSICS_")},
        "OMP_NUM_THREADS": "1",
        "MEMFORENSICS_LOG_LEVEL": "WARNING",
        **extra,
    }
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        if name not in extra:
            env.pop(name, None)
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "worker_children.py"),
            str(out),
            str(reports),
            method,
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = [json.loads(path.read_text()) for path in sorted(reports.glob("*-*.json"))]
    for item, path in zip(found, sorted(reports.glob("*-*.json")), strict=True):
        item["role"] = path.name.split("-")[0]
    return out, found


@pytest.mark.parametrize(
    ("method", "extra", "flags"),
    [
        ("spawn", {}, ()),
        ("spawn", TORCHRUN, ("distributed",)),
        ("forkserver", {}, ()),
        ("fork", TORCHRUN, ()),
    ],
    ids=["spawn", "spawn-torchrun", "forkserver", "fork-torchrun"],
)
def test_workers_are_inert_and_ranks_still_capture(
    tmp_path: Path, method: str, extra: dict[str, str], flags: tuple[str, ...]
) -> None:
    """DataLoader workers and a plain pool child write nothing and say why; a child that passes
    rank= (or, once, initialised torch.distributed) captures; overview sees no restart."""
    out, reports = _run(tmp_path, method, extra, *flags)
    roles: dict[str, list[dict[str, Any]]] = {}
    for item in reports:
        roles.setdefault(item["role"], []).append(item)
    assert len(roles["loader"]) == 2
    for item in roles["loader"] + roles["pool"]:
        assert item["capturing"] is False
        assert "installed memforensics" in item["inert"]
    (ranked,) = roles["ranked"]
    assert ranked["capturing"] is True
    assert ranked["rank"] == 1
    children = {ranked["pid"]}
    for distributed in roles.get("distributed", []):
        assert distributed["capturing"] is True
        assert distributed["rank"] == 0
        children.add(distributed["pid"])
        (out / "journal" / f"rank0_pid{distributed['pid']}.jsonl").rename(tmp_path / "dist.jsonl")
    assert len(roles.get("distributed", [])) == len(flags)

    journals = sorted(p.name for p in (out / "journal").iterdir())
    main_pid = _main_pid(journals, children)
    assert journals == sorted([f"rank0_pid{main_pid}.jsonl", f"rank1_pid{ranked['pid']}.jsonl"])
    workers = {item["pid"] for item in roles["loader"] + roles["pool"]}
    written = [p.name for p in out.rglob("*") if p.is_file()]
    assert not [name for name in written if any(f"pid{pid}" in name for pid in workers)]

    overview = _overview(out)
    assert overview["problems"]["restarts"] == {}
    assert [rank["pids"] for rank in overview["ranks"]] == [[main_pid], [ranked["pid"]]]


def _overview(out: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "memforensics", "overview", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    found: dict[str, Any] = json.loads(proc.stdout)
    return found


def _main_pid(journals: list[str], children: set[int]) -> int:
    pids = {int(name.split("_pid")[1].split(".")[0]) for name in journals}
    others = pids - children
    assert len(others) == 1, journals
    return others.pop()
