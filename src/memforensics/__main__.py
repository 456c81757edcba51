"""``python -m memforensics`` runs the console script (handy under ``torchrun -m``)."""

import sys

from memforensics.cli import console

sys.exit(console())
