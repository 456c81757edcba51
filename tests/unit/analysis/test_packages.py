"""The analysis packages keep their shape: each ``__init__`` only re-exports, imports flow one way
(type-only imports included), and the CLI reaches analysis only through the packages' names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import memforensics.analysis

ROOT = Path(memforensics.analysis.__file__).parent
COMMANDS = ROOT.parent / "cli" / "commands"
PACKAGES = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file())
ALLOWED_OUTSIDE = ("memforensics._units", "memforensics._errors", "memforensics._version")
ALLOWED_OUTSIDE += ("memforensics._layout", "memforensics.allocator")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (``if TYPE_CHECKING:`` blocks included);
    ``from package import name`` counts as the submodule when ``name`` is one."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in MODULES else node.module)
    return found


def _package(module: str) -> str:
    return ".".join(module.split(".")[:3])


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path, or None when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def _sort_key(name: str) -> tuple[int, str]:
    """ruff's isort-style order: CONSTANTS, then Classes, then functions, each alphabetical."""
    if name.isupper():
        return 0, name
    return (1 if name[0].isupper() else 2), name


@pytest.mark.parametrize("package", ["", *PACKAGES])
def test_each_init_only_reexports_with_one_sorted_all(package: str) -> None:
    """An ``__init__`` holds a docstring, imports and one ``__all__``: the names it imports,
    sorted, each one there."""
    name = "memforensics.analysis" + (f".{package}" if package else "")
    tree = ast.parse(MODULES[name].read_text("utf-8"))
    imported: list[str] = []
    exported: list[str] | None = None
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.ImportFrom):
            imported += [alias.asname or alias.name for alias in node.names]
        elif isinstance(node, ast.Assign) and exported is None:
            [target] = node.targets
            assert isinstance(target, ast.Name)
            assert target.id == "__all__"
            exported = list(ast.literal_eval(node.value))
        else:
            assert index == 0, f"{name}: more than re-exports"
            assert isinstance(node, ast.Expr), f"{name}: more than re-exports"
    assert exported is not None
    assert sorted(exported, key=_sort_key) == exported
    assert set(exported) == set(imported)
    module = importlib.import_module(name)
    assert all(hasattr(module, item) for item in exported)


def test_no_module_imports_itself_back() -> None:
    """No cycle among the analysis modules, type-only imports counted."""
    graph = {name: _imports(path) & set(MODULES) for name, path in MODULES.items()}
    assert _cycle(graph) is None


def test_no_two_packages_import_each_other() -> None:
    """Between packages data flows one way: no cycle in the package graph."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        if name.count(".") >= 2:
            own = _package(name)
            targets = {_package(m) for m in _imports(path) & set(MODULES) if m.count(".") >= 2}
            graph.setdefault(own, set()).update(targets - {own})
    assert _cycle(graph) is None


def test_analysis_imports_nothing_above_its_layer() -> None:
    """Analysis imports only itself, the allocator model and the top-level helpers: never
    capture, backends, doctor, the CLI or torch."""
    for name, path in MODULES.items():
        outside = {
            m
            for m in _imports(path)
            if m.startswith("memforensics")
            and not m.startswith("memforensics.analysis")
            and not m.startswith(ALLOWED_OUTSIDE)
        }
        assert not outside, f"{name} imports {sorted(outside)}"
        third_party = {m.split(".")[0] for m in _imports(path)} & {"torch", "pydantic", "structlog"}
        assert not third_party, f"{name} imports {sorted(third_party)}"


def test_commands_use_only_the_packages_names() -> None:
    """A CLI command imports ``memforensics.analysis`` or one of its packages, never a module
    inside a package."""
    allowed = {"memforensics.analysis"} | {f"memforensics.analysis.{p}" for p in PACKAGES}
    for path in sorted(COMMANDS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "memforensics.analysis"
            ):
                assert node.module in allowed, f"{path.name} imports {node.module}"
            elif isinstance(node, ast.Import):
                deep = [a.name for a in node.names if a.name.startswith("memforensics.analysis.")]
                assert all(name in allowed for name in deep), f"{path.name} imports {deep}"
