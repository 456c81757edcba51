"""Malformed snapshot structures never crash the analysis: SnapshotLoadError or a result."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memforensics import SnapshotLoadError
from memforensics.analysis import diff_dumps, replay_dump, summarize
from memforensics.analysis.compare import diff_by_device
from memforensics.analysis.dump import dump_from_snapshot
from memforensics.analysis.report import ReportBuilder
from memforensics.analysis.schema import to_json

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=6),
    st.binary(max_size=4),
)
_anything = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=6), inner, max_size=3),
        st.tuples(inner, inner),
    ),
    max_leaves=8,
)
_int = st.one_of(st.integers(0, 2**40), _anything)
_frame = st.fixed_dictionaries(
    {},
    optional={
        "filename": st.one_of(st.text(max_size=20), _anything),
        "line": _int,
        "name": _anything,
    },
)
_frames = st.one_of(st.lists(_frame, max_size=4), _anything)
_block = st.one_of(
    _anything,
    st.fixed_dictionaries(
        {},
        optional={
            "size": _int,
            "requested_size": _int,
            "state": st.one_of(
                st.sampled_from(["active_allocated", "active_pending_free", "inactive"]), _anything
            ),
            "address": _int,
            "frames": _frames,
            "history": st.one_of(
                st.lists(st.fixed_dictionaries({}, optional={"frames": _frames})), _anything
            ),
            "user_metadata": st.one_of(st.just("step=3"), _anything),
        },
    ),
)
_segment = st.one_of(
    _anything,
    st.fixed_dictionaries(
        {},
        optional={
            "address": _int,
            "total_size": _int,
            "device": _int,
            "segment_type": _anything,
            "is_expandable": _anything,
            "blocks": st.one_of(st.lists(_block, max_size=4), _anything),
        },
    ),
)
_actions = st.sampled_from(
    [
        "alloc",
        "free_requested",
        "free_completed",
        "free",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "snapshot",
        "oom",
    ]
)
_entry = st.one_of(
    _anything,
    st.fixed_dictionaries(
        {},
        optional={
            "action": st.one_of(_actions, _anything),
            "addr": _int,
            "size": _int,
            "time_us": _int,
            "device_free": _int,
            "user_metadata": st.one_of(st.just("step=2"), _anything),
        },
    ),
)
_snapshot = st.one_of(
    _anything,
    st.lists(_segment, max_size=4),  # torch.cuda.memory_snapshot()'s bare list
    st.fixed_dictionaries(
        {},
        optional={
            "segments": st.one_of(st.lists(_segment, max_size=4), _anything),
            "device_traces": st.one_of(
                st.lists(st.lists(_entry, max_size=6), max_size=2), _anything
            ),
        },
    ),
)
_sidecar = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            key: _anything
            for key in ("kind", "rank", "step", "steps", "created_at", "partial", "device_index")
        }
        | {
            "oom": st.one_of(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "requested_bytes": _int,
                        "device_free_bytes": _int,
                        "device_total_bytes": _int,
                    },
                ),
                _anything,
            )
        },
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_snapshot, _sidecar)
def test_malformed_structures_never_crash(snapshot: Any, sidecar: Any) -> None:
    """Any structure: loading refuses it with SnapshotLoadError, or every analysis runs."""
    try:
        dump = dump_from_snapshot(snapshot, sidecar=sidecar)
    except SnapshotLoadError as exc:
        message = str(exc)
        dump = None
    if dump is None:
        assert "\n" not in message
        return
    json.dumps(to_json(summarize(dump)))
    json.dumps(to_json(diff_dumps(dump, dump)))
    for view in dump.device_views():
        json.dumps(to_json(summarize(view)))
    json.dumps(to_json(diff_by_device(dump, dump)))
    json.dumps(to_json(replay_dump(dump)))  # the allocator replay too
    builder = ReportBuilder()
    builder.add(dump)
    assert builder.html().startswith("<!DOCTYPE html>")
