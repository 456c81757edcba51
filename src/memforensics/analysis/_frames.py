"""Allocation sites: which line of *user* code is responsible for a block of memory.

PyTorch records frames innermost first, and the innermost ones are nearly always inside torch
itself (``torch/nn/modules/...``) or C++ (``??``, ``CUDACachingAllocator.cpp``). Neither tells an
engineer what to change, so a site is the innermost frame outside torch, torch_npu and
memforensics that is Python code.
"""

from __future__ import annotations

import re

UNKNOWN_SITE = "<unknown>"

# Folder names that mark library code when they are a package on the path.
_LIBRARY_DIRS = frozenset({"torch", "torch_npu", "memforensics"})
# A checkout of one of those projects keeps its own scripts in these; they are user code.
_CHECKOUT_DIRS = frozenset({"tests", "test", "benchmarks", "examples", "scripts", "docs"})
_NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".h", ".hpp", ".so")
_STEP_RE = re.compile(r"(?:^|[^A-Za-z0-9_])step\s*=\s*(-?\d+)")

_library_cache: dict[str, bool] = {}


def is_library_file(filename: str) -> bool:
    """True for torch, torch_npu and memforensics files (by path component) and native code.

    ``/home/me/memforensics/tests/test_x.py`` is user code: a library folder name only counts
    when what follows it is not a checkout's own ``tests``/``examples``/... folder.
    """
    cached = _library_cache.get(filename)
    if cached is not None:
        return cached
    result = _classify(filename)
    if len(_library_cache) < 100_000:
        _library_cache[filename] = result
    return result


def _classify(filename: str) -> bool:
    if not filename or filename == "??" or filename.lower().endswith(_NATIVE_SUFFIXES):
        return True
    parts = filename.replace("\\", "/").split("/")
    for index, part in enumerate(parts[:-1]):
        if part in _LIBRARY_DIRS and parts[index + 1] not in _CHECKOUT_DIRS:
            return True
        if part.startswith("torchinductor_"):  # code torch.compile generated
            return True
    return False


def site_of(frames: object) -> str:
    """``path:line function`` of the innermost user frame in ``frames``, or ``"<unknown>"``.

    ``frames`` is whatever the snapshot holds; anything that is not a list of frame dicts is
    tolerated and simply yields no site.
    """
    if not isinstance(frames, list):
        return UNKNOWN_SITE
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        filename = frame.get("filename")
        if not isinstance(filename, str) or is_library_file(filename):
            continue
        line = frame.get("line")
        name = frame.get("name")
        line_text = str(line) if isinstance(line, int) else "?"
        name_text = name if isinstance(name, str) else "?"
        return f"{filename}:{line_text} {name_text}"
    return UNKNOWN_SITE


def parse_step(metadata: object) -> int | None:
    """The ``N`` of ``step=N`` in an allocation's ``user_metadata`` string, if there is one."""
    if not isinstance(metadata, str) or "step" not in metadata:
        return None
    match = _STEP_RE.search(metadata)
    return int(match.group(1)) if match else None
