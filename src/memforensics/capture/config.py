"""``ForensicsConfig``: the validated, frozen configuration of one installation.

Validation happens once, in ``install()``, so that a typo fails before the first training step
rather than silently capturing nothing at step 3,127. Every field can also come from an
environment variable ``MEMFORENSICS_<FIELD>`` (launchers such as torchrun make env vars the
easiest thing to set per job); explicit keywords win over the environment.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from memforensics._errors import ConfigError
from memforensics._layout import RANK_LIMIT

# Who am I in the job: rank and world size, without importing torch.
#
# ``torch.distributed`` is consulted only if the application already imported it (it cannot be
# initialized otherwise), so resolving a rank never drags torch into a torch-free process.


def _initialized_dist() -> Any:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # noqa: BLE001 - a half-initialized backend is "not initialized"
        return None
    return None


def distributed_initialized() -> bool:
    """True when the application initialised ``torch.distributed`` (never imports torch)."""
    return _initialized_dist() is not None


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


STEP_LIMIT = 1 << 62
"""Step counts (``steps``, ``every``, ``skip_first``, ``journal_every``) stay below this: step
numbers are 64-bit in journals and PyTorch's metadata, and 2^62 marks "never" in the schedule."""
HISTORY_ENTRY_BYTES = 64
"""The least one allocator history entry costs in memory (PyTorch's ``TraceEntry`` without its
stack): ``max_entries`` beyond physical memory / this could never be held."""
NAME_ROOM = 128
"""Characters the longest path memforensics adds below ``out_dir`` may take
(``near-oom/rank…_pid…_step…_<time>.pickle`` and its temporary name)."""


def history_entry_limit() -> int:
    """``max_entries`` must stay below this: physical memory / ``HISTORY_ENTRY_BYTES``."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        memory = 1 << 40  # no sysconf: a terabyte
    return max(memory // HISTORY_ENTRY_BYTES, 1)


def path_limits(path: str) -> tuple[int, int]:
    """``(PATH_MAX, NAME_MAX)`` of the file system ``path`` lands on, asked of its nearest
    existing folder (4,096 and 255 where ``pathconf`` cannot tell)."""
    probe = os.path.abspath(path)
    while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    limits = []
    for name, default in (("PC_PATH_MAX", 4096), ("PC_NAME_MAX", 255)):
        try:
            limits.append(os.pathconf(probe, name))
        except (AttributeError, OSError, ValueError):
            limits.append(default)
    return limits[0], limits[1]


ENV_PREFIX = "MEMFORENSICS_"

JOURNAL_EVERY = 100
"""Default journal interval. A line costs tens of microseconds, most of it torch's own
``memory_stats()`` (docs/performance.md): one per 100 steps is under a microsecond a step, and
100,000 steps of 2,048 ranks make 2,048 files of about 370 KB."""

NEAR_OOM_EVERY = 10
"""Default near-OOM check interval. A check reads two allocator figures (and the driver's free
bytes when the fraction rule needs them), a few microseconds on the faked CUDA surface: one
step in ten checks, so the average step pays well under a microsecond (docs/performance.md)."""

RankSelection = Literal["all"] | tuple[int, ...]
DeviceName = Literal["auto", "cuda", "npu", "none", "sim"]


class ForensicsConfig(BaseModel):
    """Everything ``install()`` accepts; field names are part of the public contract."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    rank: int | None = Field(default=None, ge=0, lt=RANK_LIMIT)
    ranks: RankSelection = "all"
    window_ranks: RankSelection = (0,)
    steps: int | None = Field(default=None, ge=1, lt=STEP_LIMIT)
    every: int | None = Field(default=None, ge=1, lt=STEP_LIMIT)
    skip_first: int = Field(default=0, ge=0, lt=STEP_LIMIT)
    max_windows: int | None = Field(default=None, ge=1)
    keep_last: int | None = Field(default=2, ge=0)
    out_dir: str = "memforensics"
    device: DeviceName = "auto"
    max_entries: int = Field(default=100_000, ge=1)
    stacks: Literal["python", "all"] = "python"
    oom: bool = True
    oom_history: Literal["state", "all", "off"] = "state"
    max_oom_snapshots: int = Field(default=3, ge=0)
    annotate_steps: bool = True
    context: Literal["alloc", "all"] = "alloc"
    """Stacks recorded with history: of allocations only, or of frees too (docs/guide.md)."""
    writer: Literal["auto", "inline"] = "auto"
    """Window dumps: a forked child above a size floor (``"auto"``), or always inline."""
    journal_every: int | None = Field(default=JOURNAL_EVERY, ge=1, lt=STEP_LIMIT)
    near_oom: bool = True
    """Take a near-OOM dump when the allocator retries or reserved + outside nears the limit."""
    near_oom_fraction: float = Field(default=0.95, gt=0.0, le=1.0)
    """(reserved + outside PyTorch) / limit that counts as near."""
    near_oom_every: int = Field(default=NEAR_OOM_EVERY, ge=1, lt=STEP_LIMIT)
    """Check every N steps (at the end of steps that are multiples of N)."""
    max_near_oom_snapshots: int = Field(default=2, ge=0, lt=STEP_LIMIT)
    """Near-OOM dumps per process at most."""

    @field_validator("ranks", "window_ranks", mode="before")
    @classmethod
    def _rank_list(cls, value: Any) -> Any:
        """Accept a list, tuple or single int for rank selections; store an immutable tuple."""
        if isinstance(value, bool):
            return value  # rejected by strict validation with a clear message
        if isinstance(value, int):
            return (value,)
        if isinstance(value, list | tuple):
            return tuple(value)
        return value

    @field_validator("ranks", "window_ranks")
    @classmethod
    def _ranks_non_negative(cls, value: RankSelection) -> RankSelection:
        if value != "all" and any(r < 0 or r >= RANK_LIMIT for r in value):
            raise ValueError(f"ranks must be 'all' or integers from 0 to {RANK_LIMIT - 1:,}")
        return value

    @field_validator("max_entries")
    @classmethod
    def _entries_fit_in_memory(cls, value: int) -> int:
        limit = history_entry_limit()
        if value >= limit:
            raise ValueError(
                f"must be below {limit:,} (physical memory / {HISTORY_ENTRY_BYTES} bytes an entry)"
            )
        return value

    @field_validator("out_dir", mode="before")
    @classmethod
    def _path_to_str(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("out_dir")
    @classmethod
    def _out_dir_not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("out_dir must not be empty")
        if "\0" in value:
            raise ValueError("out_dir must not contain a NUL character")
        path_max, name_max = path_limits(value)
        full = os.path.abspath(os.path.expanduser(value))
        if len(os.fsencode(full)) + NAME_ROOM >= path_max:
            raise ValueError(
                f"out_dir is {len(os.fsencode(full)):,} bytes long; with the {NAME_ROOM} bytes of"
                f" names below it, it must stay under PATH_MAX ({path_max:,})"
            )
        longest = max((len(os.fsencode(part)) for part in full.split(os.sep)), default=0)
        if longest > name_max:
            raise ValueError(f"out_dir has a name of {longest:,} bytes, over NAME_MAX ({name_max})")
        return value

    @model_validator(mode="after")
    def _every_covers_steps(self) -> ForensicsConfig:
        if self.every is not None:
            if self.steps is None:
                raise ValueError("every needs steps: set steps (the window length) too")
            if self.every < self.steps:
                raise ValueError(f"every ({self.every}) must be >= steps ({self.steps})")
        return self

    def captures(self, rank: int) -> bool:
        """True when ``rank`` captures at all (OOM dumps)."""
        return self.ranks == "all" or rank in self.ranks

    def records_windows(self, rank: int) -> bool:
        """True when ``rank`` also records step windows."""
        if self.steps is None or not self.captures(rank):
            return False
        return self.window_ranks == "all" or rank in self.window_ranks


FIELDS: tuple[str, ...] = tuple(ForensicsConfig.model_fields)
_OPTIONAL_INT = {"rank", "steps", "every", "max_windows", "keep_last", "journal_every"}
_INT = {
    "skip_first",
    "max_entries",
    "max_oom_snapshots",
    "near_oom_every",
    "max_near_oom_snapshots",
}
_FLOAT = {"near_oom_fraction"}
_BOOL = {"oom", "annotate_steps", "near_oom"}
_RANKS = {"ranks", "window_ranks"}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_var(field: str) -> str:
    """The environment variable that sets ``field``."""
    return ENV_PREFIX + field.upper()


def parse_env_value(field: str, raw: str) -> Any:
    """Turn the text of ``MEMFORENSICS_<FIELD>`` into the value the field expects."""
    text = raw.strip()
    if field in _OPTIONAL_INT and text.lower() in {"", "none", "null"}:
        return None
    if field in _OPTIONAL_INT or field in _INT:
        return int(text)
    if field in _FLOAT:
        return float(text)
    if field in _BOOL:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")
    if field in _RANKS:
        if text.lower() == "all":
            return "all"
        if text.startswith("["):
            parsed = json.loads(text)
            if not isinstance(parsed, list):
                raise ValueError("expected 'all', '0,1,2' or a JSON list")
            return parsed
        return [int(part) for part in text.split(",") if part.strip()]
    return text


def config_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Read every ``MEMFORENSICS_<FIELD>`` that is set; a bad value names its variable."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for field in FIELDS:
        name = env_var(field)
        if name not in env:
            continue
        try:
            values[field] = parse_env_value(field, env[name])
        except (ValueError, TypeError, RecursionError) as exc:  # deep JSON: RecursionError
            raise ConfigError(
                f"memforensics: environment variable {name}={env[name]!r} is invalid: {exc}",
                field=field,
            ) from None
    return values


def build_config(
    overrides: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> ForensicsConfig:
    """Validate keywords over environment values; raise ``ConfigError`` naming the culprit."""
    unknown = sorted(set(overrides) - set(FIELDS))
    if unknown:
        raise ConfigError(
            f"memforensics: unknown config field {unknown[0]!r}; "
            f"valid fields are: {', '.join(FIELDS)}",
            field=unknown[0],
        )
    from_env = config_from_env(environ)
    merged = {**from_env, **overrides}
    try:
        return ForensicsConfig(**merged)
    except ValidationError as exc:
        raise _config_error(exc, explicit=set(overrides), from_env=set(from_env)) from None


def blame_environment(
    error: ConfigError, *, explicit: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> ConfigError:
    """Name the variable in an install-time error (``out_dir`` unwritable) about an env value."""
    env = os.environ if environ is None else environ
    field = error.field
    if field is None or field in explicit or env_var(field) not in env:
        return error
    source = f"environment variable {env_var(field)}"
    message = str(error).replace(f"config field {field!r}", source)
    return ConfigError(message, field=field)


def _config_error(exc: ValidationError, *, explicit: set[str], from_env: set[str]) -> ConfigError:
    first = exc.errors()[0]
    loc = first.get("loc") or ()
    field = str(loc[0]) if loc else None
    if field is None:  # a cross-field rule (every vs steps): blame the field it is about
        field = "every"
    source = f"config field {field!r}"
    if field not in explicit and field in from_env:
        source = f"environment variable {env_var(field)}"
    message = first.get("msg", "invalid value").removeprefix("Value error, ")
    return ConfigError(f"memforensics: invalid {source}: {message}", field=field)
