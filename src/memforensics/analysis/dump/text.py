"""Words about a dump for the terminal: its sites, cut to a width, with the caller under a library
site; the line under a table cut to its top rows; its devices and what the file cannot tell.
``summary``, ``diff`` and ``leaks`` all print sites; they cut and annotate them here, so the same
site reads the same in each."""

from __future__ import annotations

from collections.abc import Iterable

from memforensics._text import SCREEN_WIDTH, shorten, wrap
from memforensics._units import format_bytes as fmt
from memforensics.analysis.dump.devices import DeviceUsage
from memforensics.analysis.dump.frames import BEFORE_RECORDING, NATIVE_ONLY, UNKNOWN_SITE
from memforensics.analysis.dump.shapes import (
    NO_HISTORY,
    NOTHING_ALLOCATED,
    ONE_EVENT,
    STACKS_ONLY,
)

SITE_WIDTH = 64
"""Characters a site keeps in a table column."""
KIND_WIDTH = 16
"""Characters of a site row's kind column (``before_recording``, the longest kind)."""
_MIN_SITE = 16  # a site keeps at least this much however narrow the screen
_READABLE_SITE = 28  # a row leaving less room than this puts its site on the next line
_SITE_INDENT = 6  # where such a site line starts
NATIVE_ONLY_MEANING = (
    "allocated with no Python on the stack: autograd's backward thread or a library's"
    " workspace (cuBLAS, cuDNN, NCCL)"
)
"""What a ``<no Python frames>`` row is; every output that shows the label says this sentence."""
_CALLER = "← caller "


def short_site(site: str, width: int = SITE_WIDTH) -> str:
    """Keep the end of a long ``path:line function`` (file and function matter, the prefix not)."""
    return shorten(site, width)


def kind_and_site(kind: str, site: str, width: int = SITE_WIDTH) -> str:
    """A site row's last two columns: the kind of its bytes, then the site, cut so that the
    two take ``width`` (by default the width a site alone takes)."""
    return f"{kind:<{KIND_WIDTH}} {short_site(site, max(width - KIND_WIDTH - 1, _MIN_SITE))}"


def caller_line(
    site: str, caller: str, indent: int, *, kinded: bool = False, width: int = SITE_WIDTH
) -> list[str]:
    """``← caller ...`` under a row's site when the site is library code: the user's own line
    that led there (``<unknown>``: none outside installed packages). Indented by ``indent``
    (``kinded``: the row's kind column starts there, and the caller goes under the site), it
    ends where the site above it can end (``width``: what the site's columns take)."""
    if caller == site or site in (UNKNOWN_SITE, BEFORE_RECORDING, NATIVE_ONLY):
        return []
    if kinded:
        indent, width = indent + KIND_WIDTH + 1, width - KIND_WIDTH - 1
    room = max(width - len(_CALLER), _MIN_SITE)
    return [f"{'':>{indent}}{_CALLER}{short_site(caller, room)}"]


def site_row(
    row: str, kind: str, site: str, caller: str | None = None, *, width: int = SCREEN_WIDTH
) -> list[str]:
    """A table row that ends in the kind of its bytes and its site, in ``width`` columns: the
    site keeps what room the row leaves (its end, behind ``…``); where the row leaves less than
    a readable site, the site goes on the next line. ``caller``: the ``← caller`` line under a
    library site."""
    room = width - len(row) - KIND_WIDTH - 1
    if room >= _READABLE_SITE:
        lines = [row + kind_and_site(kind, site, room + KIND_WIDTH + 1)]
        if caller is not None:
            lines += caller_line(site, caller, len(row), kinded=True, width=room + KIND_WIDTH + 1)
        return lines
    room = width - _SITE_INDENT
    lines = [(row + kind).rstrip(), f"{'':>{_SITE_INDENT}}{short_site(site, room)}"]
    if caller is not None:
        lines += caller_line(site, caller, _SITE_INDENT, width=room)
    return lines


def origin_words(
    kind: str | None, rank: int | None, has_sidecar: bool, predicted: bool = False
) -> str:
    """What a dump is, for a header: ``kind oom, rank 3``, or ``raw PyTorch snapshot, no
    sidecar`` when nothing but the pickle says anything (never a bare ``?``); a dump
    ``memforensics plan`` wrote says it is predicted."""
    if kind is None and rank is None and not has_sidecar:
        return "raw PyTorch snapshot, no sidecar" + (f", {PREDICTED}" if predicted else "")
    words = [f"kind {kind or 'unknown'}", f"rank {'unknown' if rank is None else rank}"]
    if predicted:
        words.append(PREDICTED)
    return ", ".join(words) + ("" if has_sidecar else ", no sidecar")


PREDICTED = "predicted by memforensics plan, not measured on a GPU"


def native_note(sites: Iterable[str]) -> list[str]:
    """The line under a table that shows a ``<no Python frames>`` row: what that row is."""
    if NATIVE_ONLY not in sites:
        return []
    text = f"{NATIVE_ONLY}: {NATIVE_ONLY_MEANING}."
    return ["", *wrap(text, SCREEN_WIDTH, "  ", "    ")]


def hidden_rows(count: int, noun: str, detail: str = "") -> list[str]:
    """The line under (or over) a cut table: how many rows it hides and how to see them."""
    if count <= 0:
        return []
    plural = noun if count == 1 else noun + "s"
    return [f"  … {count:,} {plural} not shown{detail}; --top N or --all shows them"]


def devices_text(usage: tuple[DeviceUsage, ...]) -> str:
    """``0: 12.00 GiB reserved (OOM) · 1: 14.00 GiB reserved`` for the terminal."""
    parts = [
        f"{item.device}: {fmt(item.reserved_bytes)} reserved" + (" (OOM)" if item.oom else "")
        for item in usage
    ]
    return " · ".join(parts)


def history_words(
    history: str, events: int, truncated: bool | None, live_at_start: bool, *, brief: bool = False
) -> str:
    """``43 events (complete)``, or what the file records instead of a trace: ``history`` is
    :attr:`~memforensics.analysis.dump.SnapshotShape.history`; ``truncated`` the sidecar's
    flag (None: not recorded); ``live_at_start``: blocks were live when recording started.
    ``brief``: for one screen, without what may be missing."""
    if history == NOTHING_ALLOCATED:
        return "none: nothing allocated"
    if history == STACKS_ONLY:
        return "stacks recorded, no trace"
    if history == NO_HISTORY or not events:
        return "none recorded"
    if history == ONE_EVENT:
        return "1 event: too short to rule out an OOM"
    if truncated is True:
        state = "TRUNCATED"
    elif truncated is False:
        state = "complete"
    elif live_at_start:
        state = "blocks were live when it started"
        state += "" if brief else "; older events may have been dropped"
    else:
        state = "starts with nothing live"
    return f"{events:,} events ({state})"


def context_lines(
    usage: tuple[DeviceUsage, ...], device: int | None, reason: str, limits: tuple[str, ...]
) -> list[str]:
    """The summary table's lines on devices (when several) and on what the file cannot tell."""
    lines: list[str] = []
    if len(usage) > 1:
        lines.append(f"  device       {device} of {len(usage)}, {reason}; {devices_text(usage)}")
    lines += [f"  cannot tell  {limit}" for limit in limits]
    return lines
