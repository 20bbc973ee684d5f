"""Kyverno's UPDATE semantics: allowExistingViolations and old-object matching."""

from typing import Any

import stockade.celpolicy  # noqa: F401  (registers the validate.cel handler, as the CLI and server do)
from stockade.engine.engine import Engine, Request
from stockade.engine.handlers.existing import PRE_EXISTING_VIOLATION_MESSAGE
from stockade.engine.match import RequestInfo
from stockade.policy.model import KyvernoPolicy


def pod(image: str = "nginx:1.25", labels: dict[str, str] | None = None, privileged: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": image}
    if privileged:
        container["securityContext"] = {"privileged": True}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default", "labels": labels or {}}, "spec": {"containers": [container]}}


def cpol(rule: dict[str, Any], action: str = "Enforce") -> KyvernoPolicy:
    return KyvernoPolicy({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"validationFailureAction": action, "rules": [rule]}})


MATCH_POD = {"any": [{"resources": {"kinds": ["Pod"]}}]}
NO_LATEST = {"pattern": {"spec": {"containers": [{"image": "!*:latest"}]}}}


def run(policy: KyvernoPolicy, new: dict[str, Any], old: dict[str, Any], operation: str = "UPDATE", **request: Any) -> list[tuple[str, str]]:
    engine = Engine()
    response = engine.validate(engine.policy_context(policy, Request(resource=new, operation=operation, old_resource=old, **request)))
    return [(r.status, r.message) for r in response.rules]


def rule(validate: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "r", "match": MATCH_POD, "validate": validate, **extra}


def test_update_where_old_and_new_violate_is_skipped_like_kyverno() -> None:
    result = run(cpol(rule(NO_LATEST)), pod("nginx:latest", {"v": "2"}), pod("nginx:latest"))
    assert result == [("skip", PRE_EXISTING_VIOLATION_MESSAGE)]


def test_update_that_introduces_the_violation_is_still_denied() -> None:
    [(status, _)] = run(cpol(rule(NO_LATEST)), pod("nginx:latest"), pod("nginx:1.25"))
    assert status == "fail"


def test_allow_existing_violations_false_keeps_failing() -> None:
    [(status, _)] = run(cpol(rule({**NO_LATEST, "allowExistingViolations": False})), pod("nginx:latest"), pod("nginx:latest"))
    assert status == "fail"


def test_audit_rules_and_create_requests_are_not_affected() -> None:
    assert run(cpol(rule(NO_LATEST), action="Audit"), pod("nginx:latest"), pod("nginx:latest"))[0][0] == "fail"
    assert run(cpol(rule({**NO_LATEST, "failureAction": "Enforce"}), action="Audit"), pod("nginx:latest"), pod("nginx:latest"))[0][0] == "skip"
    assert run(cpol(rule(NO_LATEST)), pod("nginx:latest"), {}, operation="CREATE")[0][0] == "fail"


def test_any_pattern_deny_and_foreach_are_covered() -> None:
    any_pattern = {"anyPattern": [{"spec": {"containers": [{"image": "*:1.25"}]}}, {"spec": {"containers": [{"image": "*:1.26"}]}}]}
    deny = {"deny": {"conditions": {"any": [{"key": "{{ request.object.spec.containers[0].image }}", "operator": "Equals", "value": "nginx:latest"}]}}}
    foreach = {"foreach": [{"list": "request.object.spec.containers", "deny": {"conditions": {"any": [{"key": "{{ element.image }}", "operator": "Equals", "value": "*:latest"}]}}}]}
    for validate in (any_pattern, deny, foreach):
        assert run(cpol(rule(validate)), pod("nginx:latest"), pod("nginx:latest")) == [("skip", PRE_EXISTING_VIOLATION_MESSAGE)], validate
        assert run(cpol(rule(validate)), pod("nginx:latest"), pod("nginx:1.25"))[0][0] == "fail", validate


def test_old_object_is_judged_as_if_created() -> None:
    # deny on request.operation: the old object is evaluated with operation CREATE, so it does not share the failure
    deny_updates = {"deny": {"conditions": {"any": [{"key": "{{ request.operation }}", "operator": "Equals", "value": "UPDATE"}]}}}
    assert run(cpol(rule(deny_updates)), pod(), pod())[0][0] == "fail"
    # request.oldObject is absent while the old object is judged, so a deny on it does not repeat
    deny_old = {"deny": {"conditions": {"any": [{"key": "{{ request.oldObject.metadata.name || '' }}", "operator": "Equals", "value": "web"}]}}}
    assert run(cpol(rule(deny_old)), pod(), pod())[0][0] == "fail"
    deny_name = {"deny": {"conditions": {"any": [{"key": "{{ request.object.metadata.name }}", "operator": "Equals", "value": "web"}]}}}
    assert run(cpol(rule(deny_name)), pod(), pod()) == [("skip", PRE_EXISTING_VIOLATION_MESSAGE)]


def test_old_object_must_match_the_rule_with_a_placeholder_requester() -> None:
    by_user = {"any": [{"resources": {"kinds": ["Pod"]}, "subjects": [{"kind": "User", "name": "alice"}]}]}
    policy = cpol({"name": "r", "match": by_user, "validate": NO_LATEST})
    [(status, _)] = run(policy, pod("nginx:latest"), pod("nginx:latest"), info=RequestInfo(username="alice"))
    assert status == "fail"


def test_old_object_must_meet_the_preconditions() -> None:
    only_team_a = {"all": [{"key": "{{ request.object.metadata.labels.team || '' }}", "operator": "Equals", "value": "a"}]}
    policy = cpol(rule(NO_LATEST, preconditions=only_team_a))
    assert run(policy, pod("nginx:latest", {"team": "a"}), pod("nginx:latest", {"team": "b"}))[0][0] == "fail"
    assert run(policy, pod("nginx:latest", {"team": "a"}), pod("nginx:latest", {"team": "a"}))[0][0] == "skip"


def test_pod_security_rules_are_covered() -> None:
    policy = cpol(rule({"podSecurity": {"level": "baseline", "version": "latest"}}))
    assert run(policy, pod(privileged=True), pod(privileged=True)) == [("skip", PRE_EXISTING_VIOLATION_MESSAGE)]
    assert run(policy, pod(privileged=True), pod())[0][0] == "fail"


def test_cel_rules_are_not_covered() -> None:
    cel = {"cel": {"expressions": [{"expression": "!object.spec.containers.exists(c, c.image.endsWith(':latest'))"}]}}
    assert run(cpol(rule(cel)), pod("nginx:latest"), pod("nginx:latest"))[0][0] == "fail"


def test_update_matches_the_new_object_only() -> None:
    """Kyverno matches the old object only when the new one is empty: a selector label present only on the old Pod
    does not bring the rule into play on UPDATE."""
    selected = {"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"checked": "yes"}}}}]}
    policy = cpol({"name": "r", "match": selected, "validate": {**NO_LATEST, "allowExistingViolations": False}})
    assert run(policy, pod("nginx:latest"), pod("nginx:latest", {"checked": "yes"})) == []
    assert run(policy, pod("nginx:latest", {"checked": "yes"}), pod("nginx:latest"))[0][0] == "fail"


def test_delete_still_matches_the_old_object() -> None:
    selected = {"any": [{"resources": {"kinds": ["Pod"], "operations": ["DELETE"], "selector": {"matchLabels": {"checked": "yes"}}}}]}
    deny_all = {"deny": {}}
    policy = cpol({"name": "r", "match": selected, "validate": deny_all})
    old = pod(labels={"checked": "yes"})
    assert run(policy, old, old, operation="DELETE")[0][0] == "fail"
