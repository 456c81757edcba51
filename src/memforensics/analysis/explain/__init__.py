"""One story per dump: its summary and diagnosis from the dump and what lies beside it."""

from memforensics.analysis.explain.explain import (
    Phase,
    WindowReader,
    evidence_files,
    explain,
    window_dumps_beside,
)

__all__ = ["Phase", "WindowReader", "evidence_files", "explain", "window_dumps_beside"]
