"""Stack capture for the ``sim`` device: the caller's Python frames, as torch records them.

This is the one hot path of a recording sim device (it runs on every allocation and free), and
its caches are module state of their own: frames cached per code position, stacks interned.
Plain Python: never imports torch.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from types import CodeType, FrameType

import memforensics.allocator
from memforensics.backends.sim import format as fmt

MALLOC_CPP: fmt.Stack = (
    ("??", 0, "torch::unwind::unwind()"),
    ("??", 0, "c10::cuda::CUDACachingAllocator::malloc"),
)
FREE_CPP: fmt.Stack = (
    ("??", 0, "torch::unwind::unwind()"),
    ("??", 0, "c10::cuda::CUDACachingAllocator::free"),
)
_SKIP: fmt.Frame = ("", 0, "")
_HERE = os.path.dirname(__file__)
_SKIPPED_FILES = frozenset(
    {
        __file__,
        os.path.join(_HERE, "__init__.py"),
        os.path.join(_HERE, "backend.py"),
        os.path.join(_HERE, "device.py"),
        os.path.join(_HERE, "tensor.py"),
        fmt.__file__,
        weakref.__file__,
        *(memforensics.allocator.__path__),
    }
)
_CACHE_LIMIT = 1 << 16
_frame_cache: dict[int, fmt.Frame] = {}
_frame_codes: list[CodeType] = []  # keeps cached code objects alive, so their ids stay unique
_frame_lock = threading.Lock()
_stack_cache: dict[fmt.Stack, fmt.Stack] = {}


def capture_stack(cpp: fmt.Stack) -> fmt.Stack:
    """The caller's Python frames, innermost first, without the sim device's own frames.

    This runs on every allocation and free while history is recorded, so it is the hot path:
    frames are cached per code position (keyed by integers, which hash for free; a code
    object hashes its whole contents) and stacks are interned, so equal stacks share one
    object. That keeps million-event traces small and lets snapshots share frame lists.
    """
    frames = list(cpp)
    frame: FrameType | None = sys._getframe(1)
    cache = _frame_cache
    while frame is not None:
        code = frame.f_code
        found = cache.get(id(code) * 1048576 + frame.f_lasti)
        if found is None:
            found = _frame_of(code, frame.f_lasti, frame.f_lineno)
        if found is not _SKIP:
            frames.append(found)
        frame = frame.f_back
    stack = tuple(frames)
    if len(_stack_cache) >= _CACHE_LIMIT:
        _stack_cache.clear()
    return _stack_cache.setdefault(stack, stack)


def _frame_of(code: CodeType, lasti: int, line: int | None) -> fmt.Frame:
    """Build and cache the frame of one code position (a cache miss of ``capture_stack``)."""
    skipped = code.co_filename in _SKIPPED_FILES  # also weakref.finalize's __call__ on GC frees
    found = _SKIP if skipped else (code.co_filename, line or 0, code.co_name)
    with _frame_lock:  # a code must stay alive exactly as long as its cache entry
        if len(_frame_cache) >= _CACHE_LIMIT:
            _frame_cache.clear()
            _frame_codes.clear()
        _frame_codes.append(code)
        _frame_cache[id(code) * 1048576 + lasti] = found
    return found
