"""The shape every ``memforensics`` subcommand has (after memray's ``Command`` protocol).

A subcommand is a class: its name is the subcommand, its docstring's first line the help, and
``run`` returns the exit status. Errors meant for the user are raised as ``CommandError`` and
printed as one line on stderr, never as a traceback.

Every command spells a flag the same way: ``--out-dir DIR`` for a folder it writes,
``-o/--output FILE`` for a file, ``--jobs N`` for processes. An old spelling stays accepted,
hidden and warned about, through :func:`add_old_spelling`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from memforensics._text import printable


class CommandError(Exception):
    """A failure to report as one line on stderr with ``exit_code`` (2: bad input or file)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Command(Protocol):
    """One ``memforensics`` subcommand."""

    name: str

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Add this subcommand's arguments to ``parser``."""
        ...

    def run(self, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        """Do the work; return the process exit status."""
        ...


def nothing_to_read(folder: str | Path, what: str = "dumps") -> str:
    """What every command says of a folder that holds nothing it reads (``what``: ``dumps``,
    ``journals or sidecars``); raised as a :class:`CommandError`, it exits 2 like any bad
    input."""
    return f"no {what} under {printable(str(folder))}"


SKIPPED_LISTED = 10
"""Files a command names when it skips many; the rest it counts. 10,000 unreadable files
are one count, not a megabyte of stderr."""


def skipped_lines(command: str, messages: Sequence[str], label: str = "skipped: ") -> list[str]:
    """What every command prints to stderr about the files it skipped: one line for each of
    the first ``SKIPPED_LISTED``, then one that counts the rest."""
    lines = [f"memforensics {command}: {label}{m}" for m in messages[:SKIPPED_LISTED]]
    if len(messages) > SKIPPED_LISTED:
        lines.append(
            f"memforensics {command}: skipped {len(messages) - SKIPPED_LISTED:,} more"
            f" file(s), {len(messages):,} in all"
        )
    return lines


def none_readable(messages: Sequence[str], default: str) -> str:
    """The one line of a command that could read none of its files (``default`` when it was
    given none): each reason for a few, the first ``SKIPPED_LISTED`` and a count for many."""
    if len(messages) <= 1:
        return messages[0] if messages else default
    shown = "; ".join(messages[:SKIPPED_LISTED])
    more = len(messages) - SKIPPED_LISTED
    tail = f"; and {more:,} more" if more > 0 else ""
    return f"none of the {len(messages):,} files could be read: {shown}{tail}"


class _OldSpelling(argparse.Action):
    """A hidden spelling of 0.1: warns once per invocation however often it is given, then
    stores into the new option's ``dest``, or does nothing when the flag is retired (``new``
    None, ``why`` it no longer does anything)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        new: str | None,
        why: str = "",
        **kw: Any,
    ) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kw)
        self.new = new
        self.why = why
        self.warned = False

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if not self.warned:
            self.warned = True
            said = (
                f"is deprecated; use {self.new}"
                if self.new is not None
                else f"does nothing any more ({self.why}) and will be removed"
            )
            print(f"{parser.prog}: warning: {option_string} {said}", file=sys.stderr)
        if self.new is not None:
            setattr(namespace, self.dest, values)


def add_old_spelling(
    parser: argparse.ArgumentParser, old: str, new: str, *, dest: str, type: Any = None
) -> None:
    """Accept ``old`` (kept through 0.2.x) for the option ``new`` already added with ``dest``
    and ``type``: hidden from the help, a one-line warning on stderr when used."""
    parser.add_argument(
        old, dest=dest, type=type, default=argparse.SUPPRESS, action=_OldSpelling, new=new
    )


def add_retired_flags(parser: argparse.ArgumentParser, *flags: str, why: str) -> None:
    """Accept ``flags`` of 0.1 that no longer do anything (through 0.2.x): hidden, one warning
    saying ``why``, no effect."""
    parser.add_argument(
        *flags, dest="_retired", nargs=0, default=argparse.SUPPRESS, action=_OldSpelling,
        new=None, why=why,
    )  # fmt: skip


class Registered(NamedTuple):
    """A subcommand as ``--help`` lists it, known without importing its module."""

    cls: str
    """Its class, in the module ``memforensics.cli.commands.<name>``."""
    summary: str
    """The first line of the class's docstring (a test keeps the two equal)."""


# Registry of subcommands, one small module each in ``commands/``, in the order
# ``memforensics --help`` lists them. Keeping the list here (rather than discovering modules)
# makes the CLI's surface explicit, and the one-line summaries let ``--help`` answer without
# importing any command: a command's module (and what it needs: the analysis, capture, rich)
# is imported only when that command runs or its own ``--help`` is asked for.
COMMANDS: dict[str, Registered] = {
    "summary": Registered(
        "SummaryCommand",
        "Explain dumps: reserved/allocated bytes, the OOM, a verdict and the biggest sites.",
    ),
    "diff": Registered(
        "DiffCommand",
        "Compare two dumps: change of live bytes per site, largest first, and leak suspects.",
    ),
    "ls": Registered(
        "LsCommand",
        "List the dumps under a run folder (all ranks), oldest first, naming the first OOM.",
    ),
    "replay": Registered(
        "ReplayCommand",
        "Replay a dump through the allocator model: self-check, proven bound, what-if table.",
    ),
    "leaks": Registered(
        "LeaksCommand",
        "Find leaks across a run's window dumps: per rank, per site, growth per step.",
    ),
    "overview": Registered(
        "OverviewCommand",
        "The whole run from every rank's journal: first OOM, ranks that stand out, a healthy peer.",
    ),
    "watch": Registered(
        "WatchCommand",
        "Watch a running job's journals: one row per rank, most urgent first (Ctrl-C ends it).",
    ),
    "report": Registered(
        "ReportCommand",
        "Write one self-contained HTML report (opens with no network) for dumps or run folders.",
    ),
    "cache": Registered(
        "CacheCommand",
        "Show (info) or empty (clear) the cache of answers about dumps that analysis commands"
        " keep.",
    ),
    "run": Registered(
        "RunCommand",
        "Run a training script or module with forensics installed, as python would run it.",
    ),
    "plan": Registered(
        "PlanCommand",
        "Predict a script's GPU memory on the CPU: peak, reserved, segments, and whether it fits.",
    ),
    "doctor": Registered(
        "DoctorCommand",
        "Check this node before a long job: framework, device, OOM hook, history, disk, settings.",
    ),
    "demo": Registered(
        "DemoCommand",
        "Run a small leaky training loop into OOM with forensics on, and show what it captured.",
    ),
}


def load_command(name: str) -> Command:
    """The registered subcommand ``name``, its module imported now."""
    module = importlib.import_module(f"memforensics.cli.commands.{name}")
    command: Command = getattr(module, COMMANDS[name].cls)()
    return command


def all_commands() -> list[Command]:
    """Instantiate every registered subcommand (importing every command's module)."""
    return [load_command(name) for name in COMMANDS]
