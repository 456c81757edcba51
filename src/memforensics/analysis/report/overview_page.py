"""``overview -o overview.html``: one offline page, a ranks x steps heatmap of the whole run.

Built the way the report page is (memray's reporters): the JavaScript and CSS are real files in
the package (``assets/overview.js`` and ``overview.css``), inlined into the page, and the data
is embedded once as JSON. No network, no library: a canvas draws the heatmap.

The page stays small at any scale because steps are cut into columns: at most ``CELL_BUDGET``
cells in all (about 290 columns for 2,048 ranks), each column a whole number of journal
intervals wide (no empty stripes), each cell the largest value of its lines (a spike never
disappears), quantized to one byte per cell per layer (reserved, allocated, retries, external)
and base64-encoded. 2,048 ranks x 1,000 lines come to about 3.5 MB.
"""

from __future__ import annotations

import base64
import statistics
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from importlib import resources
from itertools import pairwise
from pathlib import Path
from typing import Any

from memforensics._version import __version__
from memforensics.analysis.folder import MISSING, Overview, ProcessJournal, overview_text
from memforensics.analysis.report.page import content_security_policy, json_in_script, relative_link
from memforensics.analysis.schema import to_json

CELL_BUDGET = 600_000
MAX_COLUMNS = 1_000
LAYERS = (
    ("reserved", "reserved_bytes", "bytes"),
    ("allocated", "allocated_bytes", "bytes"),
    ("retries", "alloc_retries", "count"),
    ("external", "external_bytes", "bytes"),
)


@dataclass(frozen=True)
class Grid:
    """How steps map to columns: column ``c`` covers ``[first + c*width, first + (c+1)*width)``."""

    first: int
    width: int
    columns: int

    def column(self, step: int) -> int:
        """The column of ``step``."""
        return min(max((step - self.first) // self.width, 0), self.columns - 1)


def render_overview(view: Overview, *, link_base: Path | None = None) -> str:
    """The whole HTML document; dump links are relative to ``link_base`` (the page's folder)."""
    data = overview_data(view, link_base=link_base)
    payload = json_in_script(data)
    summary = escape(overview_text(view).split("\n\n")[0])
    script, style = _asset("overview.js"), _asset("overview.css")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"{content_security_policy(script, style)}"
        f"<title>memforensics overview</title><style>{style}</style></head>"
        f"<body><h1>memforensics overview</h1><p class='muted'>{escape(str(view.root))} · "
        f"memforensics {escape(__version__)}</p><pre class='facts'>{summary}</pre>"
        '<div id="controls"></div><div id="map"></div><div id="rank"></div>'
        f'<script type="application/json" id="overview-data">{payload}</script>'
        f"<script>{script}</script></body></html>\n"
    )


def _asset(name: str) -> str:
    return (resources.files("memforensics.analysis.report") / "assets" / name).read_text(
        encoding="utf-8"
    )


def overview_data(view: Overview, *, link_base: Path | None = None) -> dict[str, Any]:
    """The JSON the page draws from (also what tests check the page's numbers against)."""
    rows = _row_ranks(view)
    grid = make_grid(view.journals, rows=len(rows))
    index = {rank: i for i, rank in enumerate(rows)}
    cells = {name: [MISSING] * (len(rows) * grid.columns) for name, _, _ in LAYERS}
    for journal in view.journals:
        _bin(journal, grid, index[journal.rank] * grid.columns, cells)
    layers = {}
    for name, _column, unit in LAYERS:
        present = [v for v in cells[name] if v != MISSING]
        low, top = (min(present), max(present)) if present else (0, 0)
        cells_text = _quantize(cells[name], low, top)
        layers[name] = {"unit": unit, "min": low, "max": top, "cells": cells_text}
    marks = [
        [index[f.rank], grid.column(f.step)]
        for f in view.failures
        if f.step is not None and f.rank in index
    ]
    base = link_base if link_base is not None else Path.cwd()
    facts = {r.rank: r for r in view.ranks}
    return {
        "ranks": rows,
        "columns": grid.columns,
        "first_step": grid.first,
        "column_steps": grid.width,
        "layers": layers,
        "ooms": marks,
        "first_oom": None if view.first_oom is None else view.first_oom.rank,
        "outliers": sorted({o.rank for o in view.outliers}),
        "peer": None if view.comparison is None else view.comparison.peer,
        "facts": {
            str(rank): {
                **to_json(facts[rank]),
                "dumps": [
                    link
                    for path in facts[rank].dumps
                    if (link := relative_link((view.root / path).resolve(), base)) is not None
                ],
            }
            for rank in rows
            if rank in facts
        },
    }


def _row_ranks(view: Overview) -> list[int]:
    seen = {r.rank for r in view.ranks}
    seen |= set(view.problems.ranks_missing)  # a rank that left nothing gets an empty row
    return sorted(seen)


def make_grid(journals: Sequence[ProcessJournal], *, rows: int) -> Grid:
    """Columns for the steps ``journals`` cover, within ``CELL_BUDGET`` cells."""
    steps = [s for j in journals for s in (j.steps[:1] + j.steps[-1:]) if s != MISSING]
    if not steps:
        return Grid(0, 1, 1)
    first, last = min(steps), max(steps)
    interval = _interval(journals)
    wanted = max(1, min(MAX_COLUMNS, CELL_BUDGET // max(rows, 1)))
    span = last - first + 1
    width = max(1, -(-span // (wanted * interval))) * interval
    return Grid(first, width, -(-span // width))


def _interval(journals: Sequence[ProcessJournal]) -> int:
    """The usual step distance between journal lines (``journal_every``), from a sample."""
    gaps = []
    for journal in journals[:64]:
        steps = journal.steps
        gaps += [b - a for a, b in pairwise(steps[:201]) if b > a]
    return max(1, int(statistics.median(gaps))) if gaps else 1


def _bin(journal: ProcessJournal, grid: Grid, offset: int, cells: dict[str, list[int]]) -> None:
    """The largest value per column, one ``max()`` over a slice per column (steps are sorted)."""
    steps = journal.steps
    if not steps:
        return
    first, last = grid.column(steps[0]), grid.column(steps[-1])
    bounds = [bisect_left(steps, grid.first + c * grid.width) for c in range(first, last + 1)]
    bounds.append(len(steps))
    for name, column, _ in LAYERS:
        values, target = journal.columns[column], cells[name]
        for c, (start, end) in enumerate(pairwise(bounds), first + offset):
            if end > start:
                top = max(values[start:end])
                target[c] = max(target[c], top)


def _quantize(values: list[int], low: int, top: int) -> str:
    """One byte per cell, base64: 0 = no line, 1..255 = low..top (the contrast is between
    ranks: 42 GiB against 54 GiB must not both look "full")."""
    scale = 254 / (top - low) if top > low else 0.0
    data = bytes(0 if v == MISSING else 1 + round((v - low) * scale) for v in values)
    return base64.b64encode(data).decode("ascii")
