"""Integrations with the training frameworks people already run, one optional extra each.

- ``memforensics.integrations.lightning``: ``MemoryForensicsCallback`` for PyTorch Lightning
  (``pip install "memforensics[lightning]"``).
- ``memforensics.integrations.transformers``: ``MemoryForensicsCallback`` for the Hugging Face
  ``Trainer`` (``pip install "memforensics[transformers]"``).
- ``memforensics.integrations.verl``: ``config_from_verl`` / ``install_from_verl`` for verl-style
  ``torch_memory`` profiler configs (no extra: verl itself is not needed).

This package imports none of them: each framework is imported only when its module is.
"""
