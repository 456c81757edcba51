"""``memforensics doctor``: every check's pass / warn / fail, the JSON shape and the exit status."""

from __future__ import annotations

import json
import shutil
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from memforensics.analysis.schema import document, from_json
from memforensics.backends._protocol import HistoryMode
from memforensics.backends.sim import SimBackend
from memforensics.cli import main
from memforensics.doctor import SCHEMA, Doctor, doctor_text
from memforensics.doctor.checks import Check, DoctorReport, overall
from memforensics.testing import reset_device

_ENV = (
    "OOM_SNAPSHOT_ENABLE",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_NPU_ALLOC_CONF",
    "MEMFORENSICS_DEVICE",
    "MEMFORENSICS_OUT_DIR",
    "MEMFORENSICS_STEPS",
)


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No allocator or memforensics settings leak in from the machine; a fresh sim device."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    reset_device()
    yield
    reset_device()


def _checks(device: str, out_dir: Path, **kwargs: Any) -> dict[str, Check]:
    return {check.name: check for check in Doctor(device, out_dir, **kwargs).run()}


def _json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", "--json", *map(str, args)])
    return code, json.loads(capsys.readouterr().out)


def test_sim_passes_every_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On the sim device every check passes and the exit status is 0."""
    code, report = _json(capsys, "--device", "sim", "--out-dir", tmp_path)
    assert code == 0
    assert report["status"] == "pass", report
    assert {check["status"] for check in report["checks"]} == {"pass"}


def test_the_report_reads_back_from_its_json(tmp_path: Path) -> None:
    """The doctor's report, read back from its printed JSON, prints the same text."""
    report = Doctor("sim", tmp_path / "missing" / "out").report()
    back = from_json(DoctorReport, json.loads(json.dumps(document(report, SCHEMA))))
    assert back == report
    assert doctor_text(back) == doctor_text(report)
    assert doctor_text(report).startswith("memforensics doctor: device sim, out_dir ")


def test_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints schema (first), status, device, out_dir and a list of {name, status,
    detail}."""
    _, report = _json(capsys, "--device", "sim", "--out-dir", tmp_path)
    assert list(report) == ["schema", "status", "device", "out_dir", "checks"]
    assert report["schema"] == 2
    assert report["device"] == "sim"
    assert report["out_dir"] == str(tmp_path)
    names = [check["name"] for check in report["checks"]]
    assert names == [
        "memforensics",
        "config",
        "torch",
        "torch_npu",
        "device",
        "oom_hook",
        "history_options",
        "history_frames",
        "out_dir",
        "allocator_conf",
        "oom_snapshot_enable",
    ]
    for check in report["checks"]:
        assert set(check) == {"name", "status", "detail"}
        assert check["detail"]
        assert "\n" not in check["detail"]


def test_human_output_one_line_per_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The human report has a header, one line per check and a result line (on a screen wide
    enough for the tmp path)."""
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["doctor", "--device", "sim", "--out-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"memforensics doctor: device sim, out_dir {tmp_path}"
    assert len(lines) == 13
    assert lines[-1] == "result: pass (0 failed, 0 warnings, 11 checks)"
    assert any("history_frames" in line and "frames" in line for line in lines)


def test_history_frames_really_records(tmp_path: Path) -> None:
    """The frames check made an allocation whose recorded stack includes the doctor's frame."""
    check = _checks("sim", tmp_path)["history_frames"]
    assert check.status == "pass"
    assert "the probe allocation has" in check.detail


class _NoHistory(SimBackend):
    """A backend whose history recording silently records nothing."""

    def record_history(
        self, mode: HistoryMode, *, max_entries: int, stacks: Literal["python", "all"], clear: bool
    ) -> None:
        """Ignore the request."""


def test_history_without_events_fails(tmp_path: Path) -> None:
    """A backend that records no history fails the frames check."""
    check = _checks("sim", tmp_path, backend_factory=lambda _: _NoHistory())["history_frames"]
    assert check.status == "fail"
    assert "no alloc events" in check.detail


def test_without_torch_says_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With torch absent, sim still passes and the torch check says "not installed"."""
    monkeypatch.setitem(sys.modules, "torch", None)
    code, report = _json(capsys, "--device", "sim", "--out-dir", tmp_path)
    torch = next(check for check in report["checks"] if check["name"] == "torch")
    assert code == 0
    assert torch == {
        "name": "torch",
        "status": "pass",
        "detail": "not installed (not needed for --device sim)",
    }


def test_cuda_without_torch_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--device cuda with torch absent fails the torch and device checks, naming the cause."""
    monkeypatch.setitem(sys.modules, "torch", None)
    checks = _checks("cuda", tmp_path)
    assert (checks["torch"].status, checks["torch"].detail) == ("fail", "not installed")
    assert checks["device"].status == "fail"
    assert checks["device"].detail == "cuda: torch not installed"
    assert checks["history_frames"].status == "warn"


@pytest.mark.torch
def test_cuda_on_cpu_torch_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a CPU-only torch, --device cuda fails with "CPU-only build" and exit status 1."""
    code, report = _json(capsys, "--device", "cuda", "--out-dir", tmp_path)
    checks = {check["name"]: check for check in report["checks"]}
    assert code == 1
    assert report["status"] == "fail"
    assert checks["device"]["status"] == "fail"
    assert "CPU-only build" in checks["device"]["detail"]
    assert checks["history_options"]["status"] in {"pass", "warn"}
    assert "max_entries" in checks["history_options"]["detail"]


def test_auto_without_device_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """auto with no accelerator fails (install() would capture nothing) and exits 1, so
    ``doctor || exit 1`` stops the job; the line names the dry run."""
    monkeypatch.setitem(sys.modules, "torch", None)
    checks = _checks("auto", tmp_path)
    assert checks["device"].status == "fail"
    assert "capture nothing" in checks["device"].detail
    assert "--device sim" in checks["device"].detail
    assert overall(list(checks.values())) == "fail"
    code, report = _json(capsys, "--out-dir", tmp_path)
    assert code == 1
    assert report["status"] == "fail"


@pytest.mark.parametrize("device", ["none", "sim"])
def test_asking_for_no_accelerator_exits_0(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    device: str,
) -> None:
    """--device none or sim asked for a run without an accelerator: no failure, exit 0."""
    monkeypatch.setitem(sys.modules, "torch", None)
    code, report = _json(capsys, "--device", device, "--out-dir", tmp_path)
    assert code == 0
    assert report["status"] in {"pass", "warn"}


def test_out_dir_not_created_and_reported(tmp_path: Path) -> None:
    """A missing out_dir is checked in its nearest parent and is not created."""
    check = _checks("sim", tmp_path / "a" / "b")["out_dir"]
    assert check.status == "pass"
    assert "(will be created)" in check.detail
    assert not (tmp_path / "a").exists()


def test_out_dir_under_a_file_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An out_dir that cannot be a directory fails the check and the exit status is 1."""
    (tmp_path / "file").write_text("")
    code, report = _json(capsys, "--device", "sim", "--out-dir", tmp_path / "file" / "sub")
    check = next(check for check in report["checks"] if check["name"] == "out_dir")
    assert code == 1
    assert check["status"] == "fail"
    assert "is not a directory" in check["detail"]


def test_low_disk_space_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Less than 1 GiB free in out_dir warns."""
    usage = types.SimpleNamespace(total=1 << 30, used=(1 << 30) - (1 << 20), free=1 << 20)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage)
    check = _checks("sim", tmp_path)["out_dir"]
    assert check.status == "warn"
    assert "1.00 MiB free" in check.detail


@pytest.mark.parametrize(
    ("variable", "value", "status", "words"),
    [
        ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", "warn", "no OOM observer"),
        ("PYTORCH_ALLOC_CONF", "expandable_segments:True", "pass", "grow in place"),
        ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128", "pass", "max_split_size_mb:128"),
    ],
)
def test_allocator_conf(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    status: str,
    words: str,
) -> None:
    """cudaMallocAsync warns; expandable_segments and other settings are reported."""
    monkeypatch.setenv(variable, value)
    check = _checks("sim", tmp_path)["allocator_conf"]
    assert check.status == status
    assert words in check.detail


@pytest.mark.parametrize(("device", "status"), [("auto", "warn"), ("npu", "warn"), ("sim", "pass")])
def test_oom_snapshot_enable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str, status: str
) -> None:
    """OOM_SNAPSHOT_ENABLE warns where an NPU may be used, and is only noted elsewhere."""
    monkeypatch.setenv("OOM_SNAPSHOT_ENABLE", "1")
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    check = _checks(device, tmp_path)["oom_snapshot_enable"]
    assert check.status == status
    assert "OOM_SNAPSHOT_ENABLE=1" in check.detail


def test_invalid_env_config_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A MEMFORENSICS_* value install() would reject fails the config check (exit status 1)."""
    monkeypatch.setenv("MEMFORENSICS_STEPS", "zero")
    code, report = _json(capsys, "--device", "sim", "--out-dir", tmp_path)
    check = next(check for check in report["checks"] if check["name"] == "config")
    assert code == 1
    assert check["status"] == "fail"
    assert "MEMFORENSICS_STEPS" in check["detail"]


def test_device_and_out_default_to_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without flags the doctor checks the device and out_dir install() would use."""
    monkeypatch.setenv("MEMFORENSICS_DEVICE", "sim")
    monkeypatch.setenv("MEMFORENSICS_OUT_DIR", str(tmp_path / "runs"))
    code, report = _json(capsys)
    assert code == 0
    assert (report["device"], report["out_dir"]) == ("sim", str(tmp_path / "runs"))


def test_a_crashing_check_is_a_failure(tmp_path: Path) -> None:
    """A check that raises is reported as failed with the error; the others still run."""

    def broken(_: str) -> Any:
        raise RuntimeError("no backend today")

    checks = _checks("sim", tmp_path, backend_factory=broken)
    assert checks["device"].status == "fail"
    assert "RuntimeError: no backend today" in checks["device"].detail
    assert checks["out_dir"].status == "pass"


def test_overall_is_the_worst_status() -> None:
    """fail beats warn beats pass."""
    assert overall([Check("a", "pass", "x")]) == "pass"
    assert overall([Check("a", "pass", "x"), Check("b", "warn", "y")]) == "warn"
    assert overall([Check("a", "fail", "x"), Check("b", "warn", "y")]) == "fail"
