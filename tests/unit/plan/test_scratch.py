"""cuBLAS's workspace as the installed torch sizes it: by capability, by torch release, and by
``CUBLAS_WORKSPACE_CONFIG`` (``aten/src/ATen/cuda/CublasHandlePool.cpp``)."""

from __future__ import annotations

import pytest

from memforensics.plan.scratch import cublas_workspace_bytes, staging_bytes, torch_release

MiB = 1 << 20
SMALL = 8_519_680  # :4096:2:16:8, what every real capability-8.x snapshot we hold holds


@pytest.mark.parametrize(
    ("capability", "release", "expected"),
    [
        ((8, 0), (2, 13), SMALL),
        ((8, 9), (2, 13), SMALL),
        ((9, 0), (2, 13), 32 * MiB),
        ((10, 0), (2, 13), 32 * MiB),
        ((12, 0), (2, 13), 32 * MiB),
        ((9, 0), (2, 11), 32 * MiB),
        ((10, 0), (2, 11), SMALL),  # torch 2.11 on a B200
        ((12, 0), (2, 11), SMALL),  # torch 2.11 on an RTX 50-series
        ((7, 5), (2, 5), SMALL),
    ],
)
def test_the_default_follows_the_capability_and_the_torch_release(
    capability: tuple[int, int], release: tuple[int, int], expected: int
) -> None:
    """32 MiB for Hopper, and for Blackwell from torch 2.12; 8,519,680 B everywhere else."""
    assert cublas_workspace_bytes(capability, None, release) == expected


def test_the_environment_overrides_the_default_by_its_pairs() -> None:
    """Each ``:KiB:count`` pair adds KiB times count; a value with no pair keeps the default."""
    assert cublas_workspace_bytes((9, 0), ":4096:2:16:8", (2, 13)) == SMALL
    assert cublas_workspace_bytes((8, 0), ":4096:8", (2, 13)) == 32 * MiB
    assert cublas_workspace_bytes((9, 0), ":16:8", (2, 13)) == 128 * 1024
    assert cublas_workspace_bytes((9, 0), "nonsense", (2, 13)) == 32 * MiB


def test_a_torch_version_string_reads_as_its_release() -> None:
    """Local and pre-release suffixes do not matter; a string that is no version is refused."""
    assert torch_release("2.13.0+cpu") == (2, 13)
    assert torch_release("2.12.0a0+git1234") == (2, 12)
    with pytest.raises(ValueError, match="not a torch version"):
        torch_release("nightly")


def test_a_weight_gradient_summed_over_the_batch_stages_what_the_real_gpu_staged() -> None:
    """An RMSNorm weight's gradient (fp32, 32 x 256 x 768 summed to 768) on an A100 takes the
    50,331,648-byte staging buffer and 24 bytes of semaphores the real forward-backward
    workload's trace shows 25 times (real-workloads/small-lm-forward-backward)."""
    shape, strides = (32, 256, 768), (256 * 768, 768, 1)
    assert staging_bytes(shape, strides, frozenset({0, 1}), 4, 0, (8, 0)) == (50_331_648, 24)


def test_reductions_one_block_can_finish_take_no_staging() -> None:
    """A loss's mean over 8,192 values, and a softmax-style sum over each row of a logits-sized
    tensor, never split one output across blocks: nothing staged."""
    assert staging_bytes((32, 256), (256, 1), frozenset({0, 1}), 4, 0, (8, 0)) is None
    assert staging_bytes((8192, 50000), (50000, 1), frozenset({1}), 4, 0, (8, 0)) is None
    assert staging_bytes((4096,), (1,), frozenset({0}), 4, 0, (8, 0)) is None
