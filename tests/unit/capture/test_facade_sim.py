"""The facade end to end on the sim device: windows, OOM dumps, retention, run-time tolerance."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

import memforensics
from memforensics.backends.sim import SimOutOfMemoryError, reset_device

MiB = 1 << 20


def _files(root: Path) -> list[str]:
    """Dump files below ``root`` (the journal/ folder has its own tests: test_journal.py)."""
    files = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return sorted(name for name in files if not name.startswith("journal/"))


def _sidecar(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.with_suffix(".json").read_text())
    return data


def test_windows_dump_only_when_full(tmp_path: Path) -> None:
    """steps=2, skip_first=4: nothing on disk until step 5 ends, then steps4-5/ appears."""
    device = reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(
        steps=2, skip_first=4, max_windows=1, device="sim", out_dir=str(tmp_path)
    )
    for step in range(6):
        with mf.step(step):
            device.empty(MiB).free()
        if step < 5:
            assert _files(tmp_path) == []
    pid = mf.dumps[0].name.split("_pid")[1].split(".")[0]
    assert _files(tmp_path) == [f"steps4-5/rank0_pid{pid}.json", f"steps4-5/rank0_pid{pid}.pickle"]
    sidecar = _sidecar(mf.dumps[0])
    assert sidecar["kind"] == "window"
    assert sidecar["steps"] == [4, 5]
    assert sidecar["partial"] is False
    assert sidecar["truncated"] is False


def test_window_holds_only_its_own_steps_events(tmp_path: Path) -> None:
    """History is cleared when a window opens, so the dump holds that window's events only."""
    device = reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(
        steps=1, skip_first=1, max_windows=1, device="sim", out_dir=str(tmp_path)
    )
    with mf.step(0):
        device.empty(3 * MiB).free()
    with mf.step(1):
        device.empty(5 * MiB).free()
    snapshot = pickle.loads(mf.dumps[0].read_bytes())
    sizes = {e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"}
    assert sizes == {5 * MiB}
    assert {e["user_metadata"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"} == {
        "step=1"
    }


def test_oom_observer_dump_and_same_exception(tmp_path: Path) -> None:
    """A sim OOM writes one oom/ dump with requested and free bytes; the error propagates as is."""
    device = reset_device(total_bytes=32 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path))
    kept = [device.empty(10 * MiB) for _ in range(2)]
    raised: list[BaseException] = []

    def train_step() -> None:
        try:
            kept.append(device.empty(20 * MiB))
        except SimOutOfMemoryError as exc:
            raised.append(exc)
            raise

    with pytest.raises(SimOutOfMemoryError) as info, mf.step(7):
        train_step()
    assert info.value is raised[0]
    [dump] = mf.dumps
    assert dump.parent.name == "oom"
    assert "_step7_" in dump.name
    oom = _sidecar(dump)["oom"]
    assert oom["allocation_bytes"] == 20 * MiB  # what the allocator asked the device for
    assert oom["requested_bytes"] is None  # oom_history="state": no trace, so no request
    assert oom["device_total_bytes"] == 32 * MiB
    assert oom["device_free_bytes"] == 32 * MiB - device.reserved_bytes
    assert oom["source"] == "observer"
    assert any(f["name"] == "test_oom_observer_dump_and_same_exception" for f in oom["stack"])


def test_oom_cap_limits_dumps(tmp_path: Path) -> None:
    """max_oom_snapshots=2: a retry loop of five OOMs writes two dumps."""
    device = reset_device(total_bytes=16 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), max_oom_snapshots=2)
    for _ in range(5):
        with pytest.raises(SimOutOfMemoryError):
            device.empty(64 * MiB)
    assert len(mf.dumps) == 2


def test_step_fallback_dumps_unobserved_oom(tmp_path: Path) -> None:
    """An OOM RuntimeError the observer never saw (NCCL) is dumped by step() and re-raised."""
    reset_device(total_bytes=16 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path))
    error = RuntimeError(
        "NCCL error: unhandled cuda error, out of memory. Tried to allocate 2.00 GiB"
    )
    with pytest.raises(RuntimeError) as info, mf.step(3):
        raise error
    assert info.value is error
    [dump] = mf.dumps
    oom = _sidecar(dump)["oom"]
    assert oom["source"] == "exception"
    assert oom["allocation_bytes"] == 2 << 30


def test_non_oom_error_is_not_dumped(tmp_path: Path) -> None:
    """Ordinary exceptions pass through step() untouched and write nothing."""
    reset_device(total_bytes=16 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path))
    with pytest.raises(KeyError), mf.step(0):
        raise KeyError("x")
    assert mf.dumps == []


def test_retention_keeps_first_and_newest(tmp_path: Path) -> None:
    """keep_last=2 over five windows leaves the first and the newest two."""
    device = reset_device(total_bytes=16 * MiB)
    mf = memforensics.install(steps=1, keep_last=2, device="sim", out_dir=str(tmp_path))
    for step in range(5):
        with mf.step(step):
            device.empty(MiB).free()
    assert [p.parent.name for p in mf.dumps] == ["step0", "step3", "step4"]
    folders = sorted(
        p.name for p in tmp_path.iterdir() if p.name != "journal" and not p.name.startswith(".")
    )
    assert folders == ["step0", "step3", "step4"]


def test_close_dumps_partial_window(tmp_path: Path) -> None:
    """close() in the middle of a window dumps it with partial: true."""
    reset_device(total_bytes=16 * MiB)
    mf = memforensics.install(steps=4, device="sim", out_dir=str(tmp_path))
    for step in range(2):
        with mf.step(step):
            pass
    mf.close()
    [dump] = mf.dumps
    assert dump.parent.name == "steps0-1"
    assert _sidecar(dump)["partial"] is True


def test_misuse_warns_and_never_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nested steps and non-increasing numbers log warnings; training goes on."""
    memforensics.capture.log.reset_logging()
    reset_device(total_bytes=16 * MiB)
    mf = memforensics.install(steps=2, device="sim", out_dir=str(tmp_path))
    with mf.step(5), mf.step(6):
        pass
    with mf.step(3):
        pass
    err = capsys.readouterr().err
    assert "nested_step" in err
    assert "step_not_increasing" in err
    assert mf.dumps[0].parent.name == "steps5-6"


def test_auto_numbering_counts_from_zero(tmp_path: Path) -> None:
    """Steps without numbers count 0, 1, 2, ..."""
    reset_device(total_bytes=16 * MiB)
    mf = memforensics.install(steps=3, device="sim", out_dir=str(tmp_path))
    for _ in range(3):
        with mf.step():
            pass
    assert mf.dumps[0].parent.name == "steps0-2"


def test_unselected_rank_is_inert(tmp_path: Path) -> None:
    """A rank outside `ranks` writes nothing and records nothing, even on OOM."""
    device = reset_device(total_bytes=16 * MiB)
    mf = memforensics.install(
        rank=1, ranks=[0], steps=1, device="sim", out_dir=str(tmp_path / "out")
    )
    with pytest.raises(SimOutOfMemoryError), mf.step(0):
        device.empty(64 * MiB)
    assert not (tmp_path / "out").exists()
    assert device.snapshot()["device_traces"][0] == []


def test_window_ranks_limit_windows_not_ooms(tmp_path: Path) -> None:
    """Rank 1 (outside window_ranks) writes no windows but does dump its OOM."""
    device = reset_device(total_bytes=16 * MiB)
    mf = memforensics.install(rank=1, steps=1, device="sim", out_dir=str(tmp_path))
    with mf.step(0):
        pass
    with pytest.raises(SimOutOfMemoryError), mf.step(1):
        device.empty(64 * MiB)
    assert [p.parent.name for p in mf.dumps] == ["oom"]


def test_install_same_config_returns_same_facade(tmp_path: Path) -> None:
    """install() with an equal config returns the live facade; a different one replaces it."""
    reset_device(total_bytes=16 * MiB)
    first = memforensics.install(steps=2, device="sim", out_dir=str(tmp_path))
    assert memforensics.install(steps=2, device="sim", out_dir=str(tmp_path)) is first
    second = memforensics.install(steps=3, device="sim", out_dir=str(tmp_path))
    assert second is not first
    assert first.closed
    assert not second.closed


def test_one_observer_across_reinstalls(tmp_path: Path) -> None:
    """Re-installing never attaches a second observer: one OOM, one dump, by the live facade."""
    device = reset_device(total_bytes=16 * MiB)
    old = memforensics.install(device="sim", out_dir=str(tmp_path / "a"))
    memforensics.uninstall()
    new = memforensics.install(device="sim", out_dir=str(tmp_path / "b"))
    with pytest.raises(SimOutOfMemoryError):
        device.empty(64 * MiB)
    assert old.dumps == []
    assert len(new.dumps) == 1
    assert len(device._observers) == 1


def test_manual_dump(tmp_path: Path) -> None:
    """mf.dump() writes a manual/ snapshot with kind 'manual'."""
    device = reset_device(total_bytes=16 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path))
    kept = device.empty(MiB)
    path = mf.dump()
    assert path is not None
    assert path.parent.name == "manual"
    assert _sidecar(path)["kind"] == "manual"
    assert kept.nbytes == MiB


def test_context_manager_closes(tmp_path: Path) -> None:
    """`with install(...) as mf:` closes the facade at the end of the block."""
    reset_device(total_bytes=16 * MiB)
    with memforensics.install(device="sim", out_dir=str(tmp_path)) as mf:
        assert not mf.closed
    assert mf.closed


@pytest.mark.parametrize(("context", "free_frames"), [("alloc", False), ("all", True)])
def test_context_decides_whether_frees_keep_a_stack(
    tmp_path: Path, context: str, free_frames: bool
) -> None:
    """context="alloc" (the default) records who allocated; "all" also who freed."""
    device = reset_device(total_bytes=16 * MiB)
    options = {} if context == "alloc" else {"context": context}
    mf = memforensics.install(steps=1, device="sim", out_dir=str(tmp_path), **options)
    with mf.step(0):
        device.empty(MiB).free()
    [dump] = mf.dumps
    with dump.open("rb") as handle:
        trace = pickle.load(handle)["device_traces"][0]
    allocs = [e for e in trace if e["action"] == "alloc"]
    frees = [e for e in trace if e["action"].startswith("free")]
    assert allocs
    assert all(e["frames"] for e in allocs)
    assert len(frees) == 2
    assert all(bool(e["frames"]) is free_frames for e in frees)


def test_oom_sidecar_has_the_request_and_the_allocation(tmp_path: Path) -> None:
    """With history on, requested_bytes is the user's request (rounded to 512 bytes) from the
    trace and allocation_bytes what the allocator asked the device for (rounded to 2 MiB)."""
    device = reset_device(total_bytes=32 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), oom_history="all")
    kept = [device.empty(10 * MiB) for _ in range(2)]
    with pytest.raises(SimOutOfMemoryError) as info, mf.step(0):
        kept.append(device.empty(15 * MiB + 1))
    [dump] = mf.dumps
    oom = _sidecar(dump)["oom"]
    assert oom["requested_bytes"] == 15 * MiB + 512
    assert oom["allocation_bytes"] == 16 * MiB
    assert "Tried to allocate 16.00 MiB" in str(info.value)
