"""verl-style configs: a ``ForensicsConfig`` from verl's ``torch_memory`` profiler settings.

Teams on verl describe memory snapshots with a role's ``profiler`` config (``all_ranks``,
``ranks``, ``save_path``) and the ``torch_memory`` tool config (``trace_alloc_max_entries``,
``stack_depth``, ``memory_snapshot_num_steps``). ``install_from_verl(profiler_config)`` accepts
that mapping as it is, flat, nested under ``tool_config`` / ``global_tool_config``
``.torch_memory``, or with the selected tool config itself as ``tool_config``, so switching is one
line. verl itself is not imported or needed.

| verl option | memforensics | note |
|---|---|---|
| ``trace_alloc_max_entries`` | ``max_entries`` | same ring buffer |
| ``memory_snapshot_num_steps`` | ``steps`` | consecutive steps per window |
| ``save_path`` | ``out_dir`` | |
| ``all_ranks: true`` | ``window_ranks="all"`` | |
| ``ranks`` (``all_ranks`` false) | ``window_ranks`` | OOM dumps stay on every rank |
| ``stacks`` | ``stacks`` | same values (``"python"``, ``"all"``) |
| ``context`` | ``context`` | ``"alloc"`` or ``"all"`` |

verl's generated trainer config sets ``stacks: all`` and ``context: all`` in
``global_profiler.global_tool_config.torch_memory``: C++ frames on every event and a Python
traceback on every free, which make window dumps several times slower and larger
(docs/integrations.md has the figures). Pass ``stacks="python", context="alloc"`` as overrides
to keep memforensics' defaults.

verl's schema grows every release (0.9.1 added ``finish_hook_*`` and ``relocate_results``), so
any key not mapped here is ignored, with a debug log line; ``IGNORED`` lists the known ones and
why. The values of mapped keys are still validated: a wrong ``stacks`` or a negative
``trace_alloc_max_entries`` fails at install. ``MEMFORENSICS_*`` variables apply underneath, and
keyword overrides (any ``ForensicsConfig`` field) win over both.

The profiler mapping holds no model: a worker that builds one passes it, as to ``install()``,
so that each dump lists its tensors (``install_from_verl(profiler_config,
model=self.actor_module_fsdp, optimizer=self.actor_optimizer)`` in an FSDP actor worker; a
DTensor parameter is recorded by its local shard, FSDP1's flat parameters one entry each).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memforensics._errors import ConfigError
from memforensics.capture.config import ForensicsConfig, build_config
from memforensics.capture.facade import MemoryForensics, install
from memforensics.capture.log import safe_log

__all__ = ["IGNORED", "MAPPED", "config_from_verl", "install_from_verl", "verl_options"]

MAPPED: Mapping[str, str] = {
    "trace_alloc_max_entries": "max_entries",
    "memory_snapshot_num_steps": "steps",
    "save_path": "out_dir",
    "stacks": "stacks",
    "context": "context",
}
"""verl option -> ``ForensicsConfig`` field, for the options that map one to one."""

IGNORED: Mapping[str, str] = {
    "stack_depth": "PyTorch's history API has no stack-depth limit; full Python stacks are kept",
    "kw_args": "memforensics passes the _record_memory_history options the framework supports",
    "enable": "calling install_from_verl is the switch; OOM capture is worth having regardless",
    "tool": "the profiler choice is verl's; this mapping is the torch_memory tool by definition",
    "steps": "explicit step lists have no equivalent: windows are periodic (steps, every)",
    "profile_continuous_steps": "windows are always consecutive steps",
    "discrete": "an nsys / torch profiler option; memory snapshots have no equivalent",
    "name": "verl's tool-config tag",
    "_target_": "verl's Hydra class path",
    "extra": "verl's free-form extension field; nothing in it has a memforensics meaning",
    "relocate_results": "moves profiler artefacts into save_path; dumps are written there",
    "finish_hook_cmd": "a shell command verl runs after profiling; memforensics runs none",
    "finish_hook_all_ranks": "selects where verl's finish hook runs",
    "finish_hook_ranks": "selects where verl's finish hook runs",
}
"""verl options known to have no memforensics meaning, with the reason (any other unmapped key
is ignored too, with a debug log line)."""

_RANK_KEYS = ("all_ranks", "ranks")
_NESTED = ("global_tool_config", "tool_config")  # later wins: a role's own tool config


def _flatten(config: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``tool_config.torch_memory`` (and the global one) into the top level."""
    flat = {key: value for key, value in config.items() if key not in _NESTED}
    for key in _NESTED:
        nested = config.get(key)
        if nested is None:
            continue
        if not isinstance(nested, Mapping):
            raise ConfigError(f"memforensics: verl option {key!r} must be a mapping", field=key)
        torch_memory = nested.get("torch_memory")
        if isinstance(torch_memory, Mapping):
            flat.update(torch_memory)
        elif "trace_alloc_max_entries" in nested or nested.get("name") == "torch_memory":
            flat.update(nested)  # the torch_memory tool config itself, already selected
    return flat


def verl_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``install()`` keywords a verl-style mapping stands for (see the module's table)."""
    flat = _flatten(config)
    unknown = sorted(set(flat) - set(MAPPED) - set(IGNORED) - set(_RANK_KEYS))
    if unknown:
        safe_log(
            "debug",
            "verl_options_ignored",
            options=unknown,
            reason="not a torch_memory option memforensics maps (newer verl schema?)",
        )
    options = {MAPPED[key]: value for key, value in flat.items() if key in MAPPED}
    if options.get("out_dir") is None:
        options.pop("out_dir", None)  # verl's null save_path: keep memforensics' default
    if flat.get("all_ranks"):
        options["window_ranks"] = "all"
    elif flat.get("ranks") is not None:
        options["window_ranks"] = list(flat["ranks"])
    return options


def config_from_verl(config: Mapping[str, Any], **overrides: Any) -> ForensicsConfig:
    """Validate a verl-style mapping (plus ``overrides``) into a ``ForensicsConfig``."""
    return build_config({**verl_options(config), **overrides})


def install_from_verl(
    config: Mapping[str, Any], *, model: object = None, optimizer: object = None, **overrides: Any
) -> MemoryForensics:
    """``install()`` with the configuration a verl-style mapping stands for, tracking ``model``
    and ``optimizer`` (the worker's modules and optimizers, which the mapping cannot reach)."""
    return install(**{**verl_options(config), **overrides}, model=model, optimizer=optimizer)
