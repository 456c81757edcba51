"""Example training scripts shipped with memforensics.

They are user code, not library code: ``memforensics demo`` copies ``demo_train.py`` into its
output folder and runs it from there, so it may import torch like any training script does.
"""
