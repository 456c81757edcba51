"""The allocator replay: self-check the model on a dump, then what-if under other settings."""

from memforensics.analysis.replay.replay import (
    EXPANDABLE_ROW,
    SCHEMA,
    Replay,
    avoids,
    replay_dump,
)
from memforensics.analysis.replay.text import replay_text

__all__ = ["EXPANDABLE_ROW", "SCHEMA", "Replay", "avoids", "replay_dump", "replay_text"]
