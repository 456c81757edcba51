"""Comparing dumps: diff two of them (by site, device and kind), and leaks across windows."""

from memforensics.analysis.compare.devices import DeviceDiff, DeviceDiffs, diff_by_device
from memforensics.analysis.compare.diff import Diff, LeakSuspect, SiteGrowth, diff_dumps, diff_sides
from memforensics.analysis.compare.kinds import kinds_change
from memforensics.analysis.compare.leaks import (
    WINDOW_FACT,
    Leaks,
    LeakTracker,
    SiteTrend,
    WindowTotals,
    find_leaks,
    keep_window,
    kept_window,
    window_totals,
)
from memforensics.analysis.compare.sides import SIDES_FACT, DiffSide, DumpSides, LiveRow, diff_side
from memforensics.analysis.compare.text import (
    device_diffs_text,
    diff_text,
    kinds_change_lines,
    leaks_text,
)

__all__ = [
    "SIDES_FACT",
    "WINDOW_FACT",
    "DeviceDiff",
    "DeviceDiffs",
    "Diff",
    "DiffSide",
    "DumpSides",
    "LeakSuspect",
    "LeakTracker",
    "Leaks",
    "LiveRow",
    "SiteGrowth",
    "SiteTrend",
    "WindowTotals",
    "device_diffs_text",
    "diff_by_device",
    "diff_dumps",
    "diff_side",
    "diff_sides",
    "diff_text",
    "find_leaks",
    "keep_window",
    "kept_window",
    "kinds_change",
    "kinds_change_lines",
    "leaks_text",
    "window_totals",
]
