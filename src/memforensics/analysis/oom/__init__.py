"""The allocator at the OOM: the history undone to that moment, the lower bound, the verdict."""
