"""One story per dump: its summary and diagnosis from the dump and what lies beside it."""

from memforensics.analysis.story.story import (
    Phase,
    WindowReader,
    evidence_files,
    explain,
    window_dumps_beside,
)

__all__ = ["Phase", "WindowReader", "evidence_files", "explain", "window_dumps_beside"]
