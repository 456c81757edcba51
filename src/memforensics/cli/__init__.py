"""The ``memforensics`` console script: ``main(argv) -> int`` over one module per subcommand;
``console`` is the installed script's entry (``main`` in a process that ends after it)."""

from memforensics.cli._main import build_parser, main
from memforensics.cli._process import console

__all__ = ["build_parser", "console", "main"]
