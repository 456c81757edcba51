"""The ``memforensics`` console script: ``main(argv) -> int`` over one module per subcommand."""

from memforensics.cli._main import build_parser, main

__all__ = ["build_parser", "main"]
