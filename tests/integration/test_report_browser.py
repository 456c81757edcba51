"""The interactive report in a real headless Chromium: it draws, hovers, clicks, stays offline."""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.integration]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
MiB = 1 << 20


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium with console and network logging, or a clean skip."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("no chromium/chromedriver installed (Debian: apt-get install chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    service_module = pytest.importorskip("selenium.webdriver.chrome.service")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="mf-chromium-")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1280,1800",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=service_module.Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _report(tmp_path: Path) -> Path:
    """A report of a sim OOM dump whose live memory moves between 200 and 244 MiB of 256."""
    import memforensics
    from memforensics.analysis import list_dumps, load_dump
    from memforensics.analysis.report import ReportBuilder
    from memforensics.backends.sim import SimOutOfMemoryError, reset_device

    device = reset_device(256 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path / "run"), steps=1)
    base = [device.empty(200 * MiB)]

    def churn() -> None:
        for _ in range(3):
            held = [device.empty(2 * MiB) for _ in range(22)]
            for tensor in held:
                tensor.free()
        base.append(device.empty(60 * MiB))

    with pytest.raises(SimOutOfMemoryError), mf.step(0):
        churn()
    mf.close()
    oom = list_dumps(tmp_path / "run").first_oom
    assert oom is not None
    out = tmp_path / "report.html"
    builder = ReportBuilder()
    builder.add(load_dump(oom.path))
    out.write_text(builder.html(), encoding="utf-8")
    return out


def test_report_draws_hovers_clicks_and_never_reaches_the_network(
    browser: Any, tmp_path: Path
) -> None:
    """No console error; the timeline draws bands; hovering shows a stack; a click redraws the
    segment view at another moment; the y axis shows the movement with the limit marked; "by
    site" restacks by call site; a drag zooms; and the page made no request but its own load."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    page = _report(tmp_path)
    browser.get_log("performance")  # drop anything from before this page
    browser.get(page.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []

    bands = browser.find_elements(By.CSS_SELECTOR, "svg.timeline polygon")
    assert len(bands) >= 2
    assert browser.execute_script(
        "return [...document.querySelectorAll('svg.timeline polygon')]"
        ".some(p => p.getBBox().width > 100 && p.getBBox().height > 5)"
    )
    labels = browser.execute_script(
        "return [...document.querySelectorAll('svg.timeline text.tick')].map(t => t.textContent)"
    )
    assert any(label.startswith("device limit") for label in labels)
    assert "0 B" in labels  # stacked bands stand on 0: each band's height is its size

    overlay = browser.find_element(By.CSS_SELECTOR, "svg.timeline rect.overlay")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", overlay)
    size = overlay.size
    ActionChains(browser).move_to_element_with_offset(
        overlay, size["width"] // 2 - 5, size["height"] // 2 - 20
    ).perform()
    tooltip = browser.find_element(By.CSS_SELECTOR, ".chart .tooltip")
    assert tooltip.is_displayed()
    stack = tooltip.find_element(By.CSS_SELECTOR, "pre.stack").text
    assert "test_report_browser.py" in stack

    segments = browser.find_element(By.CSS_SELECTOR, ".segments")
    before = segments.get_attribute("data-position")
    ActionChains(browser).move_to_element_with_offset(
        overlay, -size["width"] // 2 + 20, 0
    ).click().perform()
    after = segments.get_attribute("data-position")
    assert after != before
    assert segments.find_elements(By.CSS_SELECTOR, ".segrow")
    [by_site] = [
        b for b in browser.find_elements(By.CSS_SELECTOR, ".controls button") if b.text == "by site"
    ]
    by_site.click()
    drawn = browser.execute_script(
        "return [...document.querySelectorAll('svg.timeline polygon')].map(p => p.dataset.band)"
    )
    assert any("test_report_browser.py" in band for band in drawn)
    overlay = browser.find_element(By.CSS_SELECTOR, "svg.timeline rect.overlay")  # redrawn
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", overlay)
    unzoomed = browser.execute_script(
        "return [...document.querySelectorAll('svg.timeline text.tick')].map(t => t.textContent)"
    )
    ActionChains(browser).move_to_element_with_offset(
        overlay, -100, 0
    ).click_and_hold().move_by_offset(150, 0).release().perform()
    ends = browser.execute_script(
        "return [...document.querySelectorAll('svg.timeline text.tick')].map(t => t.textContent)"
    )
    assert ends != unzoomed  # the drag zoomed in: the x range was redrawn
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []

    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    requests = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requests.append(message["params"]["request"]["url"])
    # Chromium's own pages and inline data: URLs (its blank pages use one) never leave the
    # machine; anything else but the page's own load would.
    local = ("chrome:", "chrome-untrusted:", "chrome-extension:", "devtools:", "data:", "about:")
    assert [url for url in requests if not url.startswith(local)] == [page.as_uri()]


def _marker_labels(browser: Any) -> list[tuple[str, float, float]]:
    """Text and horizontal extent of each marker label above the timeline."""
    found: list[tuple[str, float, float]] = browser.execute_script(
        "return [...document.querySelectorAll('svg.timeline text.tick')]"
        ".filter(t => /peak|OOM/.test(t.textContent))"
        ".map(t => { const b = t.getBBox(); return [t.textContent, b.x, b.x + b.width]; })"
    )
    return found


def test_oom_and_peak_labels_never_overprint(browser: Any, tmp_path: Path) -> None:
    """Where the OOM comes right at the peak, both are named and no marker label overlaps."""
    from memforensics.analysis.dump import dump_from_snapshot
    from memforensics.analysis.report import ReportBuilder
    from memforensics.testing import Block, SnapshotBuilder

    snapshot = SnapshotBuilder()
    snapshot.churn(3000)  # a long trace: the peak and the OOM next to it share a pixel
    snapshot.segment(Block(60 * MiB), Block(4 * MiB, state="inactive"))
    snapshot.oom(requested=8 * MiB, device_free=0)
    builder = ReportBuilder()
    builder.add(dump_from_snapshot(snapshot.build()))
    page = tmp_path / "report.html"
    page.write_text(builder.html(), encoding="utf-8")
    browser.get(page.as_uri())
    labels = _marker_labels(browser)
    text = " ".join(label for label, _, _ in labels)
    assert "peak" in text
    assert "OOM" in text
    ordered = sorted(labels, key=lambda item: item[1])
    for (_, _, left_end), (_, right_start, _) in itertools.pairwise(ordered):
        assert left_end <= right_start, ordered


def _page(browser: Any, tmp_path: Path, snapshot: dict[str, Any], name: str) -> None:
    """Open the report of ``snapshot`` and check the page drew without a console error."""
    from memforensics.analysis.dump import dump_from_snapshot
    from memforensics.analysis.report import ReportBuilder

    builder = ReportBuilder()
    builder.add(dump_from_snapshot(snapshot))
    page = tmp_path / f"{name}.html"
    page.write_text(builder.html(), encoding="utf-8")
    browser.get(page.as_uri())
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []


def test_memory_that_barely_moves_is_drawn_as_lines(browser: Any, tmp_path: Path) -> None:
    """2 GiB held from before recording and a few MiB of churn: from 0 the movement would be
    invisible, so the total and reserved are lines on an axis near them, and no band is
    stacked on a cut axis."""
    from selenium.webdriver.common.by import By

    from memforensics.testing import Block, SnapshotBuilder

    snapshot = SnapshotBuilder()
    snapshot.segment(Block(2048 * MiB, site=None))
    snapshot.segment(*(Block(2 * MiB, state="inactive") for _ in range(8)))
    built = snapshot.build()
    del built["device_traces"][0][:2]  # the 2 GiB segment and block came before recording
    _page(browser, tmp_path, built, "flat")
    assert browser.find_elements(By.CSS_SELECTOR, "svg.timeline polyline.live")
    assert not browser.find_elements(By.CSS_SELECTOR, "svg.timeline polygon")
    note = browser.find_element(By.CSS_SELECTOR, "[data-section=timeline] p.note").text
    assert "too little to see from 0" in note


def test_tables_and_icicle_fit_the_page(browser: Any, tmp_path: Path) -> None:
    """No table runs past the page (the what-if table's long settings wrap), and a call tree
    of one big caller and forty slivers draws no frame narrower than a few pixels: the
    slivers are one node, which opens them when clicked."""
    from selenium.webdriver.common.by import By

    from memforensics.testing import Block, Site, SnapshotBuilder

    browser.set_window_size(900, 1800)
    try:
        page = _report(tmp_path)
        browser.get(page.as_uri())
        overflow = browser.execute_script(
            "const right = document.getElementById('mf-root').getBoundingClientRect().right;"
            "return [...document.querySelectorAll('table')]"
            ".map(t => t.getBoundingClientRect().right - right).filter(d => d > 0.5)"
        )
        assert overflow == []
    finally:
        browser.set_window_size(1280, 1800)
    snapshot = SnapshotBuilder()
    small = [Block(8 * MiB, site=Site("/job/net.py", 100 + n, f"layer{n}")) for n in range(40)]
    snapshot.segment(Block(2000 * MiB), *small)
    _page(browser, tmp_path, snapshot.build(), "slivers")
    widths = browser.execute_script(
        "return [...document.querySelectorAll('.icicle .bar')]"
        ".map(b => b.getBoundingClientRect().width)"
    )
    assert min(widths) >= 4
    [merged] = browser.find_elements(By.XPATH, "//div[@class='bar'][contains(., 'smaller frames')]")
    assert merged.text.startswith("<40 smaller frames>")
    merged.click()
    shown = browser.find_elements(By.CSS_SELECTOR, ".icicle .bar")
    assert len(shown) > 40
