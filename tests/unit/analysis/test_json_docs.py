"""docs/json.md is generated from the result dataclasses and matches them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_the_committed_json_page_is_what_the_dataclasses_generate() -> None:
    """Run ``python docs/json_keys.py`` after changing a result's fields."""
    spec = importlib.util.spec_from_file_location("json_keys", DOCS / "json_keys.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (DOCS / "json.md").read_text(encoding="utf-8") == module.page()
