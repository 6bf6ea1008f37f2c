"""``python -I ... ecolaunch.cli.guard_cmd --launcher-pid PID [--state-dir D] [--simulate S] [--policy F]``: the cap
guard of one root launcher (not a user command).

Started by the launcher (:func:`ecolaunch.caps.guard.start_guard`), isolated, with the launcher's settings on
its command line and the read end of a pipe on stdin; see :mod:`ecolaunch.caps.guard`. It reads no setting from
its environment: what root's helper does is what root's launcher said. Exit status 0 when the launcher ended cleanly or its
caps were restored, 1 when the guard could not restore (it says which GPU and how to fix it).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from ecolaunch.admin.interpreter import add_settings_options, settings_env
from ecolaunch.caps.ledger import load_ledger
from ecolaunch.errors import EcolaunchError, with_hint
from ecolaunch.caps.guard import LOCK_TIMEOUT_S, READY, restore_after, wait_for_launcher, wait_gone
from ecolaunch.runtime import open_gpus, resolve
from ecolaunch.state.store import StateStore
from ecolaunch.statedir import StateLayout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ecolaunch.cli.guard_cmd", description=__doc__.split("\n")[0])
    ap.add_argument("--launcher-pid", type=int, required=True)

    add_settings_options(ap)
    args = ap.parse_args(argv)
    for s in (signal.SIGINT, signal.SIGHUP):  # only the launcher's death (its pipe) ends the guard
        signal.signal(s, signal.SIG_IGN)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ecolaunch guard: %(message)s"))
    root = logging.getLogger("ecolaunch")
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    root.propagate = False

    try:  # everything that can fail is opened before the wait, so that the restore itself is quick
        environment, rules = resolve(settings_env(args))
        backend = open_gpus(environment)
        store = StateStore(environment.state_dir, group=rules.state_group, lock_timeout_s=LOCK_TIMEOUT_S)
        host = backend.hostname()
    except EcolaunchError as e:
        sys.stderr.write(with_hint(f"ecolaunch guard: Error: cannot watch launcher {args.launcher_pid}: {e}",
                                   "if it dies, run `sudo ecolaunch agent --once` to restore its power caps") + "\n")
        wait_for_launcher(sys.stdin.buffer)
        return 1
    sys.stdout.buffer.write(READY)  # the launcher changes no cap before it reads this
    sys.stdout.buffer.flush()
    if not wait_for_launcher(sys.stdin.buffer):
        return 0
    wait_gone(args.launcher_pid)
    try:
        report = restore_after(store, backend, rules, host=host)
    except EcolaunchError as e:
        sys.stderr.write(with_hint(f"ecolaunch guard: Error: launcher {args.launcher_pid} died and its power caps "
                                   f"could not be restored: {e}", e.hint or "run `sudo ecolaunch agent --once`") + "\n")
        return 1

    gpus = {g.uuid: g.index for g in backend.gpus()}
    for uuid, watts in report.restored.items():
        sys.stderr.write(f"ecolaunch guard: launcher {args.launcher_pid} died; GPU {gpus.get(uuid, uuid)} restored to "
                         f"{watts:.0f} W\n")
    originals = load_ledger(StateLayout(environment.state_dir).ledger, host) or {}
    for uuid in report.failed:
        index, original = gpus.get(uuid, uuid), originals.get(uuid)
        value = f"{original:.0f} W" if original is not None else "its original limit"
        by_hand = f"`sudo nvidia-smi -i {index} -pl {original:.0f}` or " if original is not None else ""
        sys.stderr.write(with_hint(f"ecolaunch guard: Error: launcher {args.launcher_pid} died and GPU {index} could "
                                   f"not be restored to {value}", f"run {by_hand}`sudo ecolaunch agent --once`") + "\n")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
