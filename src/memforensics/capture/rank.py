"""Who am I in the job: rank and world size, without importing torch.

``torch.distributed`` is consulted only if the application already imported it (it cannot be
initialized otherwise), so resolving a rank never drags torch into a torch-free process.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _initialized_dist() -> Any:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # noqa: BLE001 - a half-initialized backend is "not initialized"
        return None
    return None


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def resolve_rank(explicit: int | None) -> int:
    """Explicit rank, else torch.distributed's if initialized, else ``$RANK``, else 0."""
    if explicit is not None:
        return explicit
    dist = _initialized_dist()
    if dist is not None:
        try:
            return int(dist.get_rank())
        except Exception:  # noqa: BLE001
            pass
    env = _env_int("RANK")
    return env if env is not None and env >= 0 else 0


def resolve_world_size() -> int | None:
    """torch.distributed's world size if initialized, else ``$WORLD_SIZE``, else None."""
    dist = _initialized_dist()
    if dist is not None:
        try:
            return int(dist.get_world_size())
        except Exception:  # noqa: BLE001
            pass
    return _env_int("WORLD_SIZE")
