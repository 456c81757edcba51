"""``summary`` and ``report`` explain the same devices of a dump, in the same order."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from memforensics.cli import main
from memforensics.testing import MultiDeviceDump, several_devices, write_dump, wrong_sidecar_device

_DATA = re.compile(r'<script type="application/json" id="mf-data">(.*?)</script>', re.S)

CASES: dict[str, Callable[[], MultiDeviceDump]] = {
    "oom on 1, sidecar says 0": lambda: several_devices(oom_device=1, sidecar_device=0),
    "oom on 2, no sidecar": lambda: several_devices(oom_device=2, sidecar_device=None),
    "no oom, no sidecar": lambda: several_devices(oom_device=None, sidecar_device=None),
    "no oom, sidecar says 2": lambda: several_devices(oom_device=None, sidecar_device=2),
    "old sidecar names an empty device": wrong_sidecar_device,
}


@pytest.mark.parametrize("case", CASES)
def test_summary_and_report_choose_the_same_devices(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """For every way a multi-device dump can point at a device, both commands pick the same."""
    multi = CASES[case]()
    path = write_dump(
        tmp_path / "dumps" / "rank0_pid1.pickle", multi.snapshot, sidecar=multi.sidecar
    )
    assert main(["summary", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    summarized = [summary["device_index"]] + [o["device_index"] for o in summary["other_devices"]]

    page = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(page)]) == 0
    found = _DATA.search(page.read_text(encoding="utf-8"))
    assert found is not None
    reported = [device["device"] for device in json.loads(found[1])["dumps"][0]["devices"]]

    assert reported == summarized
    expected = [multi.oom_device] if multi.oom_device is not None else sorted(multi.truths)
    assert summarized == expected
