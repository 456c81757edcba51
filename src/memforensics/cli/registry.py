"""Registry of subcommands (one small module each in ``commands/``), imported lazily at parser
build time.

Keeping the list here (rather than discovering modules) makes the CLI's surface explicit and
keeps ``import memforensics`` free of every command's dependencies.
"""

from __future__ import annotations

import importlib

from memforensics.cli._command import Command

# (module, class) in the order ``memforensics --help`` lists them.
_COMMANDS: tuple[tuple[str, str], ...] = (
    ("summary", "SummaryCommand"),
    ("diff", "DiffCommand"),
    ("ls", "LsCommand"),
    ("replay", "ReplayCommand"),
    ("leaks", "LeaksCommand"),
    ("overview", "OverviewCommand"),
    ("watch", "WatchCommand"),
    ("report", "ReportCommand"),
    ("cache", "CacheCommand"),
    ("run", "RunCommand"),
    ("doctor", "DoctorCommand"),
    ("demo", "DemoCommand"),
)


def all_commands() -> list[Command]:
    """Instantiate every registered subcommand."""
    commands: list[Command] = []
    for module_name, class_name in _COMMANDS:
        module = importlib.import_module(f"memforensics.cli.commands.{module_name}")
        commands.append(getattr(module, class_name)())
    return commands
