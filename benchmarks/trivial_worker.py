"""The trivial worker of launch_overhead.py: reads its rank and exits (no torch import)."""

import os

assert os.environ["WORLD_SIZE"] == "2"
