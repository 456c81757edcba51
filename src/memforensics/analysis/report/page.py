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

import base64
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

from memforensics._errors import SnapshotLoadError
from memforensics._version import __version__
from memforensics.analysis.compare import (
    Leaks,
    LeakTracker,
    WindowTotals,
    read_windows,
    window_totals,
)
from memforensics.analysis.dump import Dump, load_dump
from memforensics.analysis.dump.load import paused_gc
from memforensics.analysis.filled import Filled
from memforensics.analysis.report.model import DumpContext, Section
from memforensics.analysis.report.sections import (
    DUMP_SECTIONS,
    leaks_section,
    unreadable_section,
)
from memforensics.analysis.schema import to_json
from memforensics.analysis.story import WindowReader, explain

# Data embedded in an HTML page: the one escaping rule both pages (report, overview) use.
#
# Every string a page shows comes from a snapshot or a journal (site names, file paths,
# hostnames), so any of it may be hostile. The data goes into the page once, as JSON inside
# ``<script type="application/json">``, and is read back with ``JSON.parse``; the escaping below
# keeps that text from ever being markup: no ``</script>`` can close the element and no ``<!--``
# can open a comment (``<`` and ``>`` become ``\u003c`` and ``\u003e``), no ``&`` starts an
# entity, and U+2028/U+2029 (line breaks to some JavaScript parsers) are spelled out. JSON reads
# each escape back as the same character, so the data is unchanged.

_ESCAPES = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)


def content_security_policy(script: str, style: str) -> str:
    """The ``<meta>`` CSP of a page whose one inline ``<script>`` and one ``<style>`` hold
    exactly ``script`` and ``style``: nothing else runs or styles it (no ``'unsafe-inline'``,
    no network, no forms, no ``<base>``), so even markup slipped past the escaping is inert."""
    policy = (
        f"default-src 'none'; script-src {_hash(script)}; style-src {_hash(style)}; "
        "base-uri 'none'; form-action 'none'"
    )
    return f'<meta http-equiv="Content-Security-Policy" content="{policy}">'


def _hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def relative_link(target: Path, base: Path) -> str | None:
    """A link to file ``target`` from a page in ``base``: the relative path, percent-encoded
    (so ``javascript:alert(7)/x.pickle`` is a path, never a scheme); None where no relative
    path exists (another drive): no link rather than an absolute one."""
    try:
        relative = Path(os.path.relpath(target, base)).as_posix()
    except ValueError:
        return None
    return quote(relative, safe="/")


def json_in_script(data: Any) -> str:
    """``data`` as compact JSON that is safe inside a ``<script>`` element."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.translate(_ESCAPES)


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
    replay_jobs: int = 1  # processes each added dump's replay may use (``add``, not ``add_files``)
    dumps: list[dict[str, Any]] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    _leaks: LeakTracker = field(default_factory=LeakTracker)
    _windows: dict[Path, WindowTotals | str | None] = field(default_factory=dict)
    """Window dumps read to explain the dumps added, by path: every dump of a rank is explained
    from the same windows, each read once."""

    def read_window_dumps(self, paths: Sequence[Path]) -> list[WindowTotals | str | None]:
        """Each window dump's totals, read once per page (an ``explain`` window reader)."""
        for path in paths:
            if path not in self._windows:
                self._windows[path] = read_windows([path])[0]
        return [self._windows[path] for path in paths]

    def add(
        self,
        dump: Dump,
        *,
        index: int | None = None,
    ) -> None:
        """Build every section of every device of ``dump``; keep only their data.

        ``index`` (default: the dumps added so far) names the dump's elements in the page.
        """
        number = len(self.dumps) if index is None else index
        entry = dump_entry(
            dump, number, self.top, folder=self.folder, replay_jobs=self.replay_jobs,
            windows=self.read_window_dumps,
        )  # fmt: skip
        self.add_entry(*entry)

    def add_entry(self, entry: dict[str, Any], window: WindowTotals | None) -> None:
        """Keep one dump's built sections (and its window totals, for the leak section)."""
        if window is not None:
            self._leaks.add_totals(window)
        self.dumps.append(entry)

    def add_files(
        self, paths: Sequence[Path], *, jobs: int, done: Callable[[], object] = lambda: None
    ) -> None:
        """Load and build each of ``paths`` in up to ``jobs`` processes (at most ``jobs`` dumps
        in memory at once), kept in the order given, exactly as adding them one by one."""
        tasks = [(path, index, self.top, self.folder) for index, path in enumerate(paths)]
        with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(tasks)))) as pool:
            for found in pool.map(_file_entry, tasks):
                if isinstance(found, str):
                    self.add_unreadable(found)
                else:
                    self.add_entry(*found)
                done()

    def add_unreadable(self, message: str) -> None:
        """Record a file that could not be loaded (shown in the page)."""
        self.unreadable.append(message)

    def document(self) -> dict[str, Any]:
        """The JSON the page renders."""
        leaks = self._leaks.result("", self.unreadable) if self.folder else None
        run = RunContext(leaks, self.unreadable)
        sections = [to_json(s) for build in RUN_SECTIONS if (s := build(run)) is not None]
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
    script, style = _asset("report.js"), _asset("report.css")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"{content_security_policy(script, style)}"
        f"<title>memforensics report</title><style>{style}</style></head><body>"
        f"<h1>memforensics report</h1><p class='muted' id='mf-meta'>{count} dump(s) · "
        f"memforensics {escape(__version__)}</p>"
        "<noscript><p>This report draws its charts with inline JavaScript; allow scripts for "
        "this local file to see them.</p></noscript><main id='mf-root'></main>"
        '<svg id="mf-svg-namespace" width="0" height="0" aria-hidden="true"></svg>'
        f'<script type="application/json" id="mf-data">{json_in_script(document)}</script>'
        f"<script>{script}</script></body></html>\n"
    )


@paused_gc()
def dump_entry(
    dump: Dump,
    index: int,
    top: int,
    *,
    folder: bool,
    replay_jobs: int = 1,
    windows: WindowReader = read_windows,
) -> tuple[dict[str, Any], WindowTotals | None]:
    """One dump's part of the page (every section of every device it explains), and its
    window totals when the page covers a run folder; its replay runs in ``replay_jobs``
    processes, and ``windows`` reads the window dumps beside it."""
    views = dump.device_views()  # the devices ``explain`` explains, in its order
    told = explain(dump, top=top, windows=windows)  # the story every command tells of it
    devices = []
    known: Filled | None = None  # the dump classified, for the window totals
    for number, (view, summary) in enumerate(zip(views, (told, *told.other_devices), strict=True)):
        assert summary.filled is not None  # summarize always classifies
        if folder and len(views) == 1:  # the view is the whole dump
            known = summary.filled
        ctx = DumpContext(
            dump=view,
            summary=summary,
            filled=summary.filled,
            key=f"d{index}-{number}",
            top=top,
            oom_device=len(views) == 1,  # several views: no OOM is recorded
            replay_jobs=replay_jobs,
        )
        # read per dump: a builder appended to DUMP_SECTIONS since import takes part
        sections = [section for build in DUMP_SECTIONS if (section := build(ctx)) is not None]
        label = "device ?" if view.device is None else f"device {view.device}"
        devices.append(
            {
                "key": ctx.key,
                "device": view.device,
                "label": label,
                "sections": [to_json(s) for s in sections],
            }
        )
    window = window_totals(dump, known) if folder else None
    return {"name": dump.name, "devices": devices, "warnings": list(dump.warnings)}, window


def _file_entry(
    task: tuple[Path, int, int, bool],
) -> tuple[dict[str, Any], WindowTotals | None] | str:
    """A worker's job: load one file and build its entry, or say why it could not be read."""
    path, index, top, folder = task
    try:
        dump = load_dump(path)
    except SnapshotLoadError as exc:
        return str(exc)
    return dump_entry(dump, index, top, folder=folder)
