"""A run folder: its dumps (ls), its journals, and the overview of every rank."""
