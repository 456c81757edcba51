"""Read memory snapshots without torch: load, summarize, diff, list dumps, render a report.

Each capability is a package: ``dump`` (loading and the snapshot model), ``oom`` (the state at
the OOM and the verdict), ``filled`` (what filled the device), ``summary``, ``explain`` (one
story per dump: its summary from the dump and what lies beside it), ``compare`` (diff
and leaks), ``replay``, ``folder`` (ls, journals, overview) and ``report`` (the HTML pages).

The names below load their package on first use: a reader of one capability (the plan's
snapshot writer, ``summary``) pays for no other's imports.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
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

_LAZY = {
    "Diff": "memforensics.analysis.compare",
    "Dump": "memforensics.analysis.dump",
    "Filled": "memforensics.analysis.filled",
    "Leaks": "memforensics.analysis.compare",
    "Overview": "memforensics.analysis.folder",
    "Replay": "memforensics.analysis.replay",
    "RunListing": "memforensics.analysis.folder",
    "Summary": "memforensics.analysis.summary",
    "build_overview": "memforensics.analysis.folder",
    "diff_dumps": "memforensics.analysis.compare",
    "explain": "memforensics.analysis.story",
    "find_leaks": "memforensics.analysis.compare",
    "list_dumps": "memforensics.analysis.folder",
    "load_dump": "memforensics.analysis.dump",
    "replay_dump": "memforensics.analysis.replay",
    "summarize": "memforensics.analysis.summary",
    "what_filled": "memforensics.analysis.filled",
}


def __getattr__(name: str) -> object:
    """A public name, imported from its package on first use and kept here after it."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the module's own, as for a module that imported them eagerly."""
    return sorted({*globals(), *__all__})
