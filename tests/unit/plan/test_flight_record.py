"""The planned device's host memory over a long run: its own record of allocation events keeps
a bounded number of the newest, however many small operators the script runs."""

from __future__ import annotations

from memforensics.allocator import parse_conf
from memforensics.plan.device import FLIGHT_ENTRIES, DeviceSpec, PlannedDevice


def test_a_long_loop_of_small_allocations_keeps_only_the_newest_events() -> None:
    """Past ``FLIGHT_ENTRIES`` events, each new one drops the oldest: a loop of 40,000
    allocate-and-free pairs (three events each, as PyTorch's trace records them, and one
    segment) keeps exactly that many, and the snapshot written from them ends on the loop's
    last free."""
    spec = DeviceSpec(1 << 30, (9, 0), 0, parse_conf(None))
    device = PlannedDevice(spec)
    pairs = 40_000
    for _ in range(pairs):
        block = device.malloc(512)
        assert block is not None
        device.free(block)
    assert 3 * pairs > FLIGHT_ENTRIES
    trace = device.snapshot(flight=True)["device_traces"][0]
    assert len(trace) == FLIGHT_ENTRIES
    assert [event["action"] for event in trace[-3:]] == [
        "alloc",
        "free_requested",
        "free_completed",
    ]
    assert sum(event["action"] == "alloc" for event in trace) == FLIGHT_ENTRIES // 3
