"""Worker for the --max-restarts compatibility test: records each attempt, then the chosen rank fails.

Usage: ``compat_fail.py OUT_DIR FAIL_RANK CODE``. Every worker first creates
``OUT_DIR/attempt<TORCHELASTIC_RESTART_COUNT>-rank<RANK>``; the worker whose RANK is FAIL_RANK then exits with
CODE, the others exit 0.
"""

import os
import sys

out_dir, fail_rank, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
rank = os.environ["RANK"]
open(os.path.join(out_dir, f"attempt{os.environ['TORCHELASTIC_RESTART_COUNT']}-rank{rank}"), "w").close()
if rank == fail_rank:
    sys.exit(code)
