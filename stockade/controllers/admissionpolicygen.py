"""Kubernetes ValidatingAdmissionPolicy / MutatingAdmissionPolicy (+ bindings) generated from Kyverno policies.

Like Kyverno's admission-policy generator, on the leader:

* a ClusterPolicy whose single rule is ``validate.cel`` with ``cel.generate: true`` and whose match/exclude (and
  PolicyExceptions) can be expressed natively becomes ``cpol-<name>`` + ``cpol-<name>-binding``;
* a ValidatingPolicy with ``spec.autogen.validatingAdmissionPolicy.enabled`` (and no pod-controller autogen) becomes
  ``vpol-<name>`` + binding; a MutatingPolicy with ``spec.autogen.mutatingAdmissionPolicy.enabled`` becomes
  ``mpol-<name>`` + binding in the newest admissionregistration version the apiserver serves;
* generated objects carry ``app.kubernetes.io/managed-by: kyverno`` and an owner reference to their policy; they are
  deleted when the policy goes or stops qualifying, and the policy's status says whether (and why not) it generated.

Pure builders (``build_*``, ``vap_blocker``) do no I/O; ``AdmissionPolicyGenerator`` talks to the API server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from stockade.controllers.clusterdata import ClusterData, object_path
from stockade.controllers.webhookconfig import ApiResource
from stockade.engine.match import parse_kind_selector
from stockade.engine.wildcard import match as wildcard_match
from stockade.engine.wildcard import contains_wildcard
from stockade.policy.model import kyverno_reference_api_version
from stockade.errors import StockadeError
from stockade.kube.errors import KubeError, NotFound, retry_on_conflict

log = logging.getLogger("stockade.admissionpolicygen")

MANAGED_BY = {"app.kubernetes.io/managed-by": "kyverno"}
EXCLUDE_REPORTING_LABEL = "reports.kyverno.io/disabled"
GROUP = "admissionregistration.k8s.io"
MAP_VERSIONS = ("v1", "v1beta1", "v1alpha1")  # preferred first
STATUS_ATTEMPTS = 4  # status writes that lose a race read the status again this often
ALL_OPERATIONS = ["CREATE", "UPDATE", "CONNECT", "DELETE"]
GENERATED_PREFIXES = ("cpol-", "vpol-", "mpol-")

# (group, version, kind, subresource) -> served resources (one per top-level group/version)
Discovery = Callable[[str, str, str, str], list[ApiResource]]


class NotTranslatable(StockadeError):
    """A kind in match/exclude that discovery cannot resolve to exactly one resource."""


# -- which policies qualify ------------------------------------------------------------------------------------------
def _has_wildcard(value: str) -> bool:
    return contains_wildcard(value)


def _check_user_info(block: dict[str, Any]) -> str:
    if block.get("roles") or block.get("clusterRoles") or block.get("subjects"):
        return "skip generating ValidatingAdmissionPolicy: Roles / ClusterRoles / Subjects in `any/all` is not applicable."
    return ""


def _check_resources(resources: dict[str, Any], is_match: bool) -> str:
    if not is_match and resources.get("kinds") and resources.get("namespaces"):
        return "skip generating ValidatingAdmissionPolicy: excluding a resource within a namespace is not applicable."
    if resources.get("annotations"):
        return "skip generating ValidatingAdmissionPolicy: Annotations in resource description is not applicable."
    names = [str(n) for n in resources.get("names") or []] + ([str(resources["name"])] if resources.get("name") else [])
    if any(_has_wildcard(n) for n in names):
        return "skip generating ValidatingAdmissionPolicy: wildcards in resource name is not applicable."
    if any(_has_wildcard(str(ns)) for ns in resources.get("namespaces") or []):
        return "skip generating ValidatingAdmissionPolicy: wildcards in namespace name is not applicable."
    return ""


def _check_filters(filters: list[dict[str, Any]], is_match: bool) -> str:
    selectors = False
    for entry in filters:
        entry = entry or {}
        resources = entry.get("resources") or {}
        message = _check_user_info(entry) or _check_resources(resources, is_match)
        if message:
            return message
        selectors = selectors or resources.get("namespaceSelector") is not None or resources.get("selector") is not None
    if not is_match and selectors:
        return "skip generating ValidatingAdmissionPolicy: NamespaceSelector / ObjectSelector in the exclude block is not applicable."
    if is_match and len(filters) > 1 and selectors:
        return "skip generating ValidatingAdmissionPolicy: NamespaceSelector / ObjectSelector across multiple resources in the match block are not applicable."
    return ""


def _check_block(block: dict[str, Any], is_match: bool) -> str:
    name = "match" if is_match else "exclude"
    message = _check_user_info(block) or _check_resources(block.get("resources") or {}, is_match) or _check_filters(block.get("any") or [], is_match)
    if message:
        return message
    if len(block.get("all") or []) > 1:
        return f"skip generating ValidatingAdmissionPolicy: multiple 'all' in the {name} block is not applicable."
    return _check_filters(block.get("all") or [], is_match)


def _check_overrides(overrides: Any) -> str:
    overrides = overrides or []
    if len(overrides) > 1:
        return "skip generating ValidatingAdmissionPolicy: multiple validationFailureActionOverrides are not applicable."
    if overrides and (overrides[0] or {}).get("namespaces"):
        return "skip generating ValidatingAdmissionPolicy: Namespaces in validationFailureActionOverrides is not applicable."
    return ""


def vap_blocker(spec: dict[str, Any], exceptions: Iterable[dict[str, Any]] = (), *, for_validation: bool = False) -> str:
    """Why a ClusterPolicy cannot become a ValidatingAdmissionPolicy ('' when it can).  ``for_validation``: the
    question is asked by policy validation (Kyverno's CanGenerateVAP with validate=true), which type-checks any policy
    that could become one, whether or not ``validate.cel.generate`` asks for it."""
    rules = spec.get("rules") or []
    if not rules:
        return "skip generating ValidatingAdmissionPolicy: no rules found."
    if len(rules) > 1:
        return "skip generating ValidatingAdmissionPolicy: multiple rules are not applicable."
    rule = rules[0] or {}
    validate = rule.get("validate") or {}
    cel = validate.get("cel")
    if not isinstance(cel, dict):
        return "skip generating ValidatingAdmissionPolicy for non CEL rules."
    if not cel.get("generate") and not for_validation:
        return "skip generating ValidatingAdmissionPolicy: validate.cel.generate is not set to true."
    message = _check_overrides(spec.get("validationFailureActionOverrides")) or _check_overrides(validate.get("failureActionOverrides"))
    message = message or _check_block(rule.get("match") or {}, True)
    if not message and rule.get("exclude"):
        message = _check_block(rule["exclude"], False)
    if message:
        return message
    for exception in exceptions:
        exception_spec = exception.get("spec") or {}
        if any(len((entry or {}).get("ruleNames") or []) > 1 for entry in exception_spec.get("exceptions") or []):
            return "skip generating ValidatingAdmissionPolicy: multiple ruleNames in PolicyException is not applicable."
        if exception_spec.get("conditions") is not None:
            return "skip generating ValidatingAdmissionPolicy: Conditions in PolicyException is not applicable."
        match = exception_spec.get("match") or {}
        message = _check_filters(match.get("any") or [], False)
        if not message and len(match.get("all") or []) > 1:
            message = "skip generating ValidatingAdmissionPolicy: multiple 'all' in the PolicyException's match block is not applicable."
        message = message or _check_filters(match.get("all") or [], False)
        if message:
            return message
    return ""


def _enabled(spec: dict[str, Any], key: str) -> bool:
    value = ((spec.get("autogen") or {}).get(key) or {}) if isinstance(spec.get("autogen"), dict) else {}
    return isinstance(value, dict) and bool(value.get("enabled", False))


def vpol_blocker(spec: dict[str, Any], has_pod_controller_autogen: bool) -> str:
    if not _enabled(spec, "validatingAdmissionPolicy"):
        return "skip generating ValidatingAdmissionPolicy: not enabled."
    if has_pod_controller_autogen:
        return "skip generating ValidatingAdmissionPolicy: pod controllers autogen is enabled."
    return ""


def mpol_blocker(spec: dict[str, Any], has_pod_controller_autogen: bool) -> str:
    if not _enabled(spec, "mutatingAdmissionPolicy"):
        return "skip generating MutatingAdmissionPolicy: not enabled."
    if bool((spec.get("evaluation") or {}).get("useServerSideApply")) or bool(spec.get("useServerSideApply")):
        return "skip generating MutatingAdmissionPolicy: useServerSideApply is enabled, which mutates atomic fields that a native MutatingAdmissionPolicy rejects."
    if has_pod_controller_autogen:
        return "skip generating MutatingAdmissionPolicy: pod controllers autogen is enabled."
    return ""


# -- builders --------------------------------------------------------------------------------------------------------
def _operations(resources: dict[str, Any]) -> list[str]:
    wanted = [str(op).upper() for op in resources.get("operations") or []]
    found = [op for op in ("CREATE", "UPDATE", "CONNECT", "DELETE") if op in wanted]
    ordered = [op for op in wanted if op in found]  # keep the policy's order
    return list(dict.fromkeys(ordered)) or list(ALL_OPERATIONS)


def _add_rules(rules: list[dict[str, Any]], resources: dict[str, Any], is_match: bool, discover: Discovery) -> None:
    operations = _operations(resources)
    names = [str(n) for n in resources.get("names") or []] + ([str(resources["name"])] if resources.get("name") else [])
    for selector in resources.get("kinds") or []:
        group, version, kind, subresource = parse_kind_selector(str(selector))
        if kind == "*":
            rules.append(_named_rule(names, "*", "*", operations, ["*"]))
            continue
        found = discover(group, version, kind, subresource)
        if len(found) != 1:
            raise NotTranslatable(f"no unique match for kind {kind}")
        resource = found[0]
        plurals = [resource.resource] + (["pods/ephemeralcontainers"] if resource.resource == "pods" else [])
        for existing in rules:
            if resource.group in existing["apiGroups"] and resource.version in existing["apiVersions"]:
                existing["resources"] = sorted(existing["resources"] + plurals)
                break
        else:
            rules.append(_named_rule(names, resource.group, resource.version, operations, plurals))
    if not is_match and resources.get("namespaces") and not resources.get("kinds"):
        rules.append({"resourceNames": [str(n) for n in resources["namespaces"]], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces"], "operations": operations})


def _named_rule(names: list[str], group: str, version: str, operations: list[str], plurals: list[str]) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": [group], "apiVersions": [version], "operations": operations, "resources": sorted(plurals)}
    if names:
        rule["resourceNames"] = list(names)
    return rule


def _translate(match_resources: dict[str, Any], rules: list[dict[str, Any]], resources: dict[str, Any], is_match: bool, discover: Discovery) -> None:
    _add_rules(rules, resources, is_match, discover)
    if is_match:
        match_resources["resourceRules"] = rules
        if resources.get("namespaces"):
            match_resources["namespaceSelector"] = {
                "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [str(n) for n in resources["namespaces"]]}]
            }
        elif resources.get("namespaceSelector") is not None:
            match_resources["namespaceSelector"] = resources["namespaceSelector"]
        else:
            match_resources.pop("namespaceSelector", None)
        if resources.get("selector") is not None:
            match_resources["objectSelector"] = resources["selector"]
        else:
            match_resources.pop("objectSelector", None)
    else:
        match_resources["excludeResourceRules"] = rules


def _translate_block(match_resources: dict[str, Any], rules: list[dict[str, Any]], block: dict[str, Any], is_match: bool, discover: Discovery) -> None:
    if block.get("resources"):
        _translate(match_resources, rules, block["resources"], is_match, discover)
    for key in ("any", "all"):
        for entry in block.get(key) or []:
            _translate(match_resources, rules, (entry or {}).get("resources") or {}, is_match, discover)


def _owner(policy: dict[str, Any]) -> list[dict[str, Any]]:
    metadata = policy.get("metadata") or {}
    api_version = str(policy.get("apiVersion") or "")
    api_version = kyverno_reference_api_version(api_version)
    reference = {"apiVersion": api_version, "kind": str(policy.get("kind") or ""), "name": str(metadata.get("name") or "")}
    if not metadata.get("uid"):
        return []  # the apiserver requires a uid; a policy read from the cluster always has one
    reference["uid"] = str(metadata["uid"])
    return [reference]


def _metadata(name: str, policy: dict[str, Any], *, reporting_label: bool) -> dict[str, Any]:
    labels = dict(MANAGED_BY)
    if reporting_label and EXCLUDE_REPORTING_LABEL in ((policy.get("metadata") or {}).get("labels") or {}):
        labels[EXCLUDE_REPORTING_LABEL] = "true"
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    owners = _owner(policy)
    if owners:
        metadata["ownerReferences"] = owners
    return metadata


def _drop_empty(spec: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in spec.items() if value not in (None, [], {})}


def build_cpol_vap(policy: dict[str, Any], exceptions: Iterable[dict[str, Any]], discover: Discovery) -> dict[str, Any]:
    rule = ((policy.get("spec") or {}).get("rules") or [{}])[0]
    cel = (rule.get("validate") or {}).get("cel") or {}
    match_resources: dict[str, Any] = {}
    match_rules: list[dict[str, Any]] = []
    exclude_rules: list[dict[str, Any]] = []
    _translate_block(match_resources, match_rules, rule.get("match") or {}, True, discover)
    if rule.get("exclude"):
        _translate_block(match_resources, exclude_rules, rule["exclude"], False, discover)
    for exception in exceptions:
        match = (exception.get("spec") or {}).get("match") or {}
        for key in ("any", "all"):
            for entry in match.get(key) or []:
                _translate(match_resources, exclude_rules, (entry or {}).get("resources") or {}, False, discover)
    spec = _drop_empty(
        {
            "matchConstraints": match_resources,
            "paramKind": cel.get("paramKind"),
            "variables": cel.get("variables"),
            "validations": cel.get("expressions"),
            "auditAnnotations": cel.get("auditAnnotations"),
            "matchConditions": rule.get("celPreconditions"),
        }
    )
    name = f"cpol-{(policy.get('metadata') or {}).get('name', '')}"
    return {"apiVersion": f"{GROUP}/v1", "kind": "ValidatingAdmissionPolicy", "metadata": _metadata(name, policy, reporting_label=True), "spec": spec}


def _validation_actions(action: Any) -> list[str]:
    return ["Deny"] if str(action or "Audit").lower() == "enforce" else ["Audit", "Warn"]


def build_cpol_binding(policy: dict[str, Any]) -> dict[str, Any]:
    spec = policy.get("spec") or {}
    rule = (spec.get("rules") or [{}])[0]
    validate = rule.get("validate") or {}
    action = validate.get("failureAction") or spec.get("validationFailureAction")
    name = f"cpol-{(policy.get('metadata') or {}).get('name', '')}"
    body = _drop_empty({"policyName": name, "paramRef": (validate.get("cel") or {}).get("paramRef"), "validationActions": _validation_actions(action)})
    return {"apiVersion": f"{GROUP}/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": _metadata(f"{name}-binding", policy, reporting_label=False), "spec": body}


def _quoted_list(values: Iterable[Any]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def build_vpol_vap(policy: dict[str, Any], exceptions: Iterable[dict[str, Any]]) -> dict[str, Any]:
    spec = policy.get("spec") or {}
    conditions = [dict(c) for c in spec.get("matchConditions") or []]
    variables = [dict(v) for v in spec.get("variables") or []]
    for exception in exceptions:
        exception_spec = exception.get("spec") or {}
        for condition in exception_spec.get("matchConditions") or []:
            conditions.append({"name": condition.get("name"), "expression": f"!({condition.get('expression')})"})
        if exception_spec.get("images"):
            variables.append({"name": "allowedImages", "expression": _quoted_list(exception_spec["images"])})
        if exception_spec.get("allowedValues"):
            variables.append({"name": "allowedValues", "expression": _quoted_list(exception_spec["allowedValues"])})
    validations = []
    for validation in spec.get("validations") or []:
        validation = dict(validation)
        expression = str(validation.get("expression") or "")
        validation["expression"] = expression.replace("exceptions.allowedImages", "variables.allowedImages").replace(
            "exceptions.allowedValues", "variables.allowedValues"
        )
        validations.append(validation)
    body = _drop_empty(
        {
            "matchConstraints": spec.get("matchConstraints") or {},
            "variables": variables,
            "validations": validations,
            "auditAnnotations": spec.get("auditAnnotations"),
            "matchConditions": conditions,
        }
    )
    name = f"vpol-{(policy.get('metadata') or {}).get('name', '')}"
    return {"apiVersion": f"{GROUP}/v1", "kind": "ValidatingAdmissionPolicy", "metadata": _metadata(name, policy, reporting_label=True), "spec": body}


def build_vpol_binding(policy: dict[str, Any]) -> dict[str, Any]:
    actions = [str(a) for a in (policy.get("spec") or {}).get("validationActions") or []] or ["Deny"]
    name = f"vpol-{(policy.get('metadata') or {}).get('name', '')}"
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _metadata(f"{name}-binding", policy, reporting_label=False),
        "spec": {"policyName": name, "validationActions": actions},
    }


def build_mpol_map(policy: dict[str, Any], exceptions: Iterable[dict[str, Any]], version: str) -> dict[str, Any]:
    spec = policy.get("spec") or {}
    conditions = [
        {"name": c.get("name"), "expression": f"!({c.get('expression')})"} for e in exceptions for c in (e.get("spec") or {}).get("matchConditions") or []
    ]
    conditions += [dict(c) for c in spec.get("matchConditions") or []]
    resource_rules = []
    for rule in (spec.get("matchConstraints") or {}).get("resourceRules") or []:
        resource_rules.append({k: v for k, v in rule.items() if k in ("resourceNames", "apiGroups", "apiVersions", "resources", "operations", "scope")})
    mutations = []
    for mutation in spec.get("mutations") or []:
        out: dict[str, Any] = {"patchType": mutation.get("patchType")}
        for key in ("applyConfiguration", "jsonPatch"):
            if mutation.get(key):
                out[key] = {"expression": (mutation[key] or {}).get("expression")}
        mutations.append(_drop_empty(out))
    body = _drop_empty(
        {
            "matchConstraints": {"resourceRules": resource_rules},
            "matchConditions": conditions,
            "mutations": mutations,
            "variables": [dict(v) for v in spec.get("variables") or []],
            "failurePolicy": spec.get("failurePolicy"),
            "reinvocationPolicy": spec.get("reinvocationPolicy") or "Never",
        }
    )
    name = f"mpol-{(policy.get('metadata') or {}).get('name', '')}"
    owner = dict(policy, apiVersion="policies.kyverno.io/v1beta1")  # Kyverno always names the v1beta1 group version
    return {"apiVersion": f"{GROUP}/{version}", "kind": "MutatingAdmissionPolicy", "metadata": _metadata(name, owner, reporting_label=True), "spec": body}


def build_mpol_binding(policy: dict[str, Any], version: str) -> dict[str, Any]:
    name = f"mpol-{(policy.get('metadata') or {}).get('name', '')}"
    owner = dict(policy, apiVersion="policies.kyverno.io/v1beta1")
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": _metadata(f"{name}-binding", owner, reporting_label=False),
        "spec": {"policyName": name},
    }


# -- the controller --------------------------------------------------------------------------------------------------
def discovery_from(resources: Iterable[ApiResource], subresources: Iterable[ApiResource] = ()) -> Discovery:
    """Kyverno's FindResources over served resources: one entry per group/version holding the kind, the preferred
    (first listed) version when the selector leaves it open; with a subresource (``Pod/exec``) the parent's
    subresource instead (``pods/exec``, no ephemeralcontainers companion)."""
    served = [r for r in resources if "/" not in r.resource]
    children = [r for r in subresources if "/" in r.resource]

    def discover(group: str, version: str, kind: str, subresource: str) -> list[ApiResource]:
        found: dict[str, ApiResource] = {}
        for resource in served:
            if wildcard_match(group or "*", resource.group) and wildcard_match(version or "*", resource.version) and resource.kind == kind:
                found.setdefault(resource.group, resource)
        if not subresource:
            return list(found.values())
        return [
            child
            for parent in found.values()
            for child in children
            if (child.group, child.version) == (parent.group, parent.version) and wildcard_match(f"{parent.resource}/{subresource}", child.resource)
        ]

    return discover


def _admission_resource(kind: str, version: str) -> ApiResource:
    plural = kind.lower()[:-1] + "ies" if kind.endswith("Policy") else kind.lower() + "s"
    return ApiResource(GROUP, version, plural, kind, False)


class AdmissionPolicyGenerator:
    """Keeps generated VAP/MAP objects in step with the loaded policies; call ``reconcile`` on the leader."""

    def __init__(self, cluster: ClusterData, *, events: Any = None) -> None:
        self.cluster = cluster
        self.events = events
        self.generated: dict[str, set[tuple[str, str]]] = {}  # policy key -> (apiVersion, name) written

    def reconcile(self, snapshot: Any) -> None:
        if snapshot is None:
            return
        documents = [d.data for d in getattr(snapshot, "documents", ()) or ()]
        served = self._served()
        wanted: dict[tuple[str, str, str], dict[str, Any]] = {}  # (apiVersion, kind, name) -> object
        for policy in documents:
            try:
                for obj in self._desired(policy, documents, served):
                    wanted[(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])] = obj
            except (KubeError, NotTranslatable) as exc:
                log.warning("generating admission policies for %s failed: %s", _name(policy), exc)
                self._status(policy, False, str(exc))
        for obj in wanted.values():
            try:
                self._upsert(obj)
            except KubeError as exc:
                log.warning("writing %s %s failed: %s", obj["kind"], obj["metadata"]["name"], exc)
        self._prune(wanted, served)

    def _served(self) -> dict[str, list[str]]:
        """Kind -> admissionregistration versions the apiserver serves for it."""
        out: dict[str, list[str]] = {}
        try:
            for resource in self.cluster.api_resources():
                if resource.group == GROUP and "/" not in resource.resource:
                    out.setdefault(resource.kind, []).append(resource.version)
        except KubeError as exc:
            log.warning("discovery failed: %s", exc)
        return out

    def _desired(self, policy: dict[str, Any], documents: list[dict[str, Any]], served: dict[str, list[str]]) -> list[dict[str, Any]]:
        kind = str(policy.get("kind") or "")
        group = str(policy.get("apiVersion") or "").partition("/")[0]
        spec = policy.get("spec") or {}
        if kind == "ClusterPolicy" and group == "kyverno.io":
            if not any((rule or {}).get("validate") for rule in spec.get("rules") or []):
                return []
            rule_name = str(((spec.get("rules") or [{}])[0] or {}).get("name") or "")
            exceptions = [d for d in documents if _is_kyverno_exception(d) and _exception_targets(d, _name(policy), rule_name)]
            reason = vap_blocker(spec, exceptions)
            if reason:
                self._status(policy, False, reason)
                return []
            discover = discovery_from(self.cluster.api_resources(), self.cluster.api_subresources())
            objects = [build_cpol_vap(policy, exceptions, discover), build_cpol_binding(policy)]
        elif kind == "ValidatingPolicy" and group == "policies.kyverno.io":
            reason = vpol_blocker(spec, _pod_controller_autogen(policy))
            if reason:
                self._status(policy, False, reason)
                return []
            exceptions = [d for d in documents if _is_cel_exception(d) and _cel_exception_targets(d, kind, _name(policy))]
            objects = [build_vpol_vap(policy, exceptions), build_vpol_binding(policy)]
        elif kind == "MutatingPolicy" and group == "policies.kyverno.io":
            reason = mpol_blocker(spec, _pod_controller_autogen(policy))
            versions = [v for v in MAP_VERSIONS if v in served.get("MutatingAdmissionPolicy", [])]
            if not reason and not versions:
                reason = "skip generating MutatingAdmissionPolicy: requested but no MutatingAdmissionPolicy API/informers are available."
            if reason:
                self._status(policy, False, reason)
                return []
            exceptions = [d for d in documents if _is_cel_exception(d) and _cel_exception_targets(d, kind, _name(policy))]
            objects = [build_mpol_map(policy, exceptions, versions[0]), build_mpol_binding(policy, versions[0])]
        else:
            return []
        self._status(policy, True, "")
        return objects

    def _upsert(self, desired: dict[str, Any]) -> None:
        version = desired["apiVersion"].rpartition("/")[2]
        resource = _admission_resource(desired["kind"], version)
        path = object_path(resource, "", desired["metadata"]["name"])
        current = self._get(path)
        if current is None:
            self.cluster.request("POST", path.rpartition("/")[0], desired)
            log.info("generated %s %s", desired["kind"], desired["metadata"]["name"])
            self._event(desired)
            return
        if _same(current, desired):
            return
        body = dict(desired)
        body["metadata"] = {**desired["metadata"], "resourceVersion": (current.get("metadata") or {}).get("resourceVersion")}
        self.cluster.request("PUT", path, body)
        log.info("updated %s %s", desired["kind"], desired["metadata"]["name"])

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            found = self.cluster.get(path, cached=False)
            return found if isinstance(found, dict) else None
        except NotFound:
            return None

    def _prune(self, wanted: dict[tuple[str, str, str], dict[str, Any]], served: dict[str, list[str]]) -> None:
        """Delete generated objects whose policy is gone or no longer qualifies."""
        selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
        for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "MutatingAdmissionPolicy"):
            for version in served.get(kind, []):
                resource = _admission_resource(kind, version)
                try:
                    existing = self.cluster.list_resource(resource, "", label_selector=selector, cached=False)
                except KubeError as exc:
                    log.warning("listing %s failed: %s", kind, exc)
                    continue
                for obj in existing:
                    name = str((obj.get("metadata") or {}).get("name") or "")
                    if not name.startswith(GENERATED_PREFIXES):
                        continue
                    if any((k, n) == (kind, name) for (_, k, n) in wanted):
                        continue
                    try:
                        self.cluster.request("DELETE", object_path(resource, "", name))
                        log.info("deleted generated %s %s", kind, name)
                    except NotFound:
                        pass
                    except KubeError as exc:
                        log.warning("deleting %s %s failed: %s", kind, name, exc)

    def _status(self, policy: dict[str, Any], generated: bool, message: str) -> None:
        """Kyverno's status fields: ClusterPolicy ``status.validatingadmissionpolicy``, CEL policies ``status.generated``."""
        kind = str(policy.get("kind") or "")
        group, _, version = str(policy.get("apiVersion") or "").partition("/")
        plural = {"ClusterPolicy": "clusterpolicies", "ValidatingPolicy": "validatingpolicies", "MutatingPolicy": "mutatingpolicies"}.get(kind)
        if plural is None or not (policy.get("metadata") or {}).get("uid"):
            return  # only policies read from the cluster have a status to write
        path = object_path(ApiResource(group, version, plural, kind, False), "", _name(policy)) + "/status"
        try:
            if kind == "ClusterPolicy":
                status: dict[str, Any] = {"validatingadmissionpolicy": {"generated": generated, "message": message}}
                self.cluster.request("PATCH", path, {"status": status}, content_type="application/merge-patch+json")
            else:
                self._cel_status(path, generated, message)
        except KubeError as exc:
            log.warning("writing status of %s %s failed: %s", kind, _name(policy), exc)

    def _cel_status(self, path: str, generated: bool, message: str) -> None:
        """``status.generated`` and ``conditionStatus.message`` written over the current status (a conflict reads it
        again).  A status that has no conditions yet gets an empty list: readers of ``conditionStatus.conditions``
        (Kyverno's e2e steps take its length) must never find a conditionStatus without them."""
        def write() -> None:
            current = self.cluster.request("GET", path)
            if not isinstance(current, dict):
                return
            status = dict(current.get("status") or {})
            condition_status = dict(status.get("conditionStatus") or {})
            if not isinstance(condition_status.get("conditions"), list):
                condition_status["conditions"] = []
            condition_status["message"] = message
            status["conditionStatus"] = condition_status
            status["generated"] = generated
            self.cluster.request("PUT", path, {**current, "status": status})

        retry_on_conflict(write, attempts=STATUS_ATTEMPTS)

    def _event(self, obj: dict[str, Any]) -> None:
        if self.events is None:
            return
        from stockade.controllers.events import SOURCE_GENERATE, EventSpec

        owner = ((obj.get("metadata") or {}).get("ownerReferences") or [{}])[0]
        if not owner.get("name"):
            return
        noun = "validating" if obj["kind"].startswith("Validating") else "mutating"
        binding = obj["kind"].endswith("Binding")
        message = f"successfully generated {noun} admission policy{' binding' if binding else ''} {obj['metadata']['name']} from policy {owner['name']}"
        regarding = tuple((k, str(owner[k])) for k in ("apiVersion", "kind", "name", "uid") if owner.get(k))
        self.events.submit(EventSpec(namespace="default", regarding=regarding, reason="PolicyApplied", message=message, type="Normal", action="Resource Generated", source=SOURCE_GENERATE))


def _name(policy: dict[str, Any]) -> str:
    return str((policy.get("metadata") or {}).get("name") or "")


def _same(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Whether what we set is already there: our labels and spec present, and no spec field beyond ours except the
    server's defaults (failurePolicy, reinvocationPolicy)."""
    labels = (current.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in desired["metadata"].get("labels", {}).items()):
        return False
    current_spec, desired_spec = current.get("spec") or {}, desired.get("spec") or {}
    extra = set(current_spec) - set(desired_spec) - {"failurePolicy", "reinvocationPolicy"}
    return not extra and _contains(current_spec, desired_spec)


def _contains(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(k in actual and _contains(actual[k], v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(actual, list) and len(actual) == len(wanted) and all(_contains(a, w) for a, w in zip(actual, wanted))
    return bool(actual == wanted)


def _is_kyverno_exception(document: dict[str, Any]) -> bool:
    return document.get("kind") == "PolicyException" and str(document.get("apiVersion") or "").startswith("kyverno.io/")


def _is_cel_exception(document: dict[str, Any]) -> bool:
    return document.get("kind") == "PolicyException" and str(document.get("apiVersion") or "").startswith("policies.kyverno.io/")


def _exception_targets(exception: dict[str, Any], policy_name: str, rule_name: str) -> bool:
    for entry in (exception.get("spec") or {}).get("exceptions") or []:
        entry = entry or {}
        if str(entry.get("policyName") or "") == policy_name and rule_name in [str(r) for r in entry.get("ruleNames") or []]:
            return True
    return False


def _cel_exception_targets(exception: dict[str, Any], kind: str, policy_name: str) -> bool:
    for ref in (exception.get("spec") or {}).get("policyRefs") or []:
        ref = ref or {}
        if str(ref.get("name") or "") == policy_name and str(ref.get("kind") or kind) == kind:
            return True
    return False


def _pod_controller_autogen(policy: dict[str, Any]) -> bool:
    """Whether Kyverno would autogen pod-controller variants (then the native policy would miss them)."""
    from stockade.celpolicy.autogen import autogen_specs

    try:
        return bool(autogen_specs(policy.get("spec") or {}))
    except Exception:  # malformed autogen settings: the policy store reports them; generate nothing here
        return True
