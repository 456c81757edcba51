"""Every package of memforensics keeps its shape: an ``__init__`` holds a docstring, imports and
one sorted ``__all__`` of exactly what it imports (some on first use), and nothing else.

The import rules between packages (no cycles, the layers, analysis without capture or torch, the
CLI on public analysis names) are import-linter's contract in ``nox -s lint``, not tests here."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import memforensics

ROOT = Path(memforensics.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}
PACKAGES = sorted(name for name, path in MODULES.items() if path.name == "__init__.py")


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


def _sort_key(name: str) -> tuple[int, str]:
    """ruff's isort-style order: CONSTANTS, then Classes, then functions, each alphabetical."""
    if name.isupper():
        return 0, name
    return (1 if name[0].isupper() else 2), name


def _lazy_table(node: ast.stmt) -> dict[str, str] | None:
    """The ``_LAZY = {name: module}`` table of a package that loads names on first use."""
    if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["_LAZY"]:
        table: dict[str, str] = ast.literal_eval(node.value)
        return table
    return None


def _type_checking_imports(node: ast.stmt) -> dict[str, str] | None:
    """``if TYPE_CHECKING:`` imports, each name with its module (what ``_LAZY`` must say)."""
    if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
        return None
    found = {}
    for child in node.body:
        assert isinstance(child, ast.ImportFrom), "only imports under TYPE_CHECKING"
        assert child.module
        found.update({alias.asname or alias.name: child.module for alias in child.names})
    return found


@pytest.mark.parametrize("name", PACKAGES)
def test_each_init_only_reexports_with_one_sorted_all(name: str) -> None:
    """An ``__init__`` holds a docstring, imports and one ``__all__``: the names it imports,
    sorted, each one there (a docstring alone is a package with nothing public of its own).
    Names it loads on first use are imported under ``if TYPE_CHECKING:`` and listed, each with
    that same module, in its ``_LAZY`` table, which its ``__getattr__`` and ``__dir__`` read."""
    tree = ast.parse(MODULES[name].read_text("utf-8"))
    imported: list[str] = []
    exported: list[str] | None = None
    lazy: dict[str, str] = {}
    typed: dict[str, str] = {}
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.ImportFrom) and node.module == "typing":
            assert [alias.name for alias in node.names] == ["TYPE_CHECKING"]
        elif isinstance(node, ast.ImportFrom):
            imported += [alias.asname or alias.name for alias in node.names]
        elif (found := _type_checking_imports(node)) is not None:
            typed.update(found)
        elif (table := _lazy_table(node)) is not None:
            lazy.update(table)
        elif isinstance(node, ast.FunctionDef):
            assert node.name in {"__getattr__", "__dir__"}, f"{name}: more than re-exports"
        elif isinstance(node, ast.Assign) and exported is None:
            [target] = node.targets
            assert isinstance(target, ast.Name)
            assert target.id == "__all__"
            exported = list(ast.literal_eval(node.value))
        else:
            assert index == 0, f"{name}: more than re-exports"
            assert isinstance(node, ast.Expr), f"{name}: more than re-exports"
    assert lazy == typed, f"{name}: _LAZY and the TYPE_CHECKING imports disagree"
    imported += list(lazy)
    if exported is None:
        assert not imported, f"{name}: imports without an __all__"
        return
    assert sorted(exported, key=_sort_key) == exported
    assert set(exported) == set(imported)
    module = importlib.import_module(name)
    assert all(hasattr(module, item) for item in exported)
    assert set(exported) <= set(dir(module))


@pytest.mark.parametrize("name", PACKAGES)
def test_no_exported_name_shadows_a_module_of_the_package(name: str) -> None:
    """``package.part`` is the module ``package/part.py`` (or the subpackage), never a function
    the package exports under the same name: ``import package.part.x`` then works."""
    package = importlib.import_module(name)
    for part in pkgutil.iter_modules(package.__path__):
        found = getattr(package, part.name, None)
        assert found is None or inspect.ismodule(found), f"{name}.{part.name} is shadowed"
