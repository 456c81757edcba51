"""Comparing dumps: diff two of them (by site, device and kind), and leaks across windows."""

from memforensics.analysis.compare.devices import DeviceDiff, DeviceDiffs, diff_by_device, sides_of
from memforensics.analysis.compare.diff import Diff, LeakSuspect, SiteGrowth, diff_dumps, diff_sides
from memforensics.analysis.compare.kinds import kinds_change
from memforensics.analysis.compare.leaks import (
    Leaks,
    LeakTracker,
    SiteTrend,
    WindowTotals,
    find_leaks,
    fit_windows,
    read_windows,
    window_paths,
    window_totals,
)
from memforensics.analysis.compare.sides import DiffSide, LiveRow, SideOf, diff_side, live_side
from memforensics.analysis.compare.text import (
    device_diffs_text,
    diff_text,
    kinds_change_lines,
    leaks_text,
)

__all__ = [
    "DeviceDiff",
    "DeviceDiffs",
    "Diff",
    "DiffSide",
    "LeakSuspect",
    "LeakTracker",
    "Leaks",
    "LiveRow",
    "SideOf",
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
    "fit_windows",
    "kinds_change",
    "kinds_change_lines",
    "leaks_text",
    "live_side",
    "read_windows",
    "sides_of",
    "window_paths",
    "window_totals",
]
