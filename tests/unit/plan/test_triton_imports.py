"""Who gets the plan's Triton stand-in and who the installed Triton, import by import."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")  # collected, then deselected, where torch is absent

from memforensics.plan.triton_stand_in.imports import (
    VERSION,
    Triton,
    distributed,
    found_spec,
    importing,
)
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


def _asked_from(module: str, function: Any, *args: Any) -> Any:
    """``function(*args)`` called by code whose module is ``module``."""
    namespace: dict[str, Any] = {"__name__": module}
    exec("def ask(function, *args):\n    return function(*args)\n", namespace)
    return namespace["ask"](function, *args)


def test_a_librarys_find_spec_of_triton_gets_the_stand_ins_and_torchs_the_machines() -> None:
    """``importlib.util.find_spec("triton")`` from a library (transformers'
    ``is_triton_available``) is the stand-in's spec; from torch (``torch.cuda``'s own test) it
    is what the machine has."""
    triton = Triton(Notes(), lambda written: None)
    find_spec = found_spec(lambda name, package=None: INSTALLED, triton)
    spec = _asked_from("transformers.utils.import_utils", find_spec, "triton")
    assert spec is triton.modules["triton"].__spec__
    assert _asked_from("trl.kernels", find_spec, "triton.no_such_module") is None
    assert _asked_from("torch.cuda", find_spec, "triton") is INSTALLED


def test_a_librarys_triton_version_is_the_stand_ins_and_torchs_the_machines() -> None:
    """``importlib.metadata``'s distribution of Triton is the stand-in's, at the stand-in's
    version, for a library, and the machine's for torch."""
    distribution = distributed(lambda name: INSTALLED)
    found = _asked_from("accelerate.utils.imports", distribution, "triton")
    assert found.version == VERSION
    assert found.metadata["Name"] == "triton"
    assert _asked_from("torch._inductor.utils", distribution, "triton") is INSTALLED
    assert _asked_from("accelerate.utils.imports", distribution, "numpy") is INSTALLED
