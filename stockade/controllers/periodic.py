"""A leader-only pass repeated on a fixed period in a daemon thread: the loop the schedule-driven controllers share."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("stockade.controllers")


class LeaderPeriodicWorker:
    """Calls ``run_once`` every ``period`` seconds while ``is_leader()``; a failing pass is logged, never fatal."""

    thread_name = "periodic"

    def __init__(self, is_leader: Callable[[], bool], period: float) -> None:
        self.is_leader = is_leader
        self.period = period
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> object:
        raise NotImplementedError

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                if self.is_leader():
                    self.run_once()
            except Exception:  # never let the thread die
                log.exception("%s pass failed", self.thread_name)
