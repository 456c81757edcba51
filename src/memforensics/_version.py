"""Single source of the package version (read by hatchling and by ``memforensics.__version__``)."""

__version__ = "0.2.0"
