"""The offline HTML pages: the report of dumps and the overview of a run."""

from memforensics.analysis.report.model import DumpContext, Section, SectionBuilder, table
from memforensics.analysis.report.overview_page import overview_data, render_overview
from memforensics.analysis.report.page import ReportBuilder
from memforensics.analysis.report.sections import DUMP_SECTIONS

__all__ = [
    "DUMP_SECTIONS",
    "DumpContext",
    "ReportBuilder",
    "Section",
    "SectionBuilder",
    "overview_data",
    "render_overview",
    "table",
]
