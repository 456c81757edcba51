"""Reading a near-OOM dump: summary and report say "at risk", with fragmentation and headroom."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import memforensics
from memforensics.analysis import load_dump
from memforensics.analysis.oom.verdict import NO_OOM
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.schema import to_json
from memforensics.analysis.summary import summarize, summary_text
from memforensics.backends.sim import reset_device

MiB = 1 << 20
TOTAL = 256 * MiB


@pytest.fixture
def near_oom_dump(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """A sim run whose step 3 retries once, leaving holes: the near-OOM dump and the device's
    own figures at that moment (the truth the reading is checked against)."""
    device = reset_device(total_bytes=TOTAL)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), near_oom_every=1)
    kept: list[Any] = []
    truth: dict[str, int] = {}
    for step in range(4):
        with mf.step(step):
            if step == 3:
                held = [device.empty(30 * MiB) for _ in range(7)]
                for tensor in held[::2]:
                    tensor.free()  # four 30 MiB holes inside the cache
                kept += held[1::2]
                kept.append(device.empty(120 * MiB))  # no hole fits: device malloc, retry
                stats = device.memory_stats()
                truth = {
                    "retries": stats["num_alloc_retries"],
                    "reserved": stats["reserved_bytes.all.current"],
                    "allocated": stats["allocated_bytes.all.current"],
                }
    memforensics.uninstall()
    (path,) = (tmp_path / "near-oom").glob("*.pickle")
    return path, truth


def test_summary_says_at_risk_with_retries_fragmentation_and_headroom(
    near_oom_dump: tuple[Path, dict[str, int]],
) -> None:
    """summary reads the retry count, the free bytes inside reserved and the headroom left
    from a near-OOM dump, and gives no OOM verdict."""
    path, truth = near_oom_dump
    summary = summarize(load_dump(path))
    risk = to_json(summary)["at_risk"]
    assert risk["alloc_retries"] == truth["retries"] == 1
    assert risk["reserved_bytes"] == truth["reserved"]
    assert risk["free_in_reserved_bytes"] == truth["reserved"] - truth["allocated"]
    assert risk["headroom_bytes"] == TOTAL - truth["reserved"]
    assert summary.verdict.name == NO_OOM
    text = summary_text(summary)
    assert "at risk: the allocator retried once before this snapshot" in text
    assert "AT RISK (no OOM yet)" in text


def test_report_has_an_at_risk_section(near_oom_dump: tuple[Path, dict[str, int]]) -> None:
    """The report's near-OOM dump opens with an at-risk section after the verdict."""
    path, _ = near_oom_dump
    builder = ReportBuilder()
    builder.add(load_dump(path))
    sections = builder.document()["dumps"][0]["devices"][0]["sections"]
    assert [s["id"] for s in sections[:2]] == ["verdict", "at-risk"]
    rows = dict((row[0], row[1]) for row in sections[1]["data"]["rows"])
    assert rows["at risk"] == "at risk: the allocator retried once before this snapshot"


def test_other_dumps_have_no_at_risk(tmp_path: Path) -> None:
    """An OOM dump carries no at-risk reading."""
    device = reset_device(total_bytes=32 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path))
    kept = [device.empty(20 * MiB)]
    with pytest.raises(device.OutOfMemoryError), mf.step(0):
        kept.append(device.empty(20 * MiB))
    memforensics.uninstall()
    (path,) = (tmp_path / "oom").glob("*.pickle")
    assert summarize(load_dump(path)).at_risk is None
