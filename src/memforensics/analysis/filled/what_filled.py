"""What filled the device: kinds of the live memory, the peak and the OOM moment, in one pass.

``summary``, ``report`` and the benchmarks all ask the same questions of a dump; this runs the
trace walk (:mod:`~memforensics.analysis.filled.lifetimes`) and the classifier
(:mod:`~memforensics.analysis.filled.kinds`) once and hands back the answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from memforensics.analysis.dump import Dump
from memforensics.analysis.dump.gc_pause import paused_gc
from memforensics.analysis.filled.kinds import KindBytes, classify, kinds_table
from memforensics.analysis.filled.lifetimes import Lifetimes, lifetimes
from memforensics.analysis.filled.peak import Moment, moment, peak_position

KINDS_TOTAL = "allocated_bytes"  # the kinds add up to this figure of the snapshot


@dataclass(frozen=True)
class Filled:
    """Kinds at the snapshot's moment, the peak, and the OOM's moment when the trace has one."""

    kinds: tuple[KindBytes, ...]
    peak: Moment
    oom: Moment | None
    lifetimes: Lifetimes


@paused_gc()
def what_filled(dump: Dump) -> Filled:
    """Classify every allocation of ``dump`` and find its peak and OOM moments."""
    lt = lifetimes(dump)
    classify(lt)
    position = peak_position(lt)
    peak = moment(lt, "peak" if lt.has_trace else "snapshot", position, dump.trace)
    oom = moment(lt, "oom", lt.oom_positions[-1], dump.trace) if lt.oom_positions else None
    return Filled(kinds_table(lt.at_snapshot()), peak, oom, lt)
