"""One module per ``memforensics`` subcommand, each a class with the ``Command`` shape."""
