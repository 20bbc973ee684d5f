"""AdmissionReview v1 in, AdmissionReview v1 out: the HTTP-free core of the webhook.

Kept apart from the HTTP layer so the decision logic (which rules block, which warn, what patch goes back) is testable
with plain dictionaries and reusable by the benchmark.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import functools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

import stockade.celpolicy  # noqa: F401  (registers the engine's validate.cel handler)
from stockade.engine.engine import Engine, Request
from stockade.engine.handlers.verify_images import VerificationRecord, apply_record
from stockade.engine.match import RequestInfo, ResourceKind
from stockade.engine.mutate import KUBERNETES_OPTIONS, apply_json6902, diff_json_patch
from stockade.engine.response import ERROR, FAIL, PASS, SKIP, EngineResponse, RuleResponse
from stockade.identitymemo import IdentityMemo
from stockade.policy.model import RULE_TYPE_MUTATION, KyvernoPolicy
from stockade.errors import StockadeError
from stockade.webhook.enforceset import override_namespace, request_blocked, split_responses, unsuccessful_rules

_YamlDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: ~10x faster on denial-heavy traffic

ADMISSION_API_VERSION = "admission.k8s.io/v1"
FAILURE_POLICY_FAIL = "Fail"
FAILURE_POLICY_IGNORE = "Ignore"
DEFAULT_POLICY_TIMEOUT_SECONDS = 10.0  # Kyverno's default webhookTimeoutSeconds


class InvalidAdmissionReview(StockadeError, ValueError):
    """The request body is not an AdmissionReview v1 we can answer; the server turns this into HTTP 400."""


@dataclass(frozen=True)
class AdmissionRequest:
    """The fields of ``AdmissionReview.request`` the engine needs, validated once."""

    uid: str
    operation: str
    kind: ResourceKind
    resource: dict[str, str]
    sub_resource: str
    namespace: str
    name: str
    object: dict[str, Any]
    old_object: dict[str, Any]
    user_info: RequestInfo
    dry_run: bool
    api_version: str = ADMISSION_API_VERSION

    def context_fields(self) -> dict[str, Any]:
        """The request's identity fields as policies read them under ``request`` (Kyverno puts the whole
        AdmissionRequest there; object, oldObject, operation, namespace and userInfo the engine adds itself)."""
        fields: dict[str, Any] = {
            "uid": self.uid,
            "kind": {"group": self.kind.group, "version": self.kind.version, "kind": self.kind.kind},
            "resource": dict(self.resource),
            "name": self.name,
            "dryRun": self.dry_run,
        }
        if self.sub_resource:
            fields["subResource"] = self.sub_resource
        return fields

    @property
    def subject(self) -> dict[str, Any]:
        """The object policies look at: the new object, or the old one for DELETE."""
        return self.object or self.old_object


def parse_review(body: Any) -> AdmissionRequest:
    """Validate a decoded AdmissionReview and extract its request; raises InvalidAdmissionReview with the reason."""
    if not isinstance(body, dict):
        raise InvalidAdmissionReview("body must be a JSON object (AdmissionReview)")
    if body.get("kind") != "AdmissionReview":
        raise InvalidAdmissionReview(f"kind must be AdmissionReview, got {body.get('kind')!r}")
    api_version = body.get("apiVersion")
    if api_version not in (ADMISSION_API_VERSION, "admission.k8s.io/v1beta1"):
        raise InvalidAdmissionReview(f"unsupported apiVersion {api_version!r}; expected {ADMISSION_API_VERSION}")
    request = body.get("request")
    if not isinstance(request, dict):
        raise InvalidAdmissionReview("request is missing")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise InvalidAdmissionReview("request.uid is missing")
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
        raise InvalidAdmissionReview(f"request.operation {operation!r} is not CREATE, UPDATE, DELETE or CONNECT")
    kind = request.get("kind")
    if not isinstance(kind, dict) or not kind.get("kind"):
        raise InvalidAdmissionReview("request.kind must be an object with group, version and kind")
    new_object = request.get("object") or {}
    old_object = request.get("oldObject") or {}
    if not isinstance(new_object, dict) or not isinstance(old_object, dict):
        raise InvalidAdmissionReview("request.object and request.oldObject must be objects")
    if not new_object and not old_object:
        raise InvalidAdmissionReview("request carries neither object nor oldObject")
    for field_name, value in (("object", new_object), ("oldObject", old_object)):
        if value.get("metadata") is not None and not isinstance(value["metadata"], dict):  # ObjectMeta is always an object
            raise InvalidAdmissionReview(f"request.{field_name}.metadata must be an object")
    user = request.get("userInfo") or {}
    if not isinstance(user, dict):
        raise InvalidAdmissionReview("request.userInfo must be an object")
    groups = user.get("groups") or []
    if not isinstance(groups, list):
        raise InvalidAdmissionReview("request.userInfo.groups must be a list")
    extra = user.get("extra") or {}
    if not isinstance(extra, dict):
        raise InvalidAdmissionReview("request.userInfo.extra must be an object")
    resource = request.get("resource") or {}
    if not isinstance(resource, dict):
        raise InvalidAdmissionReview("request.resource must be an object")
    sub_resource = str(request.get("subResource") or "")
    namespace = str(request.get("namespace") or "")
    if namespace and kind["kind"] != "Namespace":
        # Kyverno reads the request's objects with the request's namespace (admissionutils.ConvertResource): the
        # options object of a CONNECT (PodExecOptions, ...) carries no metadata, yet policies read
        # object.metadata.namespace and generate labels downstream objects with the trigger's namespace
        new_object, old_object = _in_namespace(new_object, namespace), _in_namespace(old_object, namespace)
    info = RequestInfo(
        username=str(user.get("username") or ""),
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in groups),
        extra=dict(extra),
    )
    return AdmissionRequest(
        uid=uid,
        operation=operation,
        kind=ResourceKind(str(kind.get("group") or ""), str(kind.get("version") or ""), str(kind["kind"]), sub_resource),
        resource=dict(resource),
        sub_resource=sub_resource,
        namespace=namespace,
        name=str(request.get("name") or ""),
        object=new_object,
        old_object=old_object,
        user_info=info,
        dry_run=bool(request.get("dryRun")),
        api_version=str(api_version),
    )


def _in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``obj`` with ``metadata.namespace`` set to the request's when it has none (the API server has already made a
    stored object's namespace agree with the request's); an absent object stays absent."""
    metadata = obj.get("metadata") or {}
    if not obj or metadata.get("namespace"):
        return obj
    return {**obj, "metadata": {**metadata, "namespace": namespace}}


@dataclass
class AdmissionDecision:
    """What goes back to the apiserver, plus the engine responses for metrics and reports."""

    allowed: bool
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    responses: list[EngineResponse] = field(default_factory=list)


def review_response(request: AdmissionRequest, decision: AdmissionDecision) -> dict[str, Any]:
    """The AdmissionReview answer; a patch is sent base64-encoded as RFC 6902 JSONPatch."""
    response: dict[str, Any] = {"uid": request.uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {"status": "Failure", "message": decision.message}
    if decision.warnings:
        response["warnings"] = decision.warnings
    if decision.patch and decision.allowed:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(decision.patch, separators=(",", ":")).encode()).decode()
    return {"apiVersion": request.api_version, "kind": "AdmissionReview", "response": response}


def failure_policy(policy: Any) -> str:
    """Kyverno's default is Fail; ``spec.failurePolicy: Ignore`` (or the newer
    ``spec.webhookConfiguration.failurePolicy``) moves a policy to the ignore webhook."""
    spec = policy.spec
    configuration = spec.get("webhookConfiguration")
    value = spec.get("failurePolicy") or (configuration.get("failurePolicy") if isinstance(configuration, dict) else None)
    return FAILURE_POLICY_IGNORE if str(value or FAILURE_POLICY_FAIL).lower() == "ignore" else FAILURE_POLICY_FAIL


def policy_timeout(policy: Any, default: float = DEFAULT_POLICY_TIMEOUT_SECONDS) -> float:
    """Seconds a policy may take per request: ``spec.webhookConfiguration.timeoutSeconds``, then the older
    ``spec.webhookTimeoutSeconds`` (ClusterPolicy/Policy), else ``default``; nonsense values fall back too."""
    spec = policy.spec
    configuration = spec.get("webhookConfiguration")
    for value in ((configuration or {}).get("timeoutSeconds") if isinstance(configuration, dict) else None, spec.get("webhookTimeoutSeconds")):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return float(default)


def timed_out_response(policy: Any, response: EngineResponse | None, resource: dict[str, Any], budget: float, rule_type: str) -> EngineResponse:
    """The policy's result replaced by an error per rule it ran (or one entry named after the policy when it never
    ran), so failurePolicy decides: Fail denies, Ignore admits with a warning.  Its patch is dropped."""
    message = f"policy {getattr(policy, 'name', '')} timed out: evaluation exceeded its {budget:g}s budget"
    names = [rule.name for rule in response.rules] if response is not None and response.rules else [str(getattr(policy, "name", ""))]
    types = [rule.rule_type for rule in response.rules] if response is not None and response.rules else [rule_type]
    timed_out = EngineResponse(policy, resource, resource)
    timed_out.rules = [RuleResponse(name, kind, ERROR, message, failure_action="Enforce") for name, kind in zip(names, types)]
    return timed_out


RoleLookup = Callable[[RequestInfo, str], tuple[tuple[str, ...], tuple[str, ...]]]
"""(user, request namespace) → (Roles as ``namespace:name``, ClusterRoles) bound to that user."""


def _compact_json(value: Any) -> str | None:
    """Compact JSON text; orjson when installed (every policy is scanned on each reload: it is ten times faster).
    None when the value nests deeper than a serializer allows (orjson stops at 255 levels)."""
    try:
        import orjson

        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except ImportError:  # pragma: no cover - orjson is part of the server extra
        pass
    except TypeError:  # orjson's recursion limit; the standard library goes deeper
        pass
    try:
        return json.dumps(value, separators=(",", ":"), default=str)
    except RecursionError:
        return None


def uses_roles(policy: Any) -> bool:
    """Whether a policy needs the requester's RBAC roles: roles/clusterRoles in match/exclude, or the
    ``request.roles``/``request.clusterRoles`` variables anywhere (assumed when the policy is too deep to scan: the
    cost is one lookup, never a wrong answer)."""
    text = _compact_json(getattr(policy, "raw", {}))
    if text is None:
        return True
    return '"roles"' in text or '"clusterRoles"' in text or "request.roles" in text or "request.clusterRoles" in text


def subject_namespace(resource: dict[str, Any], request: AdmissionRequest) -> str:
    """The namespace Kyverno names a reviewed object by: its own ``metadata.namespace``, else the request's, except
    for a Namespace, which the request names as its own namespace but which is cluster-scoped."""
    metadata = resource.get("metadata") or {}
    return str(metadata.get("namespace") or labels_namespace(request))


def resource_label(resource: dict[str, Any], request: AdmissionRequest) -> str:
    """``Kind/namespace/name`` as Kyverno prints it in block messages (namespace empty for cluster objects)."""
    metadata = resource.get("metadata") or {}
    kind = resource.get("kind") or request.kind.kind
    namespace = subject_namespace(resource, request)
    # the object's own name: empty for a generateName object being created and for CONNECT options, as in Kyverno
    name = metadata.get("name") or ""
    return f"{kind}/{namespace}/{name}"


def _denying_rules(responses: Iterable[EngineResponse]) -> Iterable[tuple[EngineResponse, RuleResponse]]:
    """Each rule that denies the request (Enforce failures, errors under Fail) with its policy's response."""
    for response in responses:
        policy_failure = ""  # worked out at the first error: most responses have none
        for rule in response.rules:
            if rule.status == FAIL:
                if rule.failure_action == "Enforce":
                    yield response, rule
            elif rule.status == ERROR:
                if not policy_failure:
                    policy_failure = failure_policy(response.policy) if hasattr(response.policy, "spec") else FAILURE_POLICY_FAIL
                if policy_failure == FAILURE_POLICY_FAIL:
                    yield response, rule


def blocking_rules(responses: Iterable[EngineResponse]) -> dict[str, dict[str, str]]:
    """policy → rule → message for the rules that deny the request (Enforce failures, errors under Fail)."""
    blocked: dict[str, dict[str, str]] = {}
    for response, rule in _denying_rules(responses):
        blocked.setdefault(response.policy_name, {})[rule.name] = rule.message
    return blocked


def cel_policy_result(response: EngineResponse, rule: RuleResponse) -> str:
    """How Kyverno's CEL policy webhooks word one result, in denials and warnings alike."""
    verb = "error" if rule.status == ERROR else "failed"
    return f"Policy {response.policy_name} {verb}: {rule.message}"


def cel_denial(responses: Iterable[EngineResponse]) -> str:
    """Kyverno's answer on its CEL policy webhooks: one "Policy <name> failed: <message>" (or "error:") per denying
    result, joined by "; " — not the YAML block message of ClusterPolicies."""
    return "; ".join(cel_policy_result(response, rule) for response, rule in _denying_rules(responses))


BLOCK_YAML_CACHE_ENTRIES = 512
BLOCK_YAML_CACHED_CHARS = 4096  # longer maps (messages carrying request content) are rendered each time, never held


def block_message(resource: str, blocked: dict[str, dict[str, str]]) -> str:
    """Kyverno's denial text: a header line, then the policy → rule → message map as YAML.  The map repeats across
    requests (rule messages rarely name the resource), so short ones are rendered once: YAML output costs tens of
    microseconds, a large share of a denied review."""
    key = tuple((policy, tuple(rules.items())) for policy, rules in blocked.items())
    if sum(len(policy) + sum(len(rule) + len(message) for rule, message in rules) for policy, rules in key) <= BLOCK_YAML_CACHED_CHARS:
        body = _cached_block_yaml(key)
    else:
        body = _block_yaml(blocked)
    return f"\n\nresource {resource} was blocked due to the following policies \n\n{body}"


class _BlockDumper(_YamlDumper):  # type: ignore[misc,valid-type]
    """Chooses scalar styles as Kyverno's YAML encoder (go-yaml v3) does; see ``_represent_message``."""


def _represent_message(dumper: Any, value: str) -> Any:
    """go-yaml v3's choice of style: a literal block for text with line breaks, double quotes for text that would
    read back as another type (``true``, ``10``), else plain when the emitter allows it (PyYAML's default)."""
    if "\n" in value:
        style: str | None = "|"
    elif dumper.resolve(yaml.ScalarNode, value, (True, False)) != _STR_TAG:
        style = '"'
    else:
        style = None
    return dumper.represent_scalar(_STR_TAG, value, style=style)


_STR_TAG = "tag:yaml.org,2002:str"
_BlockDumper.add_representer(str, _represent_message)


def _block_yaml(blocked: dict[str, dict[str, str]]) -> str:
    # go-yaml v3's encoder, which Kyverno's block message uses, never folds long lines (its width is unlimited)
    return yaml.dump(blocked, Dumper=_BlockDumper, default_flow_style=False, sort_keys=True, width=_UNLIMITED_WIDTH, allow_unicode=True)


_UNLIMITED_WIDTH = 2**31 - 1


@functools.lru_cache(maxsize=BLOCK_YAML_CACHE_ENTRIES)
def _cached_block_yaml(key: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]) -> str:
    return _block_yaml({policy: dict(rules) for policy, rules in key})


def mutation_report_responses(responses: Iterable[EngineResponse]) -> list[EngineResponse]:
    """What Kyverno's mutating webhook reports: every result of the ClusterPolicy/Policy mutate rules that ran on
    the request (pass, skip, fail, error).  Image verification and CEL MutatingPolicies report elsewhere."""
    reported: list[EngineResponse] = []
    for response in responses:
        if not isinstance(response.policy, KyvernoPolicy):
            continue
        rules = [rule for rule in response.rules if rule.rule_type == RULE_TYPE_MUTATION]
        if rules:
            reported.append(dataclasses.replace(response, rules=rules))
    return reported


def warning_messages(responses: Iterable[EngineResponse], emit_warnings: bool = False) -> list[str]:
    """``policy <policy>.<rule>: <message>`` for every rule that neither passed nor was skipped; with
    ``emit_warnings`` (the mutating phase) also for the applied rules of policies with ``spec.emitWarning`` (Kyverno
    returns every non-skipped result of such a policy, "mutated Pod/x" included)."""
    warnings: list[str] = []
    for response in responses:
        emits = emit_warnings and bool(getattr(response.policy, "emit_warning", False))
        for rule in response.rules:
            if rule.status not in (PASS, SKIP) or (emits and rule.status == PASS):
                warnings.append(f"policy {response.policy_name}.{rule.name}: {rule.message}")
    return warnings


NamespaceLabels = Callable[[str], dict[str, str]]

KindLookup = Callable[[str, str, str], str | None]
"""(group, version, plural resource) → the Kind the API server serves there, or None when unknown."""


def labels_namespace(request: AdmissionRequest) -> str:
    """The namespace whose labels ``namespaceSelector`` sees; "" for a Namespace itself, which has none to look up
    (a Namespace review carries its own name as namespace, and on CREATE it does not exist yet)."""
    return "" if request.kind.kind == "Namespace" else request.namespace


def _requested_resource(request: AdmissionRequest) -> tuple[str, str, str]:
    resource = request.resource
    return str(resource.get("group") or ""), str(resource.get("version") or ""), str(resource.get("resource") or "")


def kind_lookup_pending(request: AdmissionRequest, lookup: KindLookup | None) -> bool:
    """True when ``top_level_kind`` would ask the API server (event-loop callers then resolve from a thread)."""
    needs_fetch = getattr(lookup, "needs_fetch", None)
    return bool(request.sub_resource) and needs_fetch is not None and bool(needs_fetch(*_requested_resource(request)))


def top_level_kind(request: AdmissionRequest, lookup: KindLookup | None) -> ResourceKind:
    """The kind policies match a request by, as Kyverno does: the kind served at ``request.resource`` plus the
    subresource.  A ``deployments/scale`` review has kind autoscaling/v1 Scale but matches ``Deployment/scale``."""
    if not request.sub_resource or lookup is None:
        return request.kind
    group, version, plural = _requested_resource(request)
    kind = lookup(group, version, plural) if plural else None
    if not kind:
        return request.kind
    return ResourceKind(group, version, kind, request.sub_resource)


VALIDATING_POLICY_KINDS = ("ValidatingPolicy", "NamespacedValidatingPolicy")
MUTATING_POLICY_KINDS = ("MutatingPolicy", "NamespacedMutatingPolicy")
IMAGE_VALIDATING_POLICY_KINDS = ("ImageValidatingPolicy", "NamespacedImageValidatingPolicy")

SCOPE_ALL = "all"  # every policy (the catch-all /validate and /mutate endpoints)
SCOPE_KYVERNO = "kyverno"  # ClusterPolicies/Policies without a webhook of their own
SCOPE_KYVERNO_POLICY = "kyverno-policy"  # the one ClusterPolicy/Policy of a fine-grained webhook
# CEL policy webhook path prefix -> (policy kind, phase); the rest of the path names the policies
CEL_ROUTES: dict[str, tuple[str, str]] = {
    "vpol": ("ValidatingPolicy", "validate"),
    "nvpol": ("NamespacedValidatingPolicy", "validate"),
    "gpol": ("GeneratingPolicy", "validate"),
    "ngpol": ("NamespacedGeneratingPolicy", "validate"),
    "mpol": ("MutatingPolicy", "mutate"),
    "nmpol": ("NamespacedMutatingPolicy", "mutate"),
}
# ImageValidatingPolicies have a webhook per phase: /<ivpol|nivpol>/<validate|mutate>/<name>...
IMAGE_ROUTES: dict[str, str] = {"ivpol": "ImageValidatingPolicy", "nivpol": "NamespacedImageValidatingPolicy"}
# Kyverno's two fixed mutating webhooks (registered under its naming only): policy CREATE/UPDATE, and UPDATEs of its
# own health Lease.  Stockade admits both unchanged.
POLICY_MUTATION_PATH = "/policymutate"
VERIFY_MUTATION_PATH = "/verifymutate"
MAX_SCOPED_VIEWS = 256
# Policies whose time budget an evaluator remembers: it holds them anyway, so this only guards against surprises.
_MAX_TIMEOUTS = 65_536


@dataclass(frozen=True)
class PolicySets:
    """The policies an evaluator serves, by engine: ClusterPolicy/Policy, and the CEL kinds."""

    kyverno: list[KyvernoPolicy]
    validating: list[Any]
    image_validating: list[Any]
    mutating: list[Any]


@dataclass(frozen=True)
class PolicyScope:
    """Which loaded policies one webhook path evaluates."""

    family: str = SCOPE_ALL
    names: tuple[str, ...] = ()

    def select(self, sets: PolicySets) -> PolicySets:
        if self.family == SCOPE_ALL:
            return sets
        if self.family == SCOPE_KYVERNO:
            return PolicySets([p for p in sets.kyverno if not has_own_webhook(p)], [], [], [])
        if self.family == SCOPE_KYVERNO_POLICY:
            return PolicySets([p for p in sets.kyverno if p.key in self.names and has_own_webhook(p)], [], [], [])
        kind = IMAGE_ROUTES[self.family] if self.family in IMAGE_ROUTES else CEL_ROUTES[self.family][0]
        wanted = set(self.names)

        def chosen(policies: list[Any]) -> list[Any]:
            return [p for p in policies if p.kind == kind and p.name in wanted]

        return PolicySets([], chosen(sets.validating), chosen(sets.image_validating), chosen(sets.mutating))


@dataclass(frozen=True)
class Route:
    """What a webhook path asks for: the phase, the failurePolicy variant (None: decided by the policies in
    play) and the policies."""

    phase: str
    failure: str | None
    scope: PolicyScope


def has_own_webhook(policy: KyvernoPolicy) -> bool:
    """A ClusterPolicy/Policy with ``webhookConfiguration.matchConditions`` gets a fine-grained webhook."""
    configuration = policy.spec.get("webhookConfiguration")
    return bool(isinstance(configuration, dict) and configuration.get("matchConditions"))


def parse_route(path: str) -> Route | None:
    """The webhook paths our configurations register (Kyverno's layout): ``/validate``, ``/mutate`` (everything),
    ``/<phase>/<fail|ignore>`` (ClusterPolicies of that failurePolicy), ``/<phase>/<fail|ignore>/finegrained/
    [<namespace>/]<name>`` (one policy), ``/<vpol|nvpol|gpol|ngpol|mpol|nmpol>/<name>[/<name>...]`` and
    ``/<ivpol|nivpol>/<validate|mutate>/<name>[/<name>...]``; None for anything else."""
    parts = [part for part in path.split("/") if part]
    if not parts:
        return None
    head = parts[0]
    if head in ("validate", "mutate"):
        if len(parts) == 1:
            return Route(head, None, PolicyScope())
        failure = {"fail": FAILURE_POLICY_FAIL, "ignore": FAILURE_POLICY_IGNORE}.get(parts[1])
        if failure is None:
            return None
        if len(parts) == 2:
            return Route(head, failure, PolicyScope(SCOPE_KYVERNO))
        if parts[2] != "finegrained" or len(parts) not in (4, 5):
            return None
        return Route(head, failure, PolicyScope(SCOPE_KYVERNO_POLICY, ("/".join(parts[3:]),)))
    if head in CEL_ROUTES and len(parts) > 1:
        return Route(CEL_ROUTES[head][1], None, PolicyScope(head, tuple(sorted(set(parts[1:])))))
    if head in IMAGE_ROUTES and len(parts) > 2 and parts[1] in ("validate", "mutate"):
        return Route(parts[1], None, PolicyScope(head, tuple(sorted(set(parts[2:])))))
    return None


def validation_actions(policy: Any) -> set[str]:
    """A ValidatingPolicy's ``validationActions``: Deny blocks, Warn answers with warnings, Audit only records."""
    return {str(a) for a in (policy.spec.get("validationActions") or ["Deny"])}


class AdmissionEvaluator:
    """Runs loaded policies against admission requests; one instance per policy snapshot.

    ``cel_policies`` are (Namespaced)Validating/MutatingPolicy documents as ``stockade.celpolicy.CelPolicy``
    evaluated by ``cel_evaluator``; Kyverno ClusterPolicy/Policy go through ``engine``.  Per-variant policy lists are
    computed once here, not per request.
    """

    def __init__(
        self,
        engine: Engine,
        policies: list[KyvernoPolicy],
        namespace_labels: NamespaceLabels | None = None,
        *,
        cel_policies: list[Any] | None = None,
        cel_evaluator: Any = None,
        role_resolver: RoleLookup | None = None,
        kind_resolver: KindLookup | None = None,
        default_timeout_seconds: float = DEFAULT_POLICY_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        background_username: str = "",
    ) -> None:
        self.engine = engine
        # requests by this user (Kyverno's background controller) skip MutatingPolicies with skipBackgroundRequests
        self.background_username = background_username
        self.cel_evaluator = cel_evaluator
        # kept apart from cel_policies, which background scans evaluate as ValidatingPolicies
        image_policies = [p for p in cel_policies or [] if p.kind in IMAGE_VALIDATING_POLICY_KINDS and p.admission]
        # ImageValidatingPolicies: verified in the validating phase, digests pinned (mutateDigest) in the mutating one
        self.image_evaluator: Any = None
        if cel_evaluator is not None and image_policies:
            from stockade.celpolicy.imagevalidating import ImageValidatingEvaluator

            self.image_evaluator = ImageValidatingEvaluator(
                cel_evaluator, getattr(engine, "image_verifier", None), getattr(engine, "verification_cache", None)
            )
        self._namespace_labels = namespace_labels
        self.role_resolver = role_resolver
        self.kind_resolver = kind_resolver
        self.default_timeout_seconds = default_timeout_seconds
        self.clock = clock
        # background-only policies (spec.admission / evaluation.admission.enabled false) are never applied here
        self._index(
            PolicySets(
                [p for p in policies if p.admission],
                [p for p in cel_policies or [] if p.kind in VALIDATING_POLICY_KINDS and p.admission],
                image_policies,
                # policies with targetMatchConstraints mutate existing objects only (a controller's work), never the request
                [p for p in cel_policies or [] if p.kind in MUTATING_POLICY_KINDS and p.admission and not p.has_target_constraints],
            )
        )

    def _index(self, sets: PolicySets) -> None:
        """The per-variant lists every review uses, computed once per evaluator (and per scoped view)."""
        self.policies = sets.kyverno
        self.cel_policies = sets.validating
        self.cel_image_policies = sets.image_validating
        self.cel_mutating = sets.mutating
        self.cel_digest_pinning: list[Any] = []
        if self.image_evaluator is not None and self.image_evaluator.image_verifier is not None:
            self.cel_digest_pinning = [
                p for p in self.cel_image_policies if (p.spec.get("validationConfigurations") or {}).get("mutateDigest", True) is not False
            ]
        self._timeouts: IdentityMemo[Any, float] = IdentityMemo(_MAX_TIMEOUTS)
        self._in_play: dict[tuple[str, str | None], list[Any]] = {}
        self._validating: dict[str | None, list[KyvernoPolicy]] = {}
        self._scoped: dict[PolicyScope, AdmissionEvaluator] = {}
        # roles cost API lookups: resolved only when some loaded policy can look at them
        self.needs_roles = any(uses_roles(p) for p in self.policies)
        self._by_failure_policy = {
            FAILURE_POLICY_FAIL: [p for p in self.policies if failure_policy(p) == FAILURE_POLICY_FAIL],
            FAILURE_POLICY_IGNORE: [p for p in self.policies if failure_policy(p) == FAILURE_POLICY_IGNORE],
        }
        can_verify = getattr(self.engine, "image_verifier", None) is not None
        self._verifying_by_failure: dict[str | None, list[KyvernoPolicy]] = {
            failure: [p for p in self.policies_for(failure) if can_verify and p.has_verify_images()]
            for failure in (None, FAILURE_POLICY_FAIL, FAILURE_POLICY_IGNORE)
        }

    def scoped(self, scope: PolicyScope) -> AdmissionEvaluator:
        """A view evaluating only the policies of one webhook (see ``parse_route``), so a review that several of
        our webhooks receive evaluates each policy once.  Views are cached per scope, at most ``MAX_SCOPED_VIEWS``
        (paths come from the network)."""
        if scope.family == SCOPE_ALL:
            return self
        view = self._scoped.get(scope)
        if view is not None:
            return view
        view = copy.copy(self)
        view._index(scope.select(PolicySets(self.policies, self.cel_policies, self.cel_image_policies, self.cel_mutating)))
        if len(self._scoped) < MAX_SCOPED_VIEWS:
            self._scoped[scope] = view
        return view

    @property
    def needs_network(self) -> bool:
        """True when evaluation may call registries (verifyImages, ImageValidatingPolicy), so callers keep it off
        their event loop."""
        return bool(self._verifying(None)) or (self.image_evaluator is not None and self.image_evaluator.image_verifier is not None)

    def _verifying(self, failure: str | None) -> list[KyvernoPolicy]:
        return self._verifying_by_failure[failure]

    def cel_policies_for(self, failure: str | None) -> list[Any]:
        """Validating and ImageValidating policies of one webhook variant (``None``: all)."""
        policies = self.cel_policies + self.cel_image_policies
        if failure is None:
            return policies
        return [p for p in policies if failure_policy(p) == failure]

    @staticmethod
    def _cel_input(request: AdmissionRequest, labels: dict[str, str], new_object: dict[str, Any] | None = None) -> Any:
        from stockade.celpolicy import AdmissionInput

        return AdmissionInput(
            object=(new_object if new_object is not None else request.object) or None,
            old_object=request.old_object or None,
            operation=request.operation,
            subresource=request.sub_resource,
            user_info=request.user_info.user_info_dict(),
            namespace_labels=labels,
            dry_run=request.dry_run,
            request_name=request.name,
        )

    def _mutate_cel(self, request: AdmissionRequest, failure: str | None, current: dict[str, Any], started: float) -> tuple[list[EngineResponse], dict[str, Any]]:
        """MutatingPolicies in order, each seeing the previous one's output, then ImageValidatingPolicy digest pinning."""
        policies = [p for p in self.cel_mutating if failure is None or failure_policy(p) == failure]
        pinning = [p for p in self.cel_digest_pinning if failure is None or failure_policy(p) == failure]
        if not (policies or pinning) or self.cel_evaluator is None:
            return [], current
        labels = self.namespace_labels(request)
        responses: list[EngineResponse] = []
        background = bool(self.background_username) and request.user_info.username == self.background_username
        for policy in policies:
            if background and policy.skips_background_requests:
                continue
            if self._expired(policy, started):
                responses.append(timed_out_response(policy, None, current, self._budget(policy), "Mutation"))
                continue
            response = self.cel_evaluator.mutate(policy, self._cel_input(request, labels, current))
            if response is None or not response.rules:
                continue
            if self._expired(policy, started):
                responses.append(timed_out_response(policy, response, current, self._budget(policy), "Mutation"))
                continue
            responses.append(response)
            if response.patched_resource:
                current = response.patched_resource
        for policy in pinning:
            if self._expired(policy, started):
                responses.append(timed_out_response(policy, None, current, self._budget(policy), "Mutation"))
                continue
            patches, problem = self.image_evaluator.mutate_digest(policy, self._cel_input(request, labels, current))
            if problem is not None and "Deny" in validation_actions(policy):
                responses.append(problem)
            if patches:
                current = apply_json6902(current, patches, KUBERNETES_OPTIONS)
        return responses, current

    def _validate_cel(self, request: AdmissionRequest, failure: str | None, labels: dict[str, str], started: float) -> tuple[list[EngineResponse], list[str]]:
        """ValidatingPolicy results with each rule's failure_action set from validationActions, plus Warn warnings."""
        policies = self.cel_policies_for(failure)
        if not policies or self.cel_evaluator is None:
            return [], []
        cel_request = self._cel_input(request, labels)
        responses: list[EngineResponse] = []
        warnings: list[str] = []
        evaluated: list[tuple[Any, EngineResponse]] = []
        verifications = None
        if self.image_evaluator is not None:
            from stockade.celpolicy.imagevalidating import RequestVerifications

            verifications = RequestVerifications()
        for policy in policies:
            if self._expired(policy, started):
                responses.append(timed_out_response(policy, None, request.subject, self._budget(policy), "Validation"))
                continue
            if policy.kind in IMAGE_VALIDATING_POLICY_KINDS:
                response = self.image_evaluator.validate(policy, cel_request, verifications)
            else:
                response = self.cel_evaluator.validate(policy, cel_request)
            if response is None or not response.rules:
                continue
            if self._expired(policy, started):
                responses.append(timed_out_response(policy, response, request.subject, self._budget(policy), "Validation"))
                continue
            responses.append(response)
            evaluated.append((policy, response))
        if verifications is not None:
            verifications.enforce_required()  # only now: a later ImageValidatingPolicy may verify an earlier one's image
        for policy, response in evaluated:
            actions = validation_actions(policy)
            for rule in response.rules:
                rule.failure_action = "Enforce" if "Deny" in actions else "Audit"
                if "Warn" in actions and rule.status not in (PASS, SKIP):
                    warnings.append(cel_policy_result(response, rule))
        return responses, warnings

    def policies_in_play(self, phase: str, failure: str | None) -> list[Any]:
        """Every policy a ``mutate``/``validate`` call for this webhook variant may evaluate (the ones a deadline
        cuts short); empty when the call would admit without evaluating anything."""
        cached = self._in_play.get((phase, failure))
        if cached is not None:
            return cached
        verifying = self._verifying(failure)
        if phase == "mutate":
            mutating = [p for p in self.cel_mutating + self.cel_digest_pinning if failure is None or failure_policy(p) == failure]
            kyverno = [p for p in self.policies_for(failure) if p.has_mutate()]
            chosen: list[Any] = kyverno + mutating + [p for p in verifying if p not in kyverno] if (kyverno or mutating or verifying) else []
        else:
            chosen = self._validating_policies(failure) + self.cel_policies_for(failure)
        self._in_play[(phase, failure)] = chosen
        return chosen

    def _validating_policies(self, failure: str | None) -> list[KyvernoPolicy]:
        """The ClusterPolicies/Policies a validating call of this webhook variant evaluates (validate rules, or
        verifyImages results to check), worked out once per evaluator."""
        cached = self._validating.get(failure)
        if cached is None:
            verifying = {id(p) for p in self._verifying(failure)}
            cached = self._validating[failure] = [p for p in self.policies_for(failure) if p.has_validate() or id(p) in verifying]
        return cached

    def budget(self, policies: Iterable[Any]) -> float:
        """The smallest time budget among ``policies`` (the default when there are none)."""
        return min((self._budget(p) for p in policies), default=self.default_timeout_seconds)

    def _budget(self, policy: Any) -> float:
        return self._timeouts.get(policy, self._policy_timeout)

    def _policy_timeout(self, policy: Any) -> float:
        return policy_timeout(policy, self.default_timeout_seconds)

    def _expired(self, policy: Any, started: float) -> bool:
        """A policy's budget counts from the request's arrival, like the apiserver's timeout for its webhook."""
        return self.clock() - started > self._budget(policy)

    def remaining(self, policy: Any, started: float) -> float:
        """Seconds left of a policy's budget (for calls that take a timeout, e.g. registry lookups)."""
        return max(0.0, self._budget(policy) - (self.clock() - started))

    def with_roles(self, request: AdmissionRequest) -> AdmissionRequest:
        """The request with the requester's Roles/ClusterRoles filled in, when a policy can look at them."""
        if not self.needs_roles or self.role_resolver is None or request.user_info.roles or request.user_info.cluster_roles:
            return request
        roles, cluster_roles = self.role_resolver(request.user_info, request.namespace)
        if not roles and not cluster_roles:
            return request
        info = dataclasses.replace(request.user_info, roles=tuple(roles), cluster_roles=tuple(cluster_roles))
        return dataclasses.replace(request, user_info=info)

    def policies_for(self, failure: str | None) -> list[KyvernoPolicy]:
        """The policies served by one webhook variant; ``None`` means the catch-all endpoint."""
        if failure is None:
            return self.policies
        return self._by_failure_policy[failure]

    def namespace_labels(self, request: AdmissionRequest) -> dict[str, str]:
        namespace = labels_namespace(request)
        if namespace and self._namespace_labels is not None:
            return self._namespace_labels(namespace)
        return {}

    def engine_request(self, request: AdmissionRequest, resource: dict[str, Any] | None = None) -> Request:
        labels = self.namespace_labels(request)
        subject = resource if resource is not None else request.subject
        return Request(
            resource=subject,
            operation=request.operation,
            old_resource=request.old_object,
            info=request.user_info,
            namespace_labels=labels,
            subresource=request.sub_resource,
            gvk=top_level_kind(request, self.kind_resolver),
            admission=request.context_fields(),
        )

    def mutate(self, request: AdmissionRequest, failure: str | None = None, started: float | None = None) -> AdmissionDecision:
        """Apply every mutate rule in order; the patch turns the submitted object into the mutated one.

        ``started`` is when the request arrived (``clock()`` time); each policy's timeout counts from it."""
        policies = [p for p in self.policies_for(failure) if p.has_mutate()]
        verifying = self._verifying(failure)
        if request.operation in ("DELETE", "CONNECT") or not (policies or self.cel_mutating or self.cel_digest_pinning or verifying):
            return AdmissionDecision(allowed=True)
        started = self.clock() if started is None else started
        request = self.with_roles(request)
        original = request.object
        current = original
        responses: list[EngineResponse] = []
        for policy in policies:
            if self._expired(policy, started):
                responses.append(timed_out_response(policy, None, current, self._budget(policy), "Mutation"))
                continue
            response = self.engine.mutate(self.engine.policy_context(policy, self.engine_request(request, current)))
            if self._expired(policy, started):
                responses.append(timed_out_response(policy, response, current, self._budget(policy), "Mutation"))
                continue
            if response.rules:
                responses.append(response)
            if response.patched_resource:
                current = response.patched_resource
        cel_responses, current = self._mutate_cel(request, failure, current, started)
        responses += cel_responses
        blocked = blocking_rules_for_mutation(responses)
        # verifyImages: verify signatures, pin digests, record results; an Enforce failure denies here, as in Kyverno.
        # The record covers the policies of every webhook variant (the other variant's results are cache lookups
        # after its own call), so both variants write the same annotations and neither keeps user-written entries.
        record = VerificationRecord()
        verifying_ids = {id(p) for p in verifying}
        for policy in self._verifying(None) if verifying else []:
            if id(policy) not in verifying_ids:
                if not self._expired(policy, started):
                    self.engine.verify_images(self.engine.policy_context(policy, self.engine_request(request, current)), record)
                continue
            if self._expired(policy, started):
                response = timed_out_response(policy, None, current, self._budget(policy), "ImageVerify")
            else:
                response, record = self.engine.verify_images(self.engine.policy_context(policy, self.engine_request(request, current)), record)
                if self._expired(policy, started):
                    response = timed_out_response(policy, response, current, self._budget(policy), "ImageVerify")
                else:
                    apply_verify_images_actions(policy, response)
            if response.rules:
                responses.append(response)
                for name, rules in blocking_rules([response]).items():
                    blocked.setdefault(name, {}).update(rules)
            if response.patched_resource:
                current = response.patched_resource
        if verifying:
            current, _ = apply_record(current, record)
        if blocked:
            return AdmissionDecision(False, block_message(resource_label(original, request), blocked), responses=responses)
        patch = diff_json_patch(original, current) if current is not original else []
        return AdmissionDecision(True, warnings=warning_messages(responses, emit_warnings=True), patch=patch, responses=responses)

    def validate(self, request: AdmissionRequest, failure: str | None = None, started: float | None = None) -> AdmissionDecision:
        """Deny on Enforce failures (and errors of Fail policies, timeouts included); report everything else as
        warnings.  ``started`` is when the request arrived; each policy's timeout counts from it."""
        verifying = self._verifying(failure)
        verifying_ids = {id(p) for p in verifying} if verifying else set()
        policies = self._validating_policies(failure)
        if not policies and not self.cel_policies_for(failure):
            return AdmissionDecision(allowed=True)
        started = self.clock() if started is None else started
        request = self.with_roles(request)
        # The object arriving here already went through the mutating webhook, so only validation runs.
        engine_request = self.engine_request(request)
        # one JSON context for every policy of this review (each evaluation restores it when done)
        prepared = self.engine.prepare(engine_request)
        # verifyImages results are trusted only when this process verified them; the cache makes this a lookup
        records = {
            policy.key: self.engine.verify_images(self.engine.bind(policy, prepared))[1]
            for policy in verifying
            if not self._expired(policy, started)
        }
        responses = []
        clock = self.clock
        for policy in policies:
            budget = self._budget(policy)  # as ``_expired``, with the budget looked up once per policy
            if clock() - started > budget:
                responses.append(timed_out_response(policy, None, request.subject, budget, "Validation"))
                continue
            response = self.engine.validate(self.engine.bind(policy, prepared), records.get(policy.key) if records else None)
            if clock() - started > budget:
                responses.append(timed_out_response(policy, response, request.subject, budget, "Validation"))
                continue
            if id(policy) in verifying_ids:
                apply_verify_images_actions(policy, response)
            if response.rules:
                responses.append(response)
        cel_responses, cel_warnings = self._validate_cel(request, failure, engine_request.namespace_labels, started)
        # Kyverno answers from the rules whose action here is Enforce; the Audit ones it evaluates after answering
        namespace, labels = override_namespace(request.kind.kind, request.operation, request.namespace, request.old_object, engine_request.namespace_labels)
        synchronous, deferred = split_responses(responses, namespace, labels)
        # the catch-all webhook fails closed when any of its synchronous policies is Fail, as Kyverno's handler does
        fail_closed = failure == FAILURE_POLICY_FAIL if failure is not None else any(failure_policy(r.policy) == FAILURE_POLICY_FAIL for r in synchronous)
        blocked = request_blocked(synchronous, fail_closed)
        cel_denied = cel_denial(cel_responses)
        if blocked or cel_denied:
            messages = [block_message(resource_label(request.subject, request), unsuccessful_rules(synchronous))] if blocked else []
            message = "; ".join(messages + ([cel_denied] if cel_denied else []))
            return AdmissionDecision(False, message, responses=synchronous + cel_responses)
        # warnings: what went wrong among the synchronous rules, and the Audit rules of spec.emitWarning policies
        warned = synchronous + [r for r in deferred if getattr(r.policy, "emit_warning", False)]
        return AdmissionDecision(True, warnings=warning_messages(warned) + cel_warnings, responses=responses + cel_responses)


def apply_verify_images_actions(policy: KyvernoPolicy, response: EngineResponse) -> None:
    """verifyImages entries carry their own ``failureAction`` (falling back to the policy's
    validationFailureAction); the engine only knows validate's, so verifyImages rule results are corrected here."""
    for rule in policy.rules:
        if not rule.has_verify_images():
            continue
        actions = {str(entry.get("failureAction") or "") for entry in rule.verify_images if isinstance(entry, dict)} - {""}
        if not actions:
            actions = {policy.validation_failure_action or "Audit"}
        action = "Enforce" if any(a.lower() == "enforce" for a in actions) else "Audit"
        for result in response.rules:
            if result.name == rule.name:
                result.failure_action = action


def blocking_rules_for_mutation(responses: Iterable[EngineResponse]) -> dict[str, dict[str, str]]:
    """A mutate rule that errors under failurePolicy Fail denies the request; failed mutations never do."""
    blocked: dict[str, dict[str, str]] = {}
    for response in responses:
        if hasattr(response.policy, "spec") and failure_policy(response.policy) != FAILURE_POLICY_FAIL:
            continue
        for rule in response.rules:
            if rule.status == ERROR:
                blocked.setdefault(response.policy_name, {})[rule.name] = rule.message
    return blocked
