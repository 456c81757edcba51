"""The data a summary is: :class:`Summary` and its rows, with their ``--json`` forms.

Split from :mod:`memforensics.analysis.summary.summarize` so the contract (field and key names that
``summary --json``, the report and the diff rely on, see docs/analysis.md) reads apart from the
passes that compute it; other modules that only read a summary import just this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memforensics.analysis.dump.devices import DeviceUsage
from memforensics.analysis.dump.frames import UNKNOWN_SITE
from memforensics.analysis.dump.meta import OomRecord
from memforensics.analysis.dump.shapes import SnapshotShape
from memforensics.analysis.filled.what_filled import Filled
from memforensics.analysis.oom.moment import OomMoment
from memforensics.analysis.oom.verdict import LowerBound, Verdict


@dataclass(frozen=True, slots=True)
class SiteBytes:
    """Live bytes and block count of one allocation site, reached from one ``caller``.

    ``site`` is the innermost frame outside torch; ``caller`` the innermost frame outside every
    installed package and the standard library (the user's own line); see ``_frames``.
    """

    site: str
    bytes: int
    blocks: int
    caller: str = UNKNOWN_SITE

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "site": self.site,
            "caller": self.caller,
            "bytes": self.bytes,
            "blocks": self.blocks,
        }


@dataclass(frozen=True, slots=True)
class StepBytes:
    """Live bytes allocated during one step (``step`` None: no step metadata on those blocks)."""

    step: int | None
    bytes: int
    blocks: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"step": self.step, "bytes": self.bytes, "blocks": self.blocks}


@dataclass(frozen=True)
class Summary:
    """The facts ``memforensics summary`` prints; ``to_dict`` gives the ``--json`` object."""

    file: str
    kind: str | None
    rank: int | None
    step: int | None
    steps: tuple[int, int] | None
    device_index: int | None
    reserved_bytes: int
    allocated_bytes: int
    active_bytes: int
    free_in_reserved_bytes: int
    largest_free_block_bytes: int
    segments: int
    blocks: int
    oom: OomRecord | None
    verdict: Verdict
    top_sites: tuple[SiteBytes, ...]
    live_by_step: tuple[StepBytes, ...]
    trace_entries: int
    truncated: bool | None
    warnings: tuple[str, ...]
    device: str | None = None
    site_count: int = 0
    before_recording_bytes: int = 0
    before_recording_blocks: int = 0
    devices: tuple[DeviceUsage, ...] = ()
    device_reason: str = ""
    shape: SnapshotShape = field(default_factory=SnapshotShape)
    limits: tuple[str, ...] = ()
    oom_state: OomMoment | None = None  # the state the verdict was judged on (#11)
    lower_bound: LowerBound | None = None
    filled: Filled | None = None  # kinds, peak and OOM moment (#12)

    @property
    def history_events(self) -> int:
        """Old name of ``trace_entries`` (kept for readers written before the rename)."""
        return self.trace_entries

    @property
    def history_truncated(self) -> bool | None:
        """Old name of ``truncated`` (kept for readers written before the rename)."""
        return self.truncated

    def to_dict(self) -> dict[str, Any]:
        """The ``summary --json`` object (key names are a contract; see docs/analysis.md).

        A fact the sidecar also holds has the sidecar's key (``device`` is the device's name,
        ``device_index`` its index, ``truncated``, ``trace_entries``).
        """
        return {
            "file": self.file,
            "kind": self.kind,
            "rank": self.rank,
            "step": self.step,
            "steps": list(self.steps) if self.steps else None,
            "device": self.device,
            "device_index": self.device_index,
            "reserved_bytes": self.reserved_bytes,
            "allocated_bytes": self.allocated_bytes,
            "active_bytes": self.active_bytes,
            "free_in_reserved_bytes": self.free_in_reserved_bytes,
            "largest_free_block_bytes": self.largest_free_block_bytes,
            "segments": self.segments,
            "blocks": self.blocks,
            "oom": self.oom.to_dict() if self.oom else None,
            "verdict": self.verdict.name,
            "verdict_reason": self.verdict.reason,
            "oom_state": self.oom_state.to_dict() if self.oom_state else None,
            "external_bytes": self.oom_state.external_bytes if self.oom_state else None,
            "lower_bound": self.lower_bound.to_dict() if self.lower_bound else None,
            "explanation": self.verdict.explanation,
            "advice": self.verdict.advice,
            "top_sites": [site.to_dict() for site in self.top_sites],
            "site_count": self.site_count,
            "before_recording_bytes": self.before_recording_bytes,
            "before_recording_blocks": self.before_recording_blocks,
            "live_by_step": [step.to_dict() for step in self.live_by_step],
            "trace_entries": self.trace_entries,
            "truncated": self.truncated,
            "warnings": list(self.warnings),
            "devices": [item.to_dict() for item in self.devices],
            "device_reason": self.device_reason,
            "snapshot_shape": self.shape.to_dict(),
            "limits": list(self.limits),
            **(self.filled.to_dict() if self.filled else {}),
        }
