"""Comparing dumps: diff two of them, and leaks across a rank's windows."""
