"""Near-OOM dumps on the sim device: the allocator's retry, the fraction rule, the cap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import memforensics
from memforensics.backends.sim import SimOutOfMemoryError, reset_device

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _clean(clean_env: None) -> None:
    """No MEMFORENSICS_* from the outer environment."""


def _sidecars(root: Path, kind: str) -> list[dict[str, Any]]:
    folder = root / kind
    if not folder.is_dir():
        return []
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def _thrash(device: Any) -> Any:
    """Fill the cache with 30 MiB segments, free them all, then ask for 200 MiB: the device
    malloc fails, the allocator releases its cache and the retry succeeds."""
    held = [device.empty(30 * MiB) for _ in range(8)]
    for tensor in held:
        tensor.free()
    return device.empty(200 * MiB)


def test_retry_takes_a_near_oom_dump_then_the_oom_dumps_later(tmp_path: Path) -> None:
    """A retried malloc at step 5 gives a near-oom/ dump at step 5; a later OOM its oom/ dump."""
    device = reset_device(total_bytes=256 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), near_oom_every=1)
    kept: list[Any] = []
    for step in range(5):
        with mf.step(step):
            device.empty(MiB).free()
    with mf.step(5):
        kept.append(_thrash(device))
    assert device.memory_stats()["num_alloc_retries"] == 1  # the workload's own truth
    near = _sidecars(tmp_path, "near-oom")
    assert [s["step"] for s in near] == [5]
    assert near[0]["kind"] == "near-oom"
    assert near[0]["reason"] == "alloc_retries 0 → 1 at step 5"
    assert near[0]["near_oom"]["alloc_retries"] == 1
    assert near[0]["near_oom"]["reserved_bytes"] == 200 * MiB
    assert near[0]["near_oom"]["device_total_bytes"] == 256 * MiB
    assert _sidecars(tmp_path, "oom") == []
    with pytest.raises(SimOutOfMemoryError), mf.step(6):
        kept.append(device.empty(100 * MiB))
    with mf.step(7):
        device.empty(MiB).free()
    assert [s["step"] for s in _sidecars(tmp_path, "oom")] == [6]
    assert len(_sidecars(tmp_path, "near-oom")) == 1  # the OOM's own retry is not "near"


def test_retry_between_checks_is_caught_at_the_next_check(tmp_path: Path) -> None:
    """With near_oom_every=4, a retry at step 5 is dumped at the end of step 8."""
    device = reset_device(total_bytes=256 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), near_oom_every=4)
    kept = []
    for step in range(10):
        with mf.step(step):
            if step == 5:
                kept.append(_thrash(device))
    assert [s["step"] for s in _sidecars(tmp_path, "near-oom")] == [8]


def test_fraction_rule_fires_once_when_reserved_crosses(tmp_path: Path) -> None:
    """Reserved crossing 95 % of the device gives one dump saying so, not one per check."""
    device = reset_device(total_bytes=100 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), near_oom_every=1)
    kept = []
    for step in range(6):
        with mf.step(step):
            if step == 2:
                kept.append(device.empty(96 * MiB))
    near = _sidecars(tmp_path, "near-oom")
    assert [s["step"] for s in near] == [2]
    assert near[0]["reason"] == "reserved 96 % of the limit at step 2"
    assert near[0]["near_oom"]["trigger"] == "fraction"


def test_cap_and_switches(tmp_path: Path) -> None:
    """max_near_oom_snapshots caps the dumps; near_oom=False and other ranks take none."""
    for config, expected in (
        ({"max_near_oom_snapshots": 1}, 1),
        ({"near_oom": False}, 0),
        ({"rank": 1, "ranks": [0]}, 0),
    ):
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        device = reset_device(total_bytes=256 * MiB)
        mf = memforensics.install(device="sim", out_dir=str(out), near_oom_every=1, **config)
        for step in range(3):
            with mf.step(step):
                _thrash(device).free()
                device.empty_cache()
        memforensics.uninstall()
        assert len(_sidecars(out, "near-oom")) == expected, config


@pytest.mark.torch
def test_cuda_and_npu_read_retries_from_the_nested_stats(fake: Any, install: Any) -> None:
    """On CUDA and NPU a rising num_alloc_retries takes a near-OOM dump, read through
    memory_stats_as_nested_dict (never memory_stats) on check steps only, with no synchronize."""
    alloc = fake(stats_value={"num_alloc_retries": 0, "reserved_bytes.all.current": 1 << 20})
    mf = install(near_oom_every=2, journal_every=None)
    baseline = len(alloc.called("memory_stats_as_nested_dict"))
    for step in range(4):
        with mf.step(step):
            if step == 2:
                alloc.stats_value = {**alloc.stats_value, "num_alloc_retries": 3}
    assert len(alloc.called("memory_stats_as_nested_dict")) - baseline == 2  # steps 0 and 2
    near = _sidecars(Path(mf.out_dir), "near-oom")
    assert [(s["step"], s["reason"]) for s in near] == [(2, "alloc_retries 0 → 3 at step 2")]
    assert alloc.called("memory_stats") == [((None,), {})]  # once, for the dump's figures


@pytest.mark.torch
def test_outside_pytorch_memory_counts_toward_the_fraction(fake: Any, install: Any) -> None:
    """1 GiB reserved, 0.25 GiB free on a 16 GiB device: the rest is outside PyTorch, and
    reserved plus outside (98 %) crosses the fraction; the reason says so."""
    gib = 1 << 30
    alloc = fake(
        free=gib // 4,
        stats_value={"num_alloc_retries": 0, "reserved_bytes.all.current": gib},
    )
    mf = install(near_oom_every=1, journal_every=None)
    with mf.step(0):
        pass
    (near,) = _sidecars(Path(mf.out_dir), "near-oom")
    assert near["reason"] == "reserved + outside PyTorch 98 % of the limit at step 0"
    assert near["near_oom"]["outside_pytorch_bytes"] == alloc.total - gib // 4 - gib
    assert len(alloc.called("mem_get_info")) >= 1
