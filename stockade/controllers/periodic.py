"""A leader-only pass repeated on a fixed period: the loop the schedule-driven controllers share.

It is a `stockade.kube.controller.Runnable` that needs leadership: the manager starts it when this replica gains
leadership and stops it when leadership is lost, so the pass itself never asks who leads.  Use it only for work
that is computed from what is already in memory (a cron schedule over stored policies); anything that reads the
cluster belongs on informers.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("stockade.controllers")


class LeaderPeriodicWorker:
    """Calls ``run_once`` every ``period`` seconds between ``start()`` and ``stop()``; a failing pass is logged,
    never fatal.  Restartable (leadership may come and go)."""

    thread_name = "periodic"

    def __init__(self, period: float) -> None:
        self.period = period
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self.thread_name

    @property
    def needs_leadership(self) -> bool:
        return True

    def run_once(self) -> object:
        raise NotImplementedError

    def start(self) -> None:
        if self._thread is None:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(self._stop,), name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.period):
            try:
                self.run_once()
            except Exception:  # never let the thread die
                log.exception("%s pass failed", self.thread_name)
