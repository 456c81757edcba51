"""Run folders written by someone else: absurd claims and special files cost bounded work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from memforensics._layout import RANK_LIMIT
from memforensics.testing import make_sidecar, write_journals

_LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))
from memforensics.analysis.folder import build_overview, overview_text
from memforensics.analysis.report import render_overview
view = build_overview(sys.argv[1], workers=1)
overview_text(view)
render_overview(view)
print(view.problems.ranks_missing_count, len(view.problems.ranks_missing))
print(len(view.problems.absurd_claims))
"""


def test_absurd_world_size_and_rank_claims_cost_bounded_memory(tmp_path: Path) -> None:
    """A sidecar claiming 10**12 ranks and a journal of rank 99999999999 stay under 2 GiB."""
    write_journals(tmp_path, ranks=2, lines=5)
    (tmp_path / "journal" / "rank99999999999_pid1.jsonl").write_text("")
    oom = tmp_path / "oom"
    oom.mkdir()
    for stem, world in (("rank0_pid1", 10**12), ("rank1_pid2", RANK_LIMIT - 1)):
        (oom / f"{stem}.pickle").write_bytes(b"")
        sidecar = make_sidecar(rank=0, kind="oom")
        sidecar["world_size"] = world
        (oom / f"{stem}.json").write_text(json.dumps(sidecar))
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    counts, absurd = done.stdout.split("\n")[:2]
    assert counts.split() == [str(RANK_LIMIT - 1 - 2), "1000"]
    assert absurd == "2"
