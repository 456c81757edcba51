"""The CUDA adapter through the real facade, on the real CPU torch with its CUDA surface faked.

The CUDA and NPU adapters share one implementation (``backends/_torch.py``), so every test that
is not about a CUDA-only detail runs for both devices (``device`` parameter); NPU-only behaviour
lives in ``test_npu_adapter.py``.
"""

from __future__ import annotations

import os
import pickle
import re
import warnings
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from torchfakes import (
    GIB,
    OOM_EXTRA_KEYS,
    OOM_KEYS,
    SIDECAR_EXTRA_KEYS,
    SIDECAR_KEYS,
    Fake,
    FakeAllocator,
    Install,
    files_under,
    logged,
    make_snapshot,
    oom_files,
    patch_cuda,
    patch_npu,
    read_sidecar,
)

import memforensics
from memforensics import ConfigError
from memforensics.capture.oom import REGISTRY

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("clean_env")]

TIME = r"\d{8}-\d{6}-\d{6}"


def stderr_of(capsys: pytest.CaptureFixture[str]) -> str:
    """What memforensics logged to stderr so far."""
    return capsys.readouterr().err


# -- attaching ---------------------------------------------------------------------------------
def test_auto_attaches_observer_on_install(
    fake: Fake, install: Install, device: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """device="auto" picks this device (npu when CUDA is unavailable) and attaches one observer."""
    alloc = fake()
    mf = install(device="auto")
    assert mf.backend.name == device
    assert mf.oom_attached
    assert len(alloc.called("attach_out_of_memory_observer")) == 1
    assert alloc.observers == [REGISTRY.dispatch]
    assert logged(stderr_of(capsys), "oom_observer_not_attached") == []


def test_unselected_rank_is_fully_inert(fake: Fake, install: Install, out_dir: Path) -> None:
    """A rank outside ``ranks`` attaches nothing, records no history and writes no file."""
    alloc = fake()
    mf = install(rank=0, ranks=[1], steps=1)
    for step in range(3):
        with mf.step(step):
            alloc.fire_oom()
    err = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(torch.OutOfMemoryError) as caught, mf.step(3):
        raise err
    assert caught.value is err
    mf.close()
    touched = {name for name, _, _ in alloc.calls}
    assert touched <= {"is_available", "current_device"}
    assert alloc.observers == []
    assert not out_dir.exists()


@pytest.mark.parametrize("via_uninstall", [True, False], ids=["uninstall", "reinstall"])
def test_observer_attached_once_per_process(
    fake: Fake, install: Install, tmp_path: Path, via_uninstall: bool
) -> None:
    """A second install with another config attaches nothing new; only the new facade dumps."""
    alloc = fake()
    first = install(out_dir=tmp_path / "a")
    if via_uninstall:
        memforensics.uninstall()
    second = install(out_dir=tmp_path / "b", steps=2)
    assert first is not second
    assert first.closed
    assert len(alloc.called("attach_out_of_memory_observer")) == 1
    assert second.oom_attached
    alloc.fire_oom()
    assert oom_files(tmp_path / "a") == []
    assert len(oom_files(tmp_path / "b")) == 1
    assert install(out_dir=tmp_path / "b", steps=2) is second


def test_a_forgotten_route_never_attaches_a_second_observer(
    fake: Fake, install: Install, tmp_path: Path
) -> None:
    """After uninstall and the registry's reset (as between tests on a real GPU), installing
    again on the same framework attaches nothing new, so one OOM writes one dump, not two."""
    alloc = fake()
    install(out_dir=tmp_path / "a")
    memforensics.uninstall()
    REGISTRY.forget()
    install(out_dir=tmp_path / "b")
    assert alloc.observers == [REGISTRY.dispatch]
    alloc.fire_oom()
    assert len(oom_files(tmp_path / "b")) == 1


def test_observer_quiet_after_uninstall(fake: Fake, install: Install, out_dir: Path) -> None:
    """After uninstall() the still-attached observer writes nothing."""
    alloc = fake()
    install()
    memforensics.uninstall()
    alloc.fire_oom()
    assert oom_files(out_dir) == []


def test_unavailable_device_warns_and_does_not_attach(
    fake: Fake, install: Install, out_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An explicitly chosen device that is absent gives one warning, no observer, no history."""
    alloc = fake(available=False)
    mf = install(steps=1)
    with mf.step(0):
        pass
    error = torch.OutOfMemoryError("out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(torch.OutOfMemoryError) as caught, mf.step(1):
        raise error
    assert caught.value is error
    mf.close()
    assert not mf.oom_attached
    assert alloc.called("attach_out_of_memory_observer") == []
    assert alloc.history_calls() == []
    assert files_under(out_dir) == []
    err = stderr_of(capsys)
    assert len(logged(err, "device_unavailable")) == 1
    assert err.count("level='warning'") == 1  # the step() fallback adds no failures of its own


@pytest.mark.parametrize("device", ["auto"])
def test_auto_without_any_device_warns(
    monkeypatch: pytest.MonkeyPatch, install: Install, capsys: pytest.CaptureFixture[str]
) -> None:
    """device="auto" with neither CUDA nor an NPU falls back to none and says so once."""
    cuda = FakeAllocator("cuda", available=False)
    npu = FakeAllocator("npu", available=False)
    patch_cuda(monkeypatch, cuda)
    patch_npu(monkeypatch, npu)
    mf = install(device="auto", steps=1)
    assert mf.backend.name == "none"
    assert cuda.observers == npu.observers == []
    lines = logged(stderr_of(capsys), "device_unavailable")
    assert len(lines) == 1
    assert "no CUDA or NPU device found" in lines[0]


def test_missing_hook_warns_and_windows_still_dump(
    fake: Fake, install: Install, device: str, out_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A framework without the OOM hook gives one warning naming it; windows keep dumping."""
    fake(hook="missing")
    mf = install(steps=1)
    with mf.step(0):
        pass
    assert not mf.oom_attached
    lines = logged(stderr_of(capsys), "oom_observer_not_attached")
    assert len(lines) == 1
    assert f"_{device}_attach_out_of_memory_observer" in lines[0]
    pid = os.getpid()
    assert files_under(out_dir) == [f"step0/rank0_pid{pid}.json", f"step0/rank0_pid{pid}.pickle"]


@pytest.mark.parametrize("device", ["auto"])
@pytest.mark.parametrize("value", ["xpu", "CUDA", "mps", ""])
def test_unsupported_device_fails_fast(install: Install, value: str) -> None:
    """A device name memforensics has no adapter for is a ConfigError naming ``device``."""
    with pytest.raises(ConfigError, match="device") as caught:
        install(device=value)
    assert caught.value.field == "device"


def test_attach_failure_warns_once_and_windows_still_dump(
    fake: Fake, install: Install, out_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hook that raises (cudaMallocAsync) is one warning; windows and step() dumps still work."""
    alloc = fake(hook="raises")
    install(out_dir=out_dir / "first")
    mf = install(steps=1)
    with mf.step(0):
        pass
    err = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
    with pytest.raises(torch.OutOfMemoryError), mf.step(1):
        raise err
    assert not mf.oom_attached
    lines = logged(stderr_of(capsys), "oom_observer_not_attached")
    assert len(lines) == 1
    assert "cudaMallocAsync" in lines[0]
    assert alloc.observers == []
    pid = os.getpid()
    assert (out_dir / "step0" / f"rank0_pid{pid}.pickle").is_file()
    assert (out_dir / "step1" / f"rank0_pid{pid}.pickle").is_file()
    assert len(oom_files(out_dir)) == 1


# -- windows and history -----------------------------------------------------------------------
def test_window_dumps_only_when_full(fake: Fake, install: Install, out_dir: Path) -> None:
    """steps=2, skip_first=4: steps4-5 appears only once step 5 ends, and nothing before."""
    fake()
    mf = install(steps=2, skip_first=4)
    for step in range(5):
        with mf.step(step):
            pass
        assert files_under(out_dir) == [], f"something was written after step {step}"
    with mf.step(5):
        assert files_under(out_dir) == []
    pid = os.getpid()
    assert files_under(out_dir) == [f"steps4-5/rank0_pid{pid}.json",
                                    f"steps4-5/rank0_pid{pid}.pickle"]  # fmt: skip
    sidecar = read_sidecar(out_dir / "steps4-5" / f"rank0_pid{pid}.pickle")
    assert (sidecar["kind"], sidecar["steps"], sidecar["step"]) == ("window", [4, 5], 5)
    assert sidecar["partial"] is False


def test_close_mid_window_dumps_partial(fake: Fake, install: Install, out_dir: Path) -> None:
    """close() inside a window dumps the steps seen so far, marked partial."""
    fake()
    mf = install(steps=4)
    for step in range(2):
        with mf.step(step):
            pass
    mf.close()
    sidecar = read_sidecar(out_dir / "steps0-1" / f"rank0_pid{os.getpid()}.pickle")
    assert sidecar["partial"] is True
    assert sidecar["steps"] == [0, 1]


def starts(device: str, mode: str, *, clear: bool, max_entries: int = 100_000,
           stacks: str = "python", context: str = "alloc") -> list[dict[str, Any]]:  # fmt: skip
    """The ``_record_memory_history`` calls that start ``mode``: with clear_history on torch,
    as a stop then a start on torch_npu (its function has no clear_history)."""
    call = {"enabled": mode, "context": context, "stacks": stacks, "max_entries": max_entries}
    if not clear:
        return [call]
    if device == "npu":
        return [{"enabled": None}, call]
    return [{**call, "clear_history": True}]


STOP = {"enabled": None}


def test_history_cleared_when_window_opens(fake: Fake, install: Install, device: str) -> None:
    """Recording starts at install in oom_history's mode and restarts cleared, in "all", as each
    window opens; after each window it returns to oom_history's mode."""
    alloc = fake()
    mf = install(steps=2, skip_first=1, max_entries=500)
    state = starts(device, "state", clear=True, max_entries=500)
    window = starts(device, "all", clear=True, max_entries=500)
    back = starts(device, "state", clear=False, max_entries=500)
    assert alloc.history_calls() == state
    with mf.step(0):
        assert alloc.history_calls() == state
    with mf.step(1):
        assert alloc.history_calls() == state + window
    with mf.step(2):
        pass
    assert alloc.history_calls() == state + window + back
    with mf.step(3):
        assert alloc.history_calls() == state + window + back + window
    mf.close()
    assert alloc.history_calls()[-1] == STOP


def test_old_record_signature_stops_then_starts(fake: Fake, install: Install) -> None:
    """Without a clear_history parameter, a window open stops recording, then starts it again."""
    alloc = fake(history_signature="old")
    mf = install(steps=1, oom_history="all")
    start = {"enabled": "all", "context": "alloc", "stacks": "python", "max_entries": 100_000}
    assert alloc.history_calls() == [STOP, start]
    with mf.step(0):
        assert alloc.history_calls() == [STOP, start, STOP, start]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"steps": 1, "stacks": "all", "max_entries": 1234}, ("state", "all", 1234, "alloc")),
        ({"steps": 1, "context": "all"}, ("state", "python", 100_000, "all")),
        ({}, ("state", "python", 100_000, "alloc")),
        ({"oom_history": "all", "max_entries": 7}, ("all", "python", 7, "alloc")),
    ],
)
def test_history_options_passed_through(
    fake: Fake, install: Install, config: dict[str, Any], expected: tuple[str, str, int, str]
) -> None:
    """stacks, max_entries and context reach _record_memory_history; outside windows every
    rank (window ranks too) records what oom_history says."""
    alloc = fake()
    install(**config)
    call = alloc.history_calls()[-1]
    assert (call["enabled"], call["stacks"], call["max_entries"], call["context"]) == expected


def test_oom_history_off_records_nothing(fake: Fake, install: Install) -> None:
    """oom_history="off" without windows never touches allocator history."""
    alloc = fake()
    mf = install(oom_history="off")
    mf.close()
    assert alloc.history_calls() == []


def test_annotate_steps_sets_and_clears_metadata(fake: Fake, install: Install, device: str) -> None:
    """Each step tags allocations with ``step=N`` and clears the tag when it ends (CUDA; the
    real torch_npu has no _set_memory_metadata, so NPU steps are never tagged)."""
    alloc = fake()
    mf = install(steps=2)
    if device == "npu":
        with mf.step(7):
            pass
        assert alloc.called("_set_memory_metadata") == []
        return
    with mf.step(7):
        assert alloc.called("_set_memory_metadata")[-1] == (("step=7",), {})
    assert alloc.called("_set_memory_metadata")[-1] == (("",), {})
    with mf.step():
        assert alloc.called("_set_memory_metadata")[-1] == (("step=8",), {})
    tags = [args[0] for args, _ in alloc.called("_set_memory_metadata")]
    assert tags == ["", "step=7", "", "step=8", ""]


@pytest.mark.parametrize("option", ["annotate_off", "unsupported"])
def test_no_annotation_when_off_or_unsupported(
    fake: Fake, install: Install, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """annotate_steps=False, or a framework without _set_memory_metadata, tags nothing."""
    alloc = fake(metadata_supported=option != "unsupported")
    mf = install(steps=1, annotate_steps=option != "annotate_off")
    with mf.step(0):
        pass
    assert [a for a, _ in alloc.called("_set_memory_metadata") if a != ("",)] == []
    assert "level='warning'" not in stderr_of(capsys)


def test_truncated_window_is_marked(
    fake: Fake, install: Install, out_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A window whose trace filled max_entries gets ``"truncated": true`` and a warning."""
    alloc = fake(snapshot_value=make_snapshot(trace_entries=3))
    mf = install(steps=1, max_entries=3)
    with mf.step(0):
        pass
    alloc.snapshot_value = make_snapshot(trace_entries=2)
    with mf.step(1):
        pass
    pid = os.getpid()
    full = read_sidecar(out_dir / "step0" / f"rank0_pid{pid}.pickle")
    assert (full["truncated"], full["trace_entries"]) == (True, 3)
    room = read_sidecar(out_dir / "step1" / f"rank0_pid{pid}.pickle")
    assert (room["truncated"], room["trace_entries"]) == (False, 2)
    assert len(logged(stderr_of(capsys), "window_truncated")) == 1


# -- the OOM observer --------------------------------------------------------------------------
def test_oom_observer_writes_dump_without_sync(
    fake: Fake, install: Install, out_dir: Path, device: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An observer call writes oom/rank0_pid<pid>_step<N>_<time> with full diagnostics, no sync."""
    alloc = fake(total=80 * GIB, free=512 << 20)
    mf = install()
    with mf.step(12):
        alloc.fire_oom(allocation_bytes=3 * GIB)
    assert alloc.synchronized == 0
    (snapshot,) = oom_files(out_dir)
    assert re.fullmatch(rf"rank0_pid{os.getpid()}_step12_{TIME}\.pickle", snapshot.name)
    sidecar = read_sidecar(snapshot)
    assert (sidecar["kind"], sidecar["step"], sidecar["device"]) == ("oom", 12, device)
    oom = sidecar["oom"]
    assert oom["allocation_bytes"] == 3 * GIB
    assert oom["requested_bytes"] is None  # no oom entry in the trace: no history of the request
    assert oom["device_total_bytes"] == 80 * GIB
    assert oom["device_free_bytes"] == 512 << 20
    assert oom["allocator"] == alloc.stats_value
    assert oom["source"] == "observer"
    names = [frame["name"] for frame in oom["stack"]]
    assert "test_oom_observer_writes_dump_without_sync" in names
    assert names.index("test_oom_observer_writes_dump_without_sync") < names.index("fire_oom")
    assert names[-1] == "fire_oom"  # innermost last; memforensics' own frames are left out
    (line,) = logged(stderr_of(capsys), "out_of_memory")
    assert "level='error'" in line
    assert f"allocation_bytes={3 * GIB}" in line
    assert "step=12" in line


def test_oom_outside_a_step_has_no_step_in_name(
    fake: Fake, install: Install, out_dir: Path
) -> None:
    """An OOM outside any step() is named without ``_stepN`` and has ``step: null``."""
    alloc = fake()
    mf = install()
    with mf.step(4):
        pass
    alloc.fire_oom()
    (snapshot,) = oom_files(out_dir)
    assert re.fullmatch(rf"rank0_pid{os.getpid()}_{TIME}\.pickle", snapshot.name)
    assert read_sidecar(snapshot)["step"] is None


@pytest.mark.parametrize("cap", [0, 1, 2])
def test_max_oom_snapshots_caps_dumps(
    fake: Fake, install: Install, out_dir: Path, cap: int
) -> None:
    """Retry loops fire the observer many times; at most ``max_oom_snapshots`` dumps are taken."""
    alloc = fake()
    mf = install(max_oom_snapshots=cap)
    for step in range(5):
        with mf.step(step):
            alloc.fire_oom()
    assert len(oom_files(out_dir)) == cap
    assert len(alloc.called("_snapshot")) == cap


def test_observer_reentry_is_ignored(fake: Fake, install: Install, out_dir: Path) -> None:
    """An OOM fired from inside our own capture (while snapshotting) is dropped, not recursed."""
    alloc = fake()

    def oom_again() -> None:
        alloc.on_snapshot = None
        alloc.fire_oom()

    alloc.on_snapshot = oom_again
    mf = install(max_oom_snapshots=3)
    with mf.step(0):
        alloc.fire_oom()
    assert len(oom_files(out_dir)) == 1
    assert len(alloc.called("_snapshot")) == 1


def test_memory_stats_failure_still_dumps(
    fake: Fake, install: Install, out_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """memory_stats() raising leaves ``allocator: null`` in a dump that is still written."""
    alloc = fake(failing={"memory_stats"})
    install()
    alloc.fire_oom()
    (snapshot,) = oom_files(out_dir)
    assert read_sidecar(snapshot)["oom"]["allocator"] is None
    assert len(logged(stderr_of(capsys), "oom_stats_failed")) == 1


def test_snapshot_failure_warns_and_observer_returns(
    fake: Fake, install: Install, out_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """_snapshot() raising inside the observer is a warning; the observer returns normally."""
    alloc = fake(failing={"_snapshot"})
    install()
    alloc.fire_oom()  # must not raise: that would replace the user's OOM error
    assert oom_files(out_dir) == []
    err = stderr_of(capsys)
    assert len(logged(err, "oom_snapshot_failed")) == 1
    assert len(logged(err, "out_of_memory")) == 1


def test_broken_handler_never_escapes_the_observer(
    fake: Fake, install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a failure outside the guarded helpers stays inside the observer."""
    alloc = fake()
    install()

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("memforensics.capture.atomic.utc_now", broken)
    alloc.fire_oom()


@pytest.mark.parametrize("failure", ["blocked_folder", "disk_full"])
@pytest.mark.parametrize("kind", ["oom", "window"])
def test_write_failure_at_dump_time_leaves_nothing(
    *,
    fake: Fake,
    install: Install,
    out_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failure: str,
    kind: str,
) -> None:
    """An unwritable folder or a full disk at dump time is a warning and leaves no partial file."""
    alloc = fake()
    mf = install(steps=1)
    blocker = "oom" if kind == "oom" else "step0"

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    if failure == "blocked_folder":
        (out_dir / blocker).write_text("not a folder")  # works as root, unlike chmod
    with monkeypatch.context() as patch:
        if failure == "disk_full":
            patch.setattr(os, "fsync", no_space)
        with mf.step(0):
            if kind == "oom":
                alloc.fire_oom()
    expected = [blocker] if failure == "blocked_folder" else []
    if kind == "oom":  # the window of step 0 was unaffected by an oom/ blocker
        assert [f for f in files_under(out_dir) if not f.startswith("step0/")] == expected
    else:
        assert files_under(out_dir) == expected
    assert mf.dumps == [p for p in mf.dumps if p.is_file()]
    lines = logged(stderr_of(capsys), "dump_failed")
    assert len(lines) == 1 + (kind == "oom" and failure == "disk_full")


# -- the step() fallback -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("make_error", "requested"),
    [
        (lambda: torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 80 GiB"
        ), 2 * GIB),
        (lambda: RuntimeError(
            "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.21.5"
            "\nlast error: Cuda failure 'out of memory'"
        ), None),
    ],
    ids=["OutOfMemoryError", "nccl"],
)  # fmt: skip
def test_step_fallback_dumps_and_reraises_same_exception(
    fake: Fake,
    install: Install,
    out_dir: Path,
    make_error: Callable[[], BaseException],
    requested: int | None,
) -> None:
    """An OOM the observer never saw is dumped as it leaves step(); the same object propagates."""
    alloc = fake(total=80 * GIB, free=100 << 20)
    mf = install()
    error = make_error()
    with pytest.raises(type(error)) as caught, mf.step(3):
        raise error
    assert caught.value is error
    (snapshot,) = oom_files(out_dir)
    assert re.fullmatch(rf"rank0_pid{os.getpid()}_step3_{TIME}\.pickle", snapshot.name)
    oom = read_sidecar(snapshot)["oom"]
    assert oom["source"] == "exception"
    assert oom["allocation_bytes"] == requested
    assert (oom["device_total_bytes"], oom["device_free_bytes"]) == (80 * GIB, 100 << 20)
    assert oom["error"] == str(error)
    assert alloc.synchronized == 0


@pytest.mark.parametrize(
    "error",
    [ValueError("bad batch"), RuntimeError("shape mismatch"), KeyboardInterrupt()],
    ids=["ValueError", "RuntimeError", "KeyboardInterrupt"],
)
def test_non_oom_error_propagates_without_dump(
    fake: Fake, install: Install, out_dir: Path, error: BaseException
) -> None:
    """An exception that is not an OOM leaves step() unchanged and writes no OOM dump."""
    fake()
    mf = install()
    with pytest.raises(type(error)) as caught, mf.step(0):
        raise error
    assert caught.value is error
    assert oom_files(out_dir) == []


def test_step_fallback_skipped_after_observer_dump(
    fake: Fake, install: Install, out_dir: Path
) -> None:
    """When the observer already dumped this step's OOM, the exception adds no second dump."""
    alloc = fake()
    mf = install()
    error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    def observed_then_raised() -> None:
        with mf.step(0):
            alloc.fire_oom()
            raise error

    with pytest.raises(torch.OutOfMemoryError) as caught:
        observed_then_raised()
    assert caught.value is error
    (snapshot,) = oom_files(out_dir)
    assert read_sidecar(snapshot)["oom"]["source"] == "observer"


# -- what is written ---------------------------------------------------------------------------
def test_sidecar_keys_are_the_contract(
    fake: Fake, install: Install, out_dir: Path, device: str
) -> None:
    """Window and OOM sidecars carry every DESIGN.md key, with real values or null."""
    alloc = fake()
    mf = install(steps=1)
    with mf.step(0):
        alloc.fire_oom(allocation_bytes=GIB)
    pid = os.getpid()
    window = read_sidecar(out_dir / "step0" / f"rank0_pid{pid}.pickle")
    (oom_snapshot,) = oom_files(out_dir)
    oom = read_sidecar(oom_snapshot)
    assert set(window) == SIDECAR_KEYS | SIDECAR_EXTRA_KEYS
    assert set(oom) == SIDECAR_KEYS | SIDECAR_EXTRA_KEYS | {"oom"}
    assert set(oom["oom"]) == OOM_KEYS | OOM_EXTRA_KEYS
    window_snapshot = out_dir / "step0" / f"rank0_pid{pid}.pickle"
    for sidecar, snapshot, kind in [
        (window, window_snapshot, "window"),
        (oom, oom_snapshot, "oom"),
    ]:
        assert sidecar["schema"] == 2
        assert sidecar["kind"] == kind
        assert (sidecar["rank"], sidecar["pid"], sidecar["world_size"]) == (0, pid, None)
        assert (sidecar["device"], sidecar["device_index"]) == (device, 0)
        assert sidecar["hostname"]
        assert sidecar["snapshot_file"] == snapshot.name
        assert sidecar["snapshot_bytes"] == snapshot.stat().st_size
        assert sidecar["torch_version"].startswith(torch.__version__)
        assert sidecar["memforensics_version"] == memforensics.__version__
        created = datetime.fromisoformat(sidecar["created_at"])
        assert created.utcoffset() == timedelta(0)
        assert sidecar["partial"] is False
    assert (window["steps"], window["step"]) == ([0, 0], 0)
    assert (oom["steps"], oom["step"]) == (None, 0)


def test_pickles_are_protocol_4_and_round_trip(fake: Fake, install: Install, out_dir: Path) -> None:
    """Window and OOM snapshots are protocol-4 pickles of exactly the dict _snapshot() returned."""
    alloc = fake()
    mf = install(steps=1)
    with mf.step(0):
        alloc.fire_oom()
    paths = [out_dir / "step0" / f"rank0_pid{os.getpid()}.pickle", *oom_files(out_dir)]
    assert len(paths) == 2
    for path in paths:
        data = path.read_bytes()
        assert data[:2] == b"\x80\x04"
        assert pickle.loads(data) == alloc.snapshot_value
    assert sorted(mf.dumps) == sorted(paths)


def test_oom_observer_inert_in_forked_child(fake: Fake, install: Install, out_dir: Path) -> None:
    """In a forked child (a DataLoader worker) the inherited observer writes nothing."""
    alloc = fake()
    mf = install()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 3
        try:
            with mf.step(1):
                alloc.fire_oom()
            code = 0 if oom_files(out_dir) == [] else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert oom_files(out_dir) == []
    alloc.fire_oom()  # the parent still captures
    assert len(oom_files(out_dir)) == 1


# -- CUDA only ---------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["cuda"])
def test_auto_prefers_cuda_over_npu(
    monkeypatch: pytest.MonkeyPatch, install: Install, device: str
) -> None:
    """With both CUDA and an NPU present, device="auto" takes CUDA and leaves the NPU alone."""
    cuda = FakeAllocator("cuda")
    npu = FakeAllocator("npu")
    patch_cuda(monkeypatch, cuda)
    patch_npu(monkeypatch, npu)
    mf = install(device="auto", steps=1)
    assert mf.backend.name == "cuda"
    assert len(cuda.observers) == 1
    assert npu.calls == []
    assert npu.observers == []
    assert cuda.synchronized == npu.synchronized == 0
