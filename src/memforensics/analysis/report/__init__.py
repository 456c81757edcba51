"""The offline HTML pages: the report of dumps and the overview of a run."""

from memforensics.analysis.report.model import DumpContext, Section, SectionBuilder, table
from memforensics.analysis.report.overview_page import overview_data, render_overview
from memforensics.analysis.report.page import RUN_SECTIONS, ReportBuilder, RunContext
from memforensics.analysis.report.sections import DUMP_SECTIONS

__all__ = [
    "DUMP_SECTIONS",
    "RUN_SECTIONS",
    "DumpContext",
    "ReportBuilder",
    "RunContext",
    "Section",
    "SectionBuilder",
    "overview_data",
    "render_overview",
    "table",
]
