"""Comparing dumps: diff two of them (by site, device and kind), and leaks across windows."""

from memforensics.analysis.compare.devices import diff_by_device, sides_of
from memforensics.analysis.compare.diff import (
    DIFF_SCHEMA,
    Diff,
    LeakSuspect,
    SiteGrowth,
    diff_dumps,
    diff_sides,
)
from memforensics.analysis.compare.kinds import KindChange, kinds_change
from memforensics.analysis.compare.leaks import (
    LEAKS_SCHEMA,
    Leaks,
    LeakTracker,
    RankWindows,
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
    "DIFF_SCHEMA",
    "LEAKS_SCHEMA",
    "Diff",
    "DiffSide",
    "KindChange",
    "LeakSuspect",
    "LeakTracker",
    "Leaks",
    "LiveRow",
    "RankWindows",
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
