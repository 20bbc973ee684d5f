"""``stockade explain``: why a request would be admitted or denied, rule by rule.

The request goes through the same admission evaluator as ``stockade serve`` (mutate, then validate on the mutated
object, as the apiserver calls the two webhooks), so the answer is the one the webhook would give.  For every rule of
every policy it prints whether the rule matched and, when not, the match/exclude reasons; the rule's outcome and
message (which names the failing path); the definition that decided it (pattern, anyPattern, deny conditions,
preconditions, foreach, CEL expressions); and for verifyImages which images were checked, from the verification
cache or the registry, and the verification record entries written into the object.
"""

from __future__ import annotations

from stockade.errors import StockadeError
import json
import sys
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from stockade.cli.output import colour_enabled, paint
from stockade.engine.mutate import KUBERNETES_OPTIONS, apply_json6902
from stockade.engine.response import EngineResponse
from stockade.cli.policycheck import policies_pass_check
from stockade.cli.common import USAGE_EXIT, print_error
from stockade.policy.loader import STDIN_PATH, Document, LoadError, load_documents, parse_yaml_documents, read_text, source_name

NOT_MATCHED = "not matched"
RECORD_ANNOTATIONS = ("kyverno.io/verify-images", "kyverno.io/verify-images-scoped")
_DECIDING_KEYS = ("preconditions", "validate", "mutate", "verifyImages", "generate")
_CEL_KEYS = ("validations", "matchConditions", "variables", "mutations", "auditAnnotations")


class ExplainInputError(StockadeError):
    """A resource or policy file cannot be used; the message names the file and the reason."""


@dataclass
class ImageCheckView:
    image: str
    digest: str
    source: str
    result: str


@dataclass
class RuleView:
    phase: str
    policy: str
    rule: str
    rule_type: str
    status: str
    message: str = ""
    failure_action: str = ""
    why_not: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    definition: dict[str, Any] = field(default_factory=dict)
    substituted: dict[str, Any] = field(default_factory=dict)  # preconditions / deny conditions with variables replaced
    images: list[ImageCheckView] = field(default_factory=list)


@dataclass
class Explanation:
    operation: str
    resource: str
    allowed: bool
    message: str
    rules: list[RuleView]
    patch: list[dict[str, Any]]
    verification_record: dict[str, Any]


class _LoadedPolicies:
    """The policy documents, read once (standard input cannot be read twice), as the policy store's only source."""

    def __init__(self, documents: list[Document]) -> None:
        self._documents = documents

    def fingerprint(self) -> tuple[int, ...]:
        return (len(self._documents),)

    def documents(self) -> list[Document]:
        return list(self._documents)


def _read_resource(path: str) -> dict[str, Any]:
    source = source_name(path)  # "-" is standard input
    documents = [d for d in parse_yaml_documents(read_text(path), source) if d is not None]
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise ExplainInputError(f"{source}: expected exactly one resource (a YAML/JSON object), found {len(documents)} documents")
    resource: dict[str, Any] = documents[0]
    for key in ("apiVersion", "kind"):
        if not isinstance(resource.get(key), str) or not resource[key]:
            raise ExplainInputError(f"{source}: field {key} is missing")
    if resource.get("metadata") is not None and not isinstance(resource["metadata"], dict):
        raise ExplainInputError(f"{source}: field metadata must be an object")
    return resource


def _review(new: dict[str, Any], old: dict[str, Any], operation: str, user: str, groups: tuple[str, ...]) -> dict[str, Any]:
    subject = new or old
    group, _, version = str(subject["apiVersion"]).rpartition("/")
    metadata = subject.get("metadata") or {}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": subject["kind"]},
            "resource": {"group": group, "version": version, "resource": str(subject["kind"]).lower() + "s"},
            "namespace": str(metadata.get("namespace") or ""),
            "name": str(metadata.get("name") or ""),
            "operation": operation,
            "userInfo": {"username": user, "groups": list(groups)},
            "object": new or None,
            "oldObject": old or None,
        },
    }


def _definition(policy: Any, rule_name: str) -> dict[str, Any]:
    """The parts of the rule (or CEL policy) that decided its outcome."""
    for rule in getattr(policy, "rules", None) or []:
        if getattr(rule, "name", None) == rule_name:
            return {key: rule.raw[key] for key in _DECIDING_KEYS if key in rule.raw}
    spec = (getattr(policy, "raw", None) or {}).get("spec") or {}
    return {key: spec[key] for key in _CEL_KEYS if key in spec}


def _conditions(policy: Any, rule_name: str) -> dict[str, Any]:
    """The rule's preconditions and deny conditions: the parts whose variables are worth showing resolved."""
    for rule in getattr(policy, "rules", None) or []:
        if getattr(rule, "name", None) == rule_name:
            found: dict[str, Any] = {}
            if rule.raw.get("preconditions"):
                found["preconditions"] = rule.raw["preconditions"]
            deny = (rule.raw.get("validate") or {}).get("deny")
            if isinstance(deny, dict) and deny.get("conditions"):
                found["deny.conditions"] = deny["conditions"]
            return found
    return {}


def _substituted(evaluator: Any, request: Any, policy: Any, rule_name: str) -> dict[str, Any]:
    """Conditions with ``{{ }}`` replaced from the request's JSON context (as the engine sees it before the rule's own
    ``context`` entries load; a variable needing those is reported as not resolvable).  Bounded by the engine's
    substitution growth budget."""
    from stockade.engine.context import ContextError
    from stockade.engine.variables import SubstitutionError, has_variables, substitute_all
    from stockade.jmespath import JMESPathError

    conditions = _conditions(policy, rule_name)
    if not conditions or not has_variables(conditions):
        return {}
    pctx = evaluator.engine.policy_context(policy, evaluator.engine_request(request))
    resolved: dict[str, Any] = {}
    for name, value in conditions.items():
        try:
            resolved[name] = substitute_all(value, pctx.json_context)
        except (SubstitutionError, ContextError, JMESPathError) as exc:
            resolved[name] = f"not resolvable here: {exc}"
    return resolved


def _views(phase: str, responses: list[EngineResponse], evaluator: Any = None, request: Any = None) -> list[RuleView]:
    views = []
    for response in responses:
        for rule in response.rules:
            views.append(
                RuleView(
                    phase,
                    response.policy_name,
                    rule.name,
                    rule.rule_type,
                    rule.status,
                    rule.message,
                    rule.failure_action,
                    exceptions=list(rule.exceptions),
                    definition=_definition(response.policy, rule.name),
                    substituted=_substituted(evaluator, request, response.policy, rule.name) if evaluator is not None else {},
                    images=[ImageCheckView(c.image, c.digest, c.source, c.status) for c in rule.image_checks],
                )
            )
        for rule_name, reasons in response.unmatched:
            views.append(RuleView(phase, response.policy_name, rule_name, "", NOT_MATCHED, why_not=list(reasons)))
    return views


def explain(
    policies: list[str],
    resource: str | None = None,
    old: str | None = None,
    new: str | None = None,
    operation: str | None = None,
    user: str = "",
    groups: tuple[str, ...] = (),
    image_verifier: Any = None,
    strict: bool = False,
) -> Explanation:
    """Evaluate one admission request built from files; raises ExplainInputError / LoadError with the file named."""
    from stockade.engine.handlers.verify_images import VerificationCache
    from stockade.webhook.admission import parse_review
    from stockade.webhook.policystore import PolicyStore

    if resource and (old or new):
        raise ExplainInputError("give either a resource or --old/--new, not both")
    dashed = ["POLICY"] * policies.count(STDIN_PATH) + [name for name, path in (("--resource", resource), ("--old", old), ("--new", new)) if path == STDIN_PATH]
    if len(dashed) > 1:
        raise ExplainInputError(f"only one input can be read from standard input ('-'), got it for {', '.join(dashed)}")
    new_path = resource or new
    new_object = _read_resource(new_path) if new_path else {}
    old_object = _read_resource(old) if old else {}
    if not new_object and not old_object:
        raise ExplainInputError("nothing to explain: give --resource, or --old and/or --new")
    operation = (operation or ("UPDATE" if new_object and old_object else "DELETE" if old_object else "CREATE")).upper()
    documents = load_documents(policies)  # a policy file that cannot be read fails here with its name
    # judged as the webhook would serve them, and reported here once: the store below does not check again
    if not policies_pass_check(documents, strict, admission=True):
        raise ExplainInputError("the policy check refused the policies (see above)")
    store = PolicyStore(
        sources=[_LoadedPolicies(documents)],
        image_verifier=image_verifier,
        verification_cache=VerificationCache() if image_verifier is not None else None,
        log_rejections=False,
        prechecked=True,
    )
    snapshot = store.load()
    if snapshot.errors:
        raise ExplainInputError("invalid policies: " + "; ".join(f"{'/'.join(p for p in identity if p)}: {reason}" for identity, reason in snapshot.errors.items()))
    evaluator = snapshot.evaluator
    request = parse_review(_review(new_object, old_object, operation, user, groups))
    mutated = evaluator.mutate(request, None)
    views = _views("mutate", mutated.responses, evaluator, request)
    patch = list(mutated.patch)
    record: dict[str, Any] = {}
    if mutated.allowed and patch and request.object:
        patched = apply_json6902(request.object, patch, KUBERNETES_OPTIONS)  # as the apiserver applies it
        annotations = (patched.get("metadata") or {}).get("annotations") or {}
        record = {key: _json_or_text(annotations[key]) for key in RECORD_ANNOTATIONS if key in annotations}
        request = parse_review(_review(patched, old_object, operation, user, groups))
    decision = mutated
    if mutated.allowed:
        decision = evaluator.validate(request, None)
        views += _views("validate", decision.responses, evaluator, request)
    views += _unreported_rules(snapshot.policies, views, request)
    label = f"{request.kind.kind}/{request.namespace + '/' if request.namespace else ''}{request.name}"
    return Explanation(operation, label, decision.allowed, decision.message, views, patch, record)


def _unreported_rules(policies: list[Any], views: list[RuleView], request: Any) -> list[RuleView]:
    """Rules the evaluation did not report (another kind, or a rule type not run at admission): why not."""
    from stockade.engine.match import match_reasons

    reported = {(view.policy, view.rule) for view in views}
    subject = request.object or request.old_object
    extra = []
    for policy in policies:
        for rule in getattr(policy, "rules", None) or []:
            if (policy.name, rule.name) in reported:
                continue
            reasons = match_reasons(rule.raw, subject, request.kind, info=request.user_info, operation=request.operation, policy_namespace=policy.namespace)
            extra.append(RuleView("-", policy.name, rule.name, "", NOT_MATCHED, why_not=reasons or ["the rule matches, but its type is not evaluated in the admission request (e.g. generate or background only)"]))
    return extra


def _json_or_text(value: Any) -> Any:
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


def _status_colour(status: str) -> str:
    return {"pass": "green", "fail": "red", "error": "red", "skip": "yellow"}.get(status, "")



def render_text(explanation: Explanation, colour: bool) -> str:
    verdict = paint("ALLOWED", "green", colour) if explanation.allowed else paint("DENIED", "red", colour)
    lines = [f"{explanation.operation} {explanation.resource}: {verdict}"]
    if explanation.message:
        lines.append(f"  {explanation.message.strip()}")
    for view in explanation.rules:
        status = paint(view.status.upper(), _status_colour(view.status), colour) if _status_colour(view.status) else view.status.upper()
        kind = f" ({view.rule_type}, {view.failure_action})" if view.rule_type else ""
        lines.append(f"\n[{view.phase}] policy {view.policy} / rule {view.rule}{kind}: {status}")
        for reason in view.why_not:
            lines.append(f"    why not: {reason}")
        if view.message:
            lines.append(f"    message: {view.message}")
        if view.exceptions:
            lines.append(f"    PolicyExceptions: {', '.join(view.exceptions)}")
        for image in view.images:
            lines.append(f"    image {image.image}@{image.digest}: {image.result} (from {image.source})")
        for name, value in view.substituted.items():
            lines.append(f"    {name} with variables substituted: {json.dumps(value, sort_keys=True)}")
        if view.status in ("fail", "error", "skip") and view.definition:
            text = json.dumps(view.definition, indent=2, sort_keys=True)
            lines.extend("    | " + line for line in text.splitlines())
    if explanation.patch:
        lines.append("\nJSON patch (mutations):")
        lines.extend(f"    {op.get('op')} {op.get('path')}" for op in explanation.patch)
    if explanation.verification_record:
        lines.append("\nverification record written:")
        text = json.dumps(explanation.verification_record, indent=2, sort_keys=True)
        lines.extend("    " + line for line in text.splitlines())
    return "\n".join(lines) + "\n"


def run_explain(
    policies: list[str], output: str, remove_color: bool, registry: bool, insecure_registries: tuple[str, ...], strict: bool = False, **options: Any
) -> int:
    """CLI body: 0 when the request would be admitted, 1 when denied, 2 for unusable input (message, no traceback)."""
    verifier = None
    if registry:
        from stockade.cli.registry_access import make_image_verifier

        verifier = make_image_verifier(insecure_registries)[0]
    try:
        explanation = explain(policies, image_verifier=verifier, strict=strict, **options)
    except (ExplainInputError, LoadError) as exc:
        print_error(str(exc))
        return USAGE_EXIT
    if output == "json":
        print(json.dumps(asdict(explanation), indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_text(explanation, colour_enabled(disabled=remove_color)))
    return 0 if explanation.allowed else 1
