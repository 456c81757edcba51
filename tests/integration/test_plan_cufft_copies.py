"""FFTs under ``memforensics plan`` take the buffers CUDA's cuFFT operators make beside their
outputs (``aten/src/ATen/native/cuda/SpectralOps.cpp``): a complex-to-real transform's clone of
its input, a real-to-complex one's copy of an input not aligned as complex numbers and its
second buffer off the optimised path, each freed as the operator returns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

torch = pytest.importorskip("torch")

MEASURED = """
import json
import torch

{setup}
start = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
y = {transform}
print(json.dumps({{
    "kept": torch.cuda.memory_allocated() - start,
    "peak": torch.cuda.max_memory_allocated() - start,
}}))
"""

SPECTRUM = 32 * 32 * 16 * 9 * 8
"""A complex64 spectrum of 32 samples of 32 channels on a 16x16 grid, its last dimension
halved as ``rfftn`` keeps it (1,179,648 B)."""
GRID = 32 * 32 * 16 * 16 * 4
"""The float32 field on the 16x16 grid (1,048,576 B)."""


def _measured(folder: Path, setup: str, transform: str) -> dict[str, int]:
    """What the planned script measured around ``transform``."""
    script(folder, MEASURED.format(setup=setup, transform=transform))
    done = plan(folder, "--device-capability", "9.0", "train.py")
    assert done.returncode == 0, done.stderr
    found: dict[str, int] = json.loads(done.stdout.splitlines()[0])
    return found


def test_an_inverse_real_fft_transforms_a_clone_of_its_input(tmp_path: Path) -> None:
    """``_fft_c2r_cufft`` makes the field, then clones the spectrum, which cuFFT may overwrite:
    the clone is on top of the field at the peak and only the field is kept (an FNO's
    ``irfftn`` in every spectral layer)."""
    found = _measured(
        tmp_path,
        'x = torch.randn(32, 32, 16, 9, dtype=torch.complex64, device="cuda")',
        "torch.fft.irfftn(x, s=(16, 16), dim=(-2, -1))",
    )
    assert found["kept"] == GRID
    assert found["peak"] == GRID + SPECTRUM


def test_a_real_fft_is_made_with_its_output_alone(tmp_path: Path) -> None:
    """``rfftn`` over the last two dimensions of a contiguous field is one cuFFT plan writing
    the spectrum: nothing beside it."""
    found = _measured(
        tmp_path,
        'x = torch.randn(32, 32, 16, 16, device="cuda")',
        "torch.fft.rfftn(x, dim=(-2, -1))",
    )
    assert found["kept"] == SPECTRUM
    assert found["peak"] == SPECTRUM


def test_a_real_fft_of_a_misaligned_view_copies_it(tmp_path: Path) -> None:
    """A view starting one float32 into its storage is not aligned as complex numbers, so
    ``_fft_r2c_cufft`` transforms a contiguous copy of it, freed as it returns."""
    found = _measured(
        tmp_path,
        'x = torch.randn(4097, device="cuda")[1:]',
        "torch.fft.rfft(x)",
    )
    spectrum = 16_896  # 2,049 complex64 values (16,392 B) in 512-byte blocks
    assert found["kept"] == spectrum
    assert found["peak"] == spectrum + 4096 * 4


def test_a_real_fft_over_the_first_dimensions_takes_a_second_buffer(tmp_path: Path) -> None:
    """Dimensions starting with 0 and 1 leave the optimised path: the last one's real-to-complex
    transform, then the rest's complex-to-complex one into a second spectrum-sized buffer,
    one of the two freed as it returns."""
    found = _measured(
        tmp_path,
        'x = torch.randn(16, 16, 1024, device="cuda")',
        "torch.fft.rfftn(x, dim=(0, 1))",
    )
    spectrum = 16 * 9 * 1024 * 8
    assert found["kept"] == spectrum
    assert found["peak"] == 2 * spectrum


def test_an_fft_over_four_dimensions_takes_a_second_buffer(tmp_path: Path) -> None:
    """cuFFT transforms at most three dimensions at a time: ``_fft_c2c_cufft`` writes the first
    three into the output, then the fourth from it into a second buffer, which it returns,
    freeing the first."""
    found = _measured(
        tmp_path,
        'x = torch.randn(8, 8, 8, 64, dtype=torch.complex64, device="cuda")',
        "torch.fft.fftn(x)",
    )
    size = 8 * 8 * 8 * 64 * 8
    assert found["kept"] == size
    assert found["peak"] == 2 * size


def test_an_inverse_real_fft_over_the_first_dimensions_runs_its_complex_stage_first(
    tmp_path: Path,
) -> None:
    """Off the optimised path, ``_fft_c2r_cufft`` transforms all but the last dimension
    complex-to-complex into an input-sized buffer, then that one to the real output."""
    found = _measured(
        tmp_path,
        'x = torch.randn(16, 9, 1024, dtype=torch.complex64, device="cuda")',
        "torch.fft.irfftn(x, s=(16, 16), dim=(0, 1))",
    )
    spectrum, field = 16 * 9 * 1024 * 8, 16 * 16 * 1024 * 4
    assert found["kept"] == field
    assert found["peak"] == field + spectrum
