"""Run a script or module the way ``python`` would, inside this interpreter.

``memforensics run`` has to be invisible to the training script: ``sys.argv``, ``sys.path[0]``
and ``__main__`` look as they do under ``python train.py`` or ``python -m pkg.train``, and the
script's exit status and exceptions leave unchanged. Everything changed in the interpreter is
put back afterwards, so the runner can also be driven in-process (the tests do).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import runpy
import shutil
import sys
import traceback
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal


class TargetError(Exception):
    """The script or module cannot be found; ``exit_code`` is what ``python`` would exit with."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Target:
    """What to run: a script path (as given) or a module name, and its arguments."""

    kind: Literal["script", "module"]
    name: str
    args: tuple[str, ...]

    def describe(self) -> str:
        """``train.py`` or ``-m pkg.train``, for log lines."""
        return self.name if self.kind == "script" else f"-m {self.name}"


def check_target(target: Target) -> None:
    """Fail like ``python missing.py`` (exit status 2) or ``python -m missing`` (1), before
    anything is installed. Finding ``pkg.mod`` imports ``pkg``, as python's ``-m`` does."""
    if target.kind == "script":
        if not os.path.exists(target.name):
            raise TargetError(
                f"can't open file {os.path.abspath(target.name)!r}: "
                "[Errno 2] No such file or directory",
                exit_code=2,
            )
        return
    name = target.name
    with python_like(target):  # sys.path[0] = the working directory, as for python -m
        try:
            spec = importlib.util.find_spec(name)
            is_package = spec is not None and spec.submodule_search_locations is not None
            if is_package and importlib.util.find_spec(f"{name}.__main__") is None:
                raise TargetError(
                    f"No module named {name}.__main__; {name!r} is a package and cannot be "
                    "directly executed",
                    exit_code=1,
                )
        except (ImportError, ValueError) as exc:
            message = f"Error while finding module specification for {name!r} ({exc})"
            raise TargetError(message, exit_code=1) from None
    if spec is None:
        raise TargetError(f"No module named {name}", exit_code=1)


def _path0(target: Target) -> str:
    """What python puts first on ``sys.path``: the script's folder (symlinks resolved), the
    directory or zip file itself when that is what runs, the working directory for ``-m``."""
    if target.kind == "module":
        return os.getcwd()
    real = os.path.realpath(target.name)
    if os.path.isdir(real) or zipfile.is_zipfile(real):
        return real
    return os.path.dirname(real)


@contextlib.contextmanager
def python_like(target: Target) -> Iterator[None]:
    """Set ``sys.argv`` and ``sys.path[0]`` as python would for ``target``; restore them after."""
    saved_argv = sys.argv
    first = "-m" if target.kind == "module" else os.path.abspath(target.name)
    sys.argv = [first, *target.args]  # runpy replaces argv[0] with the file it runs
    replace = bool(sys.path) and not getattr(sys.flags, "safe_path", False)
    saved_path0 = sys.path[0] if replace else None
    path0 = _path0(target)
    if replace:
        sys.path[0] = path0
    try:
        yield
    finally:
        sys.argv = saved_argv
        if replace and sys.path and sys.path[0] == path0 and saved_path0 is not None:
            sys.path[0] = saved_path0


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in ``os.environ`` inside, and every one of them put back (or removed)
    after: how a command hands a script what it must see while it runs."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def exported_config(raw: Mapping[str, str]) -> contextlib.AbstractContextManager[None]:
    """Export passed config flags as ``MEMFORENSICS_*`` variables while the script runs.

    A script that calls ``memforensics.install()`` itself then builds the same configuration and
    gets the facade ``run`` installed, instead of replacing it with one that lacks the flags.
    """
    from memforensics.capture.config import env_var  # pydantic: only where flags are passed

    return environment({env_var(field): text for field, text in raw.items()})


def _script_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the leading frames of this runner and of runpy, as python would show it."""
    own = {__name__, runpy.__name__}  # by module name: runpy's file may be "<frozen runpy>"
    while (
        tb is not None and tb.tb_next is not None and tb.tb_frame.f_globals.get("__name__") in own
    ):
        tb = tb.tb_next
    return tb


def run_target(target: Target) -> dict[str, Any]:
    """Run ``target`` as ``__main__``; its globals as it left them (runpy's copy), which hold
    what the script kept to its end for as long as the caller holds them. ``SystemExit`` and
    every exception propagate unchanged (the same object); only the runner's own frames are
    dropped from the traceback."""
    with python_like(target):
        try:
            if target.kind == "script":
                return runpy.run_path(os.path.abspath(target.name), run_name="__main__")
            return runpy.run_module(target.name, run_name="__main__", alter_sys=True)
        except SystemExit:
            raise
        except KeyboardInterrupt as exc:
            # The console script turns KeyboardInterrupt into exit status 130 without a word;
            # python prints the traceback first, so do that here.
            traceback.print_exception(type(exc), exc, _script_frames(exc.__traceback__))
            raise
        except BaseException as exc:
            exc.with_traceback(_script_frames(exc.__traceback__))
            raise


def console_script(name: str) -> str | None:
    """The Python console script that the shell runs for the bare command ``name`` (``yolo``,
    ``torchrun``, installed on ``PATH`` by pip from a package's entry points), where no file of
    that name is in the working directory; None otherwise (a path, a file here, a command that
    is not a Python script). So ``memforensics plan yolo train ...`` runs what ``yolo train
    ...`` runs, as ``python "$(which yolo)" train ...`` would."""
    if os.sep in name or (os.altsep and os.altsep in name) or os.path.exists(name):
        return None
    found = shutil.which(name)
    if found is None:
        return None
    try:
        with open(found, "rb") as file:
            first = file.readline(256)
    except OSError:
        return None
    return found if first.startswith(b"#!") and b"python" in first else None


def target_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Target:
    """Split ``run``'s or ``plan``'s command line into the script or module and its arguments."""
    rest: list[str] = list(args.script or [])
    if args.module is not None:
        if not args.module:
            parser.error("argument -m: expected a module name")
        name, *module_args = args.module
        return Target("module", name, (*module_args, *rest))
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        parser.error("a script or -m MODULE is required")
    return Target("script", console_script(rest[0]) or rest[0], tuple(rest[1:]))
