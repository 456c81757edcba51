"""The public surface, and the promise that the core never imports torch."""

from __future__ import annotations

import subprocess
import sys

import memforensics


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return set(out.split())


def test_import_does_not_import_torch() -> None:
    """`import memforensics` leaves torch unimported, in a fresh interpreter."""
    modules = _modules_after("import memforensics")
    assert "torch" not in modules
    assert "torch_npu" not in modules


def test_sim_install_analysis_and_cli_do_not_import_torch() -> None:
    """Installing on the sim device, and loading the CLI, never import torch."""
    code = (
        "import tempfile, memforensics, memforensics.cli\n"
        "mf = memforensics.install(steps=1, device='sim', out_dir=tempfile.mkdtemp())\n"
        "with mf.step(): pass\n"
        "mf.close()\n"
        "memforensics.cli.build_parser()\n"
    )
    assert "torch" not in _modules_after(code)


def test_public_names() -> None:
    """__all__ lists exactly the public API DESIGN.md promises, sorted."""
    expected = {
        "install",
        "uninstall",
        "MemoryForensics",
        "ForensicsConfig",
        "ForensicsError",
        "ConfigError",
        "BackendError",
        "SnapshotLoadError",
        "__version__",
    }
    assert set(memforensics.__all__) == expected
    assert memforensics.__all__ == sorted(memforensics.__all__)
    for name in expected:
        assert hasattr(memforensics, name)


def test_allocator_public_names() -> None:
    """memforensics.allocator.__all__ is the model's API (ruff's RUF022 keeps its order)."""
    from memforensics import allocator

    expected = {
        "BASE_ADDRESS",
        "K_LARGE_BUFFER",
        "K_MIN_BLOCK_SIZE",
        "K_MIN_LARGE_ALLOC",
        "K_ROUND_LARGE",
        "K_SMALL_BUFFER",
        "K_SMALL_SIZE",
        "NO_LIMIT",
        "AllocatorSettings",
        "Block",
        "BlockPool",
        "ConfRules",
        "DeviceCachingAllocator",
        "ExpandableSegment",
        "OomInfo",
        "RecordedSettings",
        "SeedBlock",
        "SettingsError",
        "Stat",
        "apply_assignment",
        "apply_conf",
        "deciding_settings",
        "from_snapshot",
        "get_allocation_size",
        "largest_block",
        "parse_conf",
        "read_snapshot_settings",
        "round_size",
        "roundup_power2_next_division",
        "rules_for",
        "seed_expandable",
        "seed_segment",
        "segment_blocks",
    }
    assert set(allocator.__all__) == expected
    assert len(allocator.__all__) == len(expected)
    for name in expected:
        assert hasattr(allocator, name)


def test_caching_allocator_is_one_class_with_pytorchs_names() -> None:
    """DeviceCachingAllocator has no mixin bases and makes each decision under PyTorch's name."""
    from memforensics.allocator import DeviceCachingAllocator

    assert DeviceCachingAllocator.__bases__ == (object,)
    decisions = (
        "malloc", "free", "record_stream", "empty_cache", "round_size", "get_allocation_size",
        "get_free_block", "should_split", "alloc_found_block", "alloc_block", "free_block",
        "try_merge_blocks", "insert_events", "process_events", "synchronize_and_free_events",
        "release_available_cached_blocks", "release_cached_blocks", "release_blocks",
        "release_block", "garbage_collect_cached_blocks", "find_expandable_block", "map_block",
        "try_allocate_expandable_block", "unmap_block", "release_expandable_segment",
    )  # fmt: skip
    for name in decisions:
        assert name in vars(DeviceCachingAllocator), name


def test_training_and_analysis_never_import_rich() -> None:
    """rich is the watch command's alone: importing memforensics, install() with a near-OOM
    check, the analysis and the CLI's parser load no rich module beyond what structlog itself
    loads when rich is installed (its dev renderer probes ``import rich``)."""
    code = (
        "import tempfile, memforensics, memforensics.analysis\n"
        "from memforensics.cli._main import build_parser\n"
        "build_parser()\n"
        "mf = memforensics.install(device='sim', out_dir=tempfile.mkdtemp(), near_oom_every=1)\n"
        "with mf.step(0):\n    pass\n"
        "mf.close()\n"
    )

    def rich(modules: set[str]) -> set[str]:
        return {m for m in modules if m == "rich" or m.startswith("rich.")}

    ours = rich(_modules_after(code)) - rich(_modules_after("import structlog"))
    assert ours == set()
    assert "rich.live" not in _modules_after(code)  # what watch draws with
