"""The planned node's CUDA toolkit: ``cpp_extension.CUDA_HOME`` names one whose ``nvcc`` answers
the planned build's release while a plan runs, and torch's own answer is back after."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from memforensics.allocator import parse_conf  # noqa: E402
from memforensics.plan import device_spec, run_planned  # noqa: E402

pytestmark = [pytest.mark.torch]

SPEC = device_spec(1 << 30, (9, 0), 128 << 20, parse_conf(None))


def test_a_script_reads_the_planned_toolkits_nvcc_version_and_cannot_compile() -> None:
    """Inside a plan, ``CUDA_HOME/bin/nvcc -V`` prints the release ``torch.version.cuda``
    answers (Megatron-LM reads it at start), compiling is refused with one line, and after
    the run ``CUDA_HOME`` is the installed torch's again and the folder is gone."""
    from torch.utils import cpp_extension

    own = cpp_extension.CUDA_HOME
    seen: dict[str, Any] = {}

    def run() -> None:
        home = cpp_extension.CUDA_HOME
        nvcc = os.path.join(home, "bin", "nvcc")
        seen["home"], seen["cuda"] = home, torch.version.cuda
        seen["version"] = subprocess.check_output([nvcc, "-V"], text=True)
        compiled = [nvcc, "-c", "k.cu"]
        seen["compile"] = subprocess.run(compiled, capture_output=True, text=True, check=False)

    run_planned(SPEC, run, lambda path, snapshot: None)
    if own is None:  # the CPU build (and a host without a toolkit): the plan's
        assert f"release {seen['cuda']}, V{seen['cuda']}" in seen["version"]
        assert seen["compile"].returncode != 0
        assert "answers its version only" in seen["compile"].stderr
        assert not os.path.exists(seen["home"])
    else:  # a host's own toolkit is kept
        assert seen["home"] == own
    assert own == cpp_extension.CUDA_HOME
