"""Read memory snapshots without torch: load, summarize, diff, list dumps, render a report."""

from memforensics.analysis._diff import Diff, LeakSuspect, SiteGrowth, diff_dumps
from memforensics.analysis._frames import UNKNOWN_SITE, is_library_file, parse_step, site_of
from memforensics.analysis._load import Dump, dump_from_snapshot, load_dump, read_snapshot_file
from memforensics.analysis._ls import DumpEntry, RunListing, list_dumps
from memforensics.analysis._meta import DumpMeta, OomRecord, sidecar_path
from memforensics.analysis._replay import Replay, WhatIf, replay
from memforensics.analysis._report import render_report
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
    "EXHAUSTED",
    "EXTERNAL",
    "FRAGMENTATION",
    "NO_OOM",
    "UNKNOWN",
    "UNKNOWN_SITE",
    "Diff",
    "Dump",
    "DumpEntry",
    "DumpMeta",
    "LeakSuspect",
    "LowerBound",
    "OomRecord",
    "Replay",
    "RunListing",
    "SiteBytes",
    "SiteGrowth",
    "StepBytes",
    "Summary",
    "Timeline",
    "Verdict",
    "WhatIf",
    "diff_dumps",
    "dump_from_snapshot",
    "format_bytes",
    "is_library_file",
    "list_dumps",
    "load_dump",
    "memory_timeline",
    "parse_step",
    "read_snapshot_file",
    "render_report",
    "replay",
    "sidecar_path",
    "site_of",
    "summarize",
]
