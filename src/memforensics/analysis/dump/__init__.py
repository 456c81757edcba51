"""A dump as read from disk: safe loading, the snapshot model and its shapes, devices, frames."""

from memforensics._layout import sidecar_path
from memforensics.analysis.dump.devices import DeviceUsage
from memforensics.analysis.dump.files import open_regular, read_regular
from memforensics.analysis.dump.frames import (
    BEFORE_RECORDING,
    NATIVE_ONLY,
    UNKNOWN_SITE,
    attribute,
    caller_of,
    frame_text,
    is_installed_file,
    is_library_file,
    is_native_frame,
    parse_step,
    site_fast,
    site_of,
)
from memforensics.analysis.dump.gc_pause import paused_gc
from memforensics.analysis.dump.load import (
    Dump,
    SnapshotReader,
    dump_from_snapshot,
    load_dump,
    missing_device,
    read_snapshot_file,
)
from memforensics.analysis.dump.meta import (
    SIDECAR_LIMIT,
    DumpMeta,
    OomRecord,
    dump_meta,
    read_sidecar_file,
)
from memforensics.analysis.dump.model import (
    ALLOCATED,
    INACTIVE,
    PENDING_FREE,
    Block,
    Segment,
    as_int,
)
from memforensics.analysis.dump.reading import BytesRead, CountingReader
from memforensics.analysis.dump.shapes import SnapshotShape
from memforensics.analysis.dump.sizes import block_size
from memforensics.analysis.dump.stacks import Stacks, per_stack
from memforensics.analysis.dump.text import (
    NATIVE_ONLY_MEANING,
    SITE_WIDTH,
    caller_line,
    context_lines,
    devices_text,
    hidden_rows,
    native_note,
    origin_words,
    short_site,
)

__all__ = [
    "ALLOCATED",
    "BEFORE_RECORDING",
    "INACTIVE",
    "NATIVE_ONLY",
    "NATIVE_ONLY_MEANING",
    "PENDING_FREE",
    "SIDECAR_LIMIT",
    "SITE_WIDTH",
    "UNKNOWN_SITE",
    "Block",
    "BytesRead",
    "CountingReader",
    "DeviceUsage",
    "Dump",
    "DumpMeta",
    "OomRecord",
    "Segment",
    "SnapshotReader",
    "SnapshotShape",
    "Stacks",
    "as_int",
    "attribute",
    "block_size",
    "caller_line",
    "caller_of",
    "context_lines",
    "devices_text",
    "dump_from_snapshot",
    "dump_meta",
    "frame_text",
    "hidden_rows",
    "is_installed_file",
    "is_library_file",
    "is_native_frame",
    "load_dump",
    "missing_device",
    "native_note",
    "open_regular",
    "origin_words",
    "parse_step",
    "paused_gc",
    "per_stack",
    "read_regular",
    "read_sidecar_file",
    "read_snapshot_file",
    "short_site",
    "sidecar_path",
    "site_fast",
    "site_of",
]
