"""cuBLASLt's own workspace under the real ``memforensics plan``: with
``TORCH_CUBLASLT_UNIFIED_WORKSPACE=0`` the installed torch (2.12 and later) keeps a 1 MiB
workspace per handle and stream for the products that reach cuBLASLt (``addmm`` with a 1-D
bias: ``nn.Linear`` with a bias on a 2-D input), beside cuBLAS's; unset, they share cuBLAS's."""

from __future__ import annotations

from pathlib import Path

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

LT = 1 << 20  # CUBLASLT_WORKSPACE_SIZE's default
LINEAR = """
import json
import torch
layer = torch.nn.Linear(256, 128, bias={bias}).cuda()
x = torch.randn(32, 256, device="cuda")
start = torch.cuda.memory_allocated()
y = layer(x)
first = torch.cuda.memory_allocated() - start - y.untyped_storage().nbytes()
del y
y = layer(x)
second = torch.cuda.memory_allocated() - start - y.untyped_storage().nbytes()
print(json.dumps({{"first": first, "second": second}}))
"""


def _kept(tmp_path: Path, bias: bool) -> dict[str, object]:
    """What stays allocated beside the output after the first and second forward."""
    script(tmp_path, LINEAR.format(bias=bias))
    return printed_facts(tmp_path, "--device-capability", "8.0")


def test_a_separate_cublaslt_workspace_is_kept_after_a_linear_with_bias(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the variable 0, a linear with a bias keeps one more block of cuBLASLt's 1 MiB than
    with it unset, taken at the first forward and not again at the second."""
    shared = _kept(tmp_path, bias=True)
    monkeypatch.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "0")
    separate = _kept(tmp_path, bias=True)
    assert separate["first"] == shared["first"] + LT  # type: ignore[operator]
    assert separate["second"] == separate["first"]


def test_a_linear_without_bias_takes_no_cublaslt_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a bias the product goes to cuBLAS alone: the variable changes nothing."""
    shared = _kept(tmp_path, bias=False)
    monkeypatch.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "0")
    assert _kept(tmp_path, bias=False) == shared


def test_disable_addmm_cuda_lt_keeps_a_linear_with_bias_on_cublas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DISABLE_ADDMM_CUDA_LT=1`` sends ``addmm`` with a bias to cuBLAS: no cuBLASLt
    workspace even with the unified one switched off."""
    shared = _kept(tmp_path, bias=True)
    monkeypatch.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "0")
    monkeypatch.setenv("DISABLE_ADDMM_CUDA_LT", "1")
    assert _kept(tmp_path, bias=True) == shared
