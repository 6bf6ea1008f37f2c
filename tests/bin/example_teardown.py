"""Run one function of an example as a one-rank gloo job in this process, then print the names of the threads left.

    example_teardown.py <example.py> <function> [<int argument>...] [-- <argv for the example>]

Loads the example as a module (its imports run, its ``__main__`` block does not), calls ``<function>`` (with the
integer arguments) and prints one line: ``threads: <comm>,<comm>,...`` from /proc/self/task.
"""

import os
import runpy
import socket
import sys

path, function, *rest = sys.argv[1:]
split = rest.index("--") if "--" in rest else len(rest)
positional, argv = [int(a) for a in rest[:split]], rest[split + 1:]
with socket.socket() as s:  # a free port for the one-rank store
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=str(port))
sys.argv = [path, *argv]
namespace = runpy.run_path(path, run_name="example")
namespace[function](*positional)
names = []
for tid in sorted(os.listdir("/proc/self/task")):
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            names.append(f.read().strip())
    except OSError:  # a thread that ended meanwhile
        pass
print("threads: " + ",".join(names), flush=True)
