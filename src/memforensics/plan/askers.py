"""Whose code asks: torch's own (and the plan's), or the script's and its libraries'.

Some answers differ by who asks. torch's own Python must see what the plan runs on (a stand-in
is a ``meta`` tensor; the installed Triton, or none), because it chooses kernels by it and
``meta`` has no CUDA-only ones. The script and the libraries it calls (Hugging Face, TRL,
Liger Kernel) must see what a GPU run shows them (a CUDA tensor; a Triton to import), because
they choose their own code paths by it, and those paths decide what is allocated. A frame's
module name tells them apart.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

OWN = ("torch", "memforensics", "triton")
"""The top-level packages whose code sees what the plan runs on. The installed Triton (a CUDA
build of torch brings one) is reached only through torch's own code (Inductor), as the script's
``import triton`` gets the plan's stand-in: its own lazy imports (``triton.language.core``
inside ``@triton.jit``) must find the installed package too."""


def torch_own(namespace: Mapping[str, Any] | None) -> bool:
    """Whether code whose globals are ``namespace`` is torch's (or the plan's)."""
    name = str((namespace or {}).get("__name__", ""))
    return name.split(".", maxsplit=1)[0] in OWN


def caller_torch_own(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels above this call (the caller of the function that
    asks, by default) runs torch's (or the plan's) code."""
    return torch_own(sys._getframe(depth).f_globals)
