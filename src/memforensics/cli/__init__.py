"""The ``memforensics`` console script: ``main(argv) -> int`` over one module per subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from memforensics._version import __version__
from memforensics.cli._command import Command, CommandError
from memforensics.cli.commands import all_commands

__all__ = ["Command", "CommandError", "build_parser", "main"]


def build_parser() -> tuple[
    argparse.ArgumentParser, dict[str, tuple[Command, argparse.ArgumentParser]]
]:
    """Build the top-level parser and one subparser per registered command."""
    parser = argparse.ArgumentParser(
        prog="memforensics",
        description="Explain PyTorch out-of-memory failures from memforensics dumps.",
    )
    parser.add_argument("--version", action="version", version=f"memforensics {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    table: dict[str, tuple[Command, argparse.ArgumentParser]] = {}
    for command in all_commands():
        doc = (type(command).__doc__ or "").strip()
        summary = doc.splitlines()[0] if doc else command.name
        child = sub.add_parser(command.name, help=summary, description=doc)
        command.prepare_parser(child)
        table[command.name] = (command, child)
    return parser, table


def main(argv: Sequence[str] | None = None) -> int:
    """Run the console script; return its exit status (2 for bad input, like argparse)."""
    parser, table = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    command, child = table[args.command]
    try:
        return command.run(args, child)
    except CommandError as exc:
        print(f"memforensics {command.name}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
