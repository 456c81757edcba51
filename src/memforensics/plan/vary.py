"""``--vary NAME=V1,V2,...``: one of the script's own options set to each value in turn.

Pure: the command lines to run and the answer from their rows. The CLI runs each value in its own
process (a plan changes the interpreter: modes, patches, the script's modules).
"""

from __future__ import annotations

from dataclasses import dataclass

EXPANDABLE = "expandable_segments:True"


@dataclass(frozen=True)
class Vary:
    """The option to vary (without its dashes) and its values, in the order given."""

    name: str
    values: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Vary:
        """``batch-size=1,2,4`` (ValueError for anything else)."""
        name, sep, values = text.partition("=")
        name = name.strip().lstrip("-")
        found = tuple(v.strip() for v in values.split(",") if v.strip())
        if not sep or not name or not found:
            raise ValueError(f"--vary takes NAME=V1,V2,..., got {text!r}")
        return cls(name, found)

    def args(self, script_args: tuple[str, ...], value: str) -> tuple[str, ...]:
        """``script_args`` with ``--NAME`` set to ``value``: replacing a value given there
        (``--NAME V`` or ``--NAME=V``), else added at the end."""
        flag = f"--{self.name}"
        out = list(script_args)
        for i, arg in enumerate(out):
            if arg == flag and i + 1 < len(out):
                out[i + 1] = value
                return tuple(out)
            if arg.startswith(flag + "="):
                out[i] = f"{flag}={value}"
                return tuple(out)
        return (*out, flag, value)


@dataclass(frozen=True)
class VaryRow:
    """One value planned: its peaks and whether it fits, as given and with expandable segments
    (None where the run failed for another reason, or SIGTERM or Ctrl-C stopped it before its
    peaks passed the device); ``oom``: the run ran out (its peaks are those before the request
    that failed); ``interrupted``: where the script was (``file:line``) when a signal stopped
    its run as given, else its run with expandable segments, the peaks being those up to
    there, and ``interrupted_by`` which (``SIGTERM`` or ``Ctrl-C``)."""

    value: str
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    fits: bool | None
    fits_expandable: bool | None
    error: str | None = None
    oom: bool = False
    oom_expandable: bool = False
    interrupted: str | None = None
    interrupted_by: str | None = None


SCHEMA = 1
"""Version of ``plan --vary --json``'s keys (docs/json.md)."""


@dataclass(frozen=True)
class VaryAnswer:
    """``--vary``'s answer: one row per value, and the largest value that fits, as given and
    with expandable segments; ``interrupted_by``: the signal that stopped the plan
    (``SIGTERM``, then ``terminated`` too, or ``Ctrl-C``), the rows being those of the values
    planned so far; ``not_planned``: the values it stopped before their plans began."""

    name: str
    rows: tuple[VaryRow, ...]
    largest: str | None
    largest_expandable: str | None
    terminated: bool = False
    not_planned: tuple[str, ...] = ()
    interrupted_by: str | None = None


def largest(rows: list[VaryRow], *, expandable: bool) -> str | None:
    """The largest value that fits (numerically when every value is a number, else the last in
    the order given), None when none does."""
    fitting = [r.value for r in rows if (r.fits_expandable if expandable else r.fits)]
    if not fitting:
        return None
    try:
        return max(fitting, key=float)
    except ValueError:
        return fitting[-1]


def with_expandable(conf: str | None) -> str:
    """``conf`` with ``expandable_segments:True`` (replacing any setting of it)."""
    parts = [p for p in (conf or "").split(",") if p.strip()]
    parts = [p for p in parts if not p.strip().startswith("expandable_segments")]
    return ",".join([*parts, EXPANDABLE])
