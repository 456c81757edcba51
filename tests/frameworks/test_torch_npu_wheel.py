"""The NPU adapter against the newest torch_npu release, read from its wheel with ``ast``.

Checks that every function the adapter calls exists where it looks for it, that
``_record_memory_history``'s real implementation (behind its ``*args, **kwargs`` wrapper)
accepts the keywords passed, that the OOM hook is in the binary, and that the signatures the
test fakes carry (torchfakes.NPU_SIGNATURES) are still the real ones.
"""

from __future__ import annotations

import ast
import inspect
import sys
import zipfile
from typing import Any

import pytest
from torchfakes import NPU_ABSENT, NPU_SIGNATURES

from memforensics.backends import _torch

pytestmark = pytest.mark.frameworks

EMPTY = inspect.Parameter.empty
_NAMED_DEFAULTS = {"sys.maxsize": sys.maxsize}
Params = list[tuple[str, inspect._ParameterKind, Any]]


class Sources:
    """torch_npu's Python modules in the wheel, parsed on demand, with a name resolver."""

    def __init__(self, wheel: zipfile.ZipFile) -> None:
        self.wheel = wheel
        self.names = set(wheel.namelist())
        self._trees: dict[str, tuple[ast.Module, bool] | None] = {}

    def tree(self, module: str) -> tuple[ast.Module, bool] | None:
        """``torch_npu.<module>`` parsed, and whether it is a package (an ``__init__``)."""
        if module not in self._trees:
            base = "torch_npu/" + module.replace(".", "/") if module else "torch_npu"
            self._trees[module] = None
            for path, package in ((f"{base}.py", False), (f"{base}/__init__.py", True)):
                if path in self.names:
                    parsed = ast.parse(self.wheel.read(path).decode(), path)
                    self._trees[module] = (parsed, package)
                    break
        return self._trees[module]

    def find(self, module: str, name: str, depth: int = 0) -> ast.FunctionDef | None:
        """The ``def`` that ``torch_npu.<module>.<name>`` resolves to, following imports."""
        found = self.tree(module)
        if found is None or depth > 8:
            return None
        tree, package = found
        stars: list[str] = []
        for node in _top_level(tree.body):
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
            if isinstance(node, ast.ImportFrom):
                target = _resolve(module, package, node)
                if target is None:
                    continue
                for alias in node.names:
                    if alias.name == "*":
                        stars.append(target)
                    elif (alias.asname or alias.name) == name:
                        return self.find(target, alias.name, depth + 1)
        for target in stars:
            definition = self.find(target, name, depth + 1)
            if definition is not None and self._exported(target, name):
                return definition
        return None

    def _exported(self, module: str, name: str) -> bool:
        """Whether ``from module import *`` brings ``name`` (its ``__all__``, else public)."""
        found = self.tree(module)
        assert found is not None
        for node in found[0].body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                try:
                    return name in ast.literal_eval(node.value)
                except ValueError:
                    return True
        return not name.startswith("_")


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements at module level, including those inside top-level if/try blocks."""
    found: list[ast.stmt] = []
    for node in body:
        found.append(node)
        if isinstance(node, ast.If):
            found.extend(_top_level(node.body + node.orelse))
        elif isinstance(node, ast.Try):
            found.extend(_top_level(node.body + node.orelse + node.finalbody))
            for handler in node.handlers:
                found.extend(_top_level(handler.body))
    return found


def _resolve(module: str, package: bool, node: ast.ImportFrom) -> str | None:
    """The ``torch_npu``-relative module an import names; None outside torch_npu."""
    if node.level == 0:
        name = node.module or ""
        if name == "torch_npu":
            return ""
        return name.removeprefix("torch_npu.") if name.startswith("torch_npu.") else None
    parts = module.split(".") if module else []
    here = parts if package else parts[:-1]
    base = here[: len(here) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _parameters(node: ast.FunctionDef) -> Params:
    """(name, kind, default) for each parameter of ``node``, defaults as values."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[Any] = [EMPTY] * (len(positional) - len(args.defaults))
    defaults += [_value(d) for d in args.defaults]
    kinds = [inspect.Parameter.POSITIONAL_ONLY] * len(args.posonlyargs)
    kinds += [inspect.Parameter.POSITIONAL_OR_KEYWORD] * len(args.args)
    params: Params = [
        (a.arg, kind, default) for a, kind, default in zip(positional, kinds, defaults, strict=True)
    ]
    if args.vararg:
        params.append((args.vararg.arg, inspect.Parameter.VAR_POSITIONAL, EMPTY))
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append((a.arg, inspect.Parameter.KEYWORD_ONLY, EMPTY if d is None else _value(d)))
    if args.kwarg:
        params.append((args.kwarg.arg, inspect.Parameter.VAR_KEYWORD, EMPTY))
    return params


def _value(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _NAMED_DEFAULTS.get(ast.unparse(node), ast.unparse(node))


@pytest.fixture(scope="module")
def sources(torch_npu_wheel: zipfile.ZipFile) -> Sources:
    """The wheel's Python sources."""
    return Sources(torch_npu_wheel)


def _where(path: str) -> tuple[str, str]:
    module, _, name = path.rpartition(".")
    return module, name


def test_every_function_the_adapter_calls_exists(sources: Sources) -> None:
    """torch_npu.npu has each device call, torch_npu.npu.memory each memory call."""
    missing = [
        f"torch_npu.npu.{name}"
        for name in _torch.DEVICE_CALLS + _torch.OPTIONAL_DEVICE_CALLS
        if sources.find("npu", name) is None
    ]
    missing += [
        f"torch_npu.npu.memory.{name}"
        for name in _torch.MEMORY_CALLS
        if sources.find("npu.memory", name) is None
    ]
    assert missing == []


def test_the_fakes_carry_the_real_signatures(sources: Sources) -> None:
    """Every signature torchfakes gives its stand-in torch_npu is the release's own, and the
    names it leaves out (_set_memory_metadata) are absent from the release too."""
    for path in NPU_SIGNATURES:
        module, name = _where(path)
        found = sources.find(module, name)
        assert found is not None, f"torch_npu.{path} is gone"
        assert _parameters(found) == list(NPU_SIGNATURES[path]), f"torch_npu.{path} changed"
    for path in NPU_ABSENT:
        module, name = _where(path)
        assert sources.find(module, name) is None, f"torch_npu.{path} exists now: update fakes"


def test_record_memory_history_implementation_accepts_our_keywords(sources: Sources) -> None:
    """The wrapper forwards to an implementation whose parameters take every keyword
    record_history passes; clear_history is used only where it exists, and it does not."""
    wrapper = sources.find("npu.memory", "_record_memory_history")
    assert wrapper is not None
    kinds = {kind for _, kind, _ in _parameters(wrapper)}
    assert {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD} <= kinds
    called = [
        node.func.id
        for node in ast.walk(wrapper)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id.startswith("_record_memory_history")
    ]
    assert called, "the wrapper no longer forwards to an implementation"
    impl = sources.find("npu.memory", called[0])
    assert impl is not None
    names = [name for name, _, _ in _parameters(impl)]
    assert set(_torch.HISTORY_KEYWORDS) <= set(names)
    assert _torch.CLEAR_KEYWORD not in names  # the fakes say so: update them if this changes


def test_oom_hook_is_in_the_binary(torch_npu_wheel: zipfile.ZipFile) -> None:
    """_npu_attach_out_of_memory_observer is registered by one of the wheel's libraries."""
    hook = b"_npu_attach_out_of_memory_observer"
    libraries = [n for n in torch_npu_wheel.namelist() if n.endswith(".so")]
    assert any(hook in torch_npu_wheel.read(name) for name in libraries)
