"""The handle ``torch.cuda.memory._get_current_allocator()`` gives under plan, on either build."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from memforensics.plan import cuda  # noqa: E402

pytestmark = [pytest.mark.torch]


def test_the_allocator_handle_is_made_where_the_class_is_a_cuda_builds_pybind11_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a CUDA build ``torch._C._cuda_CUDAAllocator`` is a pybind11 class, which refuses
    ``object.__new__`` ("not safe"), and every plan stopped there before the script ran; the
    handle is made by the class's own ``__new__``. A pybind11 class of the CPU build stands in
    for it."""
    pybind11 = torch._C._distributed_c10d.AllreduceOptions
    with pytest.raises(TypeError, match="not safe"):
        object.__new__(pybind11)
    monkeypatch.setattr(torch._C, "_cuda_CUDAAllocator", pybind11)
    handle = cuda.current_allocator()
    assert type(handle()) is pybind11
    assert handle() is handle()


def test_the_allocator_handle_is_one_instance_of_the_cpu_builds_stand_in_class() -> None:
    """On the CPU build the class is a stand-in whose ``__init__`` refuses construction: the
    handle is still one instance of it, as ``isinstance`` checks on a GPU expect."""
    handle = cuda.current_allocator()
    assert type(handle()) is torch._C._cuda_CUDAAllocator
    assert handle() is handle()
