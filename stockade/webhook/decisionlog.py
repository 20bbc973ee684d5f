"""Opt-in decision log: one JSON object per admission decision, appended to a file (``--decision-log``).

An audit trail must never slow admission or fill a disk: records are queued and written by one background thread
(a full queue drops records and counts them), every free-text field is clipped, the result and group lists are
capped, and a regular file is rotated to ``<path>.1`` when it reaches ``max_bytes`` (so at most twice that is kept).
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from typing import Any

from stockade.webhook.admission import AdmissionDecision, AdmissionRequest

MAX_FIELD_CHARS = 1024
MAX_RESULTS = 100
MAX_GROUPS = 20
QUEUE_RECORDS = 10_000
DEFAULT_MAX_BYTES = 100 * 1024 * 1024


def _clip(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decision_record(review: AdmissionRequest, decision: AdmissionDecision, trace_id: str = "") -> dict[str, Any]:
    """The bounded JSON-ready record of one decision."""
    results = [
        {"policy": _clip(r.policy_name, 253), "rule": _clip(rule.name, 253), "type": rule.rule_type, "result": rule.status, "message": _clip(rule.message)}
        for r in decision.responses
        for rule in r.rules
    ]
    record: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "uid": review.uid,
        "operation": review.operation,
        "kind": review.kind.kind,
        "namespace": review.namespace,
        "name": _clip(review.name, 253),
        "user": _clip(review.user_info.username, 253),
        "groups": [_clip(group, 253) for group in review.user_info.groups[:MAX_GROUPS]],
        "allowed": decision.allowed,
        "message": _clip(decision.message),
        "results": results[:MAX_RESULTS],
    }
    if len(results) > MAX_RESULTS:
        record["results_omitted"] = len(results) - MAX_RESULTS
    if trace_id:
        record["trace_id"] = trace_id
    return record


class DecisionLog:
    """Appends decision records to ``path`` from a background thread."""

    def __init__(self, path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.dropped = 0
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=QUEUE_RECORDS)
        self._file = open(path, "ab")  # noqa: SIM115 - held open for the server's lifetime, closed in close()
        self._rotatable = os.path.isfile(path)  # a pipe or /dev/stdout is never rotated
        self._thread = threading.Thread(target=self._write, name="decision-log", daemon=True)
        self._thread.start()

    def record(self, review: AdmissionRequest, decision: AdmissionDecision, trace_id: str = "") -> None:
        line = json.dumps(decision_record(review, decision, trace_id), separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def _write(self) -> None:
        while True:
            line = self._queue.get()
            if line is None:
                return
            self._file.write(line)
            if self._file.tell() >= self.max_bytes and self._rotatable:
                self._rotate()
            elif self._queue.empty():
                self._file.flush()

    def _rotate(self) -> None:
        self._file.close()
        os.replace(self.path, self.path + ".1")
        self._file = open(self.path, "ab")  # noqa: SIM115

    def close(self) -> None:
        """Write what is queued, then close the file."""
        self._queue.put(None)
        self._thread.join(timeout=10)
        self._file.close()
