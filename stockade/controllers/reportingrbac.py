"""Whether Kyverno's reports controller may read what a CEL policy matches (``RBACPermissionsGranted``).

Kyverno's policy status controller asks, for every (group, version, resource) a policy's
``matchConstraints.resourceRules`` name, whether the reports controller's service account may ``get``, ``list`` and
``watch`` it (SubjectAccessReview, resource names taken literally, wildcards included), and reports the refusals in
the policy's ``RBACPermissionsGranted`` condition.  With ``serve --reports-service-account`` Stockade asks the same
questions for that account; answers are kept a few seconds so one status pass does not repeat them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from stockade.controllers.clusterdata import subject_access_review
from stockade.kube.errors import KubeError

log = logging.getLogger("stockade.reportingrbac")

VERBS = ("get", "list", "watch")
ANSWER_TTL_SECONDS = 5.0


def matched_resources(spec: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(group, version, resource) of every combination ``matchConstraints.resourceRules`` names, in order."""
    constraints = spec.get("matchConstraints")
    rules = constraints.get("resourceRules") if isinstance(constraints, dict) else None
    found: list[tuple[str, str, str]] = []
    for rule in rules if isinstance(rules, list) else []:
        if not isinstance(rule, dict):
            continue
        for group in rule.get("apiGroups") or []:
            for version in rule.get("apiVersions") or []:
                for resource in rule.get("resources") or []:
                    found.append((str(group), str(version), str(resource)))
    return found


def refusal(verb: str, group: str, version: str, resource: str, reason: str) -> str:
    """Kyverno's wording of one missing permission (``get apps/v1, Resource=configmaps: <reason>``)."""
    return f"{verb} {group}/{version}, Resource={resource}: {reason}"


class ReportingPermissions:
    """``missing(policy document) -> [refusal, ...]`` for the reports controller's account ``user``."""

    def __init__(self, request: Callable[..., Any], user: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.request = request  # ClusterData.request-like: (method, path, body) -> decoded JSON
        self.user = user
        self.clock = clock
        self._answers: dict[tuple[str, str, str, str], tuple[float, bool, str]] = {}
        self._lock = threading.Lock()

    def missing(self, data: dict[str, Any]) -> list[str]:
        spec = data.get("spec")
        if not isinstance(spec, dict):
            return []
        refused: list[str] = []
        for group, version, resource in matched_resources(spec):
            for verb in VERBS:
                answer = self._allowed(group, version, resource, verb)
                if answer is None:
                    continue  # could not ask: say nothing rather than guess
                allowed, reason = answer
                if not allowed:
                    refused.append(refusal(verb, group, version, resource, reason))
        return refused

    def _allowed(self, group: str, version: str, resource: str, verb: str) -> tuple[bool, str] | None:
        key = (group, version, resource, verb)
        now = self.clock()
        with self._lock:
            cached = self._answers.get(key)
        if cached is not None and now - cached[0] < ANSWER_TTL_SECONDS:
            return cached[1], cached[2]
        attributes = {"group": group, "version": version, "resource": resource, "verb": verb}
        try:
            allowed, reason = subject_access_review(self.request, self.user, attributes)
        except KubeError as exc:
            log.warning("SubjectAccessReview for %s %s/%s/%s failed: %s", verb, group, version, resource, exc)
            return None
        with self._lock:
            self._answers[key] = (now, allowed, reason)
        return allowed, reason
