"""Who am I in the job: rank and world size, without importing torch.

``torch.distributed`` is consulted only if the application already imported it (it cannot be
initialized otherwise), so resolving a rank never drags torch into a torch-free process.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from memforensics._errors import ConfigError
from memforensics._layout import RANK_LIMIT


def _initialized_dist() -> Any:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # noqa: BLE001 - a half-initialized backend is "not initialized"
        return None
    return None


def _env_int(name: str, lowest: int) -> int | None:
    """``$name`` as an int from ``lowest`` to below ``RANK_LIMIT``; None when unset or empty;
    ``ConfigError`` naming the variable and the bound for anything else (``RANK=-1`` is no
    rank 0, and a 300-digit rank is no rank)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    value = int(text) if text.isascii() and text.lstrip("-").isdigit() and len(text) < 20 else None
    if value is None or not lowest <= value < RANK_LIMIT:
        raise ConfigError(
            f"memforensics: environment variable {name}={text[:40]!r} is invalid: expected an"
            f" integer from {lowest} to {RANK_LIMIT - 1:,}",
            field="rank" if name == "RANK" else None,
        )
    return value


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
    env = _env_int("RANK", 0)
    return env if env is not None else 0


def resolve_world_size() -> int | None:
    """torch.distributed's world size if initialized, else ``$WORLD_SIZE``, else None."""
    dist = _initialized_dist()
    if dist is not None:
        try:
            return int(dist.get_world_size())
        except Exception:  # noqa: BLE001
            pass
    return _env_int("WORLD_SIZE", 1)
