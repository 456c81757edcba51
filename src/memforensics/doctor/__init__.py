"""The self-check a user runs on a training node before a long job."""

from memforensics.doctor.checks import (
    SCHEMA,
    Check,
    Doctor,
    DoctorReport,
    Status,
    doctor_text,
    overall,
)

__all__ = ["SCHEMA", "Check", "Doctor", "DoctorReport", "Status", "doctor_text", "overall"]
