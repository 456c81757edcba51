"""The overview page in a real headless Chromium: it draws, marks the OOM, and opens a rank."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memforensics.analysis import build_overview
from memforensics.analysis.report import render_overview
from memforensics.testing import write_journals

pytestmark = [pytest.mark.browser, pytest.mark.integration]

webdriver = pytest.importorskip("selenium.webdriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module (its start costs seconds)."""
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("needs chromium and chromedriver on PATH")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1300,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _pixel(driver: Any, x: int, y: int) -> list[int]:
    """The RGB of the map canvas at (x, y)."""
    rgb: list[int] = driver.execute_script(
        "var c = document.querySelector('#map canvas');"
        "return Array.from(c.getContext('2d').getImageData(arguments[0], arguments[1], 1, 1)"
        ".data).slice(0, 3);",
        x,
        y,
    )
    return rgb


def test_page_draws_marks_the_oom_and_opens_a_rank(browser: Any, tmp_path: Path) -> None:
    """16 ranks, rank 5 leaks: its row ends darkest, the OOM panel opens, a click opens rank 3,
    typing 7 opens rank 7, and the retries switch rescales the legend."""
    write_journals(tmp_path, ranks=16, lines=40, leak_rank=5)
    page = tmp_path / "overview.html"
    page.write_text(render_overview(build_overview(tmp_path, workers=1), link_base=tmp_path))
    browser.get(page.as_uri())
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    geometry = browser.execute_script(
        "var c = document.querySelector('#map canvas');"
        "return [c.width, c.height, c.getBoundingClientRect().left, c.getBoundingClientRect().top];"
    )
    width, height = geometry[0], geometry[1]
    pad = 4  # the page leaves 4 px above the first row and below the last
    row = (height - 2 * pad) // 16
    last_x = width - 1 - 6  # inside the last column, clear of the OOM box's edge
    leak = _pixel(browser, last_x, pad + 5 * row + row // 2)
    healthy = _pixel(browser, last_x, pad + 3 * row + row // 2)
    assert sum(leak) < sum(healthy)  # darker: more reserved
    assert browser.find_element("css selector", "#rank h2").text == "rank 5"
    assert "step 3900" in browser.find_element("css selector", "#rank").text
    canvas = browser.find_element("css selector", "#map canvas")
    from selenium.webdriver.common.action_chains import ActionChains

    x, y = 60, pad + 3 * row + row // 2  # rank 3's row; selenium offsets from the centre
    ActionChains(browser).move_to_element_with_offset(
        canvas, x - width // 2, y - height // 2
    ).click().perform()
    assert browser.find_element("css selector", "#rank h2").text == "rank 3"
    assert browser.find_elements("css selector", "#rank svg polyline")
    box = browser.find_element("css selector", "#controls input[type='number']")
    box.send_keys("7\t")  # leaving the field fires its change event
    assert browser.find_element("css selector", "#rank h2").text == "rank 7"
    browser.find_element("css selector", "input[value='retries']").click()
    legend = browser.find_element("css selector", ".legend").text
    assert legend.endswith("4")  # rank 5 reached 4 retries; the scale's top says so
