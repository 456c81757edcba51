"""Batch norm under ``memforensics plan`` in the layout of the backend CUDA picks
(``_batch_norm_impl_index`` in ``aten/src/ATen/native/Normalization.cpp``): cuDNN's branch
reads a copy of its input contiguous in the suggested memory format, keeps it for the
backward and makes its output in that format; the native kernel, for a bfloat16 input, keeps
the input's strides and makes no copy."""

from __future__ import annotations

import pytest
from planned import printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

torch = pytest.importorskip("torch")

MEASURED = """
import json
import torch

def kept(make, norm):
    x = make()
    start = torch.cuda.memory_allocated()
    y = norm(x)
    return {"kept": torch.cuda.memory_allocated() - start, "contiguous": y.is_contiguous()}

seq = torch.nn.BatchNorm1d(128).cuda()
image = torch.nn.BatchNorm2d(16).cuda()
print(json.dumps({
    "transposed": kept(lambda: torch.randn(8, 63, 128, device="cuda").transpose(1, 2), seq),
    "channels_last": kept(
        lambda: torch.randn(8, 16, 8, 8, device="cuda").to(memory_format=torch.channels_last),
        image,
    ),
    "bfloat16": kept(
        lambda: torch.randn(8, 63, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2),
        torch.nn.BatchNorm1d(128).cuda().bfloat16(),
    ),
}))
"""

SEQUENCE = 8 * 63 * 128 * 4
"""The float32 ``[8, 128, 63]`` batch (258,048 B, a multiple of 512)."""
STATISTICS = 2 * 512
"""``save_mean`` and ``save_invstd``: 128 float32 each, one 512-B block each."""

Found = dict[str, dict[str, object]]
"""What the planned script printed: per batch norm, the bytes it kept and its output's layout."""


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> Found:
    """What the planned script measured around each batch norm."""
    folder = tmp_path_factory.mktemp("batch_norm")
    script(folder, MEASURED)
    return printed_facts(folder, "--device-capability", "9.0")  # type: ignore[return-value]


def test_a_transposed_input_is_copied_contiguous_for_cudnn(found: Found) -> None:
    """``BatchNorm1d`` over a transposed sequence keeps cuDNN's contiguous copy of its input
    beside a contiguous output and the statistics."""
    assert found["transposed"] == {"kept": 2 * SEQUENCE + STATISTICS, "contiguous": True}


def test_a_channels_last_input_is_read_as_it_is(found: Found) -> None:
    """A channels-last image is contiguous in its suggested format: no copy, and the output is
    channels-last, not contiguous."""
    assert found["channels_last"] == {"kept": 8 * 16 * 8 * 8 * 4 + 2 * 512, "contiguous": False}


def test_a_bfloat16_input_takes_the_native_kernel(found: Found) -> None:
    """cuDNN is not picked for bfloat16: the native kernel makes no copy and keeps the input's
    strides, with float32 statistics."""
    assert found["bfloat16"] == {"kept": SEQUENCE // 2 + STATISTICS, "contiguous": False}
