"""What every fault test checks on disk: evidence is whole or absent, never half-written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from memforensics.analysis.dump import read_snapshot_file

SCRIPTS = Path(__file__).resolve().parent / "scripts"
TMP_MARK = ".tmp-"


def temp_files(root: Path) -> list[Path]:
    """Hidden temporary files (``.<final>.tmp-<host>-<pid>-<hex>``) anywhere under ``root``."""
    return sorted(p for p in root.rglob(f".*{TMP_MARK}*") if p.is_file())


def visible_files(root: Path) -> list[Path]:
    """Dump files a reader would look at: everything not hidden, the journal/ folder aside."""
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".") and p.parent.name != "journal"
    )


def journal_lines(root: Path) -> dict[str, list[dict[str, Any]]]:
    """Every journal file under ``root`` by name, parsed; each must be whole lines only."""
    found = {}
    for path in sorted((root / "journal").glob("*.jsonl")):
        data = path.read_bytes()
        assert data.endswith(b"\n"), f"torn last line in {path}"
        found[path.name] = [json.loads(line) for line in data.splitlines()]
    return found


def check_evidence(root: Path) -> int:
    """Assert every visible snapshot loads whole and every sidecar has its snapshot.

    A sidecar, when present, must agree with its snapshot's size and trace length (proof that
    the pickle on disk is the whole one it describes). Returns the number of snapshots checked.
    """
    checked = 0
    for path in visible_files(root):
        if path.suffix == ".json":
            assert path.with_suffix(".pickle").is_file(), f"orphan sidecar {path}"
            continue
        if path.suffix != ".pickle":
            continue
        snapshot = read_snapshot_file(path)  # raises SnapshotLoadError on a truncated pickle
        assert isinstance(snapshot, dict), path
        sidecar_path = path.with_suffix(".json")
        if sidecar_path.is_file():
            sidecar: dict[str, Any] = json.loads(sidecar_path.read_text())
            assert sidecar["snapshot_bytes"] == path.stat().st_size, path
            traces = snapshot["device_traces"]
            if sidecar.get("trace_entries") is not None:
                assert max(len(t) for t in traces) == sidecar["trace_entries"], path
        checked += 1
    return checked


def run_script(
    name: str, *args: str | Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/<name>`` with this interpreter; bounded by ``timeout`` seconds."""
    return subprocess.run(
        [sys.executable, str(SCRIPTS / name), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def poisoned(value: object, prefix: str, suffix: str) -> object:
    """``value`` (a snapshot) with every frame's file and function name wrapped in ``prefix``
    and ``suffix``: the hostile controls a test expects to arrive escaped."""
    if isinstance(value, dict):
        found = {key: poisoned(item, prefix, suffix) for key, item in value.items()}
        for key in ("filename", "name"):
            if isinstance(found.get(key), str):
                found[key] = f"{prefix}{found[key]}{suffix}"
        return found
    if isinstance(value, list):
        return [poisoned(item, prefix, suffix) for item in value]
    return value
