"""The shape every ``memforensics`` subcommand has (after memray's ``Command`` protocol).

A subcommand is a class: its name is the subcommand, its docstring's first line the help, and
``run`` returns the exit status. Errors meant for the user are raised as ``CommandError`` and
printed as one line on stderr, never as a traceback.
"""

from __future__ import annotations

import argparse
from typing import Protocol


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
