"""``memforensics doctor``: the checks a user runs on a training node before a long job.

Each check answers one question with ``pass``, ``warn`` or ``fail`` and a one-line reason, and
none may crash the doctor: a check that raises is reported as failed with the error. The checks
talk to the device only through the ``DeviceBackend`` Protocol and ``create_backend``, so the
doctor runs (and says "not installed") where torch is absent. ``Doctor`` asks the environment,
the disk and the settings itself, and holds a ``DeviceChecks`` for the questions about the
device.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memforensics._errors import ConfigError
from memforensics._units import format_bytes
from memforensics._version import __version__
from memforensics.backends._protocol import DeviceBackend
from memforensics.backends._torch import CLEAR_KEYWORD, HISTORY_KEYWORDS, TorchAllocatorBackend
from memforensics.backends.npu import OOM_SNAPSHOT_ENABLE, oom_snapshot_enable
from memforensics.capture import atomic
from memforensics.capture.config import build_config, config_from_env
from memforensics.capture.health import describe, is_disk_condition
from memforensics.capture.oom import REGISTRY

# What one check answers (``pass``, ``warn`` or ``fail`` with a one-line reason), the verdict
# over all of them, and the report ``doctor`` prints.

Status = Literal["pass", "warn", "fail"]

SCHEMA = 2
"""``doctor --json``'s ``schema`` (docs/json.md: adding keys keeps it; renaming or removing one
bumps it)."""

_MARK = {"pass": "ok  ", "warn": "WARN", "fail": "FAIL"}


@dataclass(frozen=True)
class Check:
    """The answer to one question: a name, a status and a one-line detail."""

    name: str
    status: Status
    detail: str


@dataclass(frozen=True)
class DoctorReport:
    """Every check for one device and out_dir, in order, and the verdict over them."""

    status: Status
    device: str
    out_dir: Path
    checks: tuple[Check, ...]


def overall(checks: list[Check]) -> Status:
    """``fail`` if any check failed, else ``warn`` if any warned, else ``pass``."""
    statuses = {check.status for check in checks}
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"


def doctor_text(report: DoctorReport) -> str:
    """The report as ``doctor`` prints it: a line per check, then the verdict and its counts."""
    checks = report.checks
    lines = [f"memforensics doctor: device {report.device}, out_dir {report.out_dir}"]
    width = max((len(check.name) for check in checks), default=0)
    lines += [f"  {_MARK[check.status]}  {check.name:<{width}}  {check.detail}" for check in checks]
    failed = sum(check.status == "fail" for check in checks)
    warned = sum(check.status == "warn" for check in checks)
    noun = "warning" if warned == 1 else "warnings"
    lines.append(
        f"result: {report.status} ({failed} failed, {warned} {noun}, {len(checks)} checks)"
    )
    return "\n".join(lines)


# What ``memforensics doctor`` needs from the frameworks: imports, a reason, a probe.
#
# The doctor inspects torch and torch_npu themselves (versions, builds, a real allocation), which
# nothing else outside the backends does; those few lazy imports are gathered in this module so
# the checks themselves never import a framework.


def import_framework(module: str) -> tuple[Any, str]:
    """``(module, "")`` when it imports, ``(None, why)`` when it is absent or broken."""
    try:
        if importlib.util.find_spec(module) is None:
            return None, "not installed"
    except (ImportError, ValueError):
        return None, "not installed"
    try:
        return importlib.import_module(module), ""
    except Exception as exc:  # noqa: BLE001 - a broken install is a finding, not a crash
        return None, f"installed, but 'import {module}' failed: {type(exc).__name__}: {exc}"


def unavailable_reason(backend: DeviceBackend) -> str:
    """Why a cuda/npu backend sees no device, in the user's terms."""
    if backend.name == "cuda":
        torch, why = import_framework("torch")
        if torch is None:
            return f"cuda: torch {why}"
        if getattr(torch.version, "cuda", None) is None:
            return f"cuda: torch {torch.__version__} is a CPU-only build: no CUDA device"
        return "cuda: torch.cuda.is_available() is False (check the driver, CUDA_VISIBLE_DEVICES)"
    if backend.name == "npu":
        torch_npu, why = import_framework("torch_npu")
        if torch_npu is None:
            return f"npu: torch_npu {why}"
        return "npu: torch_npu.npu.is_available() is False (check CANN, ASCEND_RT_VISIBLE_DEVICES)"
    return f"{backend.name}: not available"


def allocate_probe(backend: DeviceBackend, nbytes: int) -> object:
    """A small allocation on the device, made from this file (so its frame can be found)."""
    if isinstance(backend, TorchAllocatorBackend):
        import torch

        backend.device_module()  # for npu, importing torch_npu registers the device type
        where = f"{backend.name}:{backend.device_index() or 0}"
        return torch.empty(nbytes, dtype=torch.uint8, device=where)
    if backend.name == "sim":
        from memforensics.backends.sim import get_device

        return get_device().empty(nbytes)
    raise NotImplementedError(f"the doctor cannot allocate on a {backend.name!r} backend")


def is_probe_frame(frame: Any) -> bool:
    """True for a frame of this module: the probe allocation was made here."""
    return isinstance(frame, dict) and frame.get("filename") == __file__


# The doctor's device checks: which backend, does it see a device, does the OOM hook attach,
# which history options does this framework accept, and are Python frames really recorded?
#
# They talk to the device only through the ``DeviceBackend`` Protocol, so they report rather than
# crash where torch is absent, and they run in order: the first picks the backend and finds out
# whether it is usable, and the later ones build on that.

BackendFactory = Callable[[str], DeviceBackend]

PROBE_BYTES = 4096


class DeviceChecks:
    """The checks of one ``device``, in order: ``check_device`` first, as it picks the backend."""

    def __init__(self, device: str, factory: BackendFactory) -> None:
        self.device = device
        self._factory = factory
        self.backend: DeviceBackend | None = None
        """The backend ``check_device`` picked (None before it ran)."""
        self.usable = False
        """True once ``check_device`` found the backend's device available."""

    def check_device(self) -> tuple[Status, str]:
        """Which backend ``install(device=...)`` would use, and whether it sees a device.

        No accelerator where one was looked for fails, so ``doctor || exit 1`` keeps a job
        from starting where ``install()`` would capture nothing; ``device='none'`` asked for
        exactly that and only warns."""
        backend = self._factory(self.device)
        self.backend = backend
        if backend.name == "none":
            if self.device == "none":
                return "warn", "device 'none': install() would capture nothing"
            return "fail", (
                "auto found no CUDA or NPU device: install() would capture nothing "
                "(--device sim checks a dry run, --device none a run without capture)"
            )
        if not backend.available():
            return "fail", unavailable_reason(backend)
        self.usable = True
        index = backend.device_index()
        info = backend.mem_get_info()
        where = f"{backend.name}:{index}" if index is not None else backend.name
        if info is None:
            return "pass", f"{where} available"
        free, total = info
        return "pass", f"{where}: {format_bytes(total)} total, {format_bytes(free)} free"

    def check_oom_hook(self) -> tuple[Status, str]:
        """Does the allocator's OOM hook exist, and does our observer attach to it?"""
        backend = self.backend
        if backend is None or backend.name == "none":
            return "warn", "not checked: no device"
        if isinstance(backend, TorchAllocatorBackend):
            try:
                module = backend.c_module()
            except Exception as exc:  # noqa: BLE001
                return "fail", f"{backend.name}: framework not importable ({exc})"
            hook = f"{module.__name__}.{backend.hook_name}"
            if getattr(module, backend.hook_name, None) is None:
                return "fail", (
                    f"{hook} is missing in this build: OOM dumps would come only from "
                    "exceptions leaving mf.step()"
                )
            if not self.usable:
                return "warn", f"{hook} exists; not attached: no {backend.name} device"
        else:
            hook = f"the {backend.name} device's observer list"
        try:
            fresh = REGISTRY.ensure_attached(backend)
        except Exception as exc:  # noqa: BLE001 - the refusal is the finding
            if backend.name == "npu" and oom_snapshot_enable() != 0:
                return "warn", f"not attached: {exc}"
            return "fail", f"attach refused: {exc}"
        return "pass", f"observer attached to {hook}" + ("" if fresh else " (already)")

    def check_history_options(self) -> tuple[Status, str]:
        """Which ``_record_memory_history`` options this framework version understands."""
        backend = self.backend
        if backend is None or backend.name == "none":
            return "warn", "not checked: no device"
        if not isinstance(backend, TorchAllocatorBackend):
            return "pass", (
                f"{backend.name}: enabled, context, stacks, max_entries, clear_history, metadata"
            )
        found = backend.history_parameters()
        metadata = hasattr(backend.memory_module(), "_set_memory_metadata")
        notes: list[str] = []
        if backend.records_history_itself():
            notes.append(
                f"{OOM_SNAPSHOT_ENABLE} is on: torch_npu records history itself and "
                "memforensics leaves it alone (windows are not cleared)"
            )
        if found is None:
            listed = "parameters unknown (no readable signature)"
            notes.append("memforensics passes enabled, context, stacks, max_entries")
        else:
            listed = ", ".join(found)
            if "trace_alloc_max_entries" in found:
                return "warn", f"legacy API (torch < 2.1): {listed}; stacks='all' is not honoured"
            unknown = [name for name in HISTORY_KEYWORDS if name not in found]
            if unknown:
                notes.append(f"does not accept {', '.join(unknown)}: history calls would fail")
            if CLEAR_KEYWORD not in found:
                notes.append(f"no {CLEAR_KEYWORD}: a window clears history by restarting it")
        listed += "; _set_memory_metadata" if metadata else ""
        if not metadata:
            notes.append("no _set_memory_metadata: allocations are not tagged step=N")
        return ("warn" if notes else "pass"), "; ".join([listed, *notes])

    def check_history_frames(self) -> tuple[Status, str]:
        """Record history, allocate a little, snapshot: are Python frames really recorded?"""
        backend = self.backend
        if backend is None or not self.usable:
            return "warn", "not run: no usable device"
        backend.record_history("all", max_entries=10_000, stacks="python", clear=True)
        try:
            probe = allocate_probe(backend, PROBE_BYTES)
            snapshot = backend.snapshot()
            del probe
        finally:
            backend.record_history(None, max_entries=10_000, stacks="python", clear=False)
        index = backend.device_index() or 0
        traces = snapshot.get("device_traces") or []
        trace = traces[index] if index < len(traces) else []
        allocs = [event for event in trace if event.get("action") == "alloc"]
        if not allocs:
            return "fail", f"history recording produced no alloc events ({len(trace)} events)"
        mine = [e for e in allocs if any(is_probe_frame(f) for f in e.get("frames") or [])]
        if not mine:
            return "fail", (
                f"{len(allocs)} alloc events, but none carries the probe's Python frames: "
                "dumps would not say who allocated"
            )
        frames = mine[-1]["frames"]
        return "pass", f"{len(trace)} trace events; the probe allocation has {len(frames)} frames"


LOW_SPACE_BYTES = 1 << 30
"""Below this much free space ``out_dir`` warns: one window dump can take hundreds of MiB."""

_ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF")


class Doctor:
    """Runs every check for one ``device`` and ``out_dir``; ``run()`` returns them in order."""

    def __init__(
        self, device: str, out_dir: Path, *, backend_factory: BackendFactory | None = None
    ) -> None:
        from memforensics.backends._select import create_backend

        self.device = device
        self.out_dir = out_dir.expanduser().resolve()
        self._device_checks = DeviceChecks(device, backend_factory or create_backend)

    def run(self) -> list[Check]:
        """Every check, in order; one that raises is reported as a failure."""
        return list(self._checks())

    def report(self) -> DoctorReport:
        """Every check (:meth:`run`) and the verdict over them."""
        checks = self.run()
        return DoctorReport(overall(checks), self.device, self.out_dir, tuple(checks))

    def _checks(self) -> Iterator[Check]:
        device = self._device_checks
        for name, check in (
            ("memforensics", self.check_memforensics),
            ("config", self.check_config),
            ("torch", self.check_torch),
            ("torch_npu", self.check_torch_npu),
            ("device", device.check_device),
            ("oom_hook", device.check_oom_hook),
            ("history_options", device.check_history_options),
            ("history_frames", device.check_history_frames),
            ("out_dir", self.check_out_dir),
            ("allocator_conf", self.check_allocator_conf),
            ("oom_snapshot_enable", self.check_oom_snapshot_enable),
        ):
            try:
                status, detail = check()
            except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check
                status, detail = "fail", f"the check itself failed: {type(exc).__name__}: {exc}"
            yield Check(name, status, detail)

    # -- environment ---------------------------------------------------------------------------
    def check_memforensics(self) -> tuple[Status, str]:
        """Versions, so a pasted report says what ran."""
        return "pass", f"memforensics {__version__}, Python {platform.python_version()}"

    def check_config(self) -> tuple[Status, str]:
        """Would ``install()`` accept the ``MEMFORENSICS_*`` variables set here?"""
        try:
            build_config({})
        except ConfigError as exc:
            return "fail", str(exc).removeprefix("memforensics: ")
        names = sorted(f"MEMFORENSICS_{field.upper()}" for field in config_from_env())
        if not names:
            return "pass", "no MEMFORENSICS_* variables set: install() uses its defaults"
        return "pass", f"valid: {', '.join(names)}"

    def check_torch(self) -> tuple[Status, str]:
        """torch's version and build (CUDA, CPU-only), or why it is missing."""
        torch, why = import_framework("torch")
        if torch is None:
            if self.device in {"sim", "none"}:
                return "pass", f"{why} (not needed for --device {self.device})"
            return ("fail" if self.device in {"cuda", "npu"} else "warn"), why
        version = getattr(torch, "version", None)
        cuda = getattr(version, "cuda", None)
        hip = getattr(version, "hip", None)
        build = f"CUDA {cuda}" if cuda else f"ROCm {hip}" if hip else "CPU-only build"
        return "pass", f"torch {torch.__version__} ({build})"

    def check_torch_npu(self) -> tuple[Status, str]:
        """torch_npu's version, needed only for Ascend NPUs."""
        torch_npu, why = import_framework("torch_npu")
        if torch_npu is None:
            if self.device == "npu":
                return "fail", why
            if why != "not installed":
                return "warn", why
            return "pass", "not installed (needed only for Ascend NPUs)"
        return "pass", f"torch_npu {getattr(torch_npu, '__version__', 'unknown')}"

    # -- the disk and the settings -------------------------------------------------------------
    def check_out_dir(self) -> tuple[Status, str]:
        """Is ``out_dir`` (or the folder it would be created in) writable, with room to spare?"""
        path = self.out_dir
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            return "fail", f"{path}: {existing} is not a directory"
        try:
            atomic.check_writable(existing)  # the probe install() makes
        except OSError as exc:
            if is_disk_condition(exc):
                return "warn", (
                    f"{path}: cannot write in {existing} ({describe(exc)}); install() will warn"
                    " and capture will write nothing until the disk takes files again;"
                    " training goes on"
                )
            return "fail", f"{path}: cannot write in {existing} ({exc.strerror or exc})"
        usage = shutil.disk_usage(existing)
        created = "" if existing == path else " (will be created)"
        detail = (
            f"{path}{created}: writable, {format_bytes(usage.free)} free of "
            f"{format_bytes(usage.total)}"
        )
        if usage.free < LOW_SPACE_BYTES:
            return "warn", f"{detail}; window dumps can take hundreds of MiB each"
        return "pass", detail

    def check_allocator_conf(self) -> tuple[Status, str]:
        """Allocator settings that stop or change what memforensics sees."""
        found = {name: os.environ[name] for name in _ALLOC_CONF_VARS if os.environ.get(name)}
        if not found:
            return "pass", "no PYTORCH_*ALLOC_CONF set: the native caching allocator"
        text = ", ".join(f"{name}={value}" for name, value in found.items())
        joined = " ".join(found.values()).replace(" ", "")
        if "backend:cudaMallocAsync" in joined:
            return "warn", (
                f"{text}: cudaMallocAsync has no OOM observer and no allocator history, so "
                "memforensics can record almost nothing"
            )
        if "expandable_segments:True" in joined:
            return "pass", f"{text}: segments grow in place, so fragmentation OOMs are rarer"
        return "pass", text

    def check_oom_snapshot_enable(self) -> tuple[Status, str]:
        """torch_npu's own OOM dumps (``OOM_SNAPSHOT_ENABLE``) replace ours on NPU.

        Read exactly as the NPU adapter (and torch_npu, with ``strtol``) reads it, so the doctor
        says what the runtime will do: ``0``, empty or non-numeric is off.
        """
        raw = os.environ.get(OOM_SNAPSHOT_ENABLE)
        if raw is None:
            return "pass", "not set"
        value = oom_snapshot_enable()
        shown = raw if raw.strip() else repr(raw)
        if value == 0:
            return "pass", (
                f"{OOM_SNAPSHOT_ENABLE}={shown} reads as 0 (off) to torch_npu: memforensics "
                "attaches its observer and records history as configured"
            )
        if self.device in {"npu", "auto"}:
            return "warn", (
                f"{OOM_SNAPSHOT_ENABLE}={shown} reads as {value} (on): torch_npu dumps on OOM and "
                "records history itself, so on NPU memforensics attaches no observer and never "
                "touches history; set it to 0 or unset it to get memforensics' dumps"
            )
        return (
            "pass",
            f"{OOM_SNAPSHOT_ENABLE}={shown}: read only by torch_npu, not --device {self.device}",
        )
