"""The self-check a user runs on a training node before a long job."""

from memforensics.doctor.checks import SCHEMA, Doctor, doctor_text

__all__ = ["SCHEMA", "Doctor", "doctor_text"]
