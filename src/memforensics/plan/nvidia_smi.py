"""``nvidia-smi`` in a plan: the program a script runs to log the GPUs it trains on, or to read
their memory, answers for the planned device, as torch's NVML queries do in a plan.

A CPU host has no ``nvidia-smi`` (a script that logs ``subprocess.run(["nvidia-smi"])`` fails
with ``FileNotFoundError``), and a GPU host's would describe its own GPUs. While the script
runs, the plan puts a folder first on ``PATH`` that holds an ``nvidia-smi`` of its own: this
module's :func:`main`, run by the plan's interpreter, which prints the usual table, ``-L``'s
list, or ``--query-gpu``'s CSV for the planned node's GPUs. What it prints comes from one
variable of the environment the program inherits (:data:`ENV`): the devices' name and size,
and the memory used (the CUDA context and what the allocator reserved, as
``torch.cuda.device_memory_used`` answers), written there by an audit hook just before Python
starts a program (the ``subprocess.Popen``, ``os.system``, ``os.posix_spawn`` and ``os.exec``
events), so the figure is the one of that moment. Every GPU of the node shows the planned
rank's figures (the plan runs one rank); readings of a running GPU (utilization, temperature,
power) are 0, as ``torch.cuda.utilization()`` answers in a plan. An audit hook cannot be taken
off: outside a plan it finds nothing to answer and does nothing.

This module imports nothing of torch or of memforensics, so the program starts quickly.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ENV = "MEMFORENSICS_PLAN_NVIDIA_SMI"
"""The environment variable the program reads the planned devices from (JSON)."""
MiB = 1 << 20
_SPAWNS = frozenset(("subprocess.Popen", "os.system", "os.posix_spawn", "os.exec"))
"""The audit events Python raises before it starts a program."""

Reading = Callable[[], dict[str, Any]]
"""The planned devices now: ``name``, ``total_bytes``, ``used_bytes``, ``count``."""
_reading: list[Reading] = []
"""The plan underway's reading, empty outside a plan."""
_hooked: list[bool] = []


def _before_spawn(event: str, args: tuple[Any, ...]) -> None:
    """Audit hook: the planned devices written to :data:`ENV` before a program starts."""
    if event not in _SPAWNS or not _reading:
        return
    try:
        os.environ[ENV] = json.dumps(_reading[-1]())
    except Exception:  # noqa: BLE001 - an audit hook that raises stops the script's call
        return


@contextmanager
def on_path(reading: Reading) -> Iterator[None]:
    """The plan's ``nvidia-smi`` first on ``PATH`` while the block runs, answering from
    ``reading``; ``PATH`` and :data:`ENV` as they were after."""
    if not _hooked:
        sys.addaudithook(_before_spawn)
        _hooked.append(True)
    saved = {name: os.environ.get(name) for name in ("PATH", ENV)}
    with tempfile.TemporaryDirectory(prefix="memforensics-nvidia-smi-") as folder:
        program = Path(folder) / "nvidia-smi"
        program.write_text(
            f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S {shlex.quote(__file__)} "$@"\n'
        )
        program.chmod(0o755)
        os.environ["PATH"] = os.pathsep.join(filter(None, (folder, saved["PATH"])))
        _reading.append(reading)
        try:
            yield
        finally:
            _reading.pop()
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
