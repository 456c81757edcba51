"""Facts that hold on a real cluster: sidecar truth, torch_npu's own rules, history.

Driven through the real facade on the real CPU torch with the CUDA / torch_npu surface faked
from the real signatures (torchfakes), for both devices where the behaviour is shared.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from torchfakes import (
    GIB,
    Fake,
    FakeAllocator,
    Install,
    logged,
    make_snapshot,
    oom_entry,
    oom_files,
    patch_device,
    read_sidecar,
)

import memforensics
from memforensics.capture.oom import REGISTRY

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("clean_env")]

MiB = 1 << 20


def enabled_modes(alloc: FakeAllocator) -> list[str | None]:
    """The ``enabled`` of every history call, with torch_npu's stop-before-restart removed."""
    calls = alloc.history_calls()
    modes: list[str | None] = []
    for i, call in enumerate(calls):
        restart = call == {"enabled": None} and i + 1 < len(calls)
        if restart and calls[i + 1].get("enabled") is not None and alloc.device == "npu":
            continue
        modes.append(call.get("enabled"))
    return modes


# -- 1. device_index -----------------------------------------------------------------------------
def test_device_index_is_read_per_dump_not_at_install(
    fake: Fake, install: Install, out_dir: Path
) -> None:
    """install() before set_device(local_rank): window and manual dumps record the device
    current at dump time, OOM dumps the failing device the observer names."""
    alloc = fake(current=0)
    mf = install(steps=1)
    alloc.set_device(5)  # what `torch.cuda.set_device(local_rank)` does after install()
    with mf.step(0):
        pass
    manual = mf.dump()
    alloc.fire_oom(device=6)
    pid = os.getpid()
    assert read_sidecar(out_dir / "step0" / f"rank0_pid{pid}.pickle")["device_index"] == 5
    assert manual is not None
    assert read_sidecar(manual)["device_index"] == 5
    (oom,) = oom_files(out_dir)
    assert read_sidecar(oom)["device_index"] == 6


def test_fallback_takes_the_device_from_the_error_text(
    fake: Fake, install: Install, out_dir: Path
) -> None:
    """A step() fallback dump names the device the error text names (else the current one)."""
    alloc = fake(current=1)
    mf = install()
    text = "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 3 has a total capacity of 79 GiB"
    with pytest.raises(torch.OutOfMemoryError), mf.step(0):
        raise torch.OutOfMemoryError(text)
    with pytest.raises(RuntimeError), mf.step(1):
        raise RuntimeError("NCCL error: unhandled cuda error, out of memory")
    sidecars = [read_sidecar(path) for path in oom_files(out_dir)]
    assert sorted(s["device_index"] for s in sidecars) == [1, 3]
    assert alloc.current == 1


# -- 3. OOM sizes --------------------------------------------------------------------------------
def test_sidecar_separates_the_request_from_the_allocation(
    fake: Fake, install: Install, out_dir: Path
) -> None:
    """requested_bytes is the trace's oom entry (the user's request), allocation_bytes the
    observer's second argument, device_total_bytes its third (the limit); schema 2."""
    snapshot = make_snapshot(device=2)
    snapshot["device_traces"][2].append(oom_entry(size=1_536 * MiB, device_free=300 * MiB))
    alloc = fake(snapshot_value=snapshot, total=80 * GIB)
    install()
    alloc.fire_oom(allocation_bytes=1_536 * MiB + 2 * MiB, device=2, device_total_bytes=40 * GIB)
    (path,) = oom_files(out_dir)
    sidecar = read_sidecar(path)
    assert sidecar["schema"] == 2
    oom = sidecar["oom"]
    assert oom["requested_bytes"] == 1_536 * MiB
    assert oom["allocation_bytes"] == 1_538 * MiB
    assert oom["device_total_bytes"] == 40 * GIB


def test_request_is_null_without_an_oom_entry(fake: Fake, install: Install, out_dir: Path) -> None:
    """Without history there is no oom entry: requested_bytes is null, never a guess."""
    alloc = fake()
    install(oom_history="off")
    alloc.fire_oom(allocation_bytes=20 * MiB)
    oom = read_sidecar(oom_files(out_dir)[0])["oom"]
    assert (oom["requested_bytes"], oom["allocation_bytes"]) == (None, 20 * MiB)


def test_fallback_limit_respects_the_memory_fraction(
    fake: Fake, install: Install, out_dir: Path
) -> None:
    """step()'s fallback reports the per-process limit (fraction x total) where one is set, and
    the error text's size as allocation_bytes."""
    fake(total=80 * GIB, fraction=0.25)
    mf = install()
    text = "NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.96 GiB total capacity)"
    with pytest.raises(torch.OutOfMemoryError), mf.step(0):
        raise torch.OutOfMemoryError(text)
    oom = read_sidecar(oom_files(out_dir)[0])["oom"]
    assert oom["device_total_bytes"] == 20 * GIB
    assert oom["allocation_bytes"] == 2 * GIB


# -- 4. history lifecycle ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("oom_history", "expected"),
    [
        # install, window 0 opens, its dump, window 3 opens, its dump (the last), close
        ("off", ["all", None, "all", None]),
        ("state", ["state", "all", "state", "all", "state", None]),
        ("all", ["all", "all", "all", None]),
    ],
)
def test_window_ranks_record_oom_history_outside_windows(
    fake: Fake, install: Install, oom_history: str, expected: list[str | None]
) -> None:
    """Outside an open window a window rank records what oom_history says ("off" is off), and
    after max_windows it returns to that mode for good."""
    alloc = fake()
    mf = install(steps=1, every=3, max_windows=2, oom_history=oom_history)
    for step in range(8):
        with mf.step(step):
            pass
    mf.close()
    assert enabled_modes(alloc) == expected


# -- 5. context ----------------------------------------------------------------------------------
@pytest.mark.parametrize("context", ["alloc", "all"])
def test_context_reaches_record_memory_history(fake: Fake, install: Install, context: str) -> None:
    """Every start of history passes context (default "alloc": no traceback per free)."""
    alloc = fake()
    options = {} if context == "alloc" else {"context": context}
    mf = install(steps=1, **options)
    with mf.step(0):
        pass
    starts = [call for call in alloc.history_calls() if call.get("enabled") is not None]
    assert len(starts) == 3
    assert {call["context"] for call in starts} == {context}


# -- 6. OOM_SNAPSHOT_ENABLE ----------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "", "abc", " 0", "00"])
def test_oom_snapshot_enable_off_values_attach_and_record(
    monkeypatch: pytest.MonkeyPatch, out_dir: Path, value: str
) -> None:
    """torch_npu reads the variable as an integer: 0, empty or non-numeric is off, so
    memforensics attaches its observer and records history as usual."""
    npu = patch_device(monkeypatch, "npu")
    monkeypatch.setenv("OOM_SNAPSHOT_ENABLE", value)
    mf = memforensics.install(out_dir=out_dir, rank=0, device="npu")
    assert mf.oom_attached
    assert npu.observers == [REGISTRY.dispatch]
    assert npu.history_calls() != []


@pytest.mark.parametrize("value", ["1", "2", " 1", "1abc", "-1"])
def test_oom_snapshot_enable_on_leaves_history_alone(
    monkeypatch: pytest.MonkeyPatch,
    out_dir: Path,
    capsys: pytest.CaptureFixture[str],
    value: str,
) -> None:
    """When torch_npu's own OOM snapshot is on, memforensics never calls
    _record_memory_history (no clearing at install or windows, no stop at close) and attaches
    no second observer; windows and step() fallback dumps still land."""
    npu = patch_device(monkeypatch, "npu")
    monkeypatch.setenv("OOM_SNAPSHOT_ENABLE", value)
    mf = memforensics.install(out_dir=out_dir, rank=0, device="npu", steps=1)
    for step in range(3):
        with mf.step(step):
            pass
    with pytest.raises(torch.OutOfMemoryError), mf.step(3):
        raise torch.OutOfMemoryError("NPU out of memory. Tried to allocate 2.00 GiB")
    mf.close()
    assert npu.history_calls() == []
    assert npu.called("attach_out_of_memory_observer") == []
    assert not mf.oom_attached
    assert len(oom_files(out_dir)) == 1
    assert (out_dir / "step2" / f"rank0_pid{os.getpid()}.pickle").is_file()
    assert len(logged(capsys.readouterr().err, "oom_observer_not_attached")) == 1


# -- 7. CANN and NCCL out-of-memory errors -------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "EL0004: [PID: 1234] 2026-11-30-10:11:12.123.456 Failed to allocate memory.\n"
        "        Possible Cause: Available memory is insufficient.",
        "call aclnnMatmul failed, detail:EL0004: Failed to allocate memory.",
        "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.21.5\n"
        "Last error:\nCuda failure 'out of memory'",
        "HCCL function error: hcclCommInitRootInfo, error code is 7 (out of memory)",
    ],
    ids=["cann-el0004", "cann-aclnn", "nccl", "hccl"],
)
def test_step_fallback_recognises_cann_and_collective_oom(
    fake: Fake, install: Install, out_dir: Path, text: str
) -> None:
    """CANN's EL0004 "Failed to allocate memory" and NCCL/HCCL OOM errors bypass the observer;
    step() dumps them and re-raises the same object."""
    fake()
    mf = install()
    error = RuntimeError(text)
    with pytest.raises(RuntimeError) as caught, mf.step(0):
        raise error
    assert caught.value is error
    (path,) = oom_files(out_dir)
    assert read_sidecar(path)["oom"]["source"] == "exception"


# -- 6 and 10. the doctor says what the runtime does ---------------------------------------------
def _doctor_checks(out_dir: Path) -> dict[str, Any]:
    from memforensics.doctor import Doctor

    return {check.name: check for check in Doctor("npu", out_dir).run()}


@pytest.mark.parametrize(("value", "on"), [("0", False), ("", False), ("x1", False), ("2", True)])
def test_doctor_reads_oom_snapshot_enable_as_the_runtime_does(
    monkeypatch: pytest.MonkeyPatch, out_dir: Path, value: str, on: bool
) -> None:
    """The doctor's verdict on OOM_SNAPSHOT_ENABLE and on the hook matches what install() then
    does: attach and record when torch_npu reads it as 0, neither when it reads non-zero."""
    npu = patch_device(monkeypatch, "npu")
    monkeypatch.setenv("OOM_SNAPSHOT_ENABLE", value)
    checks = _doctor_checks(out_dir)
    assert checks["oom_snapshot_enable"].status == ("warn" if on else "pass")
    assert ("(on)" in checks["oom_snapshot_enable"].detail) is on
    assert checks["oom_hook"].status == ("warn" if on else "pass")
    REGISTRY.forget()
    npu.calls.clear()
    mf = memforensics.install(out_dir=out_dir, rank=0, device="npu")
    assert mf.oom_attached is not on
    assert (npu.history_calls() == []) is on


def test_doctor_lists_torch_npus_real_history_parameters(
    monkeypatch: pytest.MonkeyPatch, out_dir: Path
) -> None:
    """torch_npu's _record_memory_history is (enabled, *args, **kwargs): the doctor reports the
    parameters of the implementation it wraps, and that clear_history is missing there."""
    patch_device(monkeypatch, "npu")
    detail = _doctor_checks(out_dir)["history_options"].detail
    assert detail.startswith("enabled, context, stacks, max_entries, device;")
    assert "args" not in detail
    assert "no clear_history" in detail
