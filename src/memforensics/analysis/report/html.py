"""Data embedded in an HTML page: the one escaping rule both pages (report, overview) use.

Every string a page shows comes from a snapshot or a journal (site names, file paths,
hostnames), so any of it may be hostile. The data goes into the page once, as JSON inside
``<script type="application/json">``, and is read back with ``JSON.parse``; the escaping below
keeps that text from ever being markup: no ``</script>`` can close the element and no ``<!--``
can open a comment (``<`` and ``>`` become ``\\u003c`` and ``\\u003e``), no ``&`` starts an
entity, and U+2028/U+2029 (line breaks to some JavaScript parsers) are spelled out. JSON reads
each escape back as the same character, so the data is unchanged.
"""

from __future__ import annotations

import json
from typing import Any

_ESCAPES = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)


def json_in_script(data: Any) -> str:
    """``data`` as compact JSON that is safe inside a ``<script>`` element."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.translate(_ESCAPES)
