"""Read memory snapshots without torch: load, summarize, diff, list dumps, render a report."""

from memforensics.analysis._diff import Diff, LeakSuspect, SiteGrowth, diff_dumps
from memforensics.analysis._filled import Filled, what_filled
from memforensics.analysis._frames import UNKNOWN_SITE, is_library_file, parse_step, site_of
from memforensics.analysis._kinds import KINDS, KindBytes
from memforensics.analysis._leaks import Leaks, SiteTrend, find_leaks
from memforensics.analysis._load import Dump, dump_from_snapshot, load_dump, read_snapshot_file
from memforensics.analysis._ls import DumpEntry, RunListing, list_dumps
from memforensics.analysis._meta import DumpMeta, OomRecord, sidecar_path
from memforensics.analysis._peak import CallNode, Moment
from memforensics.analysis._report import render_report
from memforensics.analysis._summary import SiteBytes, StepBytes, Summary, summarize
from memforensics.analysis._timeline import Timeline, memory_timeline
from memforensics.analysis._units import format_bytes
from memforensics.analysis._verdict import EXHAUSTED, FRAGMENTATION, NO_OOM, Verdict

__all__ = [
    "EXHAUSTED",
    "FRAGMENTATION",
    "KINDS",
    "NO_OOM",
    "UNKNOWN_SITE",
    "CallNode",
    "Diff",
    "Dump",
    "DumpEntry",
    "DumpMeta",
    "Filled",
    "KindBytes",
    "LeakSuspect",
    "Leaks",
    "Moment",
    "OomRecord",
    "RunListing",
    "SiteBytes",
    "SiteGrowth",
    "SiteTrend",
    "StepBytes",
    "Summary",
    "Timeline",
    "Verdict",
    "diff_dumps",
    "dump_from_snapshot",
    "find_leaks",
    "format_bytes",
    "is_library_file",
    "list_dumps",
    "load_dump",
    "memory_timeline",
    "parse_step",
    "read_snapshot_file",
    "render_report",
    "sidecar_path",
    "site_of",
    "summarize",
    "what_filled",
]
