"""Hypothesis strategies for fuzzing the admission path: AdmissionReviews (valid-ish and malformed) and Kyverno
ClusterPolicies assembled from rule fragments, plus the checks a well-formed answer must pass.

Shared by the property tests (tests/unit/webhook/test_webhook_fuzz.py, profile ``ci``) and the long fuzz run
(bench/fuzz_admission.py, profile ``fuzz``).  Test-only: Hypothesis is in the ``test`` extra, not a runtime dependency.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from stockade.errors import StockadeError

PROFILE_ENV = "STOCKADE_FUZZ_PROFILE"
_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much, HealthCheck.large_base_example]
settings.register_profile("ci", max_examples=1000, derandomize=True, deadline=None, database=None, suppress_health_check=_SUPPRESSED)
settings.register_profile("fuzz", max_examples=100_000, deadline=None, database=None, suppress_health_check=_SUPPRESSED)


def load_profile() -> str:
    """Select the profile named by $STOCKADE_FUZZ_PROFILE (default ``ci``: bounded and deterministic)."""
    name = os.environ.get(PROFILE_ENV, "ci")
    settings.load_profile(name)
    return name


# -- JSON values ------------------------------------------------------------------------------------------------

WEIRD_TEXT = st.sampled_from(
    ["", " ", "\x00", "\u202e", "😀", "{{", "}}", "{{ request.object }}", "*", "?*", "!", "a" * 20_000, "-1", "1e400",
     "NaN", "null", "true", "$(", "\\", "'", '"', "Ĳ", "\ud7ff", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢"]
)
TEXT = st.one_of(st.text(max_size=20), WEIRD_TEXT)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), TEXT,
)


def json_values(max_leaves: int = 20) -> st.SearchStrategy[Any]:
    """Arbitrary JSON (what json.loads can return), with huge strings, unicode and the occasional deep nest."""
    tree = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=max_leaves)
    return st.one_of(tree, st.builds(nest, SCALARS, st.integers(min_value=50, max_value=400)))


def nest(value: Any, depth: int) -> Any:
    for index in range(depth):
        value = {"a": value} if index % 2 else [value]
    return value


SMALL_JSON = json_values(6)
ANY_JSON = json_values()


WRONG_TYPE_ROLL = st.integers(min_value=0, max_value=15)
WRONG_TYPE = 15  # not 0: Hypothesis favours 0 (its shrink target), which made far more than 1 field in 16 wrong


def maybe(right: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the right type, sometimes anything at all (every field gets the wrong type now and then).

    Build these once, at module level: a strategy made anew on every draw costs Hypothesis a walk of its whole graph
    (SMALL_JSON's recursion included) before the first value; inside a composite use ``draw_maybe`` instead."""
    return WRONG_TYPE_ROLL.flatmap(lambda roll: SMALL_JSON if roll == WRONG_TYPE else right)


def draw_maybe(draw: st.DrawFn, value: Any, right: st.SearchStrategy[Any] | None = None) -> Any:
    """Inside a composite: ``value`` (or a draw from ``right``) mostly, sometimes anything, without building a strategy."""
    if draw(WRONG_TYPE_ROLL) == WRONG_TYPE:
        return draw(SMALL_JSON)
    return draw(right) if right is not None else value


# -- AdmissionReviews -------------------------------------------------------------------------------------------

KINDS = st.sampled_from(["Pod", "Deployment", "ConfigMap", "Namespace", "Service", "ClusterPolicy", "X"])
NAMES = st.one_of(st.sampled_from(["web", "db", "kube-system", "default", ""]), TEXT)
LABELS = st.dictionaries(st.sampled_from(["team", "app", "env", "owner", "x"]), st.one_of(st.sampled_from(["a", "prod", ""]), TEXT), max_size=3)
IMAGES = st.one_of(st.sampled_from(["nginx", "nginx:latest", "nginx:1.27", "ghcr.io/a/b:c@sha256:" + "0" * 64, "a/b/c:d", ":", "@", ""]), TEXT)
MEMORY = st.sampled_from(["1Gi", "100m", "x", "-1", "1e3"])
API_VERSIONS = st.sampled_from(["v1", "apps/v1"])
REVIEW_KINDS = st.fixed_dictionaries({"group": st.sampled_from(["", "apps"]), "version": st.just("v1"), "kind": KINDS})
REVIEW_RESOURCES = st.fixed_dictionaries({"group": st.just(""), "version": st.just("v1"), "resource": st.sampled_from(["pods", "deployments"])})
SUB_RESOURCES = st.sampled_from(["", "status", "ephemeralcontainers"])
OPERATIONS = st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"])
USER_INFO = st.fixed_dictionaries({"username": maybe(NAMES), "groups": maybe(st.lists(NAMES, max_size=3)),
                                   "extra": maybe(st.dictionaries(TEXT, st.lists(TEXT, max_size=2), max_size=2))})
REVIEW_API_VERSIONS = st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
UIDS = st.uuids().map(str)


@st.composite
def k8s_objects(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(KINDS)
    metadata = {"name": draw_maybe(draw, None, NAMES), "namespace": draw_maybe(draw, None, NAMES),
                "labels": draw_maybe(draw, None, LABELS), "annotations": draw_maybe(draw, None, LABELS)}
    metadata = {k: v for k, v in metadata.items() if draw(st.booleans())}
    container = {"name": draw_maybe(draw, None, NAMES), "image": draw_maybe(draw, None, IMAGES),
                 "resources": draw_maybe(draw, {"limits": {"memory": draw(MEMORY)}})}
    containers = [draw_maybe(draw, container) for _ in range(draw(st.integers(min_value=0, max_value=3)))]
    spec = {"containers": draw_maybe(draw, containers), "hostNetwork": draw_maybe(draw, None, st.booleans())}
    obj = {"apiVersion": draw_maybe(draw, None, API_VERSIONS), "kind": draw_maybe(draw, kind), "metadata": draw_maybe(draw, metadata),
           "spec": draw_maybe(draw, spec)}
    if draw(st.booleans()):
        obj["extra"] = draw(ANY_JSON)
    return obj


K8S_OBJECTS = k8s_objects()


@st.composite
def admission_reviews(draw: st.DrawFn) -> Any:
    """A JSON value sent as an AdmissionReview: mostly review-shaped with some fields wrong, sometimes anything."""
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        return draw(ANY_JSON)
    obj = draw(K8S_OBJECTS)
    request = {
        "uid": draw_maybe(draw, None, UIDS),
        "kind": draw_maybe(draw, None, REVIEW_KINDS),
        "resource": draw_maybe(draw, None, REVIEW_RESOURCES),
        "subResource": draw_maybe(draw, None, SUB_RESOURCES),
        "namespace": draw_maybe(draw, None, NAMES),
        "name": draw_maybe(draw, None, NAMES),
        "operation": draw_maybe(draw, None, OPERATIONS),
        "userInfo": draw_maybe(draw, None, USER_INFO),
        "object": draw_maybe(draw, obj),
        "oldObject": None if draw(st.booleans()) else draw_maybe(draw, None, K8S_OBJECTS),
        "dryRun": draw_maybe(draw, None, st.booleans()),
    }
    request = {k: v for k, v in request.items() if draw(st.integers(min_value=0, max_value=40)) != 40}  # rarely drop a field (not on 0: see WRONG_TYPE)
    return {"apiVersion": draw_maybe(draw, None, REVIEW_API_VERSIONS),
            "kind": draw_maybe(draw, "AdmissionReview"), "request": draw_maybe(draw, request)}


# -- policies ---------------------------------------------------------------------------------------------------

JMESPATH = st.sampled_from([
    "request.object.metadata.name", "request.object.metadata.labels.team", "request.operation", "request.namespace",
    "request.object.spec.containers[].image", "length(request.object.spec.containers || `[]`)", "to_upper(request.object.metadata.name || '')",
    "request.object.metadata.annotations.\"x\"", "element.image", "elementIndex", "regex_match('^[a-z]+$', request.object.metadata.name || '')",
    "split(request.object.metadata.name || '', '-')", "request.userInfo.username", "images.containers.*.tag", "request.object.nope.nope",
    "truncate(request.object.metadata.name || '', `3`)", "base64_decode('eA==')", "x(", "`1` + `2`", "request.object.metadata.labels | keys(@)",
])
VARIABLE = JMESPATH.map(lambda expression: "{{ " + expression + " }}")
OPERATORS = st.sampled_from([
    "Equals", "NotEquals", "In", "NotIn", "AnyIn", "AllIn", "AnyNotIn", "AllNotIn", "GreaterThan", "GreaterThanOrEquals",
    "LessThan", "LessThanOrEquals", "DurationGreaterThan", "DurationLessThan", "equals", "Bogus",
])
PATTERN_VALUES = st.one_of(
    st.sampled_from(["?*", "*", "*:latest", "!*:latest", "nginx*", ">1", "<=2Gi", ">=1Gi", "!foo", "a | b", "1-5", "1!-5", "null", "!null", "", "*/*/*:*"]),
    VARIABLE, st.booleans(), st.integers(min_value=-5, max_value=5), TEXT,
)
ANCHORED_KEYS = st.sampled_from(["name", "image", "=(name)", "X(hostNetwork)", "^(containers)", "<(image)", "+(team)", "=(labels)", "(team)", "team", "spec", "metadata"])


def patterns() -> st.SearchStrategy[Any]:
    return st.recursive(PATTERN_VALUES, lambda inner: st.one_of(st.dictionaries(ANCHORED_KEYS, inner, max_size=3), st.lists(inner, min_size=1, max_size=2)), max_leaves=8)


CONDITIONS = st.fixed_dictionaries({"key": st.one_of(VARIABLE, PATTERN_VALUES), "operator": OPERATORS, "value": st.one_of(PATTERN_VALUES, st.lists(PATTERN_VALUES, max_size=3))})
DENY = st.fixed_dictionaries({"conditions": st.one_of(
    st.lists(CONDITIONS, max_size=3),
    st.fixed_dictionaries({}, optional={"any": st.lists(CONDITIONS, max_size=3), "all": st.lists(CONDITIONS, max_size=3)}),
)})

CEL_ATOMS = st.sampled_from([
    "object.metadata.name", "has(object.metadata.labels)", "object.spec.containers", "1", "'a'", "true", "[1, 2]", "{'a': 1}", "null",
    "object.metadata.?labels.orValue({})", "request.operation", "size(object.metadata.name)", "object.nope",
])
CEL_EXPRESSIONS = st.recursive(CEL_ATOMS, lambda inner: st.one_of(
    st.tuples(inner, st.sampled_from(["==", "!=", "&&", "||", "+", "<", "in"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
    inner.map(lambda e: f"!({e})"), inner.map(lambda e: f"size({e})"),
    inner.map(lambda e: f"object.spec.containers.all(c, {e})"), inner.map(lambda e: f"[1, 2, 3].map(x, {e})"),
    st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
), max_leaves=6)


PATTERNS = patterns()
MAYBE_PATTERNS = maybe(PATTERNS)
MAYBE_ANY_PATTERN = maybe(st.lists(PATTERNS, max_size=3))
MAYBE_DENY = maybe(DENY)
FOREACH_ENTRY = st.fixed_dictionaries({"list": st.one_of(JMESPATH, TEXT)}, optional={"deny": DENY, "pattern": PATTERNS, "elementScope": st.booleans()})
MAYBE_FOREACH = maybe(st.lists(FOREACH_ENTRY, min_size=1, max_size=2))
CEL_VALIDATIONS = st.lists(st.fixed_dictionaries({"expression": maybe(CEL_EXPRESSIONS)}, optional={"message": TEXT}), min_size=1, max_size=2)
MESSAGES = st.one_of(TEXT, VARIABLE)
MATCH_KINDS = st.lists(st.one_of(KINDS, st.just("*"), TEXT), min_size=1, max_size=2)


@st.composite
def validate_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"message": draw(MESSAGES)}
    choice = draw(st.sampled_from(["pattern", "anyPattern", "deny", "foreach", "cel"]))
    if choice == "pattern":
        body["pattern"] = draw(MAYBE_PATTERNS)
    elif choice == "anyPattern":
        body["anyPattern"] = draw(MAYBE_ANY_PATTERN)
    elif choice == "deny":
        body["deny"] = draw(MAYBE_DENY)
    elif choice == "foreach":
        body["foreach"] = draw(MAYBE_FOREACH)
    else:
        body["cel"] = {"expressions": draw(CEL_VALIDATIONS)}
    return body


VALIDATE_BODIES = validate_bodies()


@st.composite
def rules(draw: st.DrawFn, index: int = 0) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "name": f"rule-{index}",
        "match": draw_maybe(draw, {"any": [{"resources": {"kinds": draw(MATCH_KINDS)}}]}),
    }
    if draw(st.booleans()):
        rule["context"] = [{"name": "v", "variable": {"jmesPath": draw(JMESPATH), "default": draw(SCALARS)}}]
    if draw(st.integers(min_value=0, max_value=3)) == 0:
        rule["preconditions"] = draw(DENY)["conditions"]
    if draw(st.integers(min_value=0, max_value=3)) == 0:
        rule["mutate"] = {"patchStrategicMerge": draw(MAYBE_PATTERNS)}
    else:
        rule["validate"] = draw(VALIDATE_BODIES)
    return rule


RULES = [rules(index) for index in range(3)]


@st.composite
def cluster_policies(draw: st.DrawFn) -> dict[str, Any]:
    """A Kyverno ClusterPolicy document assembled from rule fragments (not necessarily a valid one)."""
    count = draw(st.integers(min_value=1, max_value=3))
    spec: dict[str, Any] = {
        "validationFailureAction": draw(st.sampled_from(["Enforce", "Audit", "enforce", "Bogus"])),
        "rules": [draw(RULES[index]) for index in range(count)],
    }
    if draw(st.booleans()):
        spec["failurePolicy"] = draw(st.sampled_from(["Fail", "Ignore", "Bogus"]))
    return {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": draw(st.sampled_from(["fuzz-a", "fuzz-b", ""]))}, "spec": spec}


# -- well-formed answers ----------------------------------------------------------------------------------------


class MalformedAnswer(StockadeError, AssertionError):
    """An AdmissionReview answer that the apiserver could not use."""


def check_review_answer(answer: Any, uid: str) -> None:
    """uid echoed, allowed a bool, a denial's status a Failure with a string message, a patch base64 JSONPatch."""
    if not isinstance(answer, dict) or answer.get("kind") != "AdmissionReview" or not isinstance(answer.get("response"), dict):
        raise MalformedAnswer(f"not an AdmissionReview: {answer!r:.300}")
    json.dumps(answer)  # must be serialisable as JSON
    response = answer["response"]
    if response.get("uid") != uid:
        raise MalformedAnswer(f"uid {response.get('uid')!r} is not {uid!r}")
    if not isinstance(response.get("allowed"), bool):
        raise MalformedAnswer(f"allowed is {response.get('allowed')!r}")
    if not response["allowed"]:
        status = response.get("status")
        if not (isinstance(status, dict) and status.get("status") == "Failure" and isinstance(status.get("message"), str)):
            raise MalformedAnswer(f"denial without a Failure status and message: {status!r:.300}")
    if not all(isinstance(w, str) for w in response.get("warnings", [])):
        raise MalformedAnswer("warnings must be strings")
    if "patch" in response:
        if response.get("patchType") != "JSONPatch" or not response["allowed"]:
            raise MalformedAnswer("a patch needs patchType JSONPatch and an allowed answer")
        operations = json.loads(base64.b64decode(response["patch"], validate=True))
        if not isinstance(operations, list) or not all(isinstance(o, dict) and o.get("op") in ("add", "remove", "replace", "move", "copy", "test") and isinstance(o.get("path"), str) for o in operations):
            raise MalformedAnswer(f"patch is not RFC 6902: {operations!r:.300}")
