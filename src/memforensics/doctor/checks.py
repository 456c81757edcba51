"""``memforensics doctor``: the checks a user runs on a training node before a long job.

Each check answers one question with ``pass``, ``warn`` or ``fail`` and a one-line reason, and
none may crash the doctor: a check that raises is reported as failed with the error. The checks
talk to the device only through the ``DeviceBackend`` Protocol and ``create_backend``, so the
doctor runs (and says "not installed") where torch is absent. ``Doctor`` asks the environment,
the disk and the settings itself, and holds a ``DeviceChecks`` for the questions about the
device.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from memforensics._errors import ConfigError
from memforensics._units import format_bytes
from memforensics._version import __version__
from memforensics.backends.npu import OOM_SNAPSHOT_ENABLE, oom_snapshot_enable
from memforensics.capture.config import build_config, config_from_env
from memforensics.doctor.device import BackendFactory, DeviceChecks
from memforensics.doctor.probe import import_framework
from memforensics.doctor.status import Check, DoctorReport, Status, overall

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
            with tempfile.TemporaryFile(dir=existing):
                pass
        except OSError as exc:
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
