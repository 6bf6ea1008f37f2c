"""What a run is watched through: the GPUs' readings, the workers' step marks, and the thread that polls them.

:class:`RunMonitor` owns the run's :class:`~ecolaunch.profile.sampler.Sampler`, its hook directory (the channel the
workers' step marks and hints come through, :mod:`ecolaunch.profile.channel`) with its
:class:`~ecolaunch.profile.channel.StepReader`, and the monitor thread that calls the observer's poll every
``poll_s``. It decides nothing: the run observer (:mod:`ecolaunch.run.observer`) reads what it gathered.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ecolaunch.clock import Clock
from ecolaunch.devices.backend import GpuBackend
from ecolaunch.profile import channel
from ecolaunch.profile.sampler import Sampler

logger = logging.getLogger(__name__)


class RunMonitor:
    """The readings of one run on ``gpu_uuids``, its step marks from ``hook_dir`` (created by :meth:`open_channel`).

    Args:
        interval_s, poll_s: seconds between GPU samples, and between two polls of the monitor thread.
        background: run the sampler and monitor threads; False: each :meth:`read` takes one sample (tests, the
            benchmarks on a virtual clock).
    """

    def __init__(self, backend: GpuBackend, gpu_uuids: Sequence[str], hook_dir: Path, *, clock: Clock,
                 interval_s: float, poll_s: float, background: bool) -> None:
        self.hook_dir = hook_dir
        self.sampler = Sampler(backend, tuple(gpu_uuids), clock=clock, interval_s=interval_s)
        self.reader = channel.StepReader(hook_dir)
        self._poll_s, self._background = poll_s, background
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def open_channel(self) -> bool:
        """Create the run's hook directory (fresh, private, unguessable); False (logged) when it cannot be made."""
        try:
            self.hook_dir = self.reader.directory = channel.create_hook_dir(self.hook_dir)
        except OSError as e:
            logger.warning("cannot create the step-hook directory %s (%s); iterations will not be measured",
                           self.hook_dir, e.strerror or e)
            return False
        return True

    def start(self, poll: Callable[[], bool], on_failure: Callable[[], None]) -> None:
        """Start sampling, and call ``poll`` every ``poll_s`` until it returns False (then ``on_failure``) or
        :meth:`stop`; without background threads: one sample now."""
        if self._background:
            self.sampler.start()
            self._thread = threading.Thread(target=self._run, args=(poll, on_failure), name="ecolaunch-observer",
                                            daemon=True)
            self._thread.start()
        else:
            self.sampler.sample_once()

    def read(self, *, final: bool) -> Sequence[float]:
        """The run's step stamps so far, after reading the new marks (and, without threads, one sample)."""
        if not final and not self._background:
            self.sampler.sample_once()
        self.reader.poll()
        return self.reader.stamps()

    def hints(self) -> Mapping[str, Any]:
        """What the script declared through the channel (``@ecolaunch.job``)."""
        return channel.read_hints(self.hook_dir)

    def stop(self) -> None:
        """Stop the monitor thread and the sampler."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 3 * self._poll_s))
        self.sampler.stop()

    def close(self) -> None:
        """Remove the hook directory."""
        shutil.rmtree(self.hook_dir, ignore_errors=True)

    def _run(self, poll: Callable[[], bool], on_failure: Callable[[], None]) -> None:
        while not self._stop.wait(self._poll_s):
            if not poll():
                on_failure()
                return
