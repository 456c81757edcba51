"""What ``diff`` reads of a dump, kept as a fact about its file.

``diff`` compares two dumps by their live blocks (address, size, site, caller and the step each
was made in), the window of steps the later one covers and the live bytes per kind, device by
device when a file holds several. That is a few thousand rows where the dump is millions of
trace entries, so each view of a dump (the whole file, or one device) is worked out once and,
given the analysis cache, kept there as a fact about the file: a later ``diff`` with that dump
on either side (another partner, another ``--top``) reads the rows instead of the dump. A view
missing from what is kept (a device never compared before) is worked out from the dump, read
then, and added. The CLI's look-ahead keeps the default views of any dump another command read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memforensics._text import printable
from memforensics.analysis.cache import AnswerCache
from memforensics.analysis.dump import Dump, missing_device, parse_step
from memforensics.analysis.filled import what_filled
from memforensics.analysis.summary import live_sites, scan_trace

SIDES_FACT = "diff sides"
"""The cache's name for a dump's kept views (:class:`DumpSides`)."""
WHOLE = "whole"  # the key of the whole file's view; a device's view is keyed by its number


@dataclass(frozen=True, slots=True)
class LiveRow:
    """One live block as ``diff`` sees it."""

    address: int
    size: int
    site: str
    caller: str
    step: int | None


@dataclass(frozen=True)
class DiffSide:
    """One view of a dump, as ``diff`` compares it: its live blocks and the steps it covers."""

    name: str
    device: int | None
    live: tuple[LiveRow, ...]
    window: tuple[int, int] | None

    @property
    def allocated_bytes(self) -> int:
        """Bytes of the live blocks."""
        return sum(row.size for row in self.live)


def diff_side(view: Dump) -> DiffSide:
    """``view``'s live blocks with their sites and steps, and its window of steps."""
    live = live_sites(view)
    _, steps = scan_trace(view, [block for block, _, _ in live])
    rows = tuple(
        LiveRow(block.address, block.size, site, caller, steps.get(block.address))
        for block, site, caller in live
    )
    return DiffSide(view.name, view.device, rows, _window(view))


def _window(dump: Dump) -> tuple[int, int] | None:
    """The dump's steps: from its sidecar or path; else the steps its history recorded, since
    history is cleared when a window opens."""
    if dump.meta.steps is not None:
        return dump.meta.steps
    if dump.meta.step is not None:
        return (dump.meta.step, dump.meta.step)
    seen = [
        step
        for entry in dump.trace
        if type(entry) is dict and entry.get("action") == "alloc"
        for step in (parse_step(entry.get("user_metadata")),)
        if step is not None
    ]
    return (min(seen), max(seen)) if seen else None


class DumpSides:
    """The views of one dump that ``diff`` compares: kept ones from the cache, the others
    worked out from the dump, which is read (by ``load``) only when one is missing.

    ``name`` is how the user named the file this time; everything else is the file's.
    """

    def __init__(
        self,
        name: str,
        load: Callable[[], Dump],
        kept: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self._load = load
        self._dump: Dump | None = None
        self._kept = kept if kept is not None else {}
        self.added = False  # views were worked out that the cache does not hold

    @classmethod
    def of(cls, dump: Dump) -> DumpSides:
        """The views of a dump already in memory (nothing kept)."""
        sides = cls(dump.name, lambda: dump)
        sides._dump = dump
        return sides

    @classmethod
    def kept_or_read(
        cls,
        path: Path,
        cache: AnswerCache,
        load: Callable[[], Dump],
        on_wait: Callable[[], None] = lambda: None,
    ) -> DumpSides:
        """The views of the dump at ``path`` that the cache holds (waiting for a look-ahead
        that will keep them), the rest from ``load()`` when asked for."""
        stored = cache.lookup_settled([path], SIDES_FACT, on_wait)
        return cls(printable(str(path)), load, _sound(stored))

    @property
    def held(self) -> tuple[int, ...]:
        """The devices the file holds memory or history on, in its order."""
        held: list[int] = self._devices()["held"]
        return tuple(held)

    @property
    def device(self) -> int | None:
        """The device the file is read on by default (its OOM's, else its first)."""
        device: int | None = self._devices()["device"]
        return device

    def _devices(self) -> dict[str, Any]:
        """The kept facts, with the file's devices (``held``, ``device``) in them."""
        if "held" not in self._kept:
            self._kept["held"] = [item.device for item in self.dump().devices]
            self._kept["device"] = self.dump().device
            self.added = True
        return self._kept

    def side(self, device: int | None = None) -> DiffSide:
        """The view of ``device`` (None: the whole file); SnapshotLoadError when the file holds
        nothing on ``device``."""
        if device is not None and device not in self.held:
            raise missing_device(self.name, device, self.held)
        found = self._kept.setdefault("views", {}).get(_key(device))
        if found is None:
            found = self._kept["views"][_key(device)] = _side_dict(diff_side(self._view(device)))
            self.added = True
        return _side(self.name, found)

    def kinds(self, device: int | None = None) -> dict[str, int]:
        """Live bytes per kind of the view of ``device`` (None: the whole file)."""
        self.side(device)
        view: dict[str, Any] = self._kept["views"][_key(device)]
        if "kinds" not in view:
            view["kinds"] = {k.kind: k.bytes for k in what_filled(self._view(device)).kinds}
            self.added = True
        kinds: dict[str, int] = view["kinds"]
        return kinds

    def keep(self, path: Path, cache: AnswerCache) -> None:
        """Keep the views in the cache as a fact about ``path``, if any were added."""
        if self.added:
            cache.store([path], SIDES_FACT, json.dumps(self._kept))
            self.added = False

    def dump(self) -> Dump:
        """The dump itself (read now if it was not)."""
        if self._dump is None:
            self._dump = self._load()
        return self._dump

    def _view(self, device: int | None) -> Dump:
        dump = self.dump()
        return dump if device is None else dump.on_device(device, reason="same device")


def _key(device: int | None) -> str:
    return WHOLE if device is None else str(device)


def _side_dict(side: DiffSide) -> dict[str, Any]:
    return {
        "device": side.device,
        "live": [[r.address, r.size, r.site, r.caller, r.step] for r in side.live],
        "window": list(side.window) if side.window is not None else None,
    }


def _side(name: str, body: dict[str, Any]) -> DiffSide:
    window = body["window"]
    rows = tuple(LiveRow(*row) for row in body["live"])
    return DiffSide(name, body["device"], rows, (window[0], window[1]) if window else None)


def _sound(stored: str | None) -> dict[str, Any] | None:
    """Kept views read back from the cache, when every part has the shape written; else None
    (the views are worked out again)."""
    try:
        body = json.loads(stored) if stored is not None else None
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("views"), dict):
        return None
    held, device = body.get("held"), body.get("device")
    if not isinstance(held, list) or not all(type(d) is int for d in held):
        return None
    if not (device is None or type(device) is int):
        return None
    for view in body["views"].values():
        if not _sound_view(view):
            return None
    return body


def _sound_view(view: Any) -> bool:
    if not isinstance(view, dict) or not isinstance(view.get("live"), list):
        return False
    device, window, kinds = view.get("device"), view.get("window"), view.get("kinds")
    if not (device is None or type(device) is int):
        return False
    if not (window is None or (isinstance(window, list) and len(window) == 2)):
        return False
    if window is not None and not all(type(step) is int for step in window):
        return False
    if kinds is not None and not (
        isinstance(kinds, dict) and all(type(count) is int for count in kinds.values())
    ):
        return False
    return all(_sound_row(row) for row in view["live"])


def _sound_row(row: Any) -> bool:
    if not isinstance(row, list) or len(row) != 5:
        return False
    address, size, site, caller, step = row
    return (
        type(address) is int
        and type(size) is int
        and isinstance(site, str)
        and isinstance(caller, str)
        and (step is None or type(step) is int)
    )
