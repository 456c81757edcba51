"""The real-GPU check's judges, on inputs whose truth is known: the paths a dry run on today's
version cannot reach (schema-2 sidecars, replay tables, CUDA's own wording) are proven here."""

from __future__ import annotations

import inspect
import json
import pickle
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memforensics.analysis.schema import to_json

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from _gpu_cli import replay_outcomes  # noqa: E402 - benchmarks/ is not a package
from _gpu_oom import check_oom_sizes  # noqa: E402
from _gpu_record import FAST, Context, Step, run_step  # noqa: E402
from _gpu_rig import (  # noqa: E402
    MiB,
    SimRig,
    allocation_size,
    block_size,
    format_size,
    parse_oom_text,
)

from memforensics.testing import SimOutOfMemoryError, reset_device  # noqa: E402


@pytest.fixture(autouse=True)
def _default_sim_device() -> Iterator[None]:
    """These tests resize the process-wide sim device; later tests get the default one back."""
    yield
    reset_device()


CUDA_TEXT = (
    "CUDA out of memory. Tried to allocate 102.00 MiB. GPU 1 has a total capacity of 139.81 GiB"
    " of which 138.12 GiB is free. Including non-PyTorch memory, this process has 1.62 GiB memory"
    " in use. Of the allocated memory 480.00 MiB is allocated by PyTorch, and 480.00 MiB is"
    " reserved by PyTorch but unallocated."
)


def test_cuda_oom_text_is_parsed_into_its_four_facts() -> None:
    """PyTorch's CUDA wording yields allocation, device, total, free (and the limit) as printed."""
    assert parse_oom_text(CUDA_TEXT) == {
        "allocation": "102.00 MiB",
        "device": 1,
        "total": "139.81 GiB",
        "free": "138.12 GiB",
        "allowed": None,
    }
    limited = CUDA_TEXT.replace("in use. Of", "in use. 1.00 GiB allowed; Of")
    assert (parse_oom_text(limited) or {}).get("allowed") == "1.00 GiB"
    assert parse_oom_text("RuntimeError: NCCL error") is None


def test_format_size_matches_the_sim_devices_torch_wording() -> None:
    """format_size prints what the OOM message prints, at every threshold torch uses."""
    for size in (1024, 1025, MiB, MiB + 1, 20 * MiB, 1 << 30, (1 << 30) + 1):
        device = reset_device(total_bytes=size)
        with pytest.raises(SimOutOfMemoryError) as caught:
            device.empty(size + 1)
        assert f"total capacity of {format_size(size)} of which" in str(caught.value)


def test_allocator_rounding_follows_pytorch() -> None:
    """Blocks round to 512 B; the driver gets 2 MiB, 20 MiB, or a multiple of 2 MiB."""
    assert block_size(1) == 512
    assert block_size(100 * MiB + 1000) == 100 * MiB + 1024
    assert allocation_size(MiB) == 2 * MiB
    assert allocation_size(MiB + 512) == 20 * MiB
    assert allocation_size(10 * MiB) == 10 * MiB
    assert allocation_size(100 * MiB + 1024) == 102 * MiB


def write_oom_dump(tmp_path: Path, traced: int, oom: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """A snapshot whose trace ends in an ``oom`` entry of ``traced`` bytes, and its sidecar."""
    entry = {"action": "oom", "addr": 0, "size": traced, "stream": 0, "time_us": 1, "frames": []}
    path = tmp_path / "rank0_pid1.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[entry]]}, protocol=4))
    sidecar = {"schema": 2, "device_index": 0, "oom": oom}
    return path, sidecar


def test_schema_2_sizes_that_agree_pass(tmp_path: Path) -> None:
    """A schema-2 sidecar whose sizes match the trace, the rounding and the request passes."""
    request = 100 * MiB + 1000
    oom = {"requested_bytes": block_size(request), "allocation_bytes": 102 * MiB}
    path, sidecar = write_oom_dump(tmp_path, block_size(request), oom)
    step = Step("verdicts", "t")
    check_oom_sizes(step, sidecar, path, request)
    assert [(c.name, c.status) for c in step.checks] == [
        ("requested_bytes = trace's oom entry", "pass"),
        ("allocation_bytes = allocator rounding of requested_bytes", "pass"),
        ("requested_bytes = the request, rounded to 512", "pass"),
    ]


def test_schema_2_sidecar_reporting_the_allocation_as_request_fails(tmp_path: Path) -> None:
    """The pre-fix mistake (the observer's size written as the request) is a wrong answer."""
    request = 100 * MiB + 1000
    oom = {"requested_bytes": 102 * MiB, "allocation_bytes": 102 * MiB}
    path, sidecar = write_oom_dump(tmp_path, block_size(request), oom)
    step = Step("verdicts", "t")
    check_oom_sizes(step, sidecar, path, request)
    assert [c.name for c in step.checks if c.status == "FAIL"] == [
        "requested_bytes = trace's oom entry",
        "requested_bytes = the request, rounded to 512",
    ]


def test_schema_1_sidecar_skips_what_it_cannot_answer(tmp_path: Path) -> None:
    """Without allocation_bytes the request check is skipped, naming the missing feature."""
    path, _ = write_oom_dump(tmp_path, 512, {})
    step = Step("oom", "t")
    check_oom_sizes(step, {"schema": 1, "oom": {"requested_bytes": 2 * MiB}}, path, 1000)
    assert [c.status for c in step.checks] == ["skipped", "pass"]
    assert "schema 2" in step.checks[0].detail


def test_replay_tables_are_read_in_list_and_object_shapes() -> None:
    """Rows with a settings label and an OOM flag become a label-to-OOM map; others, None."""
    rows = [
        {"settings": "as recorded", "oom": True},
        {"settings": "expandable_segments:True", "oom": False},
    ]
    expected = {"as recorded": True, "expandable_segments:True": False}
    assert replay_outcomes(rows) == expected
    assert replay_outcomes({"fidelity": 1.0, "alternatives": rows}) == expected
    assert replay_outcomes({"verdict": "exhausted"}) is None
    assert replay_outcomes([{"settings": "x"}]) is None


def test_a_step_past_its_time_limit_is_recorded_and_stopped(tmp_path: Path) -> None:
    """A step that overruns is interrupted and reported as a timeout, not raised."""
    ctx = Context(SimRig(), FAST, tmp_path, BENCHMARKS / "gpu_truth.py")
    step = Step("slow", "sleeps")

    def body(step: Step, ctx: Context) -> None:
        time.sleep(30)

    run_step(step, ctx, 0.2, body)
    assert step.status == "timeout"
    assert "limit" in (step.error or "")


def test_a_step_that_raises_is_recorded_with_its_error(tmp_path: Path) -> None:
    """An exception in a step becomes its error line; the caller goes on."""
    ctx = Context(SimRig(), FAST, tmp_path, BENCHMARKS / "gpu_truth.py")
    step = Step("broken", "raises")

    def body(step: Step, ctx: Context) -> None:
        raise RuntimeError("no OOM after 12 steps")

    run_step(step, ctx, 5.0, body)
    assert (step.status, step.error) == ("error", "RuntimeError: no OOM after 12 steps")
    assert json.dumps(to_json(step))  # the report stays JSON


class BoundTorchCuda:
    """``torch.cuda`` (and its submodules) whose calls bind to the real torch's signatures and
    answer as a two-GPU H200 host would; each call is recorded by name."""

    def __init__(self, real: Any, answers: dict[str, Any], calls: list[str], path: str) -> None:
        self._real, self._answers, self._calls, self._path = real, answers, calls, path

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._real, name)
        path = f"{self._path}.{name}"
        if isinstance(target, types.ModuleType):
            return BoundTorchCuda(target, self._answers, self._calls, path)

        def call(*args: Any, **kwargs: Any) -> Any:
            inspect.signature(target).bind(*args, **kwargs)
            self._calls.append(path)
            return self._answers.get(path)

        return call


@pytest.mark.torch
def test_cuda_rig_calls_exist_in_the_real_torch_with_its_arguments() -> None:
    """Every torch.cuda call the CUDA rig makes binds to real torch; the limit is C++'s."""
    torch = pytest.importorskip("torch")
    from _gpu_rig import CudaRig, GiB

    total = 140 * GiB
    driver_total = total - 512 * MiB  # cudaMemGetInfo may report less than the properties
    answers = {
        "torch.cuda.is_available": True,
        "torch.cuda.device_count": 2,
        "torch.cuda.current_device": 0,
        "torch.cuda.get_device_properties": types.SimpleNamespace(
            name="NVIDIA H200", total_memory=total
        ),
        "torch.cuda.mem_get_info": (100 * GiB, driver_total),
        "torch.cuda.memory._snapshot": {"allocator_settings": {"expandable_segments": True}},
    }
    calls: list[str] = []
    fake = types.SimpleNamespace(
        cuda=BoundTorchCuda(torch.cuda, answers, calls, "torch.cuda"),
        OutOfMemoryError=torch.OutOfMemoryError,
        version=torch.version,
        __version__=torch.__version__,
    )
    rig = CudaRig(fake)
    assert rig.describe()["gpu_name"] == "NVIDIA H200"
    assert [d["index"] for d in rig.describe()["devices"]] == [0, 1]
    fraction = 3 * GiB / driver_total
    assert rig.cap(3 * GiB) == [int(fraction * driver_total), int(fraction * total)]
    assert rig.cap(None) is None
    rig.use_device(1)
    assert rig.mem_get_info() == (100 * GiB, driver_total)
    rig.empty_cache()
    rig.synchronize()
    assert rig.allocator_settings() == {"expandable_segments": True}
    assert rig.oom_error is torch.OutOfMemoryError
    assert {
        "torch.cuda.init",
        "torch.cuda.set_per_process_memory_fraction",
        "torch.cuda.set_device",
        "torch.cuda.empty_cache",
        "torch.cuda.synchronize",
        "torch.cuda.memory._snapshot",
    } <= set(calls)


@pytest.mark.torch
def test_the_checks_transformer_trains_with_the_real_torch() -> None:
    """The step-1 model is real torch: an optimizer step changes its weights (here on the CPU)."""
    torch = pytest.importorskip("torch")
    from _gpu_models import CudaTransformer

    model = CudaTransformer(torch, torch.device("cpu"), width=64, layers=1, seq=8)
    before = [p.detach().clone() for p in model.model.parameters()]
    model.step(2)
    after = list(model.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    model.close()
    assert model.model is None
