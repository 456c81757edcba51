"""A fake of DeepSpeed's op loading and ``FusedAdam`` (see ``tests/integration/fakes``)."""
