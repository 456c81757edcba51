"""Write docs/json.md: every key of each command's ``--json`` answer, from its result dataclass.

Run ``python docs/json_keys.py`` after changing a result's fields; a test compares the output
with the committed docs/json.md, so the page cannot drift from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from memforensics.analysis.compare import DIFF_SCHEMA, LEAKS_SCHEMA, Diff, Leaks
from memforensics.analysis.folder import (
    LS_SCHEMA,
    OVERVIEW_SCHEMA,
    WATCH_SCHEMA,
    Overview,
    RunListing,
    WatchView,
)
from memforensics.analysis.replay import SCHEMA as REPLAY_SCHEMA
from memforensics.analysis.replay import Replay
from memforensics.analysis.schema import json_keys
from memforensics.analysis.summary import SCHEMA as SUMMARY_SCHEMA
from memforensics.analysis.summary import Summary
from memforensics.cli._cache import SCHEMA as CACHE_SCHEMA
from memforensics.cli._cache import CacheCleared, CacheInfo
from memforensics.doctor import SCHEMA as DOCTOR_SCHEMA
from memforensics.doctor.checks import DoctorReport
from memforensics.plan.ranks import SCHEMA as RANKS_SCHEMA
from memforensics.plan.ranks import RanksAnswer
from memforensics.plan.runner import SCHEMA as PLAN_SCHEMA
from memforensics.plan.runner import PlanResult
from memforensics.plan.vary import SCHEMA as VARY_SCHEMA
from memforensics.plan.vary import VaryAnswer

PAGE = Path(__file__).with_name("json.md")

COMMANDS: tuple[tuple[str, type, int, str], ...] = (
    (
        "summary",
        Summary,
        SUMMARY_SCHEMA,
        'One file: one object. Several files: `{"schema": N, "dumps": [...]}`, each element'
        " the one-file object without its `schema`.",
    ),
    ("replay", Replay, REPLAY_SCHEMA, "One object."),
    (
        "diff",
        Diff,
        DIFF_SCHEMA,
        "One object: the first device pair's comparison (the only one for single-device dumps"
        " or `--device`), the other pairs in `other_devices`, each the same object with empty"
        " `other_devices`, `unmatched_devices` and `kinds`. `kinds` compares the whole files"
        " (with `--device`, that device).",
    ),
    (
        "leaks",
        Leaks,
        LEAKS_SCHEMA,
        "One object. `sites` holds every site of every rank, suspects first; count the"
        " suspects with `sites[].suspect`.",
    ),
    (
        "ls",
        RunListing,
        LS_SCHEMA,
        "One object: every dump, oldest first; `first_oom` is the earliest OOM dump (one of"
        " `dumps`) or null.",
    ),
    (
        "overview",
        Overview,
        OVERVIEW_SCHEMA,
        "One object. `first_oom` is the first of `failures`; `forecasts` holds every rank's"
        " `forecast`, soonest first. `problems.restarts` is keyed by rank (a string).",
    ),
    (
        "watch --once",
        WatchView,
        WATCH_SCHEMA,
        "One object for one refresh; `ranks` holds every rank, most urgent first (`--rows`"
        " trims only the table).",
    ),
    ("cache info", CacheInfo, CACHE_SCHEMA, "One object."),
    ("cache clear", CacheCleared, CACHE_SCHEMA, "One object."),
    ("doctor", DoctorReport, DOCTOR_SCHEMA, "One object; `checks` in the order they ran."),
    (
        "plan",
        PlanResult,
        PLAN_SCHEMA,
        "One object on stdout (the script's own output goes to stderr). `snapshots` lists every"
        " predicted snapshot the run left; `verdict` is null unless the run ran out"
        " (`oom_message`); `exit_status` is the script's own nonzero `sys.exit` status (130"
        " when Ctrl-C interrupted it, 143 when SIGTERM did), else null; `interrupted` is where"
        " the script was (`file:line`) when Ctrl-C or SIGTERM stopped it, the figures being the run's up to there, else"
        " null; `steps` is `--steps` (null without it), and `ended_at_step` is where the script"
        " was when an optimizer came to its step `steps` + 1, which ended the run with the"
        " figures of the steps before, else null; `failed` is where and how the script failed for a reason other than an OOM"
        " (`file:line: Error: message`, the first line of the message; plan exits 2), the"
        " figures being the run's up to there, else null. `rank` and `world_size` are the"
        " planned rank's (0 and 1 outside a distributed job); `nccl_bytes` is NCCL's buffers"
        " outside PyTorch, an allowance counted in"
        " `needed_bytes` and `fits`. `context_bytes` is `--context-memory`; it is counted in"
        " `needed_bytes` and `fits` only where `cuda_initialized` is true: the script made"
        " something on the device or called what initializes CUDA (`torch.cuda.init`,"
        " `set_device`, `mem_get_info`, ...), as a process that never does holds no CUDA"
        " context. `workers` are the script's worker processes on the device (a"
        " `multiprocessing` process given device tensors, as Hogwild training starts them), in"
        " the order they started, each its own allocator's peaks, whether it initialized CUDA"
        " (then it holds a context of its own) and the OOM it was predicted to raise; the"
        " figures above them are the script's own process's. `device_peak_bytes` is the most"
        " every process held on the device at once (reserved memory, contexts, NCCL's buffers;"
        " each worker at its peak until joined); `needed_bytes` is at least it, and `fits` is"
        " false where a worker runs out. `caught_ooms` holds PyTorch's message for each"
        " predicted OOM the script caught and went on from (a search for the largest batch that"
        " fits), in order; each left a dump in `snapshots`, and the run's own end is"
        " snapshotted too where it did not run out. The verdict is on the OOM that ended the"
        " run (`oom_message`), the last dump.",
    ),
    (
        "plan --ranks all",
        RanksAnswer,
        RANKS_SCHEMA,
        "One object: a row per rank, in rank order; `first_out` is the lowest rank that ran"
        " out (else the lowest that does not fit), a copy of its row, or null when every rank"
        " fits. A row's peaks and `fits` are null where that rank's run failed for another"
        " reason (`error`). `interrupted_by` names the signal that stopped the plan"
        " (`SIGTERM`, which sets `terminated` too, or `Ctrl-C`): `rows` are those of the ranks"
        " planned so far, `not_planned` the ranks whose plans had not begun, and a row whose"
        " run a signal stopped says where its script was (`interrupted`, `file:line`) and"
        " which signal (`interrupted_by`), its peaks being those up to there and its `fits`"
        " null unless it already did not fit; plan exits 143 after SIGTERM, 130 after Ctrl-C,"
        " and so where a rank's plan alone was sent one.",
    ),
    (
        "plan --vary",
        VaryAnswer,
        VARY_SCHEMA,
        "One object: a row per value in the order given. A row's peaks, `fits` and"
        " `fits_expandable` are null where that run failed for another reason (`error`);"
        " `oom` and `oom_expandable` say the run ran out, its peaks being those before the"
        " failed request. `interrupted_by` names the signal that stopped the plan"
        " (`SIGTERM`, which sets `terminated` too, or `Ctrl-C`): `rows` are those of the values"
        " planned so far, `not_planned` the values whose plans had not begun, and a row whose"
        " run a signal stopped says where its script was (`interrupted`, `file:line`) and"
        " which signal (`interrupted_by`), its peaks being those up to there and its `fits`"
        " null unless it already did not fit; plan exits 143 after SIGTERM, 130 after Ctrl-C,"
        " and so where a value's plan alone was sent one.",
    ),
)

HEAD = """# JSON answers

Generated by `docs/json_keys.py` from the result dataclasses; do not edit by hand.

Every `--json` answer is one object whose first key is `"schema": N`, the version of that
command's keys. **Adding keys keeps N; renaming or removing a key bumps it.** Each other key is
a field of the command's result, named as the field unless noted; `a.b` is key `b` inside the
object at `a`, `a[].b` inside each element of the list at `a`, `a{}.b` inside each value of
the object at `a`. A type met again inside itself (a call tree's node, a summary's
`other_devices`) is listed once.
"""


def page() -> str:
    """The text of docs/json.md."""
    parts = [HEAD]
    for name, kind, schema, shape in COMMANDS:
        parts.append(f"\n## `{name} --json` (schema {schema}, `{kind.__name__}`)\n\n{shape}\n")
        parts.append("\n| key | type |\n| --- | --- |\n")
        parts.extend(f"| `{path}` | {_cell(words)} |\n" for path, words in json_keys(kind))
    return "".join(parts)


def _cell(text: str) -> str:
    """``text`` inside a table cell: its ``|`` (a choice of strings) escaped."""
    return text.replace("|", "\\|")


def main() -> int:
    """Write the page (``--check``: only say whether the committed one is current)."""
    text = page()
    if "--check" in sys.argv[1:]:
        return 0 if PAGE.read_text(encoding="utf-8") == text else 1
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
