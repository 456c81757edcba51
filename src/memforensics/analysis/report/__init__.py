"""The offline HTML pages: the report of dumps and the overview of a run."""
