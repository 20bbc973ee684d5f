"""Structured server logs: JSON lines on request, trace ids in every line, one line per denial.

A denial is what users ask about ("why was I blocked?"), so each blocking rule gets its own line naming policy, rule,
resource and reason, with the trace id that finds the request's spans.  Rules that did not match are logged at debug
level with the match/exclude reasons the engine recorded.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from stockade.engine.response import ERROR, FAIL
from stockade.webhook.admission import AdmissionDecision, AdmissionRequest, resource_label

log = logging.getLogger("stockade.webhook.decisions")
MAX_REASON_CHARS = 2048  # a rule message can quote a whole object; one log line stays readable
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class TraceContextFilter(logging.Filter):
    """Adds ``trace_id``/``span_id`` of the active span to each record (installed only when tracing is on)."""

    def __init__(self, trace_ids: Callable[[], tuple[str, str]]) -> None:
        super().__init__()
        self._trace_ids = trace_ids

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "trace_id", ""):
            record.trace_id, record.span_id = self._trace_ids()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and every structured field the record carries."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_") and value not in ("", None):
                entry[key] = value if isinstance(value, (str, int, float, bool, list, dict)) else str(value)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"), ensure_ascii=False)


def configure_logging(level: str, json_format: bool, text_format: str, trace_ids: Callable[[], tuple[str, str]] | None = None) -> None:
    """The server's root logging: text (``text_format``) or JSON lines, with trace ids when tracing is on."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if json_format else logging.Formatter(text_format))
    if trace_ids is not None:
        handler.addFilter(TraceContextFilter(trace_ids))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def _clip(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def log_denial(review: AdmissionRequest, decision: AdmissionDecision) -> None:
    """One info line per failing rule of a denied request (policy, rule, resource, reason); info, not warning:
    denials are the policy working, not the server failing."""
    if not log.isEnabledFor(logging.INFO):  # the labels and clipped reasons below cost more than the check
        return
    subject = resource_label(review.object or review.old_object or {}, review)
    logged = False
    for response in decision.responses:
        for rule in response.rules:
            if rule.status not in (FAIL, ERROR):
                continue
            logged = True
            log.info(
                "denied %s %s: policy %s rule %s: %s",
                review.operation,
                subject,
                response.policy_name,
                rule.name,
                _clip(rule.message),
                extra={
                    "policy": response.policy_name,
                    "rule": rule.name,
                    "rule_type": rule.rule_type,
                    "resource": subject,
                    "operation": review.operation,
                    "uid": review.uid,
                    "reason": _clip(rule.message),
                    "failure_action": rule.failure_action,
                },
            )
    if not logged:  # denied without a failing rule: failurePolicy after a timeout or worker failure
        log.info("denied %s %s: %s", review.operation, subject, _clip(decision.message), extra={"resource": subject, "operation": review.operation, "uid": review.uid, "reason": _clip(decision.message)})


def log_unmatched(review: AdmissionRequest, decision: AdmissionDecision) -> None:
    """Debug lines: why each rule that was considered did not apply (the engine's match/exclude reasons)."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    for response in decision.responses:
        for rule_name, reasons in response.unmatched:
            log.debug(
                "rule %s/%s does not apply to %s: %s",
                response.policy_name,
                rule_name,
                review.name,
                "; ".join(reasons),
                extra={"policy": response.policy_name, "rule": rule_name, "uid": review.uid, "reason": _clip("; ".join(reasons))},
            )
