"""Allocation sites: which line of *user* code is responsible for a block of memory.

PyTorch records frames innermost first, and the innermost ones are nearly always inside torch
itself (``torch/nn/modules/...``) or C++ (``??``, ``CUDACachingAllocator.cpp``). Neither tells an
engineer what to change, so a block gets two names:

- its **site**: the innermost frame outside torch, torch_npu and memforensics that is Python
  code (a line in ``transformers`` when a notebook called a Hugging Face model);
- its **caller**: the innermost frame that is also outside every installed package
  (``site-packages``, ``dist-packages``) and the standard library: the user's own line, which is
  what they can change (the notebook cell). For plain user code both are the same frame.

Native frames are never sites: :func:`is_native_frame` is the one test every reader applies
(sites, callers, the call trees, the phases of kinds). A stack recorded with ``stacks="all"`` holds
C++ frames (``??``, ``CUDACachingAllocator.cpp``, ``c10::...``), libc's (``clone3.S``) and
libstdc++'s (``thread48.o``); none is a line anyone can change.

A block without frames is one of two things, and only the history tells which. If the history
recorded its allocation (its ``alloc`` entry is in a trace that records stacks), its stack was
taken and held no Python frame: it is ``<no Python frames>``, made by native code alone
(autograd's backward thread, which ``stacks="python"`` records as no frames at all, or a
library's own workspace). Otherwise it was allocated while the allocator recorded no history
(before recording started, or while it was off): it is ``<before recording>``. The frames alone
cannot tell the two apart, so every reader passes ``recorded`` (what
:mod:`~memforensics.analysis.filled.lifetime` found) to the functions below. A stack whose frames
are all native (``stacks="all"``) is ``<no Python frames>`` too: the same fact, recorded with
more detail. ``<unknown>`` is kept for stacks with Python frames none of which qualifies (every
Python frame inside torch; for the caller, every frame inside installed packages).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from memforensics._text import printable
from memforensics.analysis.dump.model import WIDEST

# Distinct stacks: one frames list stands for every equal one, so a stack is judged once.
#
# PyTorch writes each trace entry with its own ``frames`` list over shared frame dicts: a
# million-entry trace holds a million lists but only a few hundred distinct stacks. Whatever is
# read from a stack (its phase, its site, its call path) is the same for every equal list, so the
# trace walk replaces each list by the first equal one it met, and per-stack answers can then be
# kept by that list's identity.
#
# Two lists are equal when their frames are (``==``, which compares shared frame dicts by identity
# first): lists are bucketed by the identity of their innermost frame and compared in C. A bucket
# that grows past a few lists (a hostile file, or many stacks under one innermost frame) falls
# back on the tuple of frame identities, which costs more but never grows quadratically.

_BUCKET = 8  # lists compared per innermost frame before the tuple key takes over
_Answer = TypeVar("_Answer")


class Stacks:
    """Interns frames lists for the lifetime of one dump's analysis.

    It holds every list it returns, so no identity it keys by is reused while it lives.
    """

    __slots__ = ("_buckets", "_by_ids")

    def __init__(self) -> None:
        self._buckets: dict[int, list[list[Any]]] = {}
        self._by_ids: dict[tuple[int, ...], list[Any]] = {}

    def canonical(self, frames: object) -> object:
        """The first list seen equal to ``frames``; ``frames`` itself when it is the first, empty,
        or no list at all."""
        if type(frames) is not list or not frames:
            return frames
        head = id(frames[0])
        bucket = self._buckets.get(head)
        if bucket is None:
            self._buckets[head] = [frames]
            return frames
        try:
            for seen in bucket:
                if seen == frames:
                    return seen
        except RecursionError:  # a self-referencing list from a hostile pickle: keep it apart
            return frames
        if len(bucket) < _BUCKET:
            bucket.append(frames)
            return frames
        return self._by_ids.setdefault(tuple(map(id, frames)), frames)


def per_stack(judge: Callable[[Any], _Answer]) -> Callable[[Any], _Answer]:
    """``judge``, asked once per distinct frames list and answered from memory after that.

    Keyed by the list's identity: meant for the lists :class:`Stacks` hands out (equal stacks
    share one), while whatever holds them is alive, so no identity is reused meanwhile.
    """
    answers: dict[int, _Answer] = {}

    def answer(frames: Any) -> _Answer:
        key = id(frames)
        if key in answers:
            return answers[key]
        found = answers[key] = judge(frames)
        return found

    return answer


def per_recorded_stack(judge: Callable[[Any, bool], _Answer]) -> Callable[[Any, bool], _Answer]:
    """``judge(frames, recorded)``, asked once per distinct frames list (:func:`per_stack`) and
    recorded-ness, since what an empty stack means depends on whether the history recorded it."""
    answers: dict[int, _Answer] = {}

    def answer(frames: Any, recorded: bool) -> _Answer:
        key = id(frames) << 1 | (recorded and not frames)
        if key in answers:
            return answers[key]
        found = answers[key] = judge(frames, recorded)
        return found

    return answer


def unframed_site(recorded: bool) -> str:
    """The label of a block without frames: ``<no Python frames>`` when the history recorded
    its allocation (a stack was taken and held no Python), else ``<before recording>``."""
    return NATIVE_ONLY if recorded else BEFORE_RECORDING


UNKNOWN_SITE = "<unknown>"
BEFORE_RECORDING = "<before recording>"
NATIVE_ONLY = "<no Python frames>"

# Folder names that mark library code when they are a package on the path.
_LIBRARY_DIRS = frozenset({"torch", "torch_npu", "memforensics"})
# A checkout of one of those projects keeps its own scripts in these; they are user code.
_CHECKOUT_DIRS = frozenset({"tests", "test", "benchmarks", "examples", "scripts", "docs"})
# Object and assembly files, shared libraries and C/C++/CUDA sources (compared lower-cased, so
# ``.S`` and ``.C`` count too); a shared library may carry a version (``libc.so.6``).
_NATIVE_FILE_RE = re.compile(
    r"\.(?:o|s|a|so(?:\.\d+)*|asm|c|cc|cp|cpp|cxx|c\+\+|cu|cuh|h|hh|hpp|hxx|h\+\+|inl|ipp|tcc)$"
)
_STEP_RE = re.compile(r"(?:^|[^A-Za-z0-9_])step\s*=\s*(-?\d+)")
# Where pip, conda and distributions put packages; the standard library sits beside them.
_INSTALLED_DIRS = frozenset({"site-packages", "dist-packages"})
_STDLIB_RE = re.compile(r"(?:^|/)(?:lib|lib64)/(?:python|pypy)\d+(?:\.\d+)?t?/")

_library_cache: dict[str, bool] = {}
_installed_cache: dict[str, bool] = {}
_native_cache: dict[tuple[str, str], bool] = {}


def is_native_frame(filename: str, name: str) -> bool:
    """True for a frame that is not Python code, and so never a site or a call-tree node.

    Native means: no file or ``??`` (what the unwinder says without debug info), an object,
    assembly or library file (``thread48.o``, ``clone3.S``, ``libc.so.6``), a C, C++ or CUDA
    source or header, or a C++ qualified name (``c10::``, ``at::``, ``torch::``, any ``::``:
    a Python function's name never holds one). ``<stdin>``, ``<string>`` and notebook cells
    are Python.
    """
    key = (filename, name)
    cached = _native_cache.get(key)
    if cached is not None:
        return cached
    result = (
        not filename
        or filename == "??"
        or _NATIVE_FILE_RE.search(filename.lower()) is not None
        or "::" in name
    )
    if len(_native_cache) < 100_000:
        _native_cache[key] = result
    return result


def is_library_file(filename: str) -> bool:
    """True for torch, torch_npu and memforensics Python files (by path component), and the
    ``memforensics`` console script.

    Native frames are :func:`is_native_frame`'s to judge (they need the frame's name too).

    ``/home/me/memforensics/tests/test_x.py`` is user code: the innermost library folder name
    only counts when what follows it is not a checkout's own ``tests``/``examples``/... folder
    (so a checkout named for its package, ``memforensics/src/memforensics/examples/x.py``,
    keeps its examples the user's).
    """
    cached = _library_cache.get(filename)
    if cached is not None:
        return cached
    result = _classify(filename)
    if len(_library_cache) < 100_000:
        _library_cache[filename] = result
    return result


_RUNPY_RE = re.compile(r"(?:^|/)runpy\.py$")


def is_framework_file(filename: str) -> bool:
    """True for the frames between a user's lines that are nobody's to change: torch's,
    torch_npu's and memforensics' own, its console script included (:func:`is_library_file`),
    and ``runpy`` (how ``python -m`` and ``memforensics run`` start a script)."""
    if is_library_file(filename):
        return True
    path = filename.replace("\\", "/")
    return filename == "<frozen runpy>" or bool(_RUNPY_RE.search(path) and is_installed_file(path))


def _classify(filename: str) -> bool:
    parts = filename.replace("\\", "/").split("/")
    if parts[-2:] == ["bin", "memforensics"]:  # the console script
        return True
    innermost = None
    for index, part in enumerate(parts[:-1]):
        if part in _LIBRARY_DIRS:
            innermost = index
        if part.startswith("torchinductor_"):  # code torch.compile generated
            return True
    return innermost is not None and parts[innermost + 1] not in _CHECKOUT_DIRS


def is_installed_file(filename: str) -> bool:
    """True for files of installed packages and of the standard library (not the user's own).

    Judged by path, since a snapshot comes from another machine: a ``site-packages`` or
    ``dist-packages`` folder, anything under ``lib/pythonX.Y/`` (conda, venvs, distributions),
    Windows' ``Lib`` folder, and frozen stdlib modules (``<frozen runpy>``).
    """
    cached = _installed_cache.get(filename)
    if cached is not None:
        return cached
    path = filename.replace("\\", "/")
    parts = path.split("/")
    result = (
        filename.startswith("<frozen ")
        or any(part in _INSTALLED_DIRS or part == "Lib" for part in parts[:-1])
        or _STDLIB_RE.search(path) is not None
    )
    if len(_installed_cache) < 100_000:
        _installed_cache[filename] = result
    return result


def attribute(frames: object, recorded: bool = False) -> tuple[str, str]:
    """``(site, caller)`` of a block's frames, in one pass (see the module docstring).

    ``frames`` is whatever the snapshot holds. ``None`` or an empty list is
    ``<no Python frames>`` when ``recorded`` (the history recorded the allocation with its
    stack), else ``<before recording>``; native frames only is ``<no Python frames>``;
    anything else that yields no frame is ``<unknown>``.
    """
    if frames is None or (isinstance(frames, list) and not frames):
        label = unframed_site(recorded)
        return label, label
    if not isinstance(frames, list):
        return UNKNOWN_SITE, UNKNOWN_SITE
    site: str | None = None
    native = python = False
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        filename, name = frame.get("filename"), frame.get("name")
        if not isinstance(filename, str):
            continue
        if is_native_frame(filename, name if isinstance(name, str) else ""):
            native = True
            continue
        python = True
        if is_library_file(filename):
            continue
        if site is None:
            site = _describe(frame, filename)
        if not is_installed_file(filename):
            return site, _describe(frame, filename)
    if site is None and native and not python:
        return NATIVE_ONLY, NATIVE_ONLY
    return site or UNKNOWN_SITE, UNKNOWN_SITE


def _describe(frame: dict[object, object], filename: str) -> str:
    line = frame.get("line")
    name = frame.get("name")
    line_text = str(line) if type(line) is int and abs(line) < WIDEST else "?"
    name_text = name if isinstance(name, str) else "?"
    return f"{printable(filename)}:{line_text} {printable(name_text)}"


def frame_text(frame: object) -> str:
    """``path:line function`` of any frame a snapshot holds, printable (``?`` for what is not
    a string or a line number): the one way a frame is written, in a site and in a stack."""
    if not isinstance(frame, dict):
        return "?:? ?"
    filename = frame.get("filename")
    return _describe(frame, filename if isinstance(filename, str) else "?")


def caller_of(frames: object, recorded: bool = False) -> str:
    """``path:line function`` of the innermost frame outside torch, installed packages and the
    standard library; without frames, :func:`unframed_site`; ``<no Python frames>`` with native
    frames only, ``<unknown>`` if none qualifies."""
    return attribute(frames, recorded)[1]


def site_of(frames: object, recorded: bool = False) -> str:
    """``path:line function`` of the innermost frame outside torch (see the module docstring);
    without frames, :func:`unframed_site`; ``<no Python frames>`` with native frames only,
    ``<unknown>`` when Python frames exist but none qualifies."""
    return attribute(frames, recorded)[0]


def parse_step(metadata: object) -> int | None:
    """The ``N`` of ``step=N`` in an allocation's ``user_metadata`` string, if there is one."""
    if not isinstance(metadata, str) or "step" not in metadata:
        return None
    match = _STEP_RE.search(metadata)
    return int(match.group(1)) if match else None


_site_cache: dict[tuple[object, object, object], str] = {}
# What one frame says when it is not a site: Python inside torch, native code, or not a frame.
_LIBRARY, _NATIVE, _JUNK = "", "\0native", "\0junk"


def site_fast(frames: object, recorded: bool = False) -> str:
    """``site_of(frames, recorded)``, decided frame by frame with a cache per distinct frame.

    A snapshot repeats a few thousand frames millions of times, each entry in its own list, so
    a cache per list misses and a cache per (file, line, function) hits nearly always. The key
    holds strings and ints only: no frame of an old dump stays alive because of it.
    """
    if frames is None or (isinstance(frames, list) and not frames):
        return unframed_site(recorded)
    if not isinstance(frames, list):
        return UNKNOWN_SITE
    cache = _site_cache
    native = python = False
    for frame in frames:
        if type(frame) is not dict:
            continue
        filename, line, name = frame.get("filename"), frame.get("line"), frame.get("name")
        key = (
            filename if type(filename) is str else None,
            line if type(line) is int else None,
            name if type(name) is str else None,
        )
        label = cache.get(key)
        if label is None:
            label = _frame_site(frame)
            if len(cache) >= 200_000:
                cache.clear()
            cache[key] = label
        if label == _NATIVE:
            native = True
        elif label == _LIBRARY:
            python = True
        elif label != _JUNK:
            return label
    return NATIVE_ONLY if native and not python else UNKNOWN_SITE


def _frame_site(frame: dict[object, object]) -> str:
    """One frame's site label, or what it is when it is none (see ``site_fast``)."""
    filename, name = frame.get("filename"), frame.get("name")
    if not isinstance(filename, str):
        return _JUNK
    if is_native_frame(filename, name if isinstance(name, str) else ""):
        return _NATIVE
    if is_library_file(filename):
        return _LIBRARY
    return _describe(frame, filename)
