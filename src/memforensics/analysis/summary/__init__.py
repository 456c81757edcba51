"""The summary of one dump: what filled the device and the verdict, with its words."""

from memforensics.analysis.summary.summary import (
    SCHEMA,
    SiteBytes,
    Summary,
    live_blocks,
    live_sites,
    scan_trace,
    summarize,
)
from memforensics.analysis.summary.text import summary_text

__all__ = [
    "SCHEMA",
    "SiteBytes",
    "Summary",
    "live_blocks",
    "live_sites",
    "scan_trace",
    "summarize",
    "summary_text",
]
