"""Who gets the plan's Triton stand-in and who the installed Triton, import by import."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from memforensics.plan.triton_stand_in.imports import Triton, importing
from memforensics.plan.values import Notes

pytestmark = [pytest.mark.torch]

INSTALLED = object()
"""What the interpreter's own ``__import__`` hands back in these tests: the installed package."""


def _hook() -> tuple[Any, Triton]:
    triton = Triton(Notes(), lambda written: None)
    return importing(lambda *args: INSTALLED, triton), triton


@pytest.mark.parametrize("importer", ["triton.runtime.jit", "torch._inductor.runtime.hints"])
def test_the_installed_tritons_own_imports_and_torchs_find_the_installed_package(
    importer: str,
) -> None:
    """A CUDA build brings Triton, which Inductor imports; ``@triton.jit`` then imports
    ``triton.language.core`` lazily from Triton's own module, which got the stand-in (that has
    no such module), so every ``torch.compile`` on a CUDA build stopped. Imports made by
    Triton's own code, as by torch's, reach the installed package."""
    hook, _ = _hook()
    found = hook("triton.language.core", {"__name__": importer}, None, ("core",), 0)
    assert found is INSTALLED


def test_the_scripts_import_of_triton_gets_the_stand_in() -> None:
    """The script's (and its libraries') ``import triton`` is the plan's stand-in."""
    hook, triton = _hook()
    found = hook("triton.language", {"__name__": "__main__"}, None, ("language",), 0)
    assert found is triton.modules["triton.language"]
    assert hook("triton", {"__name__": "liger_kernel.ops"}, None, (), 0) is triton.modules["triton"]
