"""A dump written event by event, with the frames real stacks have: what the kinds tests build
their traces from (allocations and frees in the order a step makes them)."""

from __future__ import annotations

from typing import Any

from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.filled import Allocation
from memforensics.analysis.filled.kinds import classify
from memforensics.analysis.filled.lifetime import lifetimes

MiB = 1 << 20
SP = "/venv/lib/python3.11/site-packages"
Frame = dict[str, Any]


def py(filename: str, line: int, name: str) -> Frame:
    """A Python frame."""
    return {"filename": filename, "line": line, "name": name}


def cpp(name: str) -> Frame:
    """A C++ frame as the unwinder records one without debug info."""
    return {"filename": "??", "line": 0, "name": name}


MALLOC = cpp("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc")
ENGINE = [
    MALLOC,
    cpp("at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)"),
    cpp("torch::autograd::Engine::evaluate_function(std::shared_ptr<GraphTask>&)"),
    cpp("torch::autograd::Engine::thread_main(std::shared_ptr<GraphTask> const&)"),
]
CALL = py(f"{SP}/torch/nn/modules/module.py", 1747, "_call_impl")
BODY = py("/users/me/run.py", 120, "<module>")
"""The program's body, where every stack of the main thread starts."""


class Trace:
    """A dump written event by event: allocations and frees in order, one segment per block
    still live at the end (what the kinds read is the trace and the live blocks' frames)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.live: dict[int, tuple[int, list[Frame]]] = {}
        self.next = 0x7F00_0000_0000

    def alloc(self, size: int, frames: list[Frame]) -> int:
        """Allocate ``size`` bytes from ``frames`` (innermost first); its address."""
        addr, self.next = self.next, self.next + (-(-size // (2 * MiB)) + 1) * 2 * MiB
        self._event("alloc", addr, size, frames)
        self.live[addr] = (size, frames)
        return addr

    def free(self, addr: int) -> None:
        """Free a live allocation."""
        size, frames = self.live.pop(addr)
        self._event("free_requested", addr, size, frames)
        self._event("free_completed", addr, size, frames)

    def oom(self, size: int, frames: list[Frame]) -> None:
        """A request of ``size`` bytes from ``frames`` that ran out of memory (PyTorch's
        ``oom`` entry, whose ``addr`` is the device's free bytes)."""
        self._event("oom", 0, size, frames)

    def _event(self, action: str, addr: int, size: int, frames: list[Frame]) -> None:
        self.events.append(
            {"action": action, "addr": addr, "size": size, "stream": 0, "frames": frames,
             "time_us": 1_000 + len(self.events)}
        )  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """The dump as ``torch.cuda.memory._snapshot()`` writes it."""
        segments = [
            {"device": 0, "address": addr, "total_size": size, "allocated_size": size,
             "active_size": size, "requested_size": size, "stream": 0, "segment_type": "large",
             "blocks": [{"address": addr, "size": size, "requested_size": size,
                         "state": "active_allocated", "frames": frames}]}
            for addr, (size, frames) in self.live.items()
        ]  # fmt: skip
        return {"segments": segments, "device_traces": [self.events]}

    def classified(self, sidecar: dict[str, Any] | None = None) -> dict[int, Allocation]:
        """Every allocation of the dump by address (the last one at each), classified;
        ``sidecar``: the JSON sidecar written beside it, if any."""
        found = lifetimes(dump_from_snapshot(self.snapshot(), sidecar=sidecar))
        classify(found)
        return {a.addr: a for a in found.allocations}


FSDP2 = f"{SP}/torch/distributed/fsdp/_fully_shard"
"""Where FSDP2 (``fully_shard``) lives."""
FSDP2_UNSHARD = [  # FSDP2's pre-forward hook all-gathers a module's parameters (torch 2.13)
    MALLOC,
    py(f"{FSDP2}/_fsdp_param.py", 1069, "alloc_storage"),
    py(f"{FSDP2}/_fsdp_param.py", 825, "alloc_all_gather_outputs"),
    py(f"{FSDP2}/_fsdp_collectives.py", 463, "foreach_all_gather_copy_out"),
    py(f"{FSDP2}/_fsdp_param_group.py", 463, "wait_for_unshard"),
    py(f"{FSDP2}/_fsdp_param_group.py", 551, "pre_forward"),
    py(f"{SP}/torch/nn/modules/module.py", 1832, "inner"),
    CALL,
    py("/users/me/train.py", 26, "forward"),
    CALL,
    py("/users/me/train.py", 40, "main"),
    BODY,
]
FSDP2_GATHER_BUFFER = [  # the flat buffer the all-gather lands in, before its copy-out
    MALLOC,
    py(f"{FSDP2}/_fsdp_collectives.py", 59, "allocate"),
    py(f"{FSDP2}/_fsdp_collectives.py", 351, "foreach_all_gather"),
    py(f"{FSDP2}/_fsdp_param_group.py", 407, "unshard"),
    py(f"{FSDP2}/_fsdp_param_group.py", 551, "pre_forward"),
    py(f"{SP}/torch/nn/modules/module.py", 1832, "inner"),
    CALL,
    py("/users/me/train.py", 40, "main"),
    BODY,
]
