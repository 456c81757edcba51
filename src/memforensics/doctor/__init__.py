"""The self-check a user runs on a training node before a long job."""

from memforensics.doctor.checks import Doctor
from memforensics.doctor.status import Check, Status, overall

__all__ = ["Check", "Doctor", "Status", "overall"]
