"""Run every ``benchmarks/bench_*.py`` script and merge their figures into results.json.

Each bench script is a plain program a user can run alone; it prints its own table and, when
given ``--json PATH``, writes its figures there. This runner only sequences them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    """Run each bench script in a fresh interpreter and write benchmarks/results.json."""
    selected = sys.argv[1:]
    results: dict[str, object] = {}
    status = 0
    for script in sorted(HERE.glob("bench_*.py")):
        if selected and script.stem not in selected:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "result.json"
            print(f"== {script.stem}", flush=True)
            proc = subprocess.run([sys.executable, str(script), "--json", str(out)], check=False)
            if out.exists():  # a missed target exits 1 but still reports its figures
                results[script.stem] = json.loads(out.read_text())
            if proc.returncode != 0:
                status = 1
                entry = results.setdefault(script.stem, {})
                assert isinstance(entry, dict)
                entry["exit_status"] = proc.returncode
    (HERE / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"wrote {HERE / 'results.json'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
