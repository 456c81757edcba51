"""The CUDA adapter: ``torch.cuda`` and ``torch._C._cuda_attach_out_of_memory_observer``."""

from __future__ import annotations

from types import ModuleType

from memforensics.backends._torch import TorchAllocatorBackend


class CudaBackend(TorchAllocatorBackend):
    """PyTorch's CUDA caching allocator."""

    name = "cuda"

    def device_module(self) -> ModuleType:
        """``torch.cuda``."""
        import torch

        return torch.cuda

    def memory_module(self) -> ModuleType:
        """``torch.cuda.memory``."""
        import torch.cuda.memory

        return torch.cuda.memory

    def c_module(self) -> ModuleType:
        """``torch._C``."""
        import torch

        return torch._C
