"""A peak (or OOM) inside a multi-tensor optimizer step: its temporaries are named as such,
with their sites and bytes, and the fix is the optimizer's keyword, never a smaller batch."""

from __future__ import annotations

from typing import Any

from memforensics._units import format_bytes as fmt
from memforensics.analysis import summarize
from memforensics.analysis.diagnosis import Diagnosis
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.testing import AUTOGRAD_THREAD, Block, MiB, Site, SnapshotBuilder

TORCH = "/venv/lib/python3.12/site-packages/torch"
STEP = ((f"{TORCH}/optim/optimizer.py", 485, "wrapper"),)
PARAMS = Site(
    "/job/train.py", 10, "<module>", inside=((f"{TORCH}/nn/modules/module.py", 1340, "to"),)
)
STATE = Site(
    "/job/train.py", 30, "<module>",
    inside=(
        (f"{TORCH}/optim/adamw.py", 95, "_init_group"),
        (f"{TORCH}/optim/adamw.py", 220, "step"),
        *STEP,
    ),
)  # fmt: skip
STEP_TEMPS = Site(
    "/job/train.py", 30, "<module>",
    inside=(
        (f"{TORCH}/optim/adamw.py", 560, "_multi_tensor_adamw"),
        (f"{TORCH}/optim/adamw.py", 330, "adamw"),
        (f"{TORCH}/optim/adamw.py", 240, "step"),
        *STEP,
    ),
)  # fmt: skip
FORWARD = Site("/job/model.py", 40, "forward")
PARAMETER_SIZES = (MiB(64), MiB(32), MiB(16), MiB(16))
"""One block per parameter; the step's ``_foreach_sqrt`` makes one temporary as large as each."""


def _training_step(builder: SnapshotBuilder) -> None:
    """Parameters, a forward whose activations backward frees, gradients, AdamW's two moments
    per parameter, then the multi-tensor step's temporaries (one per parameter, all at once)."""
    builder.segment(*(Block(size, site=PARAMS) for size in PARAMETER_SIZES))
    builder.segment(*(Block(size, site=FORWARD, unwound=True) for size in PARAMETER_SIZES))
    builder.release()
    builder.segment(*(Block(size, site=AUTOGRAD_THREAD) for size in PARAMETER_SIZES))
    builder.segment(*(Block(size, site=STATE) for size in PARAMETER_SIZES * 2))
    builder.segment(*(Block(size, site=STEP_TEMPS, unwound=True) for size in PARAMETER_SIZES))


def _last_step_alloc(snapshot: dict[str, Any]) -> int:
    """Trace position of the step's last temporary: the peak (nothing is freed before it)."""
    trace = snapshot["device_traces"][0]
    return max(
        i
        for i, entry in enumerate(trace)
        if entry["action"] == "alloc"
        and any(f["name"] == "_multi_tensor_adamw" for f in entry["frames"])
    )


def _diagnosis(snapshot: dict[str, Any], **kwargs: Any) -> Diagnosis:
    """The diagnosis ``summary`` gives the snapshot."""
    summary = summarize(dump_from_snapshot(snapshot), **kwargs)
    assert summary.diagnosis is not None
    return summary.diagnosis


def test_a_peak_inside_the_optimizer_step_names_its_temporaries_and_the_optimizer_fix() -> None:
    """The peak of a healthy step is at a foreach AdamW step: after the static memory (the
    bigger part), the optimizer temporaries are named with their site and bytes, fused=True
    freeing all of them and foreach=False all but the largest parameter's; no cause advises a
    smaller batch for them."""
    builder = SnapshotBuilder()
    _training_step(builder)
    builder.release()
    snapshot = builder.build()
    temps, largest = sum(PARAMETER_SIZES), max(PARAMETER_SIZES)
    peak = 5 * sum(PARAMETER_SIZES)  # parameters, gradients, two moments, the temporaries
    found = _diagnosis(snapshot)
    assert found.moment == "peak"
    assert found.headline.startswith(
        f"peak {fmt(peak)} at entry {_last_step_alloc(snapshot):,}: optimizer state"
    )
    assert [c.name for c in found.causes] == ["static", "optimizer_temporaries"]
    cause = found.causes[1]
    assert cause.evidence == (
        f"optimizer temporaries {fmt(temps)} in {len(PARAMETER_SIZES)} blocks inside the"
        f" optimizer's step, inferred (train.py:30 <module> {fmt(temps)})"
    )
    assert [fix.bytes for fix in cause.fixes] == [temps, temps - largest]
    assert cause.fixes[0].action.startswith("fused=True")
    assert cause.fixes[1].action.startswith("foreach=False")
    assert "half" not in found.headline
    assert "halve" not in found.headline


def test_a_hand_written_steps_temporaries_are_fixed_in_place_not_by_a_keyword() -> None:
    """A hand-written optimizer (its own step under torch/optim's wrapper, no _multi_tensor_
    frame): its temporaries are named with its line, and the fix is updating in place there,
    freeing all of them; torch's foreach and fused keywords, which it lacks, are not offered."""
    own = Site(
        "/job/optim.py", 78, "step", inside=(), outside=(*STEP, ("/job/train.py", 30, "<module>"))
    )
    builder = SnapshotBuilder()
    builder.segment(*(Block(size, site=PARAMS) for size in PARAMETER_SIZES))
    builder.segment(*(Block(size, site=AUTOGRAD_THREAD) for size in PARAMETER_SIZES))
    builder.segment(*(Block(size, site=own, unwound=True) for size in PARAMETER_SIZES[:2]))
    builder.release()
    found = _diagnosis(builder.build())
    [cause] = [c for c in found.causes if c.name == "optimizer_temporaries"]
    assert cause.bytes == sum(PARAMETER_SIZES[:2])
    [fix] = cause.fixes
    assert fix.action.startswith("update in place in the optimizer's step at optim.py:78 step")
    assert fix.bytes == sum(PARAMETER_SIZES[:2])


def test_an_oom_inside_the_optimizer_step_is_not_blamed_on_the_batch() -> None:
    """An OOM raised in the step and dumped after unwinding: the unwound temporaries are the
    optimizer's, named so, and as they alone free what the request needed, fused=True heads
    the diagnosis; they are not "the failing step's tensors" a smaller micro-batch would cut."""
    builder = SnapshotBuilder()
    _training_step(builder)
    builder.oom(requested=MiB(40), device_free=0)
    found = _diagnosis(builder.build())
    assert found.moment == "oom"
    names = [c.name for c in found.causes]
    assert "activations" not in names
    [cause] = [c for c in found.causes if c.name == "optimizer_temporaries"]
    assert cause.bytes == sum(PARAMETER_SIZES)
    assert cause.sufficient is True
    assert found.causes[0] is cause
    assert found.headline.startswith(f"optimizer temporaries {fmt(sum(PARAMETER_SIZES))}")
    assert found.headline.endswith(
        f"removing it frees {fmt(sum(PARAMETER_SIZES))}, the request needed {fmt(MiB(40))}"
        " → fused=True in Adam/AdamW (no per-parameter temporaries)"
    )
