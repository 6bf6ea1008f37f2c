"""Worker for launcher tests: prints the name of its parent process (the launcher), as ``ps -o comm`` shows it."""

import os

with open(f"/proc/{os.getppid()}/comm") as f:
    print(f"launcher comm: {f.read().strip()}", flush=True)
