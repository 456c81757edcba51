"""``torch.distributed.checkpoint`` on one planned rank: the rank saves and loads its own part.

DCP's save makes one plan for the whole job: each rank's local plan (a DTensor's shard at the
rank's offsets, a replicated tensor once) is gathered on the coordinator, which keeps each item
on one rank, checks that the chunks fill every tensor, writes the metadata and scatters each
rank its part; a load gathers and scatters the same way. On the fake group a gather gives back
the planned rank's own plan for every rank, so a sharded tensor's chunks overlap and fill half of
it (the save fails with "invalid fill"), and a rank other than the coordinator would receive its
part from a process the plan does not run (the plan stops there).

Planned, a save and a load run as DCP's one-process form (``no_dist``), the planned rank its own
coordinator: it plans, writes and reads its own part, through the same planner and storage as on
a GPU. Writing copies each tensor to the host (no device memory: DCP's overlapping loader copies
a CUDA view as it is, on the current stream; planned, its serial loader's ``.cpu()`` does the
same, since a stand-in's ``.device`` reads ``meta``, which the overlapping loader would leave on
the device); reading copies each chunk into its tensor in place. The chunks the other ranks would
write are missing from the metadata it writes, which DCP's check of the global plan accepts
here and only here. A load reads the planned rank's own chunks, from a checkpoint a real job
wrote (a resume) or from one the run saved. The folder a save writes holds zeros for the
planned tensors: it is put back when the run ends (:mod:`~memforensics.plan.saved_files`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

from memforensics.plan.patches import LibraryReplacement
from memforensics.plan.saved_files import SavedFiles

SAVER = "torch.distributed.checkpoint.state_dict_saver"
FILESYSTEM = "torch.distributed.checkpoint.filesystem"
LOADER = "torch.distributed.checkpoint.state_dict_loader"
PLANNER = "torch.distributed.checkpoint.default_planner"
HELPERS = "torch.distributed.checkpoint.planner_helpers"

PART_FILL = "invalid fill"
"""DCP's words for a tensor whose chunks do not add up to its volume: under the plan, the other
ranks' chunks, which only the planned rank's are written."""


def _folder(storage: Any) -> str | None:
    """The local folder a DCP storage writer writes (``FileSystemWriter``), else None."""
    from torch.distributed.checkpoint.filesystem import FileSystem

    path = getattr(storage, "path", None)
    if path is None or not isinstance(getattr(storage, "fs", None), FileSystem):
        return None
    return str(os.path.abspath(os.fspath(path)))


def one_rank(original: Callable[..., Any]) -> Callable[..., Any]:
    """``_load_state_dict`` (and the save's, through :func:`saved_by_one_rank`): DCP's, with
    ``no_dist``, the planned rank its own coordinator."""
    signature = inspect.signature(original)

    def part(*args: Any, **kwargs: Any) -> Any:
        call = signature.bind(*args, **kwargs)
        call.arguments["no_dist"] = True
        return original(*call.args, **call.kwargs)

    return part


def saved_by_one_rank(files: SavedFiles) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``_save_state_dict``: :func:`one_rank`'s, its folder put back when the run ends."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)
        save = one_rank(original)

        def saved(*args: Any, **kwargs: Any) -> Any:
            folder = _folder(signature.bind(*args, **kwargs).arguments.get("storage_writer"))
            if folder is None:
                return save(*args, **kwargs)
            return files.saving(folder, lambda: save(*args, **kwargs), lambda: True)

        return saved

    return stand_in


def part_filled(original: Callable[..., Any]) -> Callable[..., Any]:
    """``_validate_global_plan``: DCP's errors, less those of tensors whose chunks fill only the
    planned rank's part of them."""

    def validated(*args: Any, **kwargs: Any) -> Any:
        return [error for error in original(*args, **kwargs) if PART_FILL not in error]

    return validated


def serial_loader(original: Callable[..., Any]) -> Callable[..., Any]:
    """``_OverlappingCpuLoader``: the serial loader of the same module, which copies each
    tensor to the host with ``.cpu()`` when it is written."""
    from torch.distributed.checkpoint.filesystem import _SerialCpuLoader

    def loader(resolve_fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return _SerialCpuLoader(resolve_fun)

    return loader


def on_device(holds: Callable[[Any], bool]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``_init_state_dict``, which a load runs first: DCP makes an empty tensor on the device
    for each ``meta`` one it is to load into (a model built on ``meta``; a ``ShardedTensor`` on
    ``meta`` it refuses); a stand-in (its ``.device`` reads ``meta``), a DTensor or
    ``ShardedTensor`` whose local shards are stand-ins, is on the planned device already and is
    loaded into in place, as a CUDA tensor is. The script's own ``meta`` tensors (``holds``)
    are DCP's."""

    def stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
        def made(value: Any) -> Any:
            one = {"": value}
            original(one)
            return one[""]

        def _init_state_dict(state_dict: dict[str, Any]) -> Any:
            from torch.distributed._shard.sharded_tensor import ShardedTensor
            from torch.distributed.checkpoint.planner_helpers import _iterate_state_dict
            from torch.distributed.tensor import DTensor

            def each(value: Any) -> Any:
                if isinstance(value, DTensor):
                    local = [value.to_local()]
                elif isinstance(value, ShardedTensor):
                    local = [shard.tensor for shard in value.local_shards()]
                else:
                    local = [value]
                if local and all(t.is_meta and not holds(t) for t in local):
                    return value
                return made(value)

            return _iterate_state_dict(state_dict, each, each, each)

        return _init_state_dict

    return stand_in


def rows(files: SavedFiles, holds: Callable[[Any], bool]) -> list[LibraryReplacement]:
    """DCP's save, load and global-plan check, replaced where the script imports them."""
    return [
        LibraryReplacement(
            SAVER,
            "_save_state_dict",
            saved_by_one_rank(files),
            "the fake group gathers the planned rank's own plan for every rank: it saves its "
            "own part, its own coordinator, and the folder is put back when the run ends",
        ),
        LibraryReplacement(
            LOADER,
            "_load_state_dict",
            one_rank,
            "the fake group gathers the planned rank's own plan for every rank: it reads its "
            "own part, its own coordinator",
        ),
        LibraryReplacement(
            HELPERS,
            "_init_state_dict",
            on_device(holds),
            "it makes a new tensor on the device for each meta one a load fills; a stand-in's "
            ".device reads meta, and it is on the planned device already",
        ),
        LibraryReplacement(
            FILESYSTEM,
            "_OverlappingCpuLoader",
            serial_loader,
            "it copies to the host only tensors whose .device reads cuda; a stand-in's reads meta",
        ),
        LibraryReplacement(
            PLANNER,
            "_validate_global_plan",
            part_filled,
            "the global plan holds the planned rank's chunks alone",
        ),
    ]
