"""The diagnosis: an OOM's causes, ranked, each with its bytes, evidence and fix."""

from memforensics.analysis.diagnosis.diagnosis import (
    CAUSES,
    Cause,
    Diagnosis,
    Evidence,
    Fix,
    cache_framework,
    diagnose,
    has_expandable,
    needed_bytes,
)
from memforensics.analysis.diagnosis.text import CAUSE_NAMES, cause_words

__all__ = [
    "CAUSES",
    "CAUSE_NAMES",
    "Cause",
    "Diagnosis",
    "Evidence",
    "Fix",
    "cache_framework",
    "cause_words",
    "diagnose",
    "has_expandable",
    "needed_bytes",
]
