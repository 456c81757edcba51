"""``triton.runtime.driver.active`` in a planned run: the planned device as Triton's CUDA
driver reports it."""

from __future__ import annotations

import types
from typing import Any

EMPTY_CACHE_BYTES = 256 * 1024 * 1024
"""The buffer ``do_bench`` clears the L2 cache with before each timed call
(``triton/backends/nvidia/driver.py``, ``get_empty_cache_for_benchmark``): 256 MiB of int32."""

SHARED_MEMORY_BYTES = {
    (7, 0): 98_304,
    (7, 5): 65_536,
    (8, 0): 166_912,
    (9, 0): 232_448,
    (10, 0): 232_448,
}
"""Shared memory a block may opt into, by compute capability (CUDA's programming guide,
"Technical Specifications per Compute Capability"); other 8.x and 12.x parts have 101,376."""


def empty_cache_for_benchmark() -> Any:
    """The L2-clearing buffer, made on the planned device as Triton makes it on the GPU."""
    import torch

    return torch.empty(EMPTY_CACHE_BYTES // 4, dtype=torch.int, device="cuda")


class Driver:
    """``triton.runtime.driver.active``: the planned device as Triton's CUDA driver reports it."""

    def get_current_device(self) -> int:
        import torch

        return int(torch.cuda.current_device())

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cuda", self.get_current_device())

    def get_current_stream(self, device: int | None = None) -> int:
        import torch

        return int(torch.cuda.current_stream(device).cuda_stream)

    def get_current_target(self) -> Any:
        import torch

        major, minor = torch.cuda.get_device_capability()
        return types.SimpleNamespace(backend="cuda", arch=major * 10 + minor, warp_size=32)

    def get_device_interface(self) -> Any:
        import torch

        return torch.cuda

    def get_empty_cache_for_benchmark(self) -> Any:
        return empty_cache_for_benchmark()

    def clear_cache(self, cache: Any) -> None:
        cache.zero_()

    @property
    def utils(self) -> Any:
        return types.SimpleNamespace(get_device_properties=_device_properties)


def _device_properties(device: int = 0) -> dict[str, int]:
    """What Triton's ``utils.get_device_properties`` gives the tutorials' launch sizing."""
    import torch

    props = torch.cuda.get_device_properties(device)
    capability = (props.major, props.minor)
    return {
        "max_shared_mem": SHARED_MEMORY_BYTES.get(capability, 101_376),
        "max_num_regs": 65_536,
        "multiprocessor_count": props.multi_processor_count,
        "warpSize": props.warp_size,
    }
