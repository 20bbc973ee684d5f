"""Admission checks of ClusterPolicies/Policies that need the cluster, as Kyverno's policy webhook makes them.

* Target scope of generate rules against discovery (``stockade.lint.generate.scope_problems``): when a check fails,
  discovery is refreshed once and the check repeated, so a CRD installed a moment ago is known.
* Kinds in match/exclude against discovery (``kind_problems``): a validate rule of a policy with background
  processing on may not name a subresource (a scan lists objects, never subresources); a kind no served resource
  answers to is only a warning, as in Kyverno, which then accepts the policy without its remaining checks.  Discovery
  is refreshed once before a kind is called unknown.
* Permissions: Kyverno's background controller writes downstream objects under its own service account, and Kyverno
  refuses a generate rule that account may not carry out (get/create, plus update/delete when synchronized).  With
  ``background_user`` set (``serve --background-service-account``) the same SubjectAccessReviews are made for that
  user, so a deployment that grants Stockade the rights Kyverno's chart grants its background controller sees the
  same admissions; with ``admission_user`` set, synchronized rules also need list/get for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from stockade.controllers.clusterdata import ClusterData, subject_access_review
from stockade.controllers.webhookconfig import ApiResource
from stockade.engine.match import parse_kind_selector
from stockade.engine.wildcard import match as wildcard_match
from stockade.lint import generate as generate_checks
from stockade.kube.errors import KubeError

log = logging.getLogger("stockade.policychecks")

KYVERNO_POLICY_KINDS = ("ClusterPolicy", "Policy")


def _is_kyverno_policy(document: dict[str, Any]) -> bool:
    return str(document.get("apiVersion", "")).startswith("kyverno.io/") and document.get("kind") in KYVERNO_POLICY_KINDS


def _has_generate(document: dict[str, Any]) -> bool:
    spec = document.get("spec")
    rules = spec.get("rules") if isinstance(spec, dict) else None
    return isinstance(rules, list) and any(isinstance(rule, dict) and isinstance(rule.get("generate"), dict) for rule in rules)


def _kind_lists(rule: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    """(path, kinds) of every kinds list in a rule's match and exclude blocks, in Kyverno's order."""
    found: list[tuple[str, list[Any]]] = []
    for block_name in ("match", "exclude"):
        block = rule.get(block_name)
        if not isinstance(block, dict):
            continue
        for key in ("any", "all"):
            entries = block.get(key)
            for index, entry in enumerate(entries if isinstance(entries, list) else []):
                resources = entry.get("resources") if isinstance(entry, dict) else None
                kinds = resources.get("kinds") if isinstance(resources, dict) else None
                if isinstance(kinds, list):
                    found.append((f"{block_name}.{key}[{index}].kinds", kinds))
        resources = block.get("resources")
        kinds = resources.get("kinds") if isinstance(resources, dict) else None
        if isinstance(kinds, list):
            found.append((f"{block_name}.kinds", kinds))
    return found


def served_for_selector(selector: str, resources: list[ApiResource], subresources: list[ApiResource]) -> tuple[list[ApiResource], list[ApiResource]]:
    """What a ``kinds`` entry names among the served resources, as Kyverno's discovery resolves it: the top-level
    resources whose group/version/kind match, then (with a subresource part) their subresources; ``*/*`` names both."""
    group, version, kind, subresource = parse_kind_selector(selector)
    top = [r for r in resources if wildcard_match(group, r.group) and wildcard_match(version, r.version) and wildcard_match(kind, r.kind)]
    if not subresource:
        return top, []
    parents = {r.resource for r in top}
    subs = [s for s in subresources if any(wildcard_match(f"{parent}/{subresource}", s.resource) for parent in parents)]
    if kind == "*" and subresource == "*":
        return top, subs
    return [], subs


def kind_problems(document: dict[str, Any], resources: list[ApiResource], subresources: list[ApiResource]) -> list[tuple[bool, str]]:
    """Kyverno's checks of the kinds a ClusterPolicy/Policy matches or excludes (its policy webhook, with API
    discovery), the first finding as (refused, message): a subresource in a validate rule of a policy with background
    processing on (``spec.background``, default true) is refused; a kind no served resource or subresource answers to
    is a warning ("the kind defined in the all match resource is invalid"), after which Kyverno accepts the policy.
    ``*`` alone is left to the wildcard checks."""
    spec = document.get("spec") if isinstance(document.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    background = spec.get("background", True) is not False
    rules = spec.get("rules")
    for index, rule in enumerate(rules if isinstance(rules, list) else []):
        if not isinstance(rule, dict):
            continue
        validates = isinstance(rule.get("validate"), dict)
        for path, kinds in _kind_lists(rule):
            if "*" in kinds:
                continue
            for kind in kinds:
                if not isinstance(kind, str) or not kind:
                    continue
                top, subs = served_for_selector(kind, resources, subresources)
                if not top and not subs:
                    return [(False, f"the kind defined in the all match resource is invalid: unable to convert GVK to GVR for kinds {kind}, err: resource not found")]
                if validates and background and subs:
                    return [(True, f"path: spec.rules[{index}].{path}: background scan enabled with subresource {kind}")]
    return []


def mutate_target_checks(document: dict[str, Any]) -> list[generate_checks.PermissionCheck]:
    """get/update on every mutate-existing target kind, for the background user (targets whose kind is a variable
    are resolved only when a trigger arrives, so Kyverno skips them)."""
    checks: list[generate_checks.PermissionCheck] = []
    spec = document.get("spec") if isinstance(document.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    rules = spec.get("rules")
    for index, rule in enumerate(rules if isinstance(rules, list) else []):
        mutate = rule.get("mutate") if isinstance(rule, dict) else None
        targets = mutate.get("targets") if isinstance(mutate, dict) else None
        for target in targets if isinstance(targets, list) else []:
            if not isinstance(target, dict):
                continue
            kind_selector = str(target.get("kind") or "")
            if not kind_selector or "{{" in kind_selector:
                continue
            _, _, kind, subresource = parse_kind_selector(kind_selector)
            checks.append(
                generate_checks.PermissionCheck(
                    f"spec.rules[{index}].mutate.targets", "background", ("get", "update"), str(target.get("apiVersion") or ""), kind,
                    str(target.get("namespace") or ""), subresource,
                )
            )
    return checks


Problem = TypeVar("Problem")


def _confirmed(find: Callable[[bool], list[Problem]]) -> list[Problem]:
    """Problems found with cached discovery (``find(False)``), confirmed with fresh discovery (``find(True)``): a kind
    or scope that only looks wrong because the cache predates a new CRD is not reported."""
    found = find(False)
    return find(True) if found else found


def _cluster_scoped_keys(resources: list[ApiResource]) -> frozenset[str]:
    """Kyverno's keys (``Kind`` and ``group/version/Kind``) of the served cluster-scoped kinds."""
    return generate_checks.cluster_scoped_keys(
        (f"{r.group}/{r.version}" if r.group else r.version, r.kind) for r in resources if not r.namespaced
    )


def _matched_gvks(vap: dict[str, Any], resources: list[ApiResource]) -> list[Any]:
    """The kinds a ValidatingAdmissionPolicy's resourceRules name (Kubernetes' typesToCheck): wildcards name none."""
    from stockade.lint.celtypes import Gvk

    found: list[Gvk] = []
    for rule in ((vap.get("spec") or {}).get("matchConstraints") or {}).get("resourceRules") or []:
        for group in rule.get("apiGroups") or []:
            for version in rule.get("apiVersions") or []:
                for plural in rule.get("resources") or []:
                    if "*" in (group, version, plural) or "/" in plural:
                        continue
                    found += [Gvk(r.group, r.version, r.kind) for r in resources if (r.group, r.version, r.resource) == (group, version, plural)]
    return found


class ClusterPolicyChecks:
    """``check(policy, old_policy) -> (errors, warnings)`` for the policy validation webhook."""

    def __init__(self, cluster: ClusterData, *, background_user: str = "", admission_user: str = "") -> None:
        self.cluster = cluster
        self.background_user = background_user
        self.admission_user = admission_user
        self._schemas: dict[tuple[str, str], tuple[Any, str] | None] = {}  # (OpenAPI v3 URL with hash, kind) -> type

    def check(self, document: dict[str, Any], old: dict[str, Any] | None = None) -> tuple[list[str], list[str]]:
        if not _is_kyverno_policy(document):
            return [], []
        if document.get("kind") == "Policy":
            scoped = _confirmed(lambda refresh: self._cluster_wide_kinds(document, refresh=refresh))
            if scoped:
                return scoped, []
        kind_findings = _confirmed(lambda refresh: self._kind_problems(document, refresh=refresh))
        for refused, message in kind_findings:
            return ([message], []) if refused else ([], [message])
        if self.background_user:
            missing_for_targets = self._target_permission_problems(document)
            if missing_for_targets:
                return missing_for_targets, []
        if not _has_generate(document):
            return [], self._cel_type_warnings(document)
        problems = _confirmed(lambda refresh: self._scope_problems(document, refresh=refresh))
        if problems:
            return [f"{path}: {message}" for path, message in problems], []
        if old:
            warning, error = generate_checks.update_problem(document, old)
            if warning or error:
                return [], []  # the static check reported it; Kyverno stops its checks here
        return self._permission_problems(document), []

    def _cel_type_warnings(self, document: dict[str, Any]) -> list[str]:
        """Kyverno's type check of ``validate.cel`` against the OpenAPI schemas of the kinds the policy's generated
        ValidatingAdmissionPolicy would match (only for policies that can be one).  Never refuses; a cluster that
        serves no schema gets no warnings."""
        from stockade.controllers.admissionpolicygen import build_cpol_vap, discovery_from, vap_blocker
        from stockade.lint.celtypes import Gvk, cel_type_warnings

        spec = document.get("spec") or {}
        if vap_blocker(spec, for_validation=True):
            return []
        try:
            resources = self.cluster.api_resources()
            vap = build_cpol_vap(document, (), discovery_from(resources, self.cluster.api_subresources()))
            gvks = _matched_gvks(vap, resources)
            return cel_type_warnings((spec.get("rules") or [{}])[0], gvks, lambda gvk: self._schema_type(Gvk(gvk.group, gvk.version, gvk.kind)))
        except KubeError as exc:
            log.warning("OpenAPI schemas unavailable, CEL expressions not type-checked: %s", exc)
            return []

    def _schema_type(self, gvk: Any) -> tuple[Any, str] | None:
        """The checking type of a kind's schema, from the OpenAPI v3 document of its group/version (fetched again
        only when the API server's hash for it changes)."""
        from stockade.cel.schematypes import SchemaTypes

        path = f"apis/{gvk.group}/{gvk.version}" if gvk.group else f"api/{gvk.version}"
        index = self.cluster.get("/openapi/v3") or {}
        url = str(((index.get("paths") or {}).get(path) or {}).get("serverRelativeURL") or "")
        if not url:
            return None
        key = (url, gvk.kind)
        if key not in self._schemas:
            base, _, query = url.partition("?")
            document = self.cluster.get(base, query=dict(part.split("=", 1) for part in query.split("&") if "=" in part))
            components = ((document or {}).get("components") or {}).get("schemas") or {}
            name = next(
                (
                    name
                    for name, schema in components.items()
                    if isinstance(schema, dict)
                    for g in schema.get("x-kubernetes-group-version-kind") or []
                    if isinstance(g, dict) and (g.get("group") or "", g.get("version"), g.get("kind")) == (gvk.group, gvk.version, gvk.kind)
                ),
                None,
            )
            if len(self._schemas) > 256:
                self._schemas.clear()
            self._schemas[key] = SchemaTypes.checking_type(components, name) if name else None
        return self._schemas[key]

    def _cluster_wide_kinds(self, document: dict[str, Any], *, refresh: bool) -> list[str]:
        """Kyverno's ResourceDescription check for namespaced Policies: a cluster-scoped kind (by discovery, as
        ``Kind`` or ``group/version/Kind``) in match or exclude is refused."""
        try:
            resources = self.cluster.api_resources(refresh=refresh)
        except KubeError as exc:
            log.warning("discovery failed, kinds not checked: %s", exc)
            return []
        cluster_wide = _cluster_scoped_keys(resources)
        problems: list[str] = []
        for index, rule in enumerate((document.get("spec") or {}).get("rules") or []):
            if not isinstance(rule, dict):
                continue
            for section in ("match", "exclude"):
                block = rule.get(section) or {}
                if not isinstance(block, dict):
                    continue
                descriptions = [(f"spec.rules[{index}].{section}.resources", block.get("resources"))]
                for key in ("any", "all"):
                    descriptions += [(f"spec.rules[{index}].{section}.{key}[{j}].resources", (entry or {}).get("resources")) for j, entry in enumerate(block.get(key) or []) if isinstance(entry, dict)]
                for path, description in descriptions:
                    for k, kind in enumerate((description or {}).get("kinds") or [] if isinstance(description, dict) else []):
                        if str(kind) in cluster_wide:
                            problems.append(f"{path}.kinds[{k}]: Forbidden: Cluster wide resource '{kind}' not allowed in namespaced policy")
        return problems

    def _kind_problems(self, document: dict[str, Any], *, refresh: bool) -> list[tuple[bool, str]]:
        try:
            resources = self.cluster.api_resources(refresh=refresh)
            subresources = self.cluster.api_subresources()
        except KubeError as exc:
            log.warning("discovery failed, kinds not checked: %s", exc)
            return []
        if not resources:
            return []  # no discovery: nothing to judge by
        return kind_problems(document, resources, subresources)

    def _scope_problems(self, document: dict[str, Any], *, refresh: bool) -> list[tuple[str, str]]:
        scoped = _cluster_scoped_keys(self.cluster.api_resources(refresh=refresh))
        return generate_checks.scope_problems(document, scoped)

    def _permission_problems(self, document: dict[str, Any]) -> list[str]:
        users = {"background": self.background_user, "admission": self.admission_user}
        for check in generate_checks.permission_checks(document):
            user = users.get(check.user) or ""
            if not user:
                continue
            resource = self._resolve(check)
            if resource is None:
                return [f"path: {check.path}..: failed to get GVR for kind {check.api_version}/{check.kind}"]
            missing = [verb for verb in check.verbs if not self._allowed(user, verb, resource, check)]
            if missing:
                return [generate_checks.permission_message(user, check, missing)]
        return []

    def _target_permission_problems(self, document: dict[str, Any]) -> list[str]:
        """Kyverno's check of mutate-existing targets: its background controller's account must be allowed to get
        and update every target kind (in the target's namespace as written), or the policy is refused."""
        for check in mutate_target_checks(document):
            resource = self._resolve(check)
            if resource is None:
                continue  # an unknown target kind is reported when a trigger arrives
            missing = [verb for verb in check.verbs if not self._allowed(self.background_user, verb, resource, check)]
            if missing:
                target = f"{check.api_version}/{check.kind}" if check.api_version else check.kind
                where = f" in namespace {check.namespace}" if check.namespace else ""
                return [
                    f"path: {check.path}.: auth check fails, additional privileges are required for the service account "
                    f"'{self.background_user}': {self.background_user} requires permissions {','.join(missing)} for resource {target}{where}"
                ]
        return []

    def _resolve(self, check: generate_checks.PermissionCheck) -> Any:
        """The served resource of a check's kind, asking discovery again before calling it unknown."""
        resource = self.cluster.resolve_kind(check.api_version, check.kind)
        if resource is None and self._refreshed():
            resource = self.cluster.resolve_kind(check.api_version, check.kind)
        return resource

    def _refreshed(self) -> bool:
        try:
            self.cluster.api_resources(refresh=True)
            return True
        except KubeError as exc:
            log.warning("discovery refresh failed: %s", exc)
            return False

    def _allowed(self, user: str, verb: str, resource: Any, check: generate_checks.PermissionCheck) -> bool:
        attributes = {"group": resource.group, "version": resource.version, "resource": resource.resource, "verb": verb}
        if check.subresource:
            attributes["subresource"] = check.subresource
        if check.namespace:
            attributes["namespace"] = check.namespace
        return subject_access_review(self.cluster.request, user, attributes)[0]
