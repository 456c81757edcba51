"""Words about a dump's sites for the terminal: one cut to a width, the caller under a library
site, and the line under a table cut to its top rows. ``summary``, ``diff`` and ``leaks`` all
print sites; they cut and annotate them here, so the same site reads the same in each."""

from __future__ import annotations

from memforensics.analysis.dump.frames import BEFORE_RECORDING, UNKNOWN_SITE

SITE_WIDTH = 64
"""Characters a site keeps in a table column."""
_CALLER = "← caller "


def short_site(site: str, width: int = SITE_WIDTH) -> str:
    """Keep the end of a long ``path:line function`` (file and function matter, the prefix not)."""
    return site if len(site) <= width else "…" + site[-(width - 1) :]


def caller_line(site: str, caller: str, indent: int) -> list[str]:
    """``← caller ...`` under a row's site when the site is library code: the user's own line
    that led there (``<unknown>``: none outside installed packages). Indented by ``indent``, it
    ends where the site above it can end."""
    if caller == site or site in (UNKNOWN_SITE, BEFORE_RECORDING):
        return []
    return [f"{'':>{indent}}{_CALLER}{short_site(caller, SITE_WIDTH - len(_CALLER))}"]


def hidden_rows(count: int, noun: str, detail: str = "") -> list[str]:
    """The line under (or over) a cut table: how many rows it hides and how to see them."""
    if count <= 0:
        return []
    plural = noun if count == 1 else noun + "s"
    return [f"  … {count:,} {plural} not shown{detail}; --top N or --all shows them"]
