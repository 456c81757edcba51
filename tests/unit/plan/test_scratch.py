"""cuBLAS's workspace as the installed torch sizes it: by capability, by torch release, and by
``CUBLAS_WORKSPACE_CONFIG`` (``aten/src/ATen/cuda/CublasHandlePool.cpp``); cuBLASLt's own, by
release and ``TORCH_CUBLASLT_UNIFIED_WORKSPACE`` / ``CUBLASLT_WORKSPACE_SIZE``."""

from __future__ import annotations

import pytest

from memforensics.plan.scratch import (
    LtWorkspace,
    cublas_workspace_bytes,
    cublaslt_workspace,
    staging_bytes,
    torch_release,
)

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


UNSET: dict[str, str] = {}
OFF = {"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "0"}
ON = {"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "1"}
LT = 1 << 20  # CUBLASLT_WORKSPACE_SIZE's default, 1024 KiB


@pytest.mark.parametrize(
    ("release", "env", "expected"),
    [
        ((2, 13), UNSET, None),  # shared with cuBLAS's unless the variable is 0
        ((2, 13), ON, None),
        ((2, 13), OFF, LtWorkspace(LT, kept=True)),
        ((2, 12), OFF, LtWorkspace(LT, kept=True)),
        ((2, 11), UNSET, LtWorkspace(LT, kept=True)),  # sized as shared, taken apart (H200)
        ((2, 11), ON, None),
        ((2, 10), UNSET, LtWorkspace(LT, kept=True)),
        ((2, 9), UNSET, LtWorkspace(LT, kept=True)),  # the real torch 2.9 snapshot's 1 MiB
        ((2, 9), ON, None),  # opt-in sharing
        ((2, 8), UNSET, LtWorkspace(LT, kept=False)),  # each call its own, freed after it
        ((2, 8), ON, None),
        ((2, 7), ON, LtWorkspace(LT, kept=False)),  # the variable not read yet
        ((2, 1), UNSET, LtWorkspace(LT, kept=False)),
    ],
)
def test_cublaslts_workspace_follows_the_release_and_the_unified_switch(
    release: tuple[int, int], env: dict[str, str], expected: LtWorkspace | None
) -> None:
    """cuBLASLt shares cuBLAS's workspace, keeps its own per handle and stream, or takes one
    per call, as each torch release decides."""
    assert cublaslt_workspace((8, 0), env, release) == expected


def test_cublaslts_workspace_size_is_read_in_kib() -> None:
    """``CUBLASLT_WORKSPACE_SIZE`` sets cuBLASLt's own workspace in KiB; a value that is not a
    number keeps 1 MiB; Hopper takes the same default as Ampere."""
    assert cublaslt_workspace((8, 0), {**OFF, "CUBLASLT_WORKSPACE_SIZE": "4096"}, (2, 13)) == (
        LtWorkspace(4 * LT, kept=True)
    )
    assert cublaslt_workspace((8, 0), {**OFF, "CUBLASLT_WORKSPACE_SIZE": "big"}, (2, 13)) == (
        LtWorkspace(LT, kept=True)
    )
    assert cublaslt_workspace((9, 0), OFF, (2, 13)) == LtWorkspace(LT, kept=True)


def test_torch_2_11_caps_its_separate_cublaslt_workspace_at_cublass() -> None:
    """Where the size rule already shares but the workspace does not (torch 2.11, variable
    unset), cuBLASLt's separate block is no larger than cuBLAS's workspace."""
    env = {"CUBLASLT_WORKSPACE_SIZE": "65536", "CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    assert cublaslt_workspace((8, 0), env, (2, 11)) == LtWorkspace(16 * 1024 * 8, kept=True)


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


def test_a_reduction_of_no_elements_launches_no_kernel_and_stages_nothing() -> None:
    """An empty reduction (the rows of an expert no token was routed to, summed per row)
    only fills its output, as ``sum_out`` does, so it stages nothing (it divided by its zero
    outputs)."""
    assert staging_bytes((0, 512), (512, 1), frozenset({1}), 4, 0, (9, 0)) is None
    assert staging_bytes((0, 2, 64), (128, 64, 1), frozenset({1}), 4, 0, (9, 0)) is None
