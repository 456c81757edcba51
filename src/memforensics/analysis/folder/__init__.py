"""A run folder: its dumps (ls), its journals, and the overview of every rank."""

from memforensics.analysis.folder.forecast import Forecast, forecast_line
from memforensics.analysis.folder.journals import MISSING, ProcessJournal, growth_per_1k
from memforensics.analysis.folder.ls import SCHEMA as LS_SCHEMA
from memforensics.analysis.folder.ls import DumpEntry, RunListing, list_dumps
from memforensics.analysis.folder.overview import (
    PARALLEL_FROM,
    Failure,
    Outlier,
    Overview,
    PeerComparison,
    Problems,
    RankFacts,
    build_overview,
)
from memforensics.analysis.folder.overview import SCHEMA as OVERVIEW_SCHEMA
from memforensics.analysis.folder.text import (
    WATCH_COLUMNS,
    ls_text,
    overview_text,
    rank_ranges,
    watch_cells,
    watch_header,
    watch_text,
)
from memforensics.analysis.folder.watch import SCHEMA as WATCH_SCHEMA
from memforensics.analysis.folder.watch import FirstOom, JournalWatch, WatchRow, WatchView

__all__ = [
    "LS_SCHEMA",
    "MISSING",
    "OVERVIEW_SCHEMA",
    "PARALLEL_FROM",
    "WATCH_COLUMNS",
    "WATCH_SCHEMA",
    "DumpEntry",
    "Failure",
    "FirstOom",
    "Forecast",
    "JournalWatch",
    "Outlier",
    "Overview",
    "PeerComparison",
    "Problems",
    "ProcessJournal",
    "RankFacts",
    "RunListing",
    "WatchRow",
    "WatchView",
    "build_overview",
    "forecast_line",
    "growth_per_1k",
    "list_dumps",
    "ls_text",
    "overview_text",
    "rank_ranges",
    "watch_cells",
    "watch_header",
    "watch_text",
]
