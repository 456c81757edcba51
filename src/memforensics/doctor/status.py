"""What one check answers (``pass``, ``warn`` or ``fail`` with a one-line reason), and the
verdict over all of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["pass", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    """The answer to one question: a name, a status and a one-line detail."""

    name: str
    status: Status
    detail: str

    def as_dict(self) -> dict[str, str]:
        """``{name, status, detail}`` for ``--json``."""
        return {"name": self.name, "status": self.status, "detail": self.detail}


def overall(checks: list[Check]) -> Status:
    """``fail`` if any check failed, else ``warn`` if any warned, else ``pass``."""
    statuses = {check.status for check in checks}
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"
