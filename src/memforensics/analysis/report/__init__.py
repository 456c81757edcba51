"""The offline HTML pages: the report of dumps and the overview of a run."""

from memforensics.analysis.report.overview_page import render_overview
from memforensics.analysis.report.page import ReportBuilder

__all__ = ["ReportBuilder", "render_overview"]
