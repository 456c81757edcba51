"""The allocator replay: self-check the model on a dump, then what-if under other settings."""
