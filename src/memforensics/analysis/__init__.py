"""Read memory snapshots without torch: load, summarize, diff, list dumps, render a report."""

from memforensics._units import format_bytes
from memforensics.analysis.compare.devices import DeviceDiff, DeviceDiffs, diff_by_device
from memforensics.analysis.compare.diff import Diff, LeakSuspect, SiteGrowth, diff_dumps
from memforensics.analysis.compare.leaks import Leaks, SiteTrend, find_leaks
from memforensics.analysis.dump.devices import DeviceUsage
from memforensics.analysis.dump.frames import (
    BEFORE_RECORDING,
    UNKNOWN_SITE,
    caller_of,
    is_installed_file,
    is_library_file,
    parse_step,
    site_of,
)
from memforensics.analysis.dump.load import Dump, dump_from_snapshot, load_dump, read_snapshot_file
from memforensics.analysis.dump.meta import DumpMeta, OomRecord, sidecar_path
from memforensics.analysis.dump.shapes import SnapshotShape
from memforensics.analysis.dump.timeline import Timeline, memory_timeline
from memforensics.analysis.filled.kinds import KINDS, KindBytes
from memforensics.analysis.filled.peak import CallNode, Moment
from memforensics.analysis.filled.what_filled import Filled, what_filled
from memforensics.analysis.folder.ls import DumpEntry, RunListing, list_dumps
from memforensics.analysis.folder.overview import Overview, RankFacts, build_overview
from memforensics.analysis.folder.text import overview_text
from memforensics.analysis.oom.verdict import (
    EXHAUSTED,
    EXTERNAL,
    FRAGMENTATION,
    NO_OOM,
    UNKNOWN,
    LowerBound,
    Verdict,
)
from memforensics.analysis.replay.replay import Replay, WhatIf, replay
from memforensics.analysis.report.overview_page import render_overview
from memforensics.analysis.report.page import render_report
from memforensics.analysis.summary.summarize import SiteBytes, StepBytes, Summary, summarize

__all__ = [
    "BEFORE_RECORDING",
    "EXHAUSTED",
    "EXTERNAL",
    "FRAGMENTATION",
    "KINDS",
    "NO_OOM",
    "UNKNOWN",
    "UNKNOWN_SITE",
    "CallNode",
    "DeviceDiff",
    "DeviceDiffs",
    "DeviceUsage",
    "Diff",
    "Dump",
    "DumpEntry",
    "DumpMeta",
    "Filled",
    "KindBytes",
    "LeakSuspect",
    "Leaks",
    "LowerBound",
    "Moment",
    "OomRecord",
    "Overview",
    "RankFacts",
    "Replay",
    "RunListing",
    "SiteBytes",
    "SiteGrowth",
    "SiteTrend",
    "SnapshotShape",
    "StepBytes",
    "Summary",
    "Timeline",
    "Verdict",
    "WhatIf",
    "build_overview",
    "caller_of",
    "diff_by_device",
    "diff_dumps",
    "dump_from_snapshot",
    "find_leaks",
    "format_bytes",
    "is_installed_file",
    "is_library_file",
    "list_dumps",
    "load_dump",
    "memory_timeline",
    "overview_text",
    "parse_step",
    "read_snapshot_file",
    "render_overview",
    "render_report",
    "replay",
    "sidecar_path",
    "site_of",
    "summarize",
    "what_filled",
]
