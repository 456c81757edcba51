"""Comparing dumps: diff two of them (by site, device and kind), and leaks across windows."""

from memforensics.analysis.compare.devices import DeviceDiff, DeviceDiffs, diff_by_device
from memforensics.analysis.compare.diff import Diff, LeakSuspect, SiteGrowth, diff_dumps
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
from memforensics.analysis.compare.text import (
    device_diffs_text,
    diff_text,
    kinds_change_lines,
    leaks_text,
)

__all__ = [
    "WINDOW_FACT",
    "DeviceDiff",
    "DeviceDiffs",
    "Diff",
    "LeakSuspect",
    "LeakTracker",
    "Leaks",
    "SiteGrowth",
    "SiteTrend",
    "WindowTotals",
    "device_diffs_text",
    "diff_by_device",
    "diff_dumps",
    "diff_text",
    "find_leaks",
    "keep_window",
    "kept_window",
    "kinds_change",
    "kinds_change_lines",
    "leaks_text",
    "window_totals",
]
