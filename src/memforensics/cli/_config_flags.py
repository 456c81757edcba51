"""Command-line flags for every ``ForensicsConfig`` field: ``--steps 4``, ``--window-ranks 0,8``.

The flags are generated from ``ForensicsConfig.model_fields``, so a new field gets its flag
without an edit here, and their text is parsed by the same ``parse_env_value`` the
``MEMFORENSICS_*`` variables go through, so a flag and its variable accept exactly the same
values. Only the flags a user passed become keywords: the environment still applies underneath,
as it does for ``install()``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from memforensics.capture.config import FIELDS, ForensicsConfig, env_var, parse_env_value

_DEST_PREFIX = "config_"

# One line per field for --help; a field missing here still gets a flag with a generic line.
_HELP = {
    "rank": "this process's global rank; none = torch.distributed's, else $RANK, else 0",
    "ranks": "ranks that capture OOM dumps: 'all', '0,8,16' or a JSON list",
    "window_ranks": "ranks that also record step windows: 'all', '0,8' or a JSON list",
    "steps": "steps per window; unset = OOM capture only",
    "every": "open a window every N steps (>= --steps)",
    "skip_first": "step calls before the first window opens",
    "max_windows": "stop opening windows after this many",
    "keep_last": "keep the first window and the newest N ('none' keeps all)",
    "out_dir": "root folder of everything written",
    "device": "auto, cuda, npu, none or sim",
    "max_entries": "allocator history ring-buffer size (trace events)",
    "stacks": "'python' or 'all' (C++ frames too: far slower dumps)",
    "oom": "attach the OOM observer: true or false",
    "oom_history": "history outside windows: state, all or off",
    "max_oom_snapshots": "OOM dumps per process at most",
    "annotate_steps": "tag allocations with step=N: true or false",
    "journal_every": "append a journal line every N steps ('none' turns the journal off)",
    "context": "stacks recorded with history: 'alloc' (allocations) or 'all' (frees too)",
    "writer": "window dumps: 'auto' (forked child for large ones) or 'inline'",
    "near_oom": "take a near-OOM dump when the allocator retries or memory nears the limit",
    "near_oom_fraction": "(reserved + outside PyTorch) / limit that counts as near",
    "near_oom_every": "check for a near-OOM every N steps",
    "max_near_oom_snapshots": "near-OOM dumps per process at most",
}


def flag_name(field: str) -> str:
    """``window_ranks`` -> ``--window-ranks``."""
    return "--" + field.replace("_", "-")


def _default_text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """Add one ``--<field>`` flag per ``ForensicsConfig`` field; unset flags stay absent."""
    group = parser.add_argument_group(
        "forensics configuration",
        "One flag per ForensicsConfig field. A flag takes the same text as its MEMFORENSICS_* "
        "variable (e.g. --ranks 0,8 --oom false) and wins over it.",
    )
    for field, info in ForensicsConfig.model_fields.items():
        text = _HELP.get(field, f"ForensicsConfig.{field}")
        group.add_argument(
            flag_name(field),
            dest=_DEST_PREFIX + field,
            metavar=field.upper(),
            default=argparse.SUPPRESS,
            help=f"{text} [default: {_default_text(info.default)}; env {env_var(field)}]",
        )


def passed_flags(args: argparse.Namespace) -> dict[str, str]:
    """The raw text of each config flag the user passed, by field name."""
    values = vars(args)
    return {
        field: values[_DEST_PREFIX + field] for field in FIELDS if _DEST_PREFIX + field in values
    }


def config_keywords(raw: Mapping[str, str], parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Parse passed flags into ``install()`` keywords; a bad value is an argparse error (exit 2)."""
    keywords: dict[str, Any] = {}
    for field, text in raw.items():
        try:
            keywords[field] = parse_env_value(field, text)
        except (ValueError, TypeError, RecursionError) as exc:  # deep JSON: RecursionError
            parser.error(f"argument {flag_name(field)}: invalid value {text!r}: {exc}")
    return keywords
