"""The allocator replay: self-check the model on a dump, then what-if under other settings."""

from memforensics.analysis.replay.blame import Pinner
from memforensics.analysis.replay.replay import SCHEMA, Replay, device_for, replay_dump
from memforensics.analysis.replay.runner import Device, RunResult, run
from memforensics.analysis.replay.text import replay_text
from memforensics.analysis.replay.what_if import WhatIf

__all__ = [
    "SCHEMA",
    "Device",
    "Pinner",
    "Replay",
    "RunResult",
    "WhatIf",
    "device_for",
    "replay_dump",
    "replay_text",
    "run",
]
