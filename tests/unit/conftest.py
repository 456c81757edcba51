"""Fixtures the adapter tests share; their code lives in torchfakes, the one shared fake."""

from torchfakes import (  # noqa: F401 - pytest finds fixtures by name in a conftest's namespace
    clean_env,
    device,
    fake,
    install,
    out_dir,
)
