"""``nvidia-smi`` in a plan: the program a script runs to log the GPUs it trains on, or to read
their memory, answers for the planned device, as torch's NVML queries do in a plan.

A CPU host has no ``nvidia-smi`` (a script that logs ``subprocess.run(["nvidia-smi"])`` fails
with ``FileNotFoundError``), and a GPU host's would describe its own GPUs. While the script
runs, the plan puts a folder first on ``PATH`` that holds an ``nvidia-smi`` of its own: this
module's :func:`main`, run by the plan's interpreter, which prints the usual table, ``-L``'s
list, or ``--query-gpu``'s CSV for the planned node's GPUs. What it prints comes from one
variable of the environment the program inherits (:data:`ENV`): the devices' name and size,
and the memory used (the CUDA context and what the allocator reserved, as
``torch.cuda.device_memory_used`` answers), written there as the plan starts and again just
before the script starts a program (``subprocess``'s ``Popen._execute_child``, which ``run``,
``check_output`` and the rest reach, and ``os.system``), so the figure is the one of that
moment. Every GPU of the node shows the planned rank's figures (the plan runs one rank);
readings of a running GPU (utilization, temperature, power) are 0, as
``torch.cuda.utilization()`` answers in a plan. Python's audit hooks would see every start,
but one cannot be taken off after the run and each costs a call on every audited event
(``sys._getframe`` too, which the plan calls on every operator).

This module imports nothing of torch or of memforensics, so the program starts quickly.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ENV = "MEMFORENSICS_PLAN_NVIDIA_SMI"
"""The environment variable the program reads the planned devices from (JSON)."""
MiB = 1 << 20

Reading = Callable[[], dict[str, Any]]
"""The planned devices now: ``name``, ``total_bytes``, ``used_bytes``, ``count``."""


def _read_first(reading: Reading, start: Callable[..., Any]) -> Callable[..., Any]:
    """``start`` (what starts a program) with the planned devices written to :data:`ENV` first."""

    @functools.wraps(start)
    def started(*args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):  # the program starts whatever the reading
            os.environ[ENV] = json.dumps(reading())
        return start(*args, **kwargs)

    return started


@contextlib.contextmanager
def on_path(reading: Reading) -> Iterator[None]:
    """The plan's ``nvidia-smi`` first on ``PATH`` while the block runs, answering from
    ``reading``; ``PATH``, :data:`ENV` and the functions that start programs as they were
    after."""
    saved = {name: os.environ.get(name) for name in ("PATH", ENV)}
    execute, system = subprocess.Popen._execute_child, os.system  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory(prefix="memforensics-nvidia-smi-") as folder:
        program = Path(folder) / "nvidia-smi"
        program.write_text(
            f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S {shlex.quote(__file__)} "$@"\n'
        )
        program.chmod(0o755)
        os.environ["PATH"] = os.pathsep.join(filter(None, (folder, saved["PATH"])))
        os.environ[ENV] = json.dumps(reading())
        subprocess.Popen._execute_child = _read_first(reading, execute)  # type: ignore[attr-defined]
        os.system = _read_first(reading, system)
        try:
            yield
        finally:
            subprocess.Popen._execute_child = execute  # type: ignore[attr-defined]
            os.system = system
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _fields(device: dict[str, Any], index: int) -> dict[str, str]:
    """``--query-gpu``'s fields for GPU ``index``, with their units."""
    total, used = device["total_bytes"] // MiB, device["used_bytes"] // MiB
    return {
        "index": str(index),
        "name": device["name"],
        "uuid": f"GPU-memforensics-planned-{index}",
        "pci.bus_id": f"00000000:{index:02X}:00.0",
        "driver_version": "planned",
        "compute_cap": device.get("capability", ""),
        "memory.total": f"{total} MiB",
        "memory.used": f"{used} MiB",
        "memory.free": f"{total - used} MiB",
        "memory.reserved": "0 MiB",
        "utilization.gpu": "0 %",
        "utilization.memory": "0 %",
        "temperature.gpu": "0",
        "power.draw": "0.00 W",
        "count": str(device["count"]),
    }


_UNITS = ("memory.", "utilization.", "power.")
"""The fields printed with a unit, which ``--format=csv,nounits`` leaves off."""


def _number(name: str, value: str) -> str:
    """``value`` of field ``name`` without its unit."""
    return value.rsplit(" ", 1)[0] if name.startswith(_UNITS) else value


def _query(device: dict[str, Any], option: str, formats: Sequence[str]) -> int:
    """``--query-gpu=a,b --format=csv[,noheader][,nounits]``: one CSV row per GPU."""
    names = [name.strip() for name in option.split("=", 1)[1].split(",") if name.strip()]
    rows = [_fields(device, index) for index in range(device["count"])]
    unknown = [name for name in names if name not in rows[0]]
    if unknown:
        print(f'Field "{unknown[0]}" is not a valid field to query.', file=sys.stderr)
        return 2
    if "noheader" not in formats:
        print(", ".join(names))
    for row in rows:
        values = [row[name] for name in names]
        if "nounits" in formats:
            values = [_number(name, value) for name, value in zip(names, values, strict=True)]
        print(", ".join(values))
    return 0


def _table(device: dict[str, Any]) -> None:
    """nvidia-smi's usual table: one GPU a row, the planned process's use on each."""
    line = "+" + "-" * 89 + "+"
    print(line)
    versions = f"Driver Version: planned{'':<8}CUDA Version: planned"
    print(f"| NVIDIA-SMI planned{'':<14}{versions:<57}|")
    print(line)
    total, used = device["total_bytes"] // MiB, device["used_bytes"] // MiB
    for index in range(device["count"]):
        memory = f"{used}MiB / {total}MiB"
        print(f"| {index:>3}  {device['name'][:36]:<36} | {memory:>22} | {'0%':>4} Default{'':<6}|")
    print(line)


def main(argv: Sequence[str]) -> int:
    """The program: what the real ``nvidia-smi`` prints, for the planned node's GPUs."""
    found = os.environ.get(ENV)
    if not found:
        print("NVIDIA-SMI has failed: no planned device is known to it.", file=sys.stderr)
        return 9
    device = json.loads(found)
    query = next((a for a in argv if a.startswith("--query-gpu=")), None)
    formats = next((a for a in argv if a.startswith("--format=")), "--format=csv")
    if query is not None:
        return _query(device, query, formats.split("=", 1)[1].split(","))
    if "-L" in argv or "--list-gpus" in argv:
        for index in range(device["count"]):
            print(f"GPU {index}: {device['name']} (UUID: GPU-memforensics-planned-{index})")
        return 0
    _table(device)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
