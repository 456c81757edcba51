"""What the CUDA build says about itself in a plan: a CUDA build's own facts (a login node with
the CUDA wheel and no GPU), torch 2.13.0's CUDA wheel's on the CPU build."""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from memforensics.plan import build  # noqa: E402

pytestmark = [pytest.mark.torch]


@pytest.fixture
def cuda_build(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The installed torch answering as a CUDA 12.8 build with cuDNN 9.10.2, NCCL 2.27.3 and
    no flash attention (the libraries' bindings as the CUDA build has them)."""
    c = torch._C
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(c, "_has_cudnn", True)
    monkeypatch.setattr(
        c, "_cudnn", types.SimpleNamespace(getVersionInt=lambda: 91002), raising=False
    )
    monkeypatch.setattr(c, "_nccl_version", lambda: (2 << 32) | (27 << 16) | 3, raising=False)
    monkeypatch.setattr(c, "_nccl_version_suffix", lambda: b"", raising=False)
    monkeypatch.setattr(c, "_is_flash_attention_available", lambda: False)
    build.facts.cache_clear()
    yield
    build.facts.cache_clear()


@pytest.mark.usefixtures("cuda_build")
def test_a_cuda_build_answers_its_own_cudnn_nccl_and_flash() -> None:
    """On a CUDA build the plan's facts are the build's own libraries', not the 2.13.0 wheel's
    pins, so a plan reports what a GPU run of the same install does."""
    facts = build.facts()
    assert facts == build.BuildFacts(cuda="12.8", cudnn=91002, nccl=(2, 27, 3), flash=False)
    assert build.cudnn_version((8, 0)) == 91002
    assert build.nccl_version() == (2, 27, 3)


@pytest.mark.usefixtures("cuda_build")
def test_a_cuda_builds_older_cudnn_still_runs_below_capability_7_5() -> None:
    """The build's own cuDNN (9.10.2 here, before 9.11) still runs on capability 7.0: torch's
    refusal follows the version the build loads."""
    assert build.cudnn_version((7, 0)) == 91002


def test_the_cpu_build_answers_as_the_2_13_wheel() -> None:
    """Where torch is the CPU build (no ``torch.version.cuda``), the facts are the 2.13.0 CUDA
    wheel's published pins; a CUDA build answers what it loads."""
    build.facts.cache_clear()
    if torch.version.cuda is None:
        assert build.facts() == build.WHEEL
    else:
        assert build.facts().cudnn == torch.backends.cudnn.version()
        assert build.facts().nccl == torch.cuda.nccl.version()
    with pytest.raises(RuntimeError, match=r"SM < 7\.5"):
        build.cudnn_version((7, 0))
