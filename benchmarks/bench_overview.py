"""How long does ``overview`` take over a 2,048-rank run, and how big is its page?

Builds a run folder of 2,048 synthetic journals x 1,000 lines (two million lines, written as a
training process writes them; one rank leaks), then times ``build_overview`` plus its text
(what ``memforensics overview DIR`` does) against one process reading every file and calling
``json.loads`` on every line, the reference. The page for the same run is rendered and
weighed against the 5 MB budget; with selenium and chromium present, the time it takes a
headless browser to load and draw it is reported too (no target).

    python benchmarks/bench_overview.py [--json PATH] [--quick] [--ranks N] [--lines N]
                                        [--repeats N]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import Figure, figure, parse_args, ratio_of, report

from memforensics.analysis import build_overview
from memforensics.analysis.folder import overview_text
from memforensics.analysis.report import render_overview
from memforensics.testing import write_journals

PAGE_BUDGET = 5_000_000


def make_run(root: Path, ranks: int, lines: int) -> None:
    """``ranks`` journals of ``lines`` lines: one written line by line, the rest copied from it
    with their rank changed (the content matters to the parser, not how it was made)."""
    write_journals(root, ranks=2, lines=lines, leak_rank=1)
    folder = root / "journal"
    template = (folder / "rank0_pid1000.jsonl").read_bytes()
    for rank in range(2, ranks):
        text = template.replace(b'"rank":0,', b'"rank":%d,' % rank)
        (folder / f"rank{rank}_pid{1000 + rank}.jsonl").write_bytes(text)


def json_loads_every_line(root: Path) -> float:
    """The reference: one process, every file, ``json.loads`` per line. Seconds."""
    start = time.perf_counter()
    folder = root / "journal"
    for name in os.listdir(folder):
        with open(folder / name, "rb") as handle:
            for line in handle:
                json.loads(line)
    return time.perf_counter() - start


def overview_seconds(root: Path) -> float:
    """``memforensics overview DIR`` without printing: read, judge, format. Seconds."""
    start = time.perf_counter()
    overview_text(build_overview(root))
    return time.perf_counter() - start


def browser_seconds(page: Path) -> float | None:
    """Load and draw time of ``page`` in headless Chromium, or None without one."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    if chromium is None or driver_path is None:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        start = time.perf_counter()
        driver.get(page.as_uri())  # returns after the load event: the map is drawn by then
        drawn = driver.execute_script("return !!document.querySelector('#map canvas');")
        return time.perf_counter() - start if drawn else None
    finally:
        driver.quit()


def main() -> int:
    """Build the run, measure, print the table."""
    args = parse_args(
        __doc__,
        ranks={"type": int, "default": None, "help": "ranks (default 2048; --quick 256)"},
        lines={"type": int, "default": 1000, "help": "journal lines per rank"},
        repeats={"type": int, "default": None, "help": "timed repeats (default 5; --quick 3)"},
    )
    ranks = args.ranks or (256 if args.quick else 2048)
    repeats = args.repeats or (3 if args.quick else 5)
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        make_run(root, ranks, args.lines)
        json_loads_every_line(root)  # warm the page cache for both sides alike
        value, ref, ratio = ratio_of(
            lambda: overview_seconds(root), lambda: json_loads_every_line(root), repeats
        )
        figures.append(
            figure(
                f"overview, {ranks:,} ranks x {args.lines:,} lines",
                "json.loads of every line, one process",
                value,
                ref,
                "s",
                ratio=ratio,
                target="<= 1.5",
                cpus=os.cpu_count(),
            )
        )
        start = time.perf_counter()
        html = render_overview(build_overview(root), link_base=root)
        render = time.perf_counter() - start
        page = Path(tmp) / "overview.html"
        page.write_text(html, encoding="utf-8")
        size = page.stat().st_size
        figures.append(
            figure(
                f"overview page, {ranks:,} ranks",
                "5 MB budget",
                size,
                PAGE_BUDGET,
                "B",
                target="<= 1",
                render_seconds=render,
            )
        )
        loaded = browser_seconds(page)
        if loaded is not None:
            figures.append(figure("page load and draw, headless Chromium", "-", loaded, 1.0, "s"))
    return report(
        "overview over a many-rank run (median seconds)",
        figures,
        args.json,
        repeats=repeats,
        ranks=ranks,
        lines=args.lines,
    )


if __name__ == "__main__":
    sys.exit(main())
