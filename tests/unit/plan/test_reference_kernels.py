"""torch's Python references run as ``meta`` kernels without importing dynamo, and are left as
torch had them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.torch

SRC = str(Path(__file__).resolve().parents[3] / "src")

CHECK = textwrap.dedent(
    """
    import json, sys
    import torch
    from memforensics.plan import reference_kernels as kernels

    code = kernels._wrapper_code()
    before = len(list(kernels._wrapped_references(code)))
    x = torch.empty(8, 8, device="meta")
    with kernels.unwrapped_until_dynamo():
        inside = len(list(kernels._wrapped_references(code)))
        made = list(((x + 1).relu() * torch.sigmoid(x)).shape)
        quiet = "torch._dynamo" not in sys.modules
    after = len(list(kernels._wrapped_references(code)))
    print(json.dumps({"before": before, "inside": inside, "after": after, "made": made,
                      "quiet": quiet}))
    """
)


def test_references_run_without_dynamo_inside_and_are_torchs_own_after() -> None:
    """Inside, elementwise operators on ``meta`` (``add``, ``relu``, ``sigmoid``) run their
    references without importing ``torch._dynamo``; every reference waits for its disabled
    function inside and, after, again as torch made it (nothing of the plan's left on it)."""
    done = subprocess.run(
        [sys.executable, "-c", CHECK],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["made"] == [8, 8]
    assert found["quiet"] is True
    assert found["before"] > 100  # every elementwise reference, unary ones included
    assert found["inside"] == 0
    assert found["after"] == found["before"]
