"""The CUDA toolkit in a plan: ``torch.utils.cpp_extension.CUDA_HOME`` names one whose
``nvcc`` answers its version, as on the GPU node a training job runs on.

A CPU build of torch sets ``CUDA_HOME`` to None whatever the host has, and a host without a
GPU seldom has a toolkit, while a node that trains with Megatron-LM or builds DeepSpeed's ops
has one. Code that reads the toolkit's version at run time (Megatron-LM's initialization runs
``CUDA_HOME/bin/nvcc -V`` to choose its kernels' architectures) then stops with a
``TypeError`` on ``None + "/bin/nvcc"``. While the script runs, the plan's own toolkit folder
stands in where the installed torch names none: its ``bin/nvcc`` prints the release of the
planned build's CUDA (``torch.version.cuda`` as the plan answers it) for ``-V`` and
``--version``, and refuses anything else with one line, since compiling CUDA code needs a real
toolkit. A host with a toolkit of its own keeps it.

The folder goes with the run. ``CUDA_HOME`` is set in ``torch.utils.cpp_extension`` when the
script imports it (the import costs half a second, so a plan never imports it itself), not in
the environment, which the script's child processes would inherit.
"""

from __future__ import annotations

import shlex
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memforensics.plan.patches import LibraryReplacement

CPP_EXTENSION = "torch.utils.cpp_extension"
REFUSED = (
    "nvcc fatal   : the planned node's CUDA toolkit (memforensics plan) answers its version "
    "only: compiling CUDA code needs a real toolkit"
)


def _nvcc(release: str) -> str:
    """The program: ``nvcc -V``'s lines for ``release`` (``13.0``), else :data:`REFUSED`."""
    version = "\n".join(
        (
            "nvcc: NVIDIA (R) Cuda compiler driver",
            "Copyright (c) 2005-2026 NVIDIA Corporation",
            "Built on memforensics plan (the planned node's toolkit)",
            f"Cuda compilation tools, release {release}, V{release}.0",
            f"Build cuda_{release}.r{release}/compiler.0_0",
        )
    )
    return (
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  -V|--version) printf '%s\\n' {shlex.quote(version)}; exit 0 ;;\n"
        "esac\n"
        f"echo {shlex.quote(REFUSED)} >&2\n"
        "exit 1\n"
    )


class Toolkit:
    """The planned node's toolkit folder while the run lasts (:meth:`installed`), and the
    ``CUDA_HOME`` it answers (:meth:`row`)."""

    def __init__(self, release: Callable[[], str]) -> None:
        self._release = release
        self.home: str | None = None

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The folder with its ``bin/nvcc`` made inside, and gone after."""
        with tempfile.TemporaryDirectory(prefix="memforensics-cuda-") as home:
            nvcc = Path(home) / "bin" / "nvcc"
            nvcc.parent.mkdir()
            nvcc.write_text(_nvcc(self._release()))
            nvcc.chmod(0o755)
            self.home = home
            try:
                yield
            finally:
                self.home = None

    def _answered(self, original: Any) -> Any:
        """``CUDA_HOME``: the installed torch's where it names a toolkit, else the plan's."""
        return original if original is not None or self.home is None else self.home

    def row(self) -> LibraryReplacement:
        """``torch.utils.cpp_extension.CUDA_HOME`` answered from the moment the script imports
        it."""
        return LibraryReplacement(
            CPP_EXTENSION,
            "CUDA_HOME",
            self._answered,
            "a GPU node has a CUDA toolkit whose nvcc answers its version; the CPU build names "
            "none",
        )
