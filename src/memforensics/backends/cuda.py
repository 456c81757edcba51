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

        module: ModuleType = torch.cuda  # a typed local: torch is Any where it is not installed
        return module

    def memory_module(self) -> ModuleType:
        """``torch.cuda.memory``."""
        import torch.cuda.memory

        module: ModuleType = torch.cuda.memory
        return module

    def c_module(self) -> ModuleType:
        """``torch._C``."""
        import torch

        module: ModuleType = torch._C
        return module
