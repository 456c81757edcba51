"""Read memory snapshots without torch: load, summarize, diff, list dumps, render a report.

Each capability is a package: ``dump`` (loading and the snapshot model), ``oom`` (the state at
the OOM and the verdict), ``filled`` (what filled the device), ``summary``, ``compare`` (diff
and leaks), ``replay``, ``folder`` (ls, journals, overview) and ``report`` (the HTML pages).
"""

from memforensics._units import format_bytes
from memforensics.analysis.compare import (
    DeviceDiff,
    DeviceDiffs,
    Diff,
    Leaks,
    LeakSuspect,
    SiteGrowth,
    SiteTrend,
    diff_by_device,
    diff_dumps,
    find_leaks,
)
from memforensics.analysis.dump import (
    BEFORE_RECORDING,
    UNKNOWN_SITE,
    DeviceUsage,
    Dump,
    DumpMeta,
    OomRecord,
    SnapshotShape,
    caller_of,
    dump_from_snapshot,
    is_installed_file,
    is_library_file,
    load_dump,
    parse_step,
    read_snapshot_file,
    sidecar_path,
    site_of,
)
from memforensics.analysis.filled import KINDS, CallNode, Filled, KindBytes, Moment, what_filled
from memforensics.analysis.folder import (
    DumpEntry,
    Overview,
    RankFacts,
    RunListing,
    build_overview,
    list_dumps,
    overview_text,
)
from memforensics.analysis.oom import (
    EXHAUSTED,
    EXTERNAL,
    FRAGMENTATION,
    NO_OOM,
    UNKNOWN,
    LowerBound,
    Verdict,
)
from memforensics.analysis.replay import Replay, WhatIf, replay
from memforensics.analysis.report import render_overview
from memforensics.analysis.summary import SiteBytes, StepBytes, Summary, summarize

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
    "overview_text",
    "parse_step",
    "read_snapshot_file",
    "render_overview",
    "replay",
    "sidecar_path",
    "site_of",
    "summarize",
    "what_filled",
]
