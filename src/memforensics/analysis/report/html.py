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

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

_ESCAPES = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)


def content_security_policy(script: str, style: str) -> str:
    """The ``<meta>`` CSP of a page whose one inline ``<script>`` and one ``<style>`` hold
    exactly ``script`` and ``style``: nothing else runs or styles it (no ``'unsafe-inline'``,
    no network, no forms, no ``<base>``), so even markup slipped past the escaping is inert."""
    policy = (
        f"default-src 'none'; script-src {_hash(script)}; style-src {_hash(style)}; "
        "base-uri 'none'; form-action 'none'"
    )
    return f'<meta http-equiv="Content-Security-Policy" content="{policy}">'


def _hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def relative_link(target: Path, base: Path) -> str | None:
    """A link to file ``target`` from a page in ``base``: the relative path, percent-encoded
    (so ``javascript:alert(7)/x.pickle`` is a path, never a scheme); None where no relative
    path exists (another drive): no link rather than an absolute one."""
    try:
        relative = Path(os.path.relpath(target, base)).as_posix()
    except ValueError:
        return None
    return quote(relative, safe="/")


def json_in_script(data: Any) -> str:
    """``data`` as compact JSON that is safe inside a ``<script>`` element."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.translate(_ESCAPES)
