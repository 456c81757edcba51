"""Step 6 of the real-GPU check, and the CLI readers steps 2 and 6 share.

Everything here goes through the real ``memforensics`` console entry in subprocesses, as a user
would run it on the dumps afterwards. ``replay`` is checked where the version under test has it;
its ``--json`` shape is read defensively (a list of alternatives, each with its settings and
whether it runs out of memory), and a shape this script does not know is recorded as
``unjudged`` with the raw output, never as a failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _gpu_record import Context, Step, has_command, read_json, run_cli

_ROW_LISTS = ("alternatives", "rows", "what_if", "whatif", "table", "results", "scenarios")
_LABELS = ("settings", "setting", "alloc_conf", "config", "name", "label")
_OOM_FLAGS = ("oom", "ooms", "out_of_memory", "would_oom", "fails")


def summary_json(ctx: Context, path: Path) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """``memforensics summary --json PATH``: the parsed object (None on failure) and the run."""
    proc = run_cli(["summary", "--json", str(path)], ctx)
    parsed = read_json(proc["stdout"]) if proc["exit_status"] == 0 else None
    return (parsed if isinstance(parsed, dict) else None), proc


def verdict_name(summary: dict[str, Any] | None) -> str | None:
    """The verdict word of a ``summary --json`` object: ``verdict.name`` (schema 2), or the
    ``verdict`` string of the 0.1 answers."""
    verdict = summary.get("verdict") if summary else None
    if isinstance(verdict, dict):
        verdict = verdict.get("name")
    return verdict if isinstance(verdict, str) else None


def replay_outcomes(parsed: Any) -> dict[str, bool] | None:
    """``{settings label: runs out of memory}`` from a ``replay --json`` object, if readable."""
    rows: Any = parsed if isinstance(parsed, list) else None
    if isinstance(parsed, dict):
        for key in _ROW_LISTS:
            if isinstance(parsed.get(key), list):
                rows = parsed[key]
                break
    if not rows:
        return None
    outcomes: dict[str, bool] = {}
    for row in rows:
        if not isinstance(row, dict):
            return None
        label = next((row[k] for k in _LABELS if row.get(k) not in (None, "")), None)
        flag = next((row[k] for k in _OOM_FLAGS if isinstance(row.get(k), bool)), None)
        if label is None or flag is None:
            return None
        outcomes[label if isinstance(label, str) else repr(label)] = flag
    return outcomes


def judge_replay(step: Step, ctx: Context, path: Path, workload: str) -> None:
    """The what-if table: expandable segments fit the fragmenting request, nothing fits the
    exhausting one."""
    proc = run_cli(["replay", str(path), "--json"], ctx)
    parsed = read_json(proc["stdout"])
    step.figures[f"{workload}_replay"] = parsed if parsed is not None else proc["stderr"][-500:]
    if proc["exit_status"] != 0 or parsed is None:
        step.check(
            "replay runs",
            False,
            expected=0,
            actual=proc["exit_status"],
            detail=proc["stderr"].strip()[-100:],
        )
        return
    outcomes = replay_outcomes(parsed)
    if outcomes is None:
        step.unjudged("replay verdict", "replay --json shape not recognised")
        return
    if workload == "fragmentation":
        expandable = {k: v for k, v in outcomes.items() if "expandable" in k.lower()}
        if not expandable:
            step.unjudged("replay verdict", "no expandable_segments row in the replay")
            return
        step.check(
            "replay says expandable_segments avoids the OOM",
            not all(expandable.values()),
            expected=False,
            actual=expandable,
        )
    else:
        step.check(
            "replay says no setting avoids the OOM",
            all(outcomes.values()),
            expected=True,
            actual=outcomes,
        )


def sample(dumps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dump per step, an OOM dump where the step has one."""
    chosen: dict[str, dict[str, Any]] = {}
    for dump in dumps:
        held = chosen.get(dump["step"])
        if held is None or (dump["kind"] == "oom" and held["kind"] != "oom"):
            chosen[dump["step"]] = dump
    return list(chosen.values())


def step_analysis(step: Step, ctx: Context) -> None:
    """6. summary, report and replay on every dump this run wrote, through the real CLI."""
    replay = has_command("replay")
    if not replay:
        step.skip("replay on real dumps", "memforensics replay")
    if not ctx.dumps:
        raise RuntimeError("no dumps were written by the earlier steps")
    timings: dict[str, list[float]] = {"summary": [], "report": [], "replay": []}
    fidelity: dict[str, Any] = {}
    for dump in sample(ctx.dumps) if ctx.settings.cli_sample else ctx.dumps:
        path = Path(dump["path"])
        name = f"{dump['step']}/{dump['kind']}/{path.name}"
        if not path.exists():
            step.check(f"{name}: still on disk", False, detail="removed (retention?)")
            continue
        parsed, proc = summary_json(ctx, path)
        timings["summary"].append(proc["seconds"])
        verdict = verdict_name(parsed)
        good = parsed is not None and (dump["kind"] != "oom" or verdict not in (None, "no-oom"))
        step.check(f"summary {name}", good, actual=verdict, detail=proc["stderr"].strip()[-100:])
        if replay and dump["kind"] == "oom":
            proc = run_cli(["replay", str(path), "--json"], ctx)
            timings["replay"].append(proc["seconds"])
            out = read_json(proc["stdout"])
            step.check(
                f"replay {name}",
                proc["exit_status"] == 0 and out is not None,
                actual=proc["exit_status"],
                detail=proc["stderr"].strip()[-100:],
            )
            if isinstance(out, dict) and "fidelity" in out:
                fidelity[name] = out["fidelity"]
    folders = sorted({Path(d["path"]).parent.parent for d in ctx.dumps})
    groups = [folders] if ctx.settings.cli_sample else [[folder] for folder in folders]
    for group in groups:
        html = ctx.work / f"report-{group[0].name if len(group) == 1 else 'all'}.html"
        proc = run_cli(["report", *map(str, group), "-o", str(html)], ctx)
        timings["report"].append(proc["seconds"])
        size = html.stat().st_size if html.exists() else 0
        step.check(
            f"report {html.stem[7:]} ({len(group)} folder(s))",
            proc["exit_status"] == 0 and size > 0,
            actual={"exit_status": proc["exit_status"], "bytes": size},
            detail=proc["stderr"].strip()[-100:],
        )
    step.figures["seconds"] = {k: v for k, v in timings.items() if v}
    step.figures["dumps"] = len(ctx.dumps)
    step.figures["bytes"] = sum(
        Path(d["path"]).stat().st_size for d in ctx.dumps if Path(d["path"]).exists()
    )
    if fidelity:
        step.figures["replay_fidelity"] = fidelity
