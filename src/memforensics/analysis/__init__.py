"""Read memory snapshots without torch: load, summarize, diff, list dumps, render a report."""

from memforensics.analysis._device_diff import DeviceDiff, DeviceDiffs, diff_by_device
from memforensics.analysis._devices import DeviceUsage
from memforensics.analysis._diff import Diff, LeakSuspect, SiteGrowth, diff_dumps
from memforensics.analysis._filled import Filled, what_filled
from memforensics.analysis._frames import (
    BEFORE_RECORDING,
    UNKNOWN_SITE,
    caller_of,
    is_installed_file,
    is_library_file,
    parse_step,
    site_of,
)
from memforensics.analysis._kinds import KINDS, KindBytes
from memforensics.analysis._leaks import Leaks, SiteTrend, find_leaks
from memforensics.analysis._load import Dump, dump_from_snapshot, load_dump, read_snapshot_file
from memforensics.analysis._ls import DumpEntry, RunListing, list_dumps
from memforensics.analysis._meta import DumpMeta, OomRecord, sidecar_path
from memforensics.analysis._overview import Overview, RankFacts, build_overview
from memforensics.analysis._overview_html import render_overview
from memforensics.analysis._overview_text import overview_text
from memforensics.analysis._peak import CallNode, Moment
from memforensics.analysis._replay import Replay, WhatIf, replay
from memforensics.analysis._report import render_report
from memforensics.analysis._shapes import SnapshotShape
from memforensics.analysis._summary import SiteBytes, StepBytes, Summary, summarize
from memforensics.analysis._timeline import Timeline, memory_timeline
from memforensics.analysis._units import format_bytes
from memforensics.analysis._verdict import (
    EXHAUSTED,
    EXTERNAL,
    FRAGMENTATION,
    NO_OOM,
    UNKNOWN,
    LowerBound,
    Verdict,
)

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
