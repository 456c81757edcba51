"""The stand-in package a planned script imports as ``triton``, and the import hooks that hand
it to every importer outside torch (``import`` statements and ``importlib.import_module``)."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import pathlib
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from memforensics.plan.askers import caller_torch_own, torch_own
from memforensics.plan.triton_stand_in import testing
from memforensics.plan.triton_stand_in.driver import Driver
from memforensics.plan.triton_stand_in.kernels import (
    Autotuner,
    Config,
    Heuristics,
    JITFunction,
    KernelInterface,
    Launches,
    arg_names,
    cdiv,
    next_power_of_2,
)
from memforensics.plan.triton_stand_in.language import Language, constexpr
from memforensics.plan.values import Notes

PINNED = "3.7.1"
"""The Triton a CUDA build of torch 2.13.0 brings: its Linux wheels require ``triton==3.7.1``
(the wheel's ``Requires-Dist``), so on the GPU a script that imports torch finds that release.
Libraries choose their paths by it (transformers' MXFP4 kernels need 3.4 or later), so the
stand-in reports it, and takes the path those libraries take on the GPU."""

VERSION = f"{PINNED}+memforensics.plan"
"""The stand-in's ``triton.__version__`` and its distribution's version: :data:`PINNED`, and a
local label that says whose (a local label sorts after the release it labels, so every
``>=`` test on the release holds)."""


class Triton:
    """The stand-in package: ``triton`` and its submodules a script imports, made once per
    planned run."""

    def __init__(self, notes: Notes, written: Callable[[list[Any]], None]) -> None:
        self.launches = Launches(notes, written)
        self.modules: dict[str, types.ModuleType] = {}
        self._module(
            "triton",
            __version__=VERSION,
            Config=Config,
            KernelInterface=KernelInterface,
            jit=self.jit,
            autotune=self.autotune,
            heuristics=self.heuristics,
            cdiv=cdiv,
            next_power_of_2=next_power_of_2,
            set_allocator=lambda allocator: None,
        )
        language = Language("triton.language")
        language.__dict__["constexpr"] = constexpr
        self._add(language)
        self._module(
            "triton.testing",
            do_bench=testing.do_bench,
            Benchmark=testing.Benchmark,
            perf_report=testing.perf_report,
        )
        driver = types.SimpleNamespace(active=Driver())
        self._module("triton.runtime", driver=driver, Autotuner=Autotuner, Heuristics=Heuristics)
        self._module("triton.runtime.jit", JITFunction=JITFunction, KernelInterface=KernelInterface)
        self._module("triton.runtime.autotuner", Autotuner=Autotuner, Heuristics=Heuristics)
        self._module("triton.runtime.driver", driver=driver)

    def _module(self, name: str, **names: Any) -> types.ModuleType:
        module = types.ModuleType(name)
        module.__dict__.update(names)
        return self._add(module)

    def _add(self, module: types.ModuleType) -> types.ModuleType:
        module.__spec__ = importlib.machinery.ModuleSpec(
            module.__name__, None, origin="memforensics plan", is_package=True
        )
        self.modules[module.__name__] = module
        parent, _, child = module.__name__.rpartition(".")
        if parent and not hasattr(self.modules[parent], child):  # runtime.driver: the driver
            setattr(self.modules[parent], child, module)
        return module

    def jit(self, fn: Callable[..., Any] | None = None, **options: Any) -> Any:
        """``triton.jit``, bare or with options."""
        if fn is None:
            return lambda fn: JITFunction(fn, self.launches, **options)
        return JITFunction(fn, self.launches, **options)

    def autotune(
        self,
        configs: Sequence[Config],
        key: Sequence[str],
        prune_configs_by: dict[str, Any] | None = None,
        reset_to_zero: Sequence[str] | None = None,
        restore_value: Sequence[str] | None = None,
        pre_hook: Callable[..., Any] | None = None,
        post_hook: Callable[..., Any] | None = None,
        warmup: float | None = None,
        rep: float | None = None,
        use_cuda_graph: bool = False,
        do_bench: Callable[..., Any] | None = None,
        cache_results: bool = False,
    ) -> Callable[[Any], Autotuner]:
        """``triton.autotune``: configs benchmarked with ``do_bench`` (or the script's own)."""

        def bench(fn: Callable[[], Any], quantiles: Sequence[float]) -> Any:
            if do_bench is not None:
                return do_bench(fn, quantiles=quantiles)
            return testing.do_bench(fn, warmup=warmup or 25, rep=rep or 100, quantiles=quantiles)

        def decorate(fn: Any) -> Autotuner:
            return Autotuner(
                fn, arg_names(fn), configs, key, reset_to_zero, restore_value,
                pre_hook, post_hook, prune_configs_by, bench,
            )  # fmt: skip

        return decorate

    def heuristics(self, values: dict[str, Callable[..., Any]]) -> Callable[[Any], Heuristics]:
        """``triton.heuristics``."""
        return lambda fn: Heuristics(fn, arg_names(fn), values)

    def imported(self, name: str, fromlist: Sequence[str] | None) -> types.ModuleType:
        """What ``import name`` (``from name import fromlist``) binds: the top package, or the
        named module for a ``from`` import; ModuleNotFoundError for what the stand-in lacks."""
        module = self.find(name)
        return module if fromlist else self.modules["triton"]

    def find(self, name: str) -> types.ModuleType:
        """The stand-in's module ``name``; ModuleNotFoundError for what it lacks."""
        if name in self.modules:
            return self.modules[name]
        if name.startswith("triton.language."):
            parent = self.find(name.rpartition(".")[0])
            found = getattr(parent, name.rpartition(".")[2])
            if isinstance(found, types.ModuleType):
                return found
        raise ModuleNotFoundError(
            f"No module named {name!r} (the plan's stand-in for Triton answers "
            + ", ".join(sorted(self.modules))
            + ")",
            name=name,
        )


class Distribution(importlib.metadata.Distribution):
    """The stand-in's installed distribution as ``importlib.metadata`` reads it: its name and
    ``triton.__version__``, no files."""

    def read_text(self, filename: str) -> str | None:
        if filename in ("METADATA", "PKG-INFO"):
            return f"Metadata-Version: 2.1\nName: triton\nVersion: {VERSION}\n"
        return None

    def locate_file(self, path: Any) -> pathlib.Path:
        return pathlib.Path(str(path))


def _triton(name: str) -> bool:
    """Whether ``name`` is ``triton`` or one of its modules (tested without splitting it: every
    import the script's process makes passes here)."""
    return name.startswith("triton") and (len(name) == 6 or name[6] == ".")


def importing(original: Callable[..., Any], triton: Triton) -> Callable[..., Any]:
    """``builtins.__import__`` with the script's imports of ``triton`` answered by ``triton``.

    Every import the process makes passes here, torch's own from C++ among them (thousands a
    training step): a name that does not start with ``triton`` is handed on after one slice
    compared, no call made."""

    def __import__(
        name: str,
        globals: dict[str, Any] | None = None,
        locals: dict[str, Any] | None = None,
        fromlist: Sequence[str] | None = (),
        level: int = 0,
    ) -> Any:
        if name[:6] == "triton" and level == 0 and _triton(name) and not torch_own(globals):
            return triton.imported(name, fromlist)
        return original(name, globals, locals, fromlist, level)

    return __import__


def imported_by_name(original: Callable[..., Any], triton: Triton) -> Callable[..., Any]:
    """``importlib.import_module`` with the script's (and its libraries') ``triton`` modules
    answered by ``triton``: libraries that test for Triton by importing it so (Liger Kernel's
    capability gates) find it as they would on the GPU."""

    def import_module(name: str, package: str | None = None) -> Any:
        if _triton(name) and not caller_torch_own():
            return triton.find(name)
        return original(name, package)

    return import_module


def found_spec(original: Callable[..., Any], triton: Triton) -> Callable[..., Any]:
    """``importlib.util.find_spec`` with the script's (and its libraries') ``triton`` modules
    answered by the stand-in's specs: libraries that test for Triton so (transformers' and
    Accelerate's ``is_triton_available``, which TRL's fused log-probabilities follow) find it
    as they would on the GPU, where a CUDA build of torch brings it."""

    def find_spec(name: str, package: str | None = None) -> Any:
        if _triton(name) and not caller_torch_own():
            module = triton.modules.get(name)
            return None if module is None else module.__spec__
        return original(name, package)

    return find_spec


def distributed(original: Callable[..., Any]) -> Callable[..., Any]:
    """``importlib.metadata.distribution`` (which ``version`` and ``metadata`` call) with the
    script's ``triton`` answered by the stand-in's: a library that reads Triton's installed
    version finds the stand-in's, as it finds the installed one on the GPU."""
    stand_in = Distribution()

    def distribution(distribution_name: str) -> Any:
        if distribution_name.lower() == "triton" and not _asked_by_torch():
            return stand_in
        return original(distribution_name)

    return distribution


def _asked_by_torch() -> bool:
    """Whether the code that asked ``importlib.metadata`` (through ``version`` or ``metadata``,
    skipped) is torch's (or the plan's)."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("importlib"):
        frame = frame.f_back
    return frame is not None and torch_own(frame.f_globals)
