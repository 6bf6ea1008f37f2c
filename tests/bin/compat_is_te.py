"""Worker for the torchrun-compatibility tests: writes ``torch.distributed.is_torchelastic_launched()``.

Usage: ``compat_is_te.py OUT_DIR``; writes ``True``/``False`` to ``OUT_DIR/<RANK>`` (``OUT_DIR/none`` when run
without a launcher). Imports torch, so keep the worker count small.
"""

import os
import sys

import torch.distributed as dist

with open(os.path.join(sys.argv[1], os.environ.get("RANK", "none")), "w") as f:
    f.write(str(dist.is_torchelastic_launched()))
