"""``report``: one self-contained interactive HTML file that never touches the network.

The page is a shell, the package's own ``report.css`` and ``report.js`` inlined, and one JSON
document with everything to draw (the way memray builds its HTML reports). The JSON is built by
the section builders of :mod:`~memforensics.analysis.report.sections`, per dump and per
device; dumps are added one at a time (:class:`ReportBuilder`), so a folder of large dumps
needs the memory of one of them.
Every string from a snapshot reaches the page as JSON text and is shown with ``textContent``,
never parsed as markup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from html import escape
from importlib import resources
from typing import Any

from memforensics._version import __version__
from memforensics.analysis.compare import Leaks, LeakTracker
from memforensics.analysis.dump import Dump
from memforensics.analysis.dump.gc_pause import paused_gc
from memforensics.analysis.report.html import json_in_script
from memforensics.analysis.report.model import DumpContext, Section
from memforensics.analysis.report.sections import (
    DUMP_SECTIONS,
    leaks_section,
    unreadable_section,
)
from memforensics.analysis.summary import summarize


@dataclass(frozen=True)
class RunContext:
    """What a run section may read: the leak trends of the windows and the unreadable files."""

    leaks: Leaks | None
    unreadable: list[str]


RunSectionBuilder = Callable[[RunContext], Section | None]
RUN_SECTIONS: list[RunSectionBuilder] = [
    lambda run: unreadable_section(run.unreadable),
    lambda run: leaks_section(run.leaks) if run.leaks is not None else None,
]


@dataclass
class ReportBuilder:
    """Add dumps one at a time, then render; unreadable files are recorded, not fatal."""

    top: int = 15
    folder: bool = False  # True: leak trends over the window dumps become a section
    dumps: list[dict[str, Any]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    _leaks: LeakTracker = field(default_factory=LeakTracker)

    @paused_gc()
    def add(self, dump: Dump) -> None:
        """Build every section of every device of ``dump``; keep only their data."""
        index = len(self.dumps)
        views = dump.device_views()  # the devices ``summary`` explains, in its order
        devices = []
        for number, view in enumerate(views):
            summary = summarize(view, top=self.top)
            assert summary.filled is not None  # summarize always classifies
            ctx = DumpContext(
                dump=view,
                summary=summary,
                filled=summary.filled,
                key=f"d{index}-{number}",
                top=self.top,
                oom_device=len(views) == 1,  # several views: no OOM is recorded
            )
            # read per dump: a builder appended to DUMP_SECTIONS since import takes part
            sections = [section for build in DUMP_SECTIONS if (section := build(ctx)) is not None]
            label = "device ?" if view.device is None else f"device {view.device}"
            devices.append(
                {
                    "key": ctx.key,
                    "device": view.device,
                    "label": label,
                    "sections": [s.to_dict() for s in sections],
                }
            )
        if self.folder:
            self._leaks.add(dump)
        self.dumps.append({"name": dump.name, "devices": devices, "warnings": list(dump.warnings)})

    def add_unreadable(self, message: str) -> None:
        """Record a file that could not be loaded (shown in the page)."""
        self.unreadable.append(message)

    def document(self) -> dict[str, Any]:
        """The JSON the page renders."""
        leaks = self._leaks.result("", self.unreadable) if self.folder else None
        run = RunContext(leaks, self.unreadable)
        sections = [s.to_dict() for build in RUN_SECTIONS if (s := build(run)) is not None]
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        return {
            "generated": stamp,
            "version": __version__,
            "dumps": self.dumps,
            "run": sections,
        }

    def html(self) -> str:
        """The whole page."""
        return page(self.document())


def _asset(name: str) -> str:
    return (
        resources.files("memforensics.analysis.report")
        .joinpath(f"assets/{name}")
        .read_text("utf-8")
    )


def page(document: dict[str, Any]) -> str:
    """The HTML shell with the assets and the document inlined."""
    count = len(document["dumps"])
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'\">"
        f"<title>memforensics report</title><style>{_asset('report.css')}</style></head><body>"
        f"<h1>memforensics report</h1><p class='muted' id='mf-meta'>{count} dump(s) · "
        f"memforensics {escape(__version__)}</p>"
        "<noscript><p>This report draws its charts with inline JavaScript; allow scripts for "
        "this local file to see them.</p></noscript><main id='mf-root'></main>"
        '<svg id="mf-svg-namespace" width="0" height="0" aria-hidden="true"></svg>'
        f'<script type="application/json" id="mf-data">{json_in_script(document)}</script>'
        f"<script>{_asset('report.js')}</script></body></html>\n"
    )
