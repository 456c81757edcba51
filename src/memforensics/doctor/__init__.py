"""The self-check a user runs on a training node before a long job."""
