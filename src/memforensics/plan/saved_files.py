"""Checkpoints a planned run saves with stand-ins in them, put back as they were when it ends.

A stand-in has no values: ``torch.save``, and ``pickle`` of an object holding one, write its
bytes as zeros (:mod:`~memforensics.plan.checkpoints`) and safetensors writes the zeros its host
copy reads;
a host copy of a stand-in (``.cpu()``, a full state dict offloaded to the CPU) holds the values
a plan reads, made up, not the trained ones.
Such a file is a checkpoint of a model whose weights are all zero, at the path where the script
keeps its real ones. Left there, it would replace a model the script trained and saved before
(``output_dir/model.safetensors``, ``ckpt.pt``), and a real run that resumes from its newest
checkpoint (Hugging Face's ``get_last_checkpoint``, a script's ``if os.path.exists(ckpt)``) would
start from zeros without a word. So the script saves as it would on a GPU, and reads back in the
same run what it saved (a resume, the best model reloaded at the end); when the run ends each
such file is put back: one that was there before gets its earlier content again, a new one is
removed, and the planned device's record says which.

A file's earlier content waits beside it under a hidden name (a rename on the same
filesystem, whatever its size), where it can be found by hand should the plan's process be
killed before it ends.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

ASIDE = ".{name}.memforensics-plan-{pid}"
"""The hidden name, beside it, a file's earlier content waits under while the run goes on."""

PUT_BACK = (
    "checkpoints saved by the script hold zeros or made-up values for the device's, so none is "
    "left where a real run would read it: {what}"
)
"""Said once a run that saved such files ends."""
SHOWN = 3
"""Paths named of each kind; the rest are counted."""


def path_of(target: Any) -> str | None:
    """The absolute path a save writes to where it is named by a path (``str`` or
    ``os.PathLike``); None for a file object or buffer, which the script opened itself."""
    if isinstance(target, (str, os.PathLike)):
        name = os.fspath(target)
        return os.path.abspath(name) if isinstance(name, str) else None
    return None


def opened_path(target: Any) -> str | None:
    """The absolute path of the file on disk that a file object the script opened writes (the
    ``name`` ``open`` gives it); None for a buffer in memory or a stream that is no file."""
    name = getattr(target, "name", None)
    if isinstance(name, str) and os.path.isfile(name):
        return os.path.abspath(name)
    return None


def _named(paths: list[str]) -> str:
    shown = ", ".join(paths[:SHOWN])
    more = len(paths) - SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def _remove(path: str) -> bool:
    """The file or folder at ``path`` removed; whether there was one."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
        return True
    if os.path.lexists(path):
        os.remove(path)
        return True
    return False


class SavedFiles:
    """The files the run saved stand-ins into, each with where its earlier content waits
    (None: the file is new). A checkpoint that is a folder (``torch.distributed.checkpoint``'s)
    is kept and put back whole."""

    def __init__(self) -> None:
        self._kept: dict[str, str | None] = {}

    def saving(
        self,
        path: str,
        save: Callable[[], Any],
        stand_ins: Callable[[], bool],
        *,
        opened: bool = False,
    ) -> Any:
        """``save()``, which writes ``path``; kept to be put back when ``stand_ins()``, asked
        after it, says it wrote a stand-in (or where it failed part way). A save of values only
        the script's replaces the file as on a GPU. ``opened``: ``save()`` writes a file object
        the script opened at ``path``, whose earlier content its ``open`` replaced already, as
        on a GPU, so it is kept as a new file (removed when the run ends)."""
        aside = None if opened else self._set_aside(path)
        try:
            result = save()
        except BaseException:
            self._kept.setdefault(path, aside)
            raise
        if stand_ins():
            self._kept.setdefault(path, aside)
        else:
            self._replaced(path, aside)
        return result

    def _set_aside(self, path: str) -> str | None:
        """A file already at ``path`` moved to its hidden name, unless the run saved there
        already: that name, or None."""
        if path in self._kept or not os.path.exists(path):
            return None
        head, name = os.path.split(path)
        aside = os.path.join(head, ASIDE.format(name=name, pid=os.getpid()))
        os.replace(path, aside)
        return aside

    def _replaced(self, path: str, aside: str | None) -> None:
        """The script saved its own values at ``path``: what was there before is gone, as on
        a GPU."""
        for earlier in (aside, self._kept.pop(path, None)):
            if earlier is not None:
                _remove(earlier)

    def put_back(self) -> str | None:
        """Every kept file as it was before the run (its earlier content again, or removed);
        the sentence that says so, or None where the run kept none. A file the script removed
        itself (a rotation of checkpoints) stays removed."""
        restored: list[str] = []
        removed: list[str] = []
        for path, aside in self._kept.items():
            try:
                if aside is not None:
                    _remove(path)
                    os.replace(aside, path)
                    restored.append(path)
                elif _remove(path):
                    removed.append(path)
            except OSError:
                continue
        self._kept.clear()
        parts = []
        if restored:
            parts.append(f"{len(restored)} saved over put back as they were ({_named(restored)})")
        if removed:
            parts.append(f"{len(removed)} new removed ({_named(removed)})")
        return PUT_BACK.format(what="; ".join(parts)) if parts else None
