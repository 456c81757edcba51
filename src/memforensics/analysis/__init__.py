"""Read memory snapshots without torch: load, summarize, diff, list dumps, render a report.

Each capability is a package: ``dump`` (loading and the snapshot model), ``oom`` (the state at
the OOM and the verdict), ``filled`` (what filled the device), ``summary``, ``explain`` (one
story per dump: its summary from the dump and what lies beside it), ``compare`` (diff
and leaks), ``replay``, ``folder`` (ls, journals, overview) and ``report`` (the HTML pages).
"""

from memforensics.analysis.compare import Diff, Leaks, diff_dumps, find_leaks
from memforensics.analysis.dump import Dump, load_dump
from memforensics.analysis.filled import Filled, what_filled
from memforensics.analysis.folder import Overview, RunListing, build_overview, list_dumps
from memforensics.analysis.replay import Replay, replay_dump
from memforensics.analysis.story import explain
from memforensics.analysis.summary import Summary, summarize

__all__ = [
    "Diff",
    "Dump",
    "Filled",
    "Leaks",
    "Overview",
    "Replay",
    "RunListing",
    "Summary",
    "build_overview",
    "diff_dumps",
    "explain",
    "find_leaks",
    "list_dumps",
    "load_dump",
    "replay_dump",
    "summarize",
    "what_filled",
]
