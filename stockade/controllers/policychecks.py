"""Admission checks of ClusterPolicies/Policies that need the cluster, as Kyverno's policy webhook makes them.

* Target scope of generate rules against discovery (``stockade.lint.generate.scope_problems``): when a check fails,
  discovery is refreshed once and the check repeated, so a CRD installed a moment ago is known.
* Permissions: Kyverno's background controller writes downstream objects under its own service account, and Kyverno
  refuses a generate rule that account may not carry out (get/create, plus update/delete when synchronized).  With
  ``background_user`` set (``serve --background-service-account``) the same SubjectAccessReviews are made for that
  user, so a deployment that grants Stockade the rights Kyverno's chart grants its background controller sees the
  same admissions; with ``admission_user`` set, synchronized rules also need list/get for it.
"""

from __future__ import annotations

import logging
from typing import Any

from stockade.controllers.clusterdata import ApiError, ClusterData
from stockade.lint import generate as generate_checks

log = logging.getLogger("stockade.policychecks")

SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
KYVERNO_POLICY_KINDS = ("ClusterPolicy", "Policy")


def _is_kyverno_policy(document: dict[str, Any]) -> bool:
    return str(document.get("apiVersion", "")).startswith("kyverno.io/") and document.get("kind") in KYVERNO_POLICY_KINDS


def _has_generate(document: dict[str, Any]) -> bool:
    spec = document.get("spec")
    rules = spec.get("rules") if isinstance(spec, dict) else None
    return isinstance(rules, list) and any(isinstance(rule, dict) and isinstance(rule.get("generate"), dict) for rule in rules)


class ClusterPolicyChecks:
    """``check(policy, old_policy) -> (errors, warnings)`` for the policy validation webhook."""

    def __init__(self, cluster: ClusterData, *, background_user: str = "", admission_user: str = "") -> None:
        self.cluster = cluster
        self.background_user = background_user
        self.admission_user = admission_user

    def check(self, document: dict[str, Any], old: dict[str, Any] | None = None) -> tuple[list[str], list[str]]:
        if not _is_kyverno_policy(document) or not _has_generate(document):
            return [], []
        problems = self._scope_problems(document, refresh=False)
        if problems:
            problems = self._scope_problems(document, refresh=True)
        if problems:
            return [f"{path}: {message}" for path, message in problems], []
        if old:
            warning, error = generate_checks.update_problem(document, old)
            if warning or error:
                return [], []  # the static check reported it; Kyverno stops its checks here
        return self._permission_problems(document), []

    def _scope_problems(self, document: dict[str, Any], *, refresh: bool) -> list[tuple[str, str]]:
        resources = self.cluster.api_resources(refresh=refresh)
        scoped = generate_checks.cluster_scoped_keys(
            (f"{r.group}/{r.version}" if r.group else r.version, r.kind) for r in resources if not r.namespaced
        )
        return generate_checks.scope_problems(document, scoped)

    def _permission_problems(self, document: dict[str, Any]) -> list[str]:
        users = {"background": self.background_user, "admission": self.admission_user}
        for check in generate_checks.permission_checks(document):
            user = users.get(check.user) or ""
            if not user:
                continue
            resource = self.cluster.resolve_kind(check.api_version, check.kind)
            if resource is None:
                resource = self.cluster.resolve_kind(check.api_version, check.kind) if self._refreshed() else None
            if resource is None:
                return [f"path: {check.path}..: failed to get GVR for kind {check.api_version}/{check.kind}"]
            missing = [verb for verb in check.verbs if not self._allowed(user, verb, resource, check)]
            if missing:
                return [generate_checks.permission_message(user, check, missing)]
        return []

    def _refreshed(self) -> bool:
        try:
            self.cluster.api_resources(refresh=True)
            return True
        except ApiError as exc:
            log.warning("discovery refresh failed: %s", exc)
            return False

    def _allowed(self, user: str, verb: str, resource: Any, check: generate_checks.PermissionCheck) -> bool:
        attributes = {"group": resource.group, "version": resource.version, "resource": resource.resource, "verb": verb}
        if check.subresource:
            attributes["subresource"] = check.subresource
        if check.namespace:
            attributes["namespace"] = check.namespace
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"user": user, "resourceAttributes": attributes}}
        answer = self.cluster.request("POST", SUBJECT_ACCESS_REVIEWS, review)
        return bool(((answer or {}).get("status") or {}).get("allowed"))
