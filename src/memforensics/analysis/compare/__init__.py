"""Comparing dumps: diff two of them (by site, device and kind), and leaks across windows."""

from memforensics.analysis.compare.diff import (
    DIFF_SCHEMA,
    Diff,
    DiffSide,
    SideOf,
    diff_by_device,
    diff_dumps,
    diff_side,
)
from memforensics.analysis.compare.leaks import (
    LEAKS_SCHEMA,
    JournalTrend,
    Leaks,
    LeakTracker,
    WindowTotals,
    find_leaks,
    fit_windows,
    read_windows,
    window_paths,
    window_totals,
)
from memforensics.analysis.compare.text import device_diffs_text, leaks_text

__all__ = [
    "DIFF_SCHEMA",
    "LEAKS_SCHEMA",
    "Diff",
    "DiffSide",
    "JournalTrend",
    "LeakTracker",
    "Leaks",
    "SideOf",
    "WindowTotals",
    "device_diffs_text",
    "diff_by_device",
    "diff_dumps",
    "diff_side",
    "find_leaks",
    "fit_windows",
    "leaks_text",
    "read_windows",
    "window_paths",
    "window_totals",
]
