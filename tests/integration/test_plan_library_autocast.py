"""Library operators that cast in their own CUDA autocast kernel: torchvision's ``roi_align``
(Faster and Mask R-CNN's box and mask heads) runs in float32 under ``torch.autocast("cuda")``,
its input and boxes cast to float32 and its result back to the input's dtype. Each script
registers ``torchvision::roi_align`` as torchvision registers it (its schema, a CPU kernel, and
its ``meta`` kernel with its dtype check, ``torchvision/_meta_registrations.py``); torchvision
is not among the test dependencies, and the plan knows the operator by name only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, printed_facts, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

REGISTERED = """
import json
import torch

lib = torch.library.Library("torchvision", "DEF")
lib.define(
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor"
)

def _roi_align_cpu(input, rois, spatial_scale, pooled_height, pooled_width, *rest):
    return input.new_zeros((rois.shape[0], input.shape[1], pooled_height, pooled_width))

def _roi_align_meta(input, rois, spatial_scale, pooled_height, pooled_width, *rest):
    torch._check(rois.size(1) == 5, lambda: "rois must have shape as Tensor[K, 5]")
    torch._check(
        input.dtype == rois.dtype,
        lambda: "Expected tensor for input to have the same type as tensor for rois; "
        f"but type {input.dtype} does not equal {rois.dtype}",
    )
    return input.new_empty((rois.size(0), input.size(1), pooled_height, pooled_width))

lib.impl("roi_align", _roi_align_cpu, "CPU")
lib.impl("roi_align", _roi_align_meta, "Meta")
"""

POOLED = (
    REGISTERED
    + """
conv = torch.nn.Conv2d(3, 64, 3, padding=1, device="cuda")
images = torch.randn(2, 3, 100, 100, device="cuda")
rois = torch.tensor([[0, 0.0, 0.0, 50.0, 50.0]] * 300, device="cuda")
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    features = conv(images)
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    pooled = torch.ops.torchvision.roi_align(features, rois, 1.0, 7, 7, 2, True)
    during = torch.cuda.max_memory_allocated() - before
    after = torch.cuda.memory_allocated() - before
print(json.dumps({"features": str(features.dtype), "pooled": str(pooled.dtype),
                  "shape": list(pooled.shape), "during": during, "after": after}))
"""
)


def _block(nbytes: int) -> int:
    """What the caching allocator hands out for ``nbytes``: a multiple of 512 B."""
    return -(-nbytes // 512) * 512


def test_roi_align_under_autocast_runs_in_float32_with_its_kernels_casts(tmp_path: Path) -> None:
    """``roi_align`` of float16 features and float32 boxes under ``torch.autocast("cuda")``
    runs (torchvision's dtype check passes) and returns float16, holding at its peak what its
    autocast kernel holds: the features cast to float32, the float32 result and its float16
    cast; after it only the float16 result."""
    script(tmp_path, POOLED)
    facts = printed_facts(tmp_path, "--device-capability", "8.0")
    features = 2 * 64 * 100 * 100
    pooled = 300 * 64 * 7 * 7
    result = _block(pooled * 2)
    during = _block(features * 4) + _block(pooled * 4) + result
    assert facts == {
        "features": "torch.float16",
        "pooled": "torch.float16",
        "shape": [300, 64, 7, 7],
        "during": during,
        "after": result,
    }


UNFOLLOWED = """
import json
import torch

lib = torch.library.Library("mylib", "DEF")
lib.define("scale(Tensor x) -> Tensor")
lib.impl("scale", lambda x: x * 2, "CPU")
lib.impl("scale", lambda x: torch.empty_like(x), "Meta")

def _scale_autocast(x):
    with torch._C._ExcludeDispatchKeyGuard(
        torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)
    ):
        return torch.ops.mylib.scale(x.float())

lib.impl("scale", _scale_autocast, "AutocastCUDA")
with torch.autocast("cuda"):
    out = torch.ops.mylib.scale(torch.ones(4, device="cuda", dtype=torch.float16))
print(json.dumps({"dtype": str(out.dtype)}))
"""


def test_a_library_autocast_kernel_the_plan_does_not_know_is_said(tmp_path: Path) -> None:
    """An operator of another library with its own CUDA autocast kernel runs uncast, and the
    plan says once that it did not follow that kernel."""
    script(tmp_path, UNFOLLOWED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == {"dtype": "torch.float16"}
    assert "CUDA autocast kernel is not followed" in done.stdout + done.stderr
