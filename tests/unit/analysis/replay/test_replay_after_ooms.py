"""A run that goes on after failed requests replays without error: the allocator model never
places a new segment over one it holds."""

from __future__ import annotations

import contextlib
import importlib
import random
from itertools import pairwise

import pytest

from memforensics.analysis import replay_dump
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.oom import recorded_settings, state_before
from memforensics.analysis.replay.replay import device_for
from memforensics.analysis.replay.runner import run
from memforensics.testing import SimDevice, SimOutOfMemoryError

MiB = 1 << 20


def _keeps_going_after_ooms(seed: int, *, live_at_start: bool) -> SimDevice:
    """96 MiB, a 0.75 memory fraction, two streams and cross-stream uses, requests from bytes to
    40 MiB that sometimes fail, the cache sometimes emptied: the program goes on after each OOM."""
    rng = random.Random(seed)
    device = SimDevice(96 * MiB)
    device.set_per_process_memory_fraction(0.75)
    live: list[object] = []

    def work(count: int) -> None:
        for _ in range(count):
            op = rng.choice(["alloc"] * 4 + ["free", "free", "empty", "stream"])
            if op == "alloc":
                size = rng.choice([rng.randint(1, 4096), rng.randint(4097, MiB), 2 * MiB, 10 * MiB,
                                   20 * MiB, 24 * MiB + 7, 40 * MiB])  # fmt: skip
                with contextlib.suppress(SimOutOfMemoryError):
                    live.append(device.empty(size, stream=rng.randint(0, 1)))
            elif op == "free" and live:
                live.pop(rng.randrange(len(live))).free()  # type: ignore[attr-defined]
            elif op == "stream" and live:
                live[rng.randrange(len(live))].record_stream(rng.randint(0, 2))  # type: ignore[attr-defined]
            elif op == "empty" and rng.random() < 0.3:
                device.empty_cache()

    if live_at_start:
        work(rng.randint(5, 40))
    device.record_memory_history("all", max_entries=100_000)
    work(rng.randint(100, 400))
    return device


def _overlapping_segments(model: object) -> list[tuple[int, int]]:
    """Segments of the model (address ranges from each segment's first block) that overlap."""
    heads = [
        block
        for pool in (model.small_blocks, model.large_blocks)  # type: ignore[attr-defined]
        for block in pool.blocks.values()
        if block.prev is None
    ] + [block for block in model.active_blocks.values() if block.prev is None]  # type: ignore[attr-defined]
    ranges = []
    for head in {id(block): block for block in heads}.values():
        size, block = 0, head
        while block is not None:
            size += block.size
            block = block.next
        ranges.append((head.address, head.address + size))
    ranges.sort()
    return [(a, b) for (a, b), (c, _) in pairwise(ranges) if c < b]


@pytest.mark.parametrize("seed", range(12))
def test_a_run_that_goes_on_after_ooms_replays_without_error(seed: int) -> None:
    """Where the model serves a request the real allocator failed, its new segment goes where no
    segment of its own is: the self-check follows the run to its end, never a KeyError."""
    device = _keeps_going_after_ooms(seed, live_at_start=seed % 2 == 1)
    dump = dump_from_snapshot(device.snapshot())
    result = replay_dump(dump, jobs=1)
    assert not any("lost track" in refusal for refusal in result.refusals)
    assert result.placements_same <= result.placements_checked
    settings = recorded_settings(dump)
    exact = run(dump, settings, state_before(dump, 0, settings), device_for(dump, None),
                exact=True, stop_at_oom=False)  # fmt: skip
    assert _overlapping_segments(exact.model) == []


def test_a_model_that_loses_track_refuses_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the model's books disagree while following a trace, replay refuses its self-check
    and what-if with a sentence, and prints no table."""
    module = importlib.import_module("memforensics.analysis.replay.replay")

    def broken(*_args: object, **_kwargs: object) -> None:
        raise KeyError(0x7F0000000000)

    monkeypatch.setattr(module, "run", broken)
    dump = dump_from_snapshot(_keeps_going_after_ooms(0, live_at_start=False).snapshot())
    result = replay_dump(dump, jobs=1)
    assert any("lost track of its blocks" in refusal for refusal in result.refusals)
    assert result.what_if == ()
