"""A cache of analysis answers keyed by each dump file's identity: checked plain text, bounded."""

from memforensics.analysis.cache.identity import FORMAT, file_key
from memforensics.analysis.cache.store import (
    MAX_BYTES_ENV,
    AnswerCache,
    CacheInfo,
    default_cache_dir,
    default_max_bytes,
)
from memforensics.analysis.cache.working import Claim

__all__ = [
    "FORMAT",
    "MAX_BYTES_ENV",
    "AnswerCache",
    "CacheInfo",
    "Claim",
    "default_cache_dir",
    "default_max_bytes",
    "file_key",
]
