"""Real dumps from the sim device: the analysis reads what memforensics itself writes."""

from __future__ import annotations

from pathlib import Path

import pytest

import memforensics
from memforensics.analysis import list_dumps, load_dump, summarize
from memforensics.backends.sim import SimDevice, SimOutOfMemoryError, reset_device

MiB = 1 << 20


def _allocate(device: SimDevice, sizes: list[int]) -> list[object]:
    kept: list[object] = []
    for size in sizes:
        kept.append(device.empty(size))
    return kept


def test_sim_oom_dump_is_explained(tmp_path: Path) -> None:
    """A sim OOM dump gives the sidecar's OOM, an 'exhausted' verdict and this test as the site."""
    device = reset_device(total_bytes=32 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), steps=1, skip_first=0)
    with pytest.raises(SimOutOfMemoryError), mf.step(0):
        _allocate(device, [12 * MiB, 12 * MiB, 20 * MiB])
    mf.close()
    listing = list_dumps(tmp_path)
    first = listing.first_oom
    assert first is not None
    assert first.rank == 0
    assert first.step == 0
    summary = summarize(load_dump(first.path))
    assert summary.oom is not None
    assert summary.oom.requested_bytes == 20 * MiB
    assert summary.verdict.name == "exhausted"
    assert summary.allocated_bytes == 24 * MiB
    [site] = summary.top_sites  # the one line in _allocate, in this test file
    assert site.site.startswith(__file__)
    assert site.site.endswith(" _allocate")
    assert [(s.step, s.bytes) for s in summary.live_by_step] == [(0, 24 * MiB)]


def test_an_oom_dump_says_the_allocators_own_peak_from_its_sidecar(tmp_path: Path) -> None:
    """An OOM dump's allocator statistics carry the process's peak (a 56 MiB block freed before
    the failing step, more than the step ever held) to summary's ``allocator_peak_bytes``."""
    device = reset_device(total_bytes=64 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), steps=1, skip_first=0)
    device.empty(56 * MiB).free()
    with pytest.raises(SimOutOfMemoryError), mf.step(0):
        _allocate(device, [24 * MiB, 24 * MiB, 24 * MiB])
    mf.close()
    first = list_dumps(tmp_path).first_oom
    assert first is not None
    summary = summarize(load_dump(first.path))
    assert summary.allocated_bytes == 48 * MiB  # the step's two blocks
    assert summary.allocator_peak_bytes == 56 * MiB


def test_a_window_dump_says_the_peak_that_came_before_its_window(tmp_path: Path) -> None:
    """A window's trace begins after a 56 MiB block came and went; its sidecar still carries
    the allocator's peak, and the cause line tells the trace's peak from it."""
    device = reset_device(total_bytes=256 * MiB)
    mf = memforensics.install(device="sim", out_dir=str(tmp_path), steps=1, skip_first=1)
    device.empty(56 * MiB).free()
    for step in range(2):
        with mf.step(step):
            kept = _allocate(device, [4 * MiB])
    mf.close()
    del kept
    [window] = [path for path in mf.dumps if path.parent.name.startswith("step")]
    summary = summarize(load_dump(window))
    assert summary.allocator_peak_bytes == 56 * MiB
    assert summary.peak is not None
    assert summary.peak.live_bytes < 56 * MiB
    assert summary.diagnosis is not None
    assert summary.diagnosis.headline.startswith("peak in the trace")
