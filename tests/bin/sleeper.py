"""Worker for launcher tests: marks <dir>/started-<RANK>-<pid>, sleeps, then marks done-<RANK>-<pid>."""

import os
import pathlib
import sys
import time

out = pathlib.Path(sys.argv[1])
rank, pid = os.environ.get("RANK", "0"), os.getpid()
(out / f"started-{rank}-{pid}").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
time.sleep(float(sys.argv[2]))
(out / f"done-{rank}-{pid}").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
