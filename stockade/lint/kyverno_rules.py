"""Kyverno's admission checks of kyverno.io policies beyond the CRD schema that ``stockade.lint.policies`` does not
make itself: policy names, user info and resource filters, match/exclude sets that cancel out, foreach and JSON
patch shapes, CEL rule fields, verifyImages attestors, failure action overrides, cleanup schedules, global context
entries and policy exceptions.

Pure functions over the document as written (no defaults applied, no cluster).  Each problem is a ``Finding``:
the field path as written in the document, what is wrong, and the rule it belongs to (if any).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import yaml

from stockade import yamlsafe
from stockade.cel.rewrite import uses_identifier
from stockade.engine.pattern.anchors import parse_anchor
from stockade.engine.variables import VARIABLE_RE
from stockade.images.reference import InvalidReferenceError, parse_reference
from stockade.jmespath import JMESPathError, compile_expression
from stockade.policy.schedule import ScheduleError, parse_schedule
from stockade.wildcard import contains_wildcard
from stockade.wildcard import match as wildcard_match

MAX_POLICY_NAME_LENGTH = 63
AUTOGEN_ANNOTATION = "pod-policies.kyverno.io/autogen-controllers"
REQUEST_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
SIGNATURE_ALGORITHMS = ("", "sha224", "sha256", "sha384", "sha512")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
ATTESTOR_KINDS = ("keys", "certificates", "keyless", "attestor")
MAX_MATCH_CONDITIONS = 64
LABELS_NOT_STRINGS = 'labels and annotations supports only string values, "use double quotes around the non string values"'
_QUALIFIED_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class Finding(NamedTuple):
    """One problem: field path as written, message, and the rule's name when it is in a rule."""

    path: str
    message: str
    rule: str = ""
    # Kyverno makes this check in its policy webhook only; its CLI loads, compiles and evaluates the policy
    webhook_only: bool = False


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _has_variable(text: str) -> bool:
    return bool(VARIABLE_RE.search(text))


# ---------------------------------------------------------------------------------------------------------------
# shared pieces


def policy_name_problems(metadata: dict[str, Any]) -> list[Finding]:
    """Kyverno puts policy names into report labels, so they are limited to 63 characters."""
    name = metadata.get("name")
    if isinstance(name, str) and len(name) > MAX_POLICY_NAME_LENGTH:
        return [Finding("metadata.name", f"must be no more than {MAX_POLICY_NAME_LENGTH} characters (policy names are used as label values)")]
    return []


def _filters(block: dict[str, Any], path: str) -> Iterator[tuple[dict[str, Any], str]]:
    """(filter, path) for a match/exclude block: each ``any``/``all`` entry, then the block itself."""
    for key in ("any", "all"):
        for index, entry in enumerate(_list(block.get(key))):
            if isinstance(entry, dict):
                yield entry, f"{path}.{key}[{index}]"
    yield block, path


def user_info_problems(entry: dict[str, Any], path: str, rule: str = "") -> list[Finding]:
    """Subjects need a kind and a name (service accounts also a namespace); roles are ``namespace:name``."""
    problems: list[Finding] = []
    for index, subject in enumerate(_list(entry.get("subjects"))):
        if not isinstance(subject, dict):
            continue
        where = f"{path}.subjects[{index}]"
        if not subject.get("name"):
            problems.append(Finding(f"{where}.name", "Required value: a subject needs a name", rule))
        if subject.get("kind") == "ServiceAccount" and not subject.get("namespace"):
            problems.append(Finding(f"{where}.namespace", "namespace is required when Kind is ServiceAccount", rule))
    for index, role in enumerate(_list(entry.get("roles"))):
        if isinstance(role, str) and len(role.split(":")) != 2:
            problems.append(Finding(f"{path}.roles[{index}]", f"Role is expected to be in namespace:name format, got {role!r}", rule))
    return problems


def selector_problem(selector: Any) -> str:
    """Why a label selector is unusable (Kubernetes' conversion rules), or ""; selectors with wildcards are
    Kyverno's own extension and are not checked."""
    if not isinstance(selector, dict):
        return ""
    labels = _dict(selector.get("matchLabels"))
    expressions = _list(selector.get("matchExpressions"))
    if any(contains_wildcard(str(k)) or contains_wildcard(str(v)) for k, v in labels.items()):
        return ""
    if any(isinstance(e, dict) and any(contains_wildcard(str(v)) for v in _list(e.get("values"))) for e in expressions):
        return ""
    for expression in expressions:
        if not isinstance(expression, dict):
            continue
        operator, values = expression.get("operator"), _list(expression.get("values"))
        if operator not in SELECTOR_OPERATORS:
            return f"{operator!r} is not a valid label selector operator"
        if operator in ("In", "NotIn") and not values:
            return f"values must be non-empty for operator {operator}"
        if operator in ("Exists", "DoesNotExist") and values:
            return f"values must be empty for operator {operator}"
    if not labels and not expressions:
        return "The requirements are not specified in selector"
    return ""


def resource_description_problems(resources: dict[str, Any], path: str, namespaced: bool, rule: str = "") -> list[Finding]:
    problems: list[Finding] = []
    if resources.get("name") and _list(resources.get("names")):
        problems.append(Finding(path, "Both name and names can not be specified together", rule))
    for key in ("selector",):
        if resources.get(key) is not None:
            problem = selector_problem(resources[key])
            if problem:
                problems.append(Finding(f"{path}.{key}", problem, rule))
    if namespaced and _list(resources.get("namespaces")):
        problems.append(Finding(f"{path}.namespaces", "Filtering namespaces not allowed in namespaced policies", rule))
    return problems


def match_block_problems(block: Any, path: str, namespaced: bool, rule: str = "") -> list[Finding]:
    """User info and resource description checks of every filter of a match/exclude block."""
    problems: list[Finding] = []
    if not isinstance(block, dict):
        return problems
    for entry, where in _filters(block, path):
        problems += user_info_problems(entry, where, rule)
        resources = entry.get("resources")
        if isinstance(resources, dict):
            problems += resource_description_problems(resources, f"{where}.resources", namespaced, rule)
    return problems


def _pruned(value: Any) -> Any:
    """Empty fields dropped, so a field written empty and one left out compare equal (as Go's zero values do)."""
    if isinstance(value, dict):
        out = {key: _pruned(item) for key, item in value.items()}
        return {key: item for key, item in out.items() if item not in (None, {}, [], "")}
    if isinstance(value, list):
        return [_pruned(item) for item in value]
    return value


def _covers(exclude: list[Any], match: list[Any]) -> bool:
    """Whether every listed match value is also excluded (and match lists some)."""
    return bool(match) and all(item in exclude for item in match)


def matches_empty_set(match: Any, exclude: Any) -> bool:
    """Kyverno's rejection of a rule (or cleanup policy) whose exclude block removes everything its match block
    selects: an identical ``any`` filter on both sides, or a single-filter exclude that repeats every restriction of
    the match (roles, subjects, names, namespaces, kinds, selectors, annotations)."""
    match, exclude = _pruned(_dict(match)), _pruned(exclude)
    if not isinstance(exclude, dict) or not exclude:
        return False
    if exclude.get("all") or match.get("all"):
        return False
    if match.get("any") and exclude.get("any"):
        return any(m == e for m in match["any"] for e in exclude["any"])
    ex_res, m_res = _dict(exclude.get("resources")), _dict(match.get("resources"))
    for key in ("roles", "clusterRoles", "subjects"):
        if exclude.get(key) and not _covers(_list(exclude.get(key)), _list(match.get(key))):
            return False
    if ex_res.get("name") and not wildcard_match(str(ex_res["name"]), str(m_res.get("name") or "")):
        return False
    if ex_res.get("names"):
        return any(wildcard_match(str(e), str(m)) for m in _list(m_res.get("names")) for e in ex_res["names"])
    for key in ("namespaces", "kinds"):
        if ex_res.get(key) and not _covers(_list(ex_res.get(key)), _list(m_res.get(key))):
            return False
    for key in ("selector", "namespaceSelector"):
        m_sel, ex_sel = m_res.get(key), ex_res.get(key)
        if (m_sel is None) != (ex_sel is None):
            return False
        if isinstance(m_sel, dict) and isinstance(ex_sel, dict):
            ex_expr = _list(ex_sel.get("matchExpressions"))
            if ex_expr and not _covers(ex_expr, _list(m_sel.get("matchExpressions"))):
                return False
            ex_labels = _dict(ex_sel.get("matchLabels"))
            m_labels = _dict(m_sel.get("matchLabels"))
            if ex_labels and (not m_labels or any(ex_labels.get(k) != v for k, v in m_labels.items())):
                return False
    if (m_res.get("annotations") is None) != (ex_res.get("annotations") is None):
        return False
    if m_res.get("annotations") is not None and m_res.get("annotations") != ex_res.get("annotations"):
        return False
    return True


def _conditions(block: Any, path: str) -> Iterator[tuple[dict[str, Any], str]]:
    if isinstance(block, list):
        for index, condition in enumerate(block):
            if isinstance(condition, dict):
                yield condition, f"{path}[{index}]"
    elif isinstance(block, dict):
        for key in ("any", "all"):
            for index, condition in enumerate(_list(block.get(key))):
                if isinstance(condition, dict):
                    yield condition, f"{path}.{key}[{index}]"


def condition_value_problems(block: Any, path: str, rule: str = "") -> list[Finding]:
    """A condition needs a value; one on ``{{request.operation}}`` may only compare with admission operations."""
    problems: list[Finding] = []
    for condition, where in _conditions(block, path):
        if "key" not in condition or "operator" not in condition:
            continue  # reported by the caller
        value = condition.get("value")
        if value is None:
            problems.append(Finding(f"{where}.value", "entered value of `key`, `value` or `operator` is missing or misspelled", rule))
            continue
        key = condition.get("key")
        if not isinstance(key, str) or key.replace(" ", "") != "{{request.operation}}":
            continue
        if isinstance(value, str):
            if not (len(value) >= 4 and value.startswith("{{") and value.endswith("}}")) and value not in REQUEST_OPERATIONS:
                problems.append(Finding(f"{where}.value", _unknown_operation(value), rule))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if not isinstance(item, str):
                    problems.append(Finding(f"{where}.value[{index}]", f"'value[{index}]' found to be of the type {_go_type(item)}. The provided values are expected to be strings", rule))
                elif item not in REQUEST_OPERATIONS:
                    problems.append(Finding(f"{where}.value[{index}]", _unknown_operation(item), rule))
        else:
            problems.append(Finding(f"{where}.value", f"'value' field found to be of the type {_go_kind(value)}. The provided value/values are expected to be either in the form of a string or list", rule))
    return problems


def _unknown_operation(value: str) -> str:
    return f"unknown value '{value}' found under the 'value' field. Only the following values are allowed: [{', '.join(REQUEST_OPERATIONS)}]"


def _go_kind(value: Any) -> str:
    """The Go reflect kind a decoded JSON value has (what Kyverno names in its messages)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "float64" if isinstance(value, float) else "int64"
    return "map" if isinstance(value, dict) else "slice" if isinstance(value, list) else "string"


def _go_type(value: Any) -> str:
    """Go's ``%T`` of a decoded JSON value."""
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    return _go_kind(value)


def schedule_problem(schedule: Any, extended: bool = False) -> str:
    """Why a cron schedule cannot be parsed, or "".  Cleanup policies take standard cron (five fields, ``@hourly``
    style shorthands, ``@every <duration>``, an optional ``TZ=``/``CRON_TZ=`` prefix); DeletingPolicies
    (``extended``) also take optional seconds and years fields and the L/W/# forms, which are not checked further."""
    text = str(schedule or "").strip()
    if re.match(r"^(CRON_)?TZ=\S+\s+", text):
        text = text.split(None, 1)[1]
    if text.startswith("@every"):
        return "" if re.fullmatch(r"@every\s+(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+", text) else f"invalid duration in {text!r}"
    fields = text.split()
    if extended:
        if text.startswith("@"):
            fields = []
        elif len(fields) == 6:
            fields = fields[:5]
        elif len(fields) == 7:
            fields = fields[1:6]
        if any(mark in text for mark in ("L", "W", "#")):
            return ""
    try:
        parse_schedule(" ".join(fields) if fields else text)
    except ScheduleError as error:
        return str(error)
    return ""


def qualified_name_problem(name: str) -> str:
    """Kubernetes' qualified name rule (``[prefix/]name``, name at most 63 characters), or ""."""
    prefix, _, local = name.rpartition("/")
    if "/" in name and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "the prefix must be a DNS subdomain"
    if not local or len(local) > 63 or not _QUALIFIED_NAME_PART.match(local):
        return "must consist of alphanumerics, '-', '_' or '.', start and end with an alphanumeric, at most 63 characters (with an optional DNS subdomain prefix and '/')"
    return ""


# ---------------------------------------------------------------------------------------------------------------
# ClusterPolicy / Policy


def _failure_action(value: Any) -> str:
    return str(value).lower() if isinstance(value, str) else ""


def failure_action_override_problems(overrides: Any, path: str, rule: str = "") -> list[Finding]:
    """Namespaces (and wildcard patterns) of Enforce overrides must not overlap those of Audit overrides."""
    seen: dict[str, set[str]] = {"enforce": set(), "audit": set()}
    patterns: dict[str, set[str]] = {"enforce": set(), "audit": set()}
    for index, override in enumerate(_list(overrides)):
        if not isinstance(override, dict):
            continue
        action = _failure_action(override.get("action"))
        if action not in seen:
            continue
        where = f"{path}[{index}].namespaces"
        names = [str(n) for n in _list(override.get("namespaces"))]
        plain = [n for n in names if not contains_wildcard(n)]
        wild = [n for n in names if contains_wildcard(n)]
        other = "audit" if action == "enforce" else "enforce"
        clash = sorted(seen[other] & set(plain))
        if clash:
            return [Finding(where, f"namespaces {', '.join(clash)} have both Enforce and Audit overrides", rule)]
        seen[action].update(plain)
        patterns[action].update(wild)
        for left, right in ((patterns["audit"], seen["enforce"]), (patterns["enforce"], seen["audit"])):
            hit = next(((p, n) for p in sorted(left) for n in sorted(right) if wildcard_match(p, n)), None)
            if hit:
                return [Finding(where, f"wildcard pattern {hit[0]!r} matches namespace {hit[1]!r} of the other action", rule)]
        for left, right in ((patterns["audit"], patterns["enforce"]), (patterns["enforce"], patterns["audit"])):
            hit = next(((p, q) for p in sorted(left) for q in sorted(right) if wildcard_match(p, q)), None)
            if hit:
                return [Finding(where, f"wildcard pattern {hit[0]!r} conflicts with pattern {hit[1]!r} of the other action", rule)]
    return []


def _element_variables(value: Any, path: str, in_foreach: bool) -> Iterator[tuple[str, str]]:
    """(path, variable) for every ``{{element...}}``/``{{elementIndex}}`` used outside a foreach."""
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}"
            if isinstance(key, str) and not in_foreach:
                yield from ((child, v) for v in _element_names(key))
            yield from _element_variables(item, child, in_foreach or key == "foreach")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _element_variables(item, f"{path}[{index}]", in_foreach)
    elif isinstance(value, str) and not in_foreach:
        yield from ((path, v) for v in _element_names(value))


def _element_names(text: str) -> list[str]:
    if "{{" not in text:
        return []
    names = []
    for match in VARIABLE_RE.finditer(text):
        name = match.group(2)[2:-2].strip()
        if name.startswith("element") or name == "elementIndex":
            names.append(name)
    return names


def _pattern_labels_problem(pattern: Any) -> bool:
    """Whether metadata.labels/annotations (or spec.template.metadata's) of a pattern hold a non-string value."""
    if not isinstance(pattern, dict):
        return False

    def bad(metadata: Any) -> bool:
        for key in ("labels", "annotations"):
            values = _dict(metadata).get(key)
            if isinstance(values, dict) and any(not isinstance(v, str) for v in values.values()):
                return True
        return False

    return bad(pattern.get("metadata")) or bad(_dict(_dict(pattern.get("spec")).get("template")).get("metadata"))


def _validate_foreach_problems(entries: Any, path: str, rule: str) -> list[Finding]:
    problems: list[Finding] = []
    for index, each in enumerate(_list(entries)):
        if not isinstance(each, dict):
            continue
        where = f"{path}[{index}]"
        present = [k for k in ("pattern", "anyPattern", "deny") if each.get(k) is not None]
        if _list(each.get("foreach")):
            present.append("foreach")
        if not present:
            problems.append(Finding(where, "one of pattern, anyPattern, deny, or a nested foreach must be specified", rule))
        elif len(present) > 1:
            problems.append(Finding(where, f"only one of pattern, anyPattern, deny, or a nested foreach can be specified; found {', '.join(present)}", rule))
        problems += _validate_foreach_problems(each.get("foreach"), f"{where}.foreach", rule)
    return problems


def _mutate_foreach_problems(entries: Any, path: str, rule: str) -> list[Finding]:
    for index, each in enumerate(_list(entries)):
        if not isinstance(each, dict):
            continue
        where = f"{path}[{index}]"
        nested = _list(each.get("foreach"))
        if nested:
            others = [k for k in ("context", "preconditions", "patchesJson6902", "patchStrategicMerge") if each.get(k)]
            if others:
                return [Finding(where, f"a nested foreach cannot contain other declarations; found {', '.join(others)}", rule)]
            return _mutate_foreach_problems(nested, f"{where}.foreach", rule)
        has_json = bool(each.get("patchesJson6902"))
        has_merge = each.get("patchStrategicMerge") is not None
        if has_json == has_merge:
            return [Finding(where, "only one of `patchStrategicMerge` or `patchesJson6902` is allowed", rule)]
    return []


def json_patch_value_problems(operations: Any, path: str, rule: str) -> list[Finding]:
    """add, replace and test operations carry a value."""
    problems: list[Finding] = []
    for index, operation in enumerate(_list(operations)):
        if isinstance(operation, dict) and operation.get("op") in ("add", "replace", "test") and "value" not in operation:
            problems.append(Finding(f"{path}[{index}].value", f"invalid value: a JSON patch {operation['op']} operation needs a value", rule))
    return problems


def _cel_rule_problems(cel: dict[str, Any], path: str, rule: str) -> list[Finding]:
    problems: list[Finding] = []
    for index, expression in enumerate(_list(cel.get("expressions"))):
        if isinstance(expression, dict) and not expression.get("expression"):
            problems.append(Finding(f"{path}.expressions[{index}].expression", "cel.expressions.expression is required", rule))
    kind, ref = cel.get("paramKind"), cel.get("paramRef")
    if isinstance(kind, dict):
        for key in ("apiVersion", "kind"):
            if not kind.get(key):
                problems.append(Finding(f"{path}.paramKind.{key}", f"cel.paramKind.{key} is required", rule))
        if ref is None:
            problems.append(Finding(f"{path}.paramRef", "cel.paramRef is required", rule))
    if isinstance(ref, dict):
        if bool(ref.get("name")) == (ref.get("selector") is not None):
            problems.append(Finding(f"{path}.paramRef", "one of cel.paramRef.name or cel.paramRef.selector must be set", rule))
        if not ref.get("parameterNotFoundAction"):
            problems.append(Finding(f"{path}.paramRef.parameterNotFoundAction", "cel.paramRef.parameterNotFoundAction is required", rule))
        if kind is None:
            problems.append(Finding(f"{path}.paramKind", "cel.paramKind is required", rule))
    for index, annotation in enumerate(_list(cel.get("auditAnnotations"))):
        if not isinstance(annotation, dict):
            continue
        for key in ("key", "valueExpression"):
            if not annotation.get(key):
                problems.append(Finding(f"{path}.auditAnnotations[{index}].{key}", f"cel.auditAnnotation.{key} is required", rule))
    return problems


def _anchors_in(value: Any, path: str) -> str:
    """The path of the first anchored key in a generate data pattern, or ""."""
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}"
            if isinstance(key, str) and parse_anchor(key) is not None:
                return child
            found = _anchors_in(item, child)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _anchors_in(item, f"{path}[{index}]")
            if found:
                return found
    return ""


def _generate_problems(generate: dict[str, Any], path: str, rule: str) -> tuple[list[Finding], list[str]]:
    problems: list[Finding] = []
    warnings: list[str] = []
    selector = _dict(generate.get("cloneList")).get("selector")
    if selector is not None and contains_wildcard(str(selector)):
        problems.append(Finding(f"{path}.cloneList.selector", "wildcard characters `*/?` not supported", rule))
    if generate.get("data") is not None:
        anchored = _anchors_in(generate["data"], f"{path}.data")
        if anchored:
            problems.append(Finding(anchored, "anchors not supported on generate resources", rule))
    foreach = generate.get("foreach")
    patterns = [(p, f"{path}.foreach[{i}]") for i, p in enumerate(_list(foreach)) if isinstance(p, dict)] if foreach is not None else [(generate, path)]
    for pattern, where in patterns:
        clone_list = _dict(pattern.get("cloneList"))
        if not _list(clone_list.get("kinds")):
            required = ("apiVersion",) if pattern is generate else ("kind", "name", "apiVersion")
            for key in required:
                if not pattern.get(key):
                    problems.append(Finding(f"{where}.{key}", f"{key} can not be empty", rule))
        sources = {"kind": pattern.get("kind"), "apiVersion": pattern.get("apiVersion"), "clone": pattern.get("clone"), "cloneList": pattern.get("cloneList")}
        if any(_has_variable(text) for text in _strings(sources)):
            warnings.append(f"variables in {where}.clone/cloneList would lead to incorrect synchronization behavior")
    return problems, warnings


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def attestor_set_problems(attestor_set: Any, path: str, rule: str, notary: bool = False) -> list[Finding]:
    problems: list[Finding] = []
    if not isinstance(attestor_set, dict):
        return problems
    entries = _list(attestor_set.get("entries"))
    count = attestor_set.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count > len(entries):
        problems.append(Finding(f"{path}.count", "count cannot exceed the number of entries", rule))
    if not entries:
        problems.append(Finding(f"{path}.entries", "an attestor set needs at least one entry", rule))
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        where = f"{path}.entries[{index}]"
        present = [k for k in ATTESTOR_KINDS if entry.get(k) is not None]
        if len(present) != 1:
            problems.append(Finding(where, "an attestor needs exactly one of keys, certificates, keyless or a nested attestor", rule))
        keys = entry.get("keys")
        if isinstance(keys, dict):
            if not keys.get("publicKeys") and not keys.get("kms") and keys.get("secret") is None:
                problems.append(Finding(f"{where}.keys", "a public key, KMS key or secret is required", rule))
            if keys.get("publicKeys") and str(keys.get("signatureAlgorithm") or "") not in SIGNATURE_ALGORITHMS:
                problems.append(Finding(f"{where}.keys.signatureAlgorithm", f"unsupported signature algorithm; use one of {', '.join(a for a in SIGNATURE_ALGORITHMS if a)}", rule))
        certificates = entry.get("certificates")
        if isinstance(certificates, dict) and not certificates.get("cert") and not certificates.get("certChain"):
            problems.append(Finding(f"{where}.certificates", "cert or certChain is required", rule))
        keyless = entry.get("keyless")
        if isinstance(keyless, dict):
            rekor = keyless.get("rekor")
            if rekor is None and not keyless.get("roots"):
                problems.append(Finding(f"{where}.keyless", "either a Rekor URL or roots are required", rule))
            if isinstance(rekor, dict) and not rekor.get("url"):
                problems.append(Finding(f"{where}.keyless.rekor.url", "a Rekor URL is required", rule))
        if isinstance(entry.get("attestor"), dict):
            problems += attestor_set_problems(entry["attestor"], f"{where}.attestor", rule)
        if notary:
            for key, label in (("keyless", "keyless"), ("keys", "keys")):
                if entry.get(key) is not None:
                    problems.append(Finding(f"{where}.{key}", f"{label} attestors are not allowed for type Notary", rule))
    return problems


def _verify_images_problems(entries: Any, spec_action: str, path: str, rule: str) -> list[Finding]:
    problems: list[Finding] = []
    for index, entry in enumerate(_list(entries)):
        if not isinstance(entry, dict):
            continue
        where = f"{path}[{index}]"
        action = _failure_action(entry.get("failureAction")) or spec_action
        if action == "audit" and entry.get("mutateDigest") is True:
            problems.append(Finding(f"{where}.mutateDigest", "mutateDigest must be false with the Audit failure action", rule))
        notary = str(entry.get("type") or "").lower() == "notary"
        for set_index, attestor_set in enumerate(_list(entry.get("attestors"))):
            problems += attestor_set_problems(attestor_set, f"{where}.attestors[{set_index}]", rule, notary)
        for att_index, attestation in enumerate(_list(entry.get("attestations"))):
            for set_index, attestor_set in enumerate(_list(_dict(attestation).get("attestors"))):
                problems += attestor_set_problems(attestor_set, f"{where}.attestations[{att_index}].attestors[{set_index}]", rule)
    return problems


def _context_problems(entries: Any, path: str, rule: str, namespaced: bool) -> list[Finding]:
    problems: list[Finding] = []
    for index, entry in enumerate(_list(entries)):
        if not isinstance(entry, dict):
            continue
        where = f"{path}[{index}]"
        if namespaced and entry.get("globalReference") is not None:
            problems.append(Finding(f"{where}.globalReference", "globalReference is not allowed in namespaced policies", rule))
        reference = _dict(entry.get("imageRegistry")).get("reference")
        if isinstance(reference, str) and reference and not _has_variable(reference):
            try:
                parse_reference(reference)
            except InvalidReferenceError as error:
                problems.append(Finding(f"{where}.imageRegistry.reference", f"bad image: {reference}: {error}", rule))
    return problems


def rule_problems(rule: dict[str, Any], path: str, spec: dict[str, Any], namespaced: bool, policy_namespace: str) -> tuple[list[Finding], list[str]]:
    """Kyverno's per-rule checks that ``stockade.lint.policies`` does not make itself, and warnings."""
    name = str(rule.get("name") or "")
    problems: list[Finding] = []
    warnings: list[str] = []
    match, exclude = rule.get("match"), rule.get("exclude")
    problems += match_block_problems(match, f"{path}.match", namespaced, name)
    problems += match_block_problems(exclude, f"{path}.exclude", namespaced, name)
    if isinstance(match, dict):
        for entry, where in _filters(match, f"{path}.match"):
            if where == f"{path}.match" and (_list(match.get("any")) or _list(match.get("all"))):
                continue
            if entry and not _pruned(_dict(entry.get("resources"))) and any(entry.get(k) for k in ("subjects", "roles", "clusterRoles")):
                problems.append(Finding(f"{where}.resources", "match resources not specified: a filter needs resources besides user info", name))
    if exclude is not None and matches_empty_set(match, exclude):
        problems.append(Finding(path, "Rule is matching an empty set: its exclude block removes everything its match block selects", name))
    for where, variable in _element_variables({k: v for k, v in rule.items() if k not in ("match", "exclude")}, path, False):
        problems.append(Finding(where, f"variable '{variable}' present outside of foreach at path {where}", name))
    problems += condition_value_problems(rule.get("preconditions"), f"{path}.preconditions", name)
    problems += _context_problems(rule.get("context"), f"{path}.context", name, namespaced)

    validate = rule.get("validate")
    if isinstance(validate, dict):
        if isinstance(validate.get("deny"), dict):
            problems += condition_value_problems(validate["deny"].get("conditions"), f"{path}.validate.deny.conditions", name)
        problems += _validate_foreach_problems(validate.get("foreach"), f"{path}.validate.foreach", name)
        if isinstance(validate.get("cel"), dict):
            problems += _cel_rule_problems(validate["cel"], f"{path}.validate.cel", name)
        if not namespaced:
            problems += failure_action_override_problems(validate.get("failureActionOverrides"), f"{path}.validate.failureActionOverrides", name)
        patterns = [validate.get("pattern"), *_list(validate.get("anyPattern"))]
        patterns += [_dict(each).get("pattern") for each in _list(validate.get("foreach"))]
        if any(_pattern_labels_problem(p) for p in patterns):
            problems.append(Finding(f"{path}.validate", LABELS_NOT_STRINGS, name))

    mutate = rule.get("mutate")
    if isinstance(mutate, dict):
        problems += _mutate_foreach_problems(mutate.get("foreach"), f"{path}.mutate.foreach", name)
        patches = [mutate.get("patchStrategicMerge")] + [_dict(each).get("patchStrategicMerge") for each in _list(mutate.get("foreach"))]
        if any(_pattern_labels_problem(p) for p in patches):
            problems.append(Finding(f"{path}.mutate", LABELS_NOT_STRINGS, name))
        if namespaced and mutate.get("targets") is not None:
            for index, target in enumerate(_list(mutate.get("targets"))):
                target_namespace = _dict(target).get("namespace")
                if target_namespace and target_namespace != policy_namespace:
                    problems.append(Finding(f"{path}.mutate.targets[{index}].namespace", "This field can be ignored or should have value of the namespace where the policy is being created", name))
        patch = mutate.get("patchesJson6902")
        if isinstance(patch, str) and patch:
            try:
                operations = yamlsafe.load(VARIABLE_RE.sub("kyvernojsonpatchvariable", patch), yaml.SafeLoader)
            except yaml.YAMLError:
                operations = None  # reported by the caller
            problems += json_patch_value_problems(operations, f"{path}.mutate.patchesJson6902", name)

    generate = rule.get("generate")
    if isinstance(generate, dict):
        found, notes = _generate_problems(generate, f"{path}.generate", name)
        problems += found
        warnings += notes

    verify_images = rule.get("verifyImages")
    if verify_images:
        problems += _verify_images_problems(verify_images, _failure_action(spec.get("validationFailureAction")), f"{path}.verifyImages", name)
        if any(isinstance(e, dict) and e.get("mutateDigest") is True for e in _list(verify_images)):
            extractors = _dict(rule.get("imageExtractors"))
            if any(isinstance(x, dict) and x.get("jmesPath") for group in extractors.values() for x in _list(group)):
                problems.append(Finding(f"{path}.imageExtractors", "jmespath may not be used in an image extractor when mutating digests with verify images", name))
        for index, entry in enumerate(_list(verify_images)):
            deny = _dict(_dict(_dict(entry).get("validate")).get("deny"))
            problems += condition_value_problems(deny.get("conditions"), f"{path}.verifyImages[{index}].validate.deny.conditions", name)
            for att_index, attestation in enumerate(_list(_dict(entry).get("attestations"))):
                for cond_index, condition in enumerate(_list(_dict(attestation).get("conditions"))):
                    problems += condition_value_problems(condition, f"{path}.verifyImages[{index}].attestations[{att_index}].conditions[{cond_index}]", name)
    return problems, warnings


def policy_problems(document: dict[str, Any]) -> tuple[list[Finding], list[str]]:
    """Kyverno's checks of a ClusterPolicy/Policy that ``stockade.lint.policies`` does not make itself."""
    metadata = _dict(document.get("metadata"))
    spec = _dict(document.get("spec"))
    namespaced = document.get("kind") == "Policy"
    problems = policy_name_problems(metadata)
    warnings: list[str] = []
    if _dict(metadata.get("annotations")).get(AUTOGEN_ANNOTATION) == "all":
        problems.append(Finding(f"metadata.annotations[{AUTOGEN_ANNOTATION}]", "'all' is no longer supported: remove the annotation or list the controllers"))
    if not namespaced:
        problems += failure_action_override_problems(spec.get("validationFailureActionOverrides"), "spec.validationFailureActionOverrides")
    policy_namespace = str(metadata.get("namespace") or "")
    for index, rule in enumerate(_list(spec.get("rules"))):
        if isinstance(rule, dict):
            found, notes = rule_problems(rule, f"spec.rules[{index}]", spec, namespaced, policy_namespace)
            problems += found
            warnings += notes
    return problems, warnings


# ---------------------------------------------------------------------------------------------------------------
# CleanupPolicy / ClusterCleanupPolicy, PolicyException (kyverno.io), GlobalContextEntry


def cleanup_problems(document: dict[str, Any]) -> list[Finding]:
    """Kyverno's cleanup policy checks besides context sources and user info (made by the caller)."""
    spec = _dict(document.get("spec"))
    namespaced = document.get("kind") == "CleanupPolicy"
    problems = policy_name_problems(_dict(document.get("metadata")))
    if spec.get("schedule"):
        problem = schedule_problem(spec["schedule"])
        if problem:
            problems.append(Finding("spec.schedule", f"not a valid cron schedule: {problem}"))
    for block in ("match", "exclude"):
        filters = list(_filters(_dict(spec.get(block)), f"spec.{block}"))
        if not any(entry.get(k) for entry, _ in filters for k in ("roles", "clusterRoles", "subjects")):
            # with user info the caller's refusal stands alone, as in Kyverno
            problems += match_block_problems(spec.get(block), f"spec.{block}", namespaced)
    if spec.get("exclude") is not None and matches_empty_set(spec.get("match"), spec.get("exclude")):
        problems.append(Finding("spec", "CleanupPolicy is matching an empty set: its exclude block removes everything its match block selects"))
    problems += condition_value_problems(spec.get("conditions"), "spec.conditions")
    return problems


def exception_problems(document: dict[str, Any]) -> list[Finding]:
    """A background exception cannot filter by requester; user info and selectors must be well formed."""
    spec = _dict(document.get("spec"))
    match = _dict(spec.get("match"))
    problems: list[Finding] = []
    if spec.get("background") is not False:
        for key in ("any", "all"):
            for index, entry in enumerate(_list(match.get(key))):
                for field_name in ("roles", "clusterRoles", "subjects"):
                    if _dict(entry).get(field_name):
                        problems.append(Finding(f"spec.match.{key}[{index}].{field_name}", "user info cannot be used in a background exception (set spec.background to false)"))
    for key in ("any", "all"):
        for index, entry in enumerate(_list(match.get(key))):
            if isinstance(entry, dict):
                where = f"spec.match.{key}[{index}]"
                problems += user_info_problems(entry, where)
                resources = entry.get("resources")
                if isinstance(resources, dict) and resources.get("selector") is not None:
                    problem = selector_problem(resources["selector"])
                    if problem:
                        problems.append(Finding(f"{where}.resources.selector", problem))
    return problems


def global_context_problems(document: dict[str, Any]) -> list[Finding]:
    """A GlobalContextEntry reads exactly one source, completely described, and names its projections."""
    spec = _dict(document.get("spec"))
    name = str(_dict(document.get("metadata")).get("name") or "")
    problems: list[Finding] = []
    resource, api_call = spec.get("kubernetesResource"), spec.get("apiCall")
    if (resource is None) == (api_call is None):
        problems.append(Finding("spec.kubernetesResource", "a global context entry needs exactly one of kubernetesResource or apiCall"))
    if isinstance(resource, dict):
        version = resource.get("version") or ""
        if not resource.get("group") and version != "v1":
            problems.append(Finding("spec.kubernetesResource.group", "a group is required (only the core group v1 may leave it empty)"))
        if not version:
            problems.append(Finding("spec.kubernetesResource.version", "a version is required"))
        if not resource.get("resource"):
            problems.append(Finding("spec.kubernetesResource.resource", "a resource is required"))
    if isinstance(api_call, dict):
        if not _positive_duration(api_call.get("refreshInterval")):
            problems.append(Finding("spec.apiCall.refreshInterval", "a refresh interval greater than 0 seconds is required"))
        if bool(api_call.get("service")) == bool(api_call.get("urlPath")):
            problems.append(Finding("spec.apiCall.service", "an API call needs exactly one of service or urlPath"))
        if api_call.get("data") is not None and api_call.get("method") != "POST":
            problems.append(Finding("spec.apiCall.method", "an API call with data must use method POST"))
    for index, projection in enumerate(_list(spec.get("projections"))):
        if not isinstance(projection, dict):
            continue
        where = f"spec.projections[{index}]"
        projection_name = projection.get("name") or ""
        if not projection_name:
            problems.append(Finding(f"{where}.name", "a projection needs a name"))
        elif projection_name == name:
            problems.append(Finding(f"{where}.name", "a projection's name must differ from the global context entry's name"))
        expression = projection.get("jmesPath") or ""
        if not expression:
            problems.append(Finding(f"{where}.jmesPath", "a projection needs a JMESPath expression"))
        else:
            try:
                compile_expression(str(expression))
            except JMESPathError as error:
                problems.append(Finding(f"{where}.jmesPath", f"invalid JMESPath {expression!r}: {error}"))
    return problems


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _positive_duration(value: Any) -> bool:
    """Whether a Go duration string (``10s``, ``1h30m``) is longer than zero."""
    if not isinstance(value, str) or not value:
        return False
    text = value.lstrip("+")
    if text.startswith("-"):
        return False
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(a + b for a, b in parts) != text:
        return False
    return sum(float(amount) * _DURATION_SECONDS[unit] for amount, unit in parts) > 0


# ---------------------------------------------------------------------------------------------------------------
# policies.kyverno.io


def _has_resource_rules(constraints: Any) -> bool:
    return bool(_list(_dict(constraints).get("resourceRules")))


def cel_policy_problems(kind: str, document: dict[str, Any]) -> list[Finding]:
    """Kyverno's checks of the CEL policy kinds besides compiling their expressions (made by the caller)."""
    spec = _dict(document.get("spec"))
    base = kind.removeprefix("Namespaced")
    problems: list[Finding] = []
    if base in ("MutatingPolicy", "GeneratingPolicy", "DeletingPolicy") and not _has_resource_rules(spec.get("matchConstraints")):
        problems.append(Finding("spec.matchConstraints", "a matchConstraints with at least one resource rule is required", webhook_only=True))
    if base == "DeletingPolicy":
        schedule = spec.get("schedule")
        if not schedule:
            problems.append(Finding("spec.schedule", "a schedule is required", webhook_only=True))
        else:
            problem = schedule_problem(schedule, extended=True)
            if problem:
                problems.append(Finding("spec.schedule", f"not a valid cron schedule: {problem}", webhook_only=True))
    if base == "GeneratingPolicy":
        for index, generation in enumerate(_list(spec.get("generate"))):
            if not isinstance(generation, dict):
                continue
            has_expression, has_template = bool(generation.get("expression")), generation.get("template") is not None
            if has_expression and has_template:
                problems.append(Finding(f"spec.generate[{index}]", "only one of expression or template may be set"))
            elif not has_expression and not has_template:
                problems.append(Finding(f"spec.generate[{index}]", "one of expression or template must be set"))
    if base == "MutatingPolicy" and _dict(_dict(spec.get("autogen")).get("mutatingAdmissionPolicy")).get("enabled") is True:
        for index, condition in enumerate(_list(spec.get("matchConditions"))):
            expression = _dict(condition).get("expression")
            if isinstance(expression, str) and uses_identifier(expression, "variables"):
                problems.append(Finding(
                    f"spec.matchConditions[{index}].expression",
                    "matchConditions cannot use variables when a MutatingAdmissionPolicy is generated (it evaluates them before variables): inline the expression",
                ))
    return problems


def cel_exception_problems(document: dict[str, Any]) -> list[Finding]:
    """Policy references name a policy and its kind; match conditions are named uniquely (at most 64)."""
    spec = _dict(document.get("spec"))
    problems: list[Finding] = []
    for index, reference in enumerate(_list(spec.get("policyRefs"))):
        if not isinstance(reference, dict):
            continue
        for key in ("name", "kind"):
            if not reference.get(key):
                problems.append(Finding(f"spec.policyRefs[{index}].{key}", f"the policy {key} is required"))
    conditions = _list(spec.get("matchConditions"))
    if len(conditions) > MAX_MATCH_CONDITIONS:
        problems.append(Finding("spec.matchConditions", f"at most {MAX_MATCH_CONDITIONS} match conditions are allowed, found {len(conditions)}"))
    names: set[str] = set()
    for index, condition in enumerate(conditions):
        if not isinstance(condition, dict):
            continue
        where = f"spec.matchConditions[{index}]"
        if not str(condition.get("expression") or "").strip():
            problems.append(Finding(f"{where}.expression", "an expression is required"))
        name = condition.get("name")
        if not name:
            problems.append(Finding(f"{where}.name", "a name is required"))
        elif qualified_name_problem(str(name)):
            problems.append(Finding(f"{where}.name", f"invalid name {name!r}: {qualified_name_problem(str(name))}"))
        elif name in names:
            problems.append(Finding(f"{where}.name", f"duplicate match condition name {name!r}"))
        else:
            names.add(str(name))
    return problems
