import os

# Keep tests offline and quiet: no hub access, no telemetry, a non-interactive matplotlib.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
