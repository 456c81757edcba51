"""What one check answers (``pass``, ``warn`` or ``fail`` with a one-line reason), the verdict
over all of them, and the report ``doctor`` prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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
