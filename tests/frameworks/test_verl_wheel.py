"""``install_from_verl`` on the newest verl release's own generated trainer configs.

The YAML files are read from the wheel and resolved with OmegaConf (verl's own config library,
installed in the ``frameworks`` session only); verl itself is never imported.
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memforensics
from memforensics.integrations.verl import IGNORED, MAPPED, config_from_verl, install_from_verl

pytestmark = pytest.mark.frameworks


def _omegaconf() -> Any:
    """OmegaConf, which verl's configs need resolved (a failure, not a skip, when absent)."""
    try:
        import omegaconf
    except ImportError:
        pytest.fail("omegaconf is needed to resolve verl's configs: nox -s frameworks installs it")
    return omegaconf


def _profiler_sections(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``profiler`` / ``global_profiler`` mapping in a resolved config, with its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key in {"profiler", "global_profiler"} and isinstance(value, dict):
                yield where, value
            else:
                yield from _profiler_sections(value, where)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _profiler_sections(value, f"{path}[{index}]")


@pytest.fixture(scope="module")
def sections(verl_wheel: zipfile.ZipFile) -> list[tuple[str, dict[str, Any]]]:
    """The profiler sections of every generated trainer config in the wheel, resolved."""
    found: list[tuple[str, dict[str, Any]]] = []
    names = [n for n in verl_wheel.namelist() if n.endswith(".yaml") and "/_generated_" in n]
    assert any(n.endswith("_generated_ppo_trainer.yaml") for n in names)
    omegaconf = _omegaconf()
    for name in names:
        config = omegaconf.OmegaConf.create(verl_wheel.read(name).decode())
        for key in config:
            node = omegaconf.OmegaConf.select(config, str(key))
            if isinstance(node, omegaconf.DictConfig | omegaconf.ListConfig):
                resolved = omegaconf.OmegaConf.to_container(node, resolve=True)
                found += [
                    (f"{name}:{path}", section)
                    for path, section in _profiler_sections({str(key): resolved})
                ]
    assert found, "no profiler sections in verl's generated configs"
    return found


def test_install_from_verl_accepts_every_profiler_section(
    sections: list[tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    """Each profiler section of verl's own configs installs (sim device), its torch_memory
    values mapped: nothing in the schema of this release makes install_from_verl raise."""
    for where, section in sections:
        mf = install_from_verl(section, device="sim", out_dir=str(tmp_path / "out"))
        try:
            config = mf.config
            tool = _torch_memory(section)
            if tool is not None:
                assert config.max_entries == tool["trace_alloc_max_entries"], where
                assert config.steps == tool["memory_snapshot_num_steps"], where
        finally:
            memforensics.uninstall()


def test_global_tool_config_is_mapped_as_verl_sets_it(
    sections: list[tuple[str, dict[str, Any]]],
) -> None:
    """verl's global torch_memory settings (stacks and context "all") reach the config."""
    (section,) = [s for where, s in sections if where.endswith(":global_profiler")][:1]
    tool = section["global_tool_config"]["torch_memory"]
    config = config_from_verl(section)
    assert (config.stacks, config.context) == (tool["stacks"], tool["context"])


def test_every_mapped_option_exists_in_verl(
    sections: list[tuple[str, dict[str, Any]]], verl_wheel: zipfile.ZipFile
) -> None:
    """Each key install_from_verl maps or documents is a real verl option of this release
    (in its generated configs or its TorchMemoryToolConfig / ProfilerConfig dataclasses)."""
    keys: set[str] = set()
    for _, section in sections:
        keys |= _all_keys(section)
    keys |= _dataclass_fields(verl_wheel, "verl/utils/profiler/config.py")
    documented = {*MAPPED, "all_ranks", "ranks"}
    assert documented - keys == set()
    assert {"stack_depth", "kw_args", "relocate_results", "finish_hook_cmd"} <= set(IGNORED)


def _torch_memory(section: dict[str, Any]) -> dict[str, Any] | None:
    tool = (section.get("tool_config") or {}).get("torch_memory")
    if tool is None:
        tool = (section.get("global_tool_config") or {}).get("torch_memory")
    return tool if isinstance(tool, dict) else None


def _all_keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        keys = {str(k) for k in node}
        for value in node.values():
            keys |= _all_keys(value)
        return keys
    if isinstance(node, list):
        return set().union(*(_all_keys(v) for v in node)) if node else set()
    return set()


def _dataclass_fields(wheel: zipfile.ZipFile, path: str) -> set[str]:
    """Annotated field names of every class in ``path`` of the wheel."""
    tree = ast.parse(wheel.read(path).decode(), path)
    return {
        node.target.id
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
