"""A run folder: its dumps (ls), its journals, and the overview of every rank."""

from memforensics.analysis.folder.forecast import Line, fit_line
from memforensics.analysis.folder.journals import (
    MISSING,
    JournalFile,
    ProcessJournal,
    read_process,
    read_run_journals,
)
from memforensics.analysis.folder.ls import SCHEMA as LS_SCHEMA
from memforensics.analysis.folder.ls import RunListing, list_dumps
from memforensics.analysis.folder.overview import SCHEMA as OVERVIEW_SCHEMA
from memforensics.analysis.folder.overview import Overview, build_overview
from memforensics.analysis.folder.text import (
    WATCH_COLUMNS,
    cause_lines,
    ls_text,
    overview_text,
    skipped_lines_text,
    watch_cells,
    watch_header,
    watch_text,
)
from memforensics.analysis.folder.watch import SCHEMA as WATCH_SCHEMA
from memforensics.analysis.folder.watch import JournalWatch, WatchView

__all__ = [
    "LS_SCHEMA",
    "MISSING",
    "OVERVIEW_SCHEMA",
    "WATCH_COLUMNS",
    "WATCH_SCHEMA",
    "JournalFile",
    "JournalWatch",
    "Line",
    "Overview",
    "ProcessJournal",
    "RunListing",
    "WatchView",
    "build_overview",
    "cause_lines",
    "fit_line",
    "list_dumps",
    "ls_text",
    "overview_text",
    "read_process",
    "read_run_journals",
    "skipped_lines_text",
    "watch_cells",
    "watch_header",
    "watch_text",
]
