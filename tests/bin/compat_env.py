"""Worker for the torchrun-compatibility tests (PyTorch's ``bin/test_script.py``, re-expressed; no torch import).

Usage: ``compat_env.py OUT_DIR``. Writes the worker's whole environment as JSON to ``OUT_DIR/<RANK>`` (so the
directory lists one file per global rank, as PyTorch's script touches) and prints ``creating OUT_DIR/<RANK>``.
"""

import json
import os
import sys

out_dir = sys.argv[1]
path = os.path.join(out_dir, os.environ["RANK"])
print(f"creating {path}", flush=True)
tmp = os.path.join(out_dir, f".{os.environ['RANK']}.tmp")
with open(tmp, "w") as f:
    json.dump(dict(os.environ), f)
os.replace(tmp, path)
