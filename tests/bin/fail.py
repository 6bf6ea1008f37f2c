"""Worker for launcher tests: the rank named by argv[1] exits with code argv[2]; the others sleep a little."""

import os
import sys
import time

if os.environ["RANK"] == sys.argv[1]:
    sys.exit(int(sys.argv[2]))
time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 2.0)
