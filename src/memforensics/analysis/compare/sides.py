"""What ``diff`` reads of one dump: a side of the comparison.

``diff`` compares two dumps by their live blocks (address, size, site, caller and the step each
was made in), the window of steps the later one covers and the live bytes per kind, device by
device when a file holds several. That is a few thousand rows where the dump is millions of
trace entries: :func:`diff_side` is a pure function of one dump and a device, and its result a
plain value, so a caller may keep it (the CLI caches it per file) and compare it with any
partner later without reading the dump again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from memforensics.analysis.dump import Dump, parse_step
from memforensics.analysis.filled import what_filled
from memforensics.analysis.summary import live_sites, scan_trace


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
    """One view of a dump, as ``diff`` compares it: its live blocks and the steps it covers;
    from :func:`diff_side`, also the devices the file holds memory or history on and the live
    bytes per kind."""

    name: str
    device: int | None
    live: tuple[LiveRow, ...]
    window: tuple[int, int] | None
    held: tuple[int, ...] = ()
    kinds: dict[str, int] = field(default_factory=dict)

    @property
    def allocated_bytes(self) -> int:
        """Bytes of the live blocks."""
        return sum(row.size for row in self.live)


SideOf = Callable[[int | None], DiffSide]
"""One dump's side of a comparison, by device (None: the whole file)."""


def diff_side(dump: Dump, device: int | None = None) -> DiffSide:
    """The side of ``dump`` on ``device`` (None: the whole file): its live rows and window, the
    file's devices and the live bytes per kind; SnapshotLoadError when the file holds nothing
    on ``device``."""
    view = dump if device is None else dump.on_device(device, reason="same device")
    live = live_side(view)
    kinds = {k.kind: k.bytes for k in what_filled(view).kinds}
    held = tuple(item.device for item in dump.devices)
    return DiffSide(live.name, live.device, live.live, live.window, held, kinds)


def live_side(view: Dump) -> DiffSide:
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
