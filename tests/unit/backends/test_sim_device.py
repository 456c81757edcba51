"""The sim device: a plain-Python caching allocator that writes torch's snapshot format."""

from __future__ import annotations

import gc
import io
import pickle
import random
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memforensics.backends._protocol import DeviceBackend
from memforensics.backends.sim import (
    SimBackend,
    SimDevice,
    SimOutOfMemoryError,
    SimTensor,
    get_device,
    reset_device,
)
from memforensics.backends.sim import backend as sim_module
from memforensics.backends.sim import device as _sim_device
from memforensics.backends.sim import format as _sim_format
from shared_data import REAL_SNAPSHOTS, needs_shared_data

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _fresh_default_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with no process-wide sim device and no size override."""
    monkeypatch.delenv("MEMFORENSICS_SIM_TOTAL_BYTES", raising=False)
    monkeypatch.setattr(sim_module, "_default", None)


def segments(device: SimDevice) -> list[dict[str, Any]]:
    """The device's snapshot segments."""
    return device.snapshot()["segments"]  # type: ignore[no-any-return]


def trace(device: SimDevice) -> list[dict[str, Any]]:
    """The device's trace events (device 0)."""
    return device.snapshot()["device_traces"][0]  # type: ignore[no-any-return]


def blocks_of(segment: dict[str, Any]) -> list[tuple[int, str]]:
    """A segment's blocks as ``(size, state)`` pairs in address order."""
    return [(block["size"], block["state"]) for block in segment["blocks"]]


def check_tiling(device: SimDevice) -> None:
    """Blocks tile each segment exactly and no two inactive blocks are neighbours."""
    for segment in segments(device):
        address = segment["address"]
        previous_inactive = False
        for block in segment["blocks"]:
            assert block["address"] == address
            address += block["size"]
            inactive = block["state"] == "inactive"
            assert not (inactive and previous_inactive), "unmerged neighbouring holes"
            previous_inactive = inactive
        assert address == segment["address"] + segment["total_size"]


# -- allocator semantics


def test_small_request_rounds_to_512_inside_a_2mib_small_segment() -> None:
    """A 100-byte request takes a 512-byte block split off a fresh 2 MiB small segment."""
    device = SimDevice()
    tensor = device.empty(100)
    [segment] = segments(device)
    assert segment["segment_type"] == "small"
    assert segment["total_size"] == 2 * MiB
    assert blocks_of(segment) == [(512, "active_allocated"), (2 * MiB - 512, "inactive")]
    assert segment["blocks"][0]["requested_size"] == 100
    assert tensor.address == segment["address"]
    assert device.allocated_bytes == 512


def test_mid_sized_request_is_served_from_a_20mib_large_segment() -> None:
    """A 3 MiB request gets a 20 MiB large segment whose remainder stays cached."""
    device = SimDevice()
    device_tensor = device.empty(3 * MiB)
    [segment] = segments(device)
    assert segment["segment_type"] == "large"
    assert blocks_of(segment) == [(3 * MiB, "active_allocated"), (17 * MiB, "inactive")]
    assert device.reserved_bytes == 20 * MiB
    assert device_tensor.nbytes == 3 * MiB


def test_big_request_gets_its_own_segment_rounded_to_2mib() -> None:
    """A request of 10 MiB or more gets its own segment, rounded up to a 2 MiB multiple."""
    device = SimDevice()
    _tensor = device.empty(12 * MiB + 1)
    [segment] = segments(device)
    assert segment["total_size"] == 14 * MiB
    assert blocks_of(segment) == [(12 * MiB + 512, "active_allocated"), (2 * MiB - 512, "inactive")]


def test_large_block_keeps_a_remainder_of_1mib_or_less_unsplit() -> None:
    """As in torch, a large-pool block is split only when more than 1 MiB would remain."""
    device = SimDevice()
    _tensor = device.empty(19 * MiB + MiB // 2)
    [segment] = segments(device)
    assert blocks_of(segment) == [(20 * MiB, "active_allocated")]
    assert segment["blocks"][0]["requested_size"] == 19 * MiB + MiB // 2


def test_free_merges_a_block_with_both_inactive_neighbours() -> None:
    """Freeing the middle block of three joins it with the holes on both sides."""
    device = SimDevice()
    first, middle, last = device.empty(4 * MiB), device.empty(4 * MiB), device.empty(4 * MiB)
    first.free()
    last.free()
    assert blocks_of(segments(device)[0]) == [
        (4 * MiB, "inactive"),
        (4 * MiB, "active_allocated"),
        (12 * MiB, "inactive"),
    ]
    middle.free()
    assert blocks_of(segments(device)[0]) == [(20 * MiB, "inactive")]
    assert device.reserved_bytes == 20 * MiB  # cached, not returned to the device


def test_best_fit_picks_the_smallest_hole_that_fits() -> None:
    """A request lands in the smallest inactive block big enough, not the first one."""
    device = SimDevice()
    tensors = [device.empty(size) for size in (6 * MiB, 2 * MiB, 4 * MiB, 2 * MiB, 3 * MiB)]
    tensors[0].free()  # 6 MiB hole
    tensors[2].free()  # 4 MiB hole
    chosen = device.empty(4 * MiB - 512)
    assert chosen.address == tensors[2].address


def test_fragmentation_leaves_unusable_holes_in_reserved_segments() -> None:
    """Holes that are each too small force a new segment although enough bytes are free."""
    device = SimDevice(total_bytes=40 * MiB)
    tensors = [device.empty(4 * MiB) for _ in range(5)]
    tensors[1].free()
    tensors[3].free()
    stats = device.memory_stats()
    assert stats["inactive_split_bytes.all.current"] == 8 * MiB
    assert stats["inactive_split.all.current"] == 2
    _big = device.empty(6 * MiB)  # 8 MiB free in holes, but no single hole fits
    assert len(segments(device)) == 2
    assert device.reserved_bytes == 40 * MiB


def test_empty_cache_returns_only_fully_free_segments() -> None:
    """empty_cache releases cached segments with no live block and traces segment_free."""
    device = SimDevice()
    device.record_memory_history("all", max_entries=100)
    keep = device.empty(MiB // 2)
    device.empty(3 * MiB).free()
    device.empty_cache()
    [segment] = segments(device)
    assert segment["segment_type"] == "small"
    assert [e["action"] for e in trace(device)][-1] == "segment_free"
    assert device.memory_stats()["num_device_free"] == 1
    keep.free()


def test_free_is_idempotent_and_garbage_collection_frees() -> None:
    """free() twice frees once, and dropping the last reference frees like a tensor."""
    device = SimDevice()
    tensor = device.empty(MiB)
    tensor.free()
    tensor.free()
    assert tensor.freed
    assert device.allocated_bytes == 0
    collected = device.empty(MiB)
    assert device.allocated_bytes == MiB
    del collected
    gc.collect()
    assert device.allocated_bytes == 0
    assert device.memory_stats()["allocation.all.freed"] == 2


def test_zero_byte_request_allocates_nothing() -> None:
    """Like torch's null pointer for empty tensors, zero bytes reserve no block."""
    device = SimDevice()
    tensor = device.empty(0)
    assert tensor.address == 0
    assert segments(device) == []
    tensor.free()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 24 * MiB)), max_size=60))
def test_random_workload_keeps_segments_tiled_and_stats_exact(
    operations: list[tuple[bool, int]],
) -> None:
    """Any alloc/free sequence leaves blocks tiling segments and stats equal to live blocks."""
    device = SimDevice(total_bytes=1 << 30)
    live: list[SimTensor] = []
    for allocate, size in operations:
        if allocate or not live:
            live.append(device.empty(size))
        else:
            live.pop(size % len(live)).free()
    check_tiling(device)
    live_blocks = [
        block
        for segment in segments(device)
        for block in segment["blocks"]
        if block["state"] == "active_allocated"
    ]
    stats = device.memory_stats()
    assert stats["allocated_bytes.all.current"] == sum(b["size"] for b in live_blocks)
    assert stats["requested_bytes.all.current"] == sum(t.nbytes for t in live)
    assert sorted(b["address"] for b in live_blocks) == sorted(t.address for t in live)


# -- out of memory


def test_oom_raises_with_torch_wording_and_calls_observers() -> None:
    """Past the budget: observers get (device, requested, total, free), then the error is raised."""
    device = SimDevice(total_bytes=64 * MiB, index=0)
    calls: list[tuple[int, int, int, int]] = []
    device.attach_out_of_memory_observer(lambda *args: calls.append(args))
    _held = device.empty(40 * MiB)
    with pytest.raises(SimDevice.OutOfMemoryError) as raised:
        device.empty(40 * MiB)
    assert isinstance(raised.value, RuntimeError)
    assert calls == [(0, 40 * MiB, 64 * MiB, 24 * MiB)]
    assert str(raised.value) == (
        "SIM out of memory. Tried to allocate 40.00 MiB. Device 0 has a total capacity of "
        "64.00 MiB of which 24.00 MiB is free. Of the allocated memory 40.00 MiB is allocated "
        "by PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
    )
    stats = device.memory_stats()
    assert stats["num_ooms"] == 1
    assert stats["num_alloc_retries"] == 1


def test_oom_retry_releases_cached_segments_first() -> None:
    """A request that fits only after empty_cache succeeds, counting one retry and no OOM."""
    device = SimDevice(total_bytes=64 * MiB)
    device.record_memory_history("all", max_entries=100)
    device.empty(40 * MiB).free()
    assert device.reserved_bytes == 40 * MiB
    _tensor = device.empty(50 * MiB)
    stats = device.memory_stats()
    assert (stats["num_alloc_retries"], stats["num_ooms"], stats["num_device_free"]) == (1, 0, 1)
    actions = [e["action"] for e in trace(device)]
    assert actions[-3:] == ["segment_free", "segment_alloc", "alloc"]


def test_observer_can_snapshot_because_the_lock_is_released() -> None:
    """An observer that calls snapshot() and memory_stats() completes instead of deadlocking."""
    device = SimDevice(total_bytes=32 * MiB)
    device.record_memory_history("all", max_entries=100)
    seen: list[dict[str, Any]] = []
    device.attach_out_of_memory_observer(lambda *_: seen.append(device.snapshot()))
    device.attach_out_of_memory_observer(lambda *_: seen.append(device.memory_stats()))
    errors: list[BaseException] = []

    def allocate_too_much() -> None:
        try:
            device.empty(64 * MiB)
        except SimOutOfMemoryError as error:
            errors.append(error)

    worker = threading.Thread(target=allocate_too_much, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "observer deadlocked on the allocator lock"
    assert len(errors) == 1
    [oom] = [e for e in seen[0]["device_traces"][0] if e["action"] == "oom"]
    assert oom["device_free"] == 32 * MiB
    assert oom["size"] == 64 * MiB


# -- history


def test_trace_records_alloc_and_free_events_in_order() -> None:
    """With "all", an alloc and a free produce torch's five events with matching addresses."""
    device = SimDevice()
    device.record_memory_history("all", max_entries=100)
    tensor = device.empty(1000)
    tensor.free()
    events = trace(device)
    assert [e["action"] for e in events] == [
        "segment_alloc",
        "alloc",
        "free_requested",
        "free_completed",
    ]
    assert [e["size"] for e in events] == [2 * MiB, 1000, 1000, 1000]
    assert {e["addr"] for e in events} == {tensor.address}
    times = [e["time_us"] for e in events]
    assert times == sorted(times)
    assert all(isinstance(t, int) and t > 1_600_000_000_000_000 for t in times)


def test_ring_buffer_keeps_only_the_newest_max_entries() -> None:
    """The trace is a ring buffer: older events fall out past max_entries."""
    device = SimDevice()
    device.record_memory_history("all", max_entries=10)
    tensors = [device.empty(512 * (i + 1)) for i in range(20)]
    events = trace(device)
    assert len(events) == 10
    assert [e["size"] for e in events] == [512 * (i + 1) for i in range(10, 20)]
    assert tensors


def test_clear_history_empties_the_trace_but_keeps_recording() -> None:
    """clear_history=True drops earlier events; later ones are recorded."""
    device = SimDevice()
    device.record_memory_history("all", max_entries=100)
    _early = device.empty(512)
    device.record_memory_history("all", max_entries=100)
    assert len(trace(device)) == 2  # restarting without clear keeps the trace
    device.record_memory_history("all", max_entries=100, clear_history=True)
    assert trace(device) == []
    _late = device.empty(1024)
    assert [e["action"] for e in trace(device)] == ["alloc"]


def test_state_mode_records_block_frames_but_no_trace() -> None:
    """The "state" mode keeps stacks on live blocks only and records no trace events."""
    device = SimDevice()
    device.record_memory_history("state", max_entries=100)
    _tensor = device.empty(512)
    snapshot = device.snapshot()
    assert snapshot["device_traces"] == [[]]
    block = snapshot["segments"][0]["blocks"][0]
    assert block["frames"][0]["name"] == "test_state_mode_records_block_frames_but_no_trace"


def test_stopping_history_drops_the_trace_and_later_frames() -> None:
    """None stops recording: the trace is emptied (as torch does) and new blocks have no frames."""
    device = SimDevice()
    device.record_memory_history("all", max_entries=100)
    before = device.empty(512)
    device.record_memory_history(None, max_entries=100)
    after = device.empty(512)
    snapshot = device.snapshot()
    assert snapshot["device_traces"] == [[]]
    frames = {b["address"]: b["frames"] for b in snapshot["segments"][0]["blocks"]}
    assert frames[before.address] != []
    assert frames[after.address] == []


def test_frames_are_the_callers_innermost_first_without_sim_frames() -> None:
    """Frames start at the calling function and name no sim module file."""

    def allocate_here(device: SimDevice) -> SimTensor:
        return device.empty(512)

    device = SimDevice()
    device.record_memory_history("all", max_entries=100)
    tensor = allocate_here(device)
    del tensor
    gc.collect()
    events = trace(device)
    alloc = next(e for e in events if e["action"] == "alloc")
    names = [f["name"] for f in alloc["frames"]]
    assert names[:2] == [
        "allocate_here",
        "test_frames_are_the_callers_innermost_first_without_sim_frames",
    ]
    assert alloc["frames"][0]["filename"] == __file__
    assert isinstance(alloc["frames"][0]["line"], int)
    freed = next(e for e in events if e["action"] == "free_requested")
    assert freed["frames"][0]["name"] == names[1]  # the del, not the finalizer machinery
    sim_files = {sim_module.__file__, _sim_device.__file__, _sim_format.__file__}
    assert not {f["filename"] for e in events for f in e["frames"]} & sim_files


def test_stacks_all_adds_cpp_frames_innermost() -> None:
    """stacks="all" prepends C++-looking allocator frames before the Python ones, as torch does."""
    device = SimDevice()
    device.record_memory_history("all", max_entries=100, stacks="all")
    _tensor = device.empty(512)
    frames = trace(device)[-1]["frames"]
    cpp = [f for f in frames if f["filename"] == "??"]
    assert {"name": "c10::cuda::CUDACachingAllocator::malloc", "filename": "??", "line": 0} in cpp
    assert frames[: len(cpp)] == cpp
    assert frames[len(cpp)]["name"] == "test_stacks_all_adds_cpp_frames_innermost"


def test_user_metadata_tags_later_events_and_blocks() -> None:
    """set_memory_metadata tags later trace events and blocks; untagged blocks carry no key."""
    device = SimDevice()
    device.record_memory_history("all", max_entries=100)
    plain = device.empty(512)
    device.set_memory_metadata("step=12")
    tagged = device.empty(512)
    events = trace(device)
    assert [e["user_metadata"] for e in events] == ["", "", "step=12"]
    blocks = {b["address"]: b for b in segments(device)[0]["blocks"]}
    assert "user_metadata" not in blocks[plain.address]
    assert blocks[tagged.address]["user_metadata"] == "step=12"


def test_invalid_history_mode_is_rejected() -> None:
    """An unknown mode or stacks value raises ValueError instead of silently recording."""
    device = SimDevice()
    with pytest.raises(ValueError, match="enabled"):
        device.record_memory_history("everything", max_entries=10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stacks"):
        device.record_memory_history("all", max_entries=10, stacks="cpp")  # type: ignore[arg-type]


# -- snapshot format


class PlainUnpickler(pickle.Unpickler):
    """Refuses every global, like the analysis layer's restricted loader."""

    def find_class(self, module: str, name: str) -> Any:
        """Any class reference means the snapshot is not plain data."""
        raise pickle.UnpicklingError(f"global {module}.{name} refused")


def busy_device() -> SimDevice:
    """A device with history, metadata, several segments, holes and an OOM in its trace."""
    device = SimDevice(total_bytes=128 * MiB)
    device.record_memory_history("all", max_entries=1000)
    device.set_memory_metadata("step=1")
    tensors = [device.empty(size) for size in (100, 5000, 3 * MiB, 4 * MiB, 12 * MiB)]
    tensors[1].free()
    tensors[3].free()
    with pytest.raises(SimOutOfMemoryError):
        device.empty(200 * MiB)
    device._keep = tensors  # type: ignore[attr-defined]  # keep the blocks live
    return device


def test_snapshot_round_trips_through_protocol_4_and_a_restricted_unpickler() -> None:
    """The snapshot is plain data: it pickles with protocol 4 and loads with no globals."""
    snapshot = busy_device().snapshot()
    loaded = PlainUnpickler(io.BytesIO(pickle.dumps(snapshot, protocol=4))).load()
    assert loaded == snapshot


@needs_shared_data
def test_snapshot_keys_match_a_real_torch_snapshot() -> None:
    """Top-level, segment, block, trace and settings keys are those real PyTorch writes."""
    with (REAL_SNAPSHOTS / "cuda-transformer-forward.pickle").open("rb") as handle:
        real = pickle.load(handle)
    ours = busy_device().snapshot()
    assert set(ours) == set(real)
    assert set(ours["allocator_settings"]) == set(real["allocator_settings"])
    assert {frozenset(s) for s in ours["segments"]} == {frozenset(s) for s in real["segments"]}
    real_block_keys = {frozenset(b) for s in real["segments"] for b in s["blocks"]}
    for block in (b for s in ours["segments"] for b in s["blocks"]):
        assert set(block) - {"user_metadata"} in real_block_keys
    real_entry_keys = {frozenset(e) for e in real["device_traces"][0]}
    for entry in ours["device_traces"][0]:
        extra = {"user_metadata", "device_free"}
        assert set(entry) - extra in real_entry_keys
    real_segment = real["segments"][0]
    for key, value in ours["segments"][0].items():
        assert type(value) is type(real_segment[key]), key


def test_snapshot_is_independent_of_the_allocator() -> None:
    """Mutating a snapshot changes nothing, and later allocations do not change it."""
    device = busy_device()
    first = device.snapshot()
    expected = pickle.dumps(first, protocol=4)
    first["segments"][0]["blocks"][0]["frames"].clear()
    first["device_traces"][0].clear()
    assert device.snapshot()["device_traces"][0] != []
    assert device.snapshot()["segments"][0]["blocks"][0]["frames"] != []
    second = device.snapshot()
    device.empty(MiB).free()
    device.set_memory_metadata("step=2")
    assert pickle.dumps(second, protocol=4) == expected


def test_segments_and_blocks_are_sorted_by_address_with_consistent_sizes() -> None:
    """Segments and blocks come sorted by address; segment sizes add up from their blocks."""
    snapshot = busy_device().snapshot()
    addresses = [s["address"] for s in snapshot["segments"]]
    assert addresses == sorted(addresses)
    assert all(a % (2 * MiB) == 0 for a in addresses)
    for segment in snapshot["segments"]:
        active = [b for b in segment["blocks"] if b["state"] == "active_allocated"]
        assert segment["allocated_size"] == sum(b["size"] for b in active)
        assert segment["requested_size"] == sum(b["requested_size"] for b in active)
        assert [b["address"] for b in segment["blocks"]] == sorted(
            b["address"] for b in segment["blocks"]
        )


def test_memory_stats_and_mem_get_info_agree_with_the_segments() -> None:
    """Statistics use torch's key names and match what the snapshot shows."""
    device = busy_device()
    stats = device.memory_stats()
    snapshot = device.snapshot()
    reserved = sum(s["total_size"] for s in snapshot["segments"])
    allocated = sum(s["allocated_size"] for s in snapshot["segments"])
    assert stats["reserved_bytes.all.current"] == reserved == device.reserved_bytes
    assert stats["allocated_bytes.all.current"] == allocated == device.allocated_bytes
    assert stats["active_bytes.all.current"] == allocated
    assert stats["allocated_bytes.all.peak"] >= allocated
    assert stats["reserved_bytes.all.peak"] >= reserved
    assert stats["num_device_alloc"] == len(snapshot["segments"])
    assert stats["requested_bytes.all.current"] == 100 + 3 * MiB + 12 * MiB
    assert device.mem_get_info() == (128 * MiB - reserved, 128 * MiB)
    assert all(isinstance(value, int) for value in stats.values())


# -- threads, default device, backend


def test_concurrent_threads_leave_the_allocator_consistent() -> None:
    """Eight threads allocating and freeing at once end with nothing allocated and tidy segments."""
    device = SimDevice(total_bytes=1 << 30)
    device.record_memory_history("all", max_entries=5000)
    failures: list[BaseException] = []

    def churn(seed: int) -> None:
        rng = random.Random(seed)
        live: list[SimTensor] = []
        try:
            for _ in range(400):
                if live and rng.random() < 0.5:
                    live.pop(rng.randrange(len(live))).free()
                else:
                    live.append(device.empty(rng.choice([100, 70_000, 3 * MiB, 11 * MiB])))
            live.clear()  # the rest are freed by garbage collection
        except BaseException as error:  # noqa: BLE001 - any failure in a worker is reported below
            failures.append(error)

    workers = [threading.Thread(target=churn, args=(seed,)) for seed in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    gc.collect()
    assert failures == []
    assert device.allocated_bytes == 0
    check_tiling(device)


def test_default_device_is_lazy_sized_from_env_and_replaced_by_reset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """get_device() reads MEMFORENSICS_SIM_TOTAL_BYTES once; reset_device() swaps in a new one."""
    monkeypatch.setenv("MEMFORENSICS_SIM_TOTAL_BYTES", str(256 * MiB))
    device = get_device()
    assert device is get_device()
    assert device.mem_get_info() == (256 * MiB, 256 * MiB)
    replaced = reset_device(64 * MiB)
    assert replaced is get_device() is not device
    assert replaced.total_bytes == 64 * MiB


def test_bad_env_size_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A malformed MEMFORENSICS_SIM_TOTAL_BYTES fails with a message naming it."""
    monkeypatch.setenv("MEMFORENSICS_SIM_TOTAL_BYTES", "lots")
    with pytest.raises(ValueError, match="MEMFORENSICS_SIM_TOTAL_BYTES"):
        get_device()


def test_backend_satisfies_the_protocol_and_follows_reset_device() -> None:
    """SimBackend is a DeviceBackend whose hook key and calls follow the current default device."""
    backend = SimBackend()
    assert isinstance(backend, DeviceBackend)
    assert (backend.name, backend.available(), backend.framework_version()) == ("sim", True, None)
    first = reset_device(32 * MiB)
    assert backend.oom_hook_key() is first
    calls: list[tuple[int, int, int, int]] = []
    assert backend.attach_oom_observer(lambda *args: calls.append(args)) is first
    second = reset_device(32 * MiB)
    assert backend.oom_hook_key() is second
    assert backend.device_index() == 0
    backend.record_history("all", max_entries=50, stacks="python", clear=False)
    assert backend.set_step_metadata("step=3") is True
    _tensor = second.empty(512)
    [event] = backend.snapshot()["device_traces"][0][-1:]
    assert event["user_metadata"] == "step=3"
    assert backend.memory_stats()["allocated_bytes.all.current"] == 512
    assert backend.mem_get_info() == (30 * MiB, 32 * MiB)
    with pytest.raises(SimOutOfMemoryError):
        first.empty(64 * MiB)
    assert calls == [(0, 64 * MiB, 32 * MiB, 32 * MiB)]
