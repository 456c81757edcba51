"""Every call the adapters make binds against the real installed torch's signatures.

The fakes in torchfakes bind each call against the real function first, so driving every
adapter path here proves the names and keywords exist in this torch. The torch_npu side is
checked against the newest torch_npu wheel by ``nox -s frameworks`` (tests/frameworks).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from torchfakes import GIB, NPU_SIGNATURES, oom_files, patch_device, signature_of

import memforensics
from memforensics.backends import _torch
from memforensics.backends.cuda import CudaBackend
from memforensics.doctor import Doctor

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("clean_env")]


def test_every_adapter_name_exists_in_the_real_torch() -> None:
    """Each torch.cuda / torch.cuda.memory name the adapter calls exists in this torch and
    accepts the call as the adapter makes it (no arguments)."""
    import torch.cuda.memory

    for name in _torch.DEVICE_CALLS + _torch.OPTIONAL_DEVICE_CALLS:
        inspect.signature(getattr(torch.cuda, name)).bind()
    for name in _torch.MEMORY_CALLS:
        assert callable(getattr(torch.cuda.memory, name))
    inspect.signature(torch.cuda.memory._snapshot).bind()
    inspect.signature(torch.cuda.memory._set_memory_metadata).bind("step=1")


def test_history_keywords_bind_to_the_real_record_memory_history() -> None:
    """Every keyword record_history passes (clear_history included) is a parameter of this
    torch's _record_memory_history, and the adapter reads the same list."""
    import torch.cuda.memory

    real = torch.cuda.memory._record_memory_history
    keywords = dict.fromkeys((*_torch.HISTORY_KEYWORDS, _torch.CLEAR_KEYWORD), None)
    inspect.signature(real).bind(**keywords)
    inspect.signature(real).bind(enabled=None)
    assert _torch.history_parameters(real) == tuple(inspect.signature(real).parameters)


def test_torch_npu_parameters_come_from_the_wrapped_implementation() -> None:
    """torch_npu's (enabled, *args, **kwargs) wrapper yields its implementation's parameters,
    and every history keyword but clear_history binds to them."""
    from torchfakes import npu_record_memory_history, with_signature

    impl_signature = signature_of(NPU_SIGNATURES["npu.memory._record_memory_history_impl"])
    impl = with_signature(impl_signature, lambda arguments: None, "_record_memory_history_impl")
    wrapper = npu_record_memory_history(impl)
    params = _torch.history_parameters(wrapper)
    assert params == ("enabled", "context", "stacks", "max_entries", "device")
    impl_signature.bind(**dict.fromkeys(_torch.HISTORY_KEYWORDS, None))


def test_driving_every_path_calls_only_real_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Install, windows, an observed OOM, the step() fallback, a manual dump, close and the
    doctor, all against the fakes bound to real torch signatures: every name the adapter
    declares is called, and none raises TypeError."""
    alloc = patch_device(monkeypatch, "cuda", fraction=0.5, total=8 * GIB)
    out = tmp_path / "out"
    mf = memforensics.install(device="cuda", out_dir=out, rank=0, steps=1, context="all")
    for step in range(2):
        with mf.step(step):
            pass
    alloc.fire_oom(allocation_bytes=GIB, device=0)
    with pytest.raises(torch.OutOfMemoryError), mf.step(2):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
    assert mf.dump() is not None
    mf.close()
    Doctor("cuda", tmp_path / "doctor").run()
    called = {name for name, _, _ in alloc.calls}
    declared = {
        *_torch.DEVICE_CALLS,
        *_torch.OPTIONAL_DEVICE_CALLS,
        *_torch.MEMORY_CALLS,
        *_torch.OPTIONAL_MEMORY_CALLS,
    }
    assert declared <= called
    assert "synchronize" not in called
    assert len(oom_files(out)) == 2
    assert isinstance(mf.backend, CudaBackend)
    assert mf.backend.history_parameters() is not None
