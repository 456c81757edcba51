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
