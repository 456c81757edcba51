"""The ``memforensics`` console script: ``main(argv) -> int`` over one module per subcommand."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext

from memforensics._version import __version__
from memforensics.cli._command import COMMANDS, Command, CommandError, load_command
from memforensics.cli._output import safe_output

__all__ = ["Command", "CommandError", "build_parser", "main"]

# ``run`` hands stdout to the user's script, whose exceptions pass through unchanged (as under
# python), so a closed pipe there is the script's business, not ours.
_SCRIPT_COMMANDS = frozenset({"run"})
# Commands that read dumps end when their answer is printed, and what they read (millions of
# dicts and lists) holds no cycles: the collector's passes over it would cost a third of the
# command and free nothing, so it is held off until the command ends. Reference counting frees
# each dump when its answer is done. Not for ``run`` (the user's training) nor ``watch`` (it
# runs for hours).
_READERS = frozenset({"diff", "leaks", "ls", "overview", "replay", "report", "summary"})


def build_parser(
    commands: Iterable[str] | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, tuple[Command, argparse.ArgumentParser]]]:
    """Build the top-level parser, listing every registered command, and a full subparser for
    each of ``commands`` (default: all of them). Only those commands' modules are imported:
    the listing comes from the registry's one-line summaries."""
    parser = argparse.ArgumentParser(
        prog="memforensics",
        description="Explain PyTorch out-of-memory failures from memforensics dumps.",
    )
    parser.add_argument("--version", action="version", version=f"memforensics {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = set(COMMANDS if commands is None else commands)
    table: dict[str, tuple[Command, argparse.ArgumentParser]] = {}
    for name, registered in COMMANDS.items():
        child = sub.add_parser(name, help=registered.summary, description=registered.summary)
        if name in wanted:
            command = load_command(name)
            child.description = (type(command).__doc__ or "").strip() or registered.summary
            command.prepare_parser(child)
            table[name] = (command, child)
    return parser, table


def _command_named(argv: Sequence[str]) -> list[str]:
    """The command ``argv`` names, as a list of one (none when it names no registered one): the
    first argument that is not an option, as the top-level options take no values."""
    for arg in argv:
        if arg == "--":
            break
        if not arg.startswith("-"):
            return [arg] if arg in COMMANDS else []
    return []


def main(argv: Sequence[str] | None = None) -> int:
    """Run the console script; return its exit status (2 for bad input, like argparse)."""
    if argv is None:
        argv = sys.argv[1:]
    parser, table = build_parser(_command_named(argv))
    try:
        args = _parse(parser, table, argv)
    except SystemExit:  # --help, --version or a usage error: flush now, quietly if need be
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _pipe_closed()
        raise
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    command, child = table[args.command]
    if command.name in _SCRIPT_COMMANDS:
        return _run(command, args, child)
    collector: AbstractContextManager[None] = nullcontext()
    if command.name in _READERS:  # their modules imported the analysis already
        from memforensics.analysis.dump import paused_gc

        collector = paused_gc()
    with safe_output(), collector:
        return _run(command, args, child)


def _parse(
    parser: argparse.ArgumentParser,
    table: dict[str, tuple[Command, argparse.ArgumentParser]],
    argv: Sequence[str] | None,
) -> argparse.Namespace:
    """``argv`` parsed; an unknown argument is reported with the usage of the subcommand it was
    given to (argparse's own parse_args would show the top-level usage), exit status 2."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        child = table[args.command][1] if args.command is not None else parser
        child.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _run(command: Command, args: argparse.Namespace, child: argparse.ArgumentParser) -> int:
    try:
        status = command.run(args, child)
        if command.name not in _SCRIPT_COMMANDS:
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return status
    except CommandError as exc:
        print(f"memforensics {command.name}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except MemoryError:
        print(f"memforensics {command.name}: out of memory", file=sys.stderr)
        return 1
    except BrokenPipeError:
        if command.name in _SCRIPT_COMMANDS:
            raise
        return _pipe_closed()


def _pipe_closed() -> int:
    """The reader of stdout left (``| head``): stop quietly with status 0, as the reader got
    all it wanted. stdout is pointed at /dev/null so the interpreter's final flush of what is
    still buffered cannot fail again and print an ``Exception ignored`` message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 0
