"""Hostile reviews and careless policies against a real `stockade serve`: every case checks liveness, the hostile
answer within budget + 2 s, RSS below the chart limit, and SIGTERM within 10 s (see hostile_server.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hostile_server import HOSTILE_BUDGET, Findings, HostileCall, Probe, cluster_policy, pod, review, run_case, serving


def pod_review(annotations: dict[str, str] | None = None, image: str = "nginx:1.27", spec_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = pod("hostile", labels={"team": "a"}, image=image)
    if annotations:
        obj["metadata"]["annotations"] = annotations
    obj["spec"].update(spec_extra or {})
    return review(obj)


def test_normal_load_keeps_liveness_and_stops_on_sigterm(tmp_path: Path) -> None:
    """The harness itself: an ordinary review under an ordinary policy meets every criterion."""
    policy = cluster_policy("require-team", """
validate:
  message: "label team is required"
  pattern:
    metadata:
      labels:
        team: "?*"
""")
    with serving(tmp_path, {"p.yaml": policy}) as server:
        run_case(server, lambda: review(pod("plain")), expect_allowed=False)


REDOS_POLICY = cluster_policy("owner-format", """
validate:
  message: "annotation owner must be lowercase words joined by single dashes"
  deny:
    conditions:
      any:
      - key: "{{ regex_match('^([a-z0-9]+-?)+$', request.object.metadata.annotations.owner || '') }}"
        operator: Equals
        value: false
""")


def test_catastrophic_regex_on_a_long_annotation(tmp_path: Path) -> None:
    """Case 1: a nested quantifier is exponential for a backtracking engine on 'aaaa…a!'; RE2 semantics make it linear."""
    with serving(tmp_path, {"p.yaml": REDOS_POLICY}) as server:
        run_case(server, lambda: pod_review({"owner": "a" * 40 + "!"}), expect_allowed=False)


WILDCARD_POLICY = cluster_policy("image-shape", """
validate:
  message: "images must be registry/org/name:tag"
  pattern:
    spec:
      containers:
      - image: "*/*/*:*"
""")


def test_wildcard_image_pattern_on_a_3000_character_image(tmp_path: Path) -> None:
    """Case 2: '*/*/*:*' against 'a/a/a/…' with no tag: a backtracking translation of the wildcard is polynomial of
    high degree; a linear matcher answers at once (denied: there is no ':')."""
    image = "a/" * 1600 + "a"
    with serving(tmp_path, {"p.yaml": WILDCARD_POLICY}) as server:
        run_case(server, lambda: pod_review(image=image), expect_allowed=False)


DOUBLING_POLICY = cluster_policy("echo-annotation", """
validate:
  message: "annotation echo must not say no: {{ request.object.metadata.annotations.echo }}"
  deny:
    conditions:
      any:
      - key: "{{ request.object.metadata.annotations.echo }}"
        operator: Equals
        value: "no"
""")


def test_self_referencing_value_does_not_double_on_every_substitution_round(tmp_path: Path) -> None:
    """Case 3: a value that references itself twice would double on every substitution round if substituted values
    were substituted again; substitution must be bounded (answer per failurePolicy, memory flat)."""
    ref = "{{ request.object.metadata.annotations.echo }}"
    with serving(tmp_path, {"p.yaml": DOUBLING_POLICY}) as server:
        run_case(server, lambda: pod_review({"echo": ref + ref}))


def deep_review(depth: int) -> bytes:
    """A pod review whose spec.deep nests ``depth`` objects; written as text, since json.dumps recurses per level."""
    body = json.dumps(pod_review(spec_extra={"deep": "DEEP"}))
    nested = '{"a":' * (depth - 1) + '{"leaf":"x"}' + "}" * (depth - 1)
    return body.replace('"DEEP"', nested).encode()


DEEP_POLICIES = {
    "validate.yaml": cluster_policy("require-team", """
validate:
  message: "label team is required"
  pattern:
    metadata:
      labels:
        team: "?*"
"""),
    "mutate.yaml": cluster_policy("add-label", """
mutate:
  patchStrategicMerge:
    metadata:
      labels:
        stockade.io/managed: "true"
"""),
}


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
@pytest.mark.parametrize("depth", [325, 3000])
def test_deeply_nested_json_in_the_object_is_evaluated(tmp_path: Path, depth: int, path: str) -> None:
    """Case 9: JSON nested 325 and 3,000 levels deep inside request.object gets a real answer, not a 400 or a crash."""
    with serving(tmp_path, DEEP_POLICIES) as server:
        run_case(server, lambda: deep_review(depth), path=path)


def slow_policy(failure_policy: str) -> str:
    """A careless policy: nested foreach over the same list, quadratic in its length (with a budget of 3 s)."""
    return cluster_policy(f"careless-{failure_policy.lower()}", """
validate:
  foreach:
  - list: request.object.spec.items
    foreach:
    - list: request.object.spec.items
      deny:
        conditions:
          any:
          - key: "{{ element }}"
            operator: Equals
            value: never-present
""", failure_policy=failure_policy)


def slow_review(items: int) -> dict[str, Any]:
    return pod_review(spec_extra={"items": [f"item-{i}" for i in range(items)]})


def test_sigterm_during_a_slow_evaluation(tmp_path: Path) -> None:
    """Case 10: a 2,000 × 2,000 foreach is in evaluation: probes answer meanwhile; then SIGTERM arrives while it is
    still in flight and the server exits within 10 s with code 0.  (After SIGTERM the server stops accepting
    connections, as it should: only the exit is checked then.)"""
    with serving(tmp_path, {"p.yaml": slow_policy("Fail")}) as server:
        findings = Findings()
        slow = HostileCall(server, slow_review(2000))
        with Probe(server, findings) as probe:
            slow.start()
            probe.wait_rounds(2)
        findings.check(slow.thread.is_alive(), f"the slow evaluation was over before SIGTERM ({slow.elapsed:.1f}s): nothing was in flight")
        server.sigterm_during(findings)
        findings.assert_none(server.log())


@pytest.mark.parametrize(("failure_policy", "allowed"), [("Fail", False), ("Ignore", True)])
def test_slow_policy_gets_its_failure_policy_answer_within_its_budget(tmp_path: Path, failure_policy: str, allowed: bool) -> None:
    """Case 11: webhookTimeoutSeconds 3: Fail denies with a timeout message, Ignore admits; later reviews work."""
    with serving(tmp_path, {"p.yaml": slow_policy(failure_policy)}) as server:
        findings = Findings()
        with Probe(server, findings):
            response = HostileCall(server, slow_review(2000), budget=HOSTILE_BUDGET).start().result(findings)
        if response is not None:
            findings.check(response["allowed"] is allowed, f"allowed={response['allowed']}, expected {allowed} ({failure_policy})")
            if not allowed:
                message = str((response.get("status") or {}).get("message", ""))
                findings.check("timed out" in message, f"denial does not name the timeout: {message!r}")
        later = review(pod("later", labels={"team": "a"}))
        try:
            status, body = server.post_review("/validate", later, timeout=1.0)
            findings.check(status == 200 and json.loads(body)["response"]["allowed"] is True, f"a later review: {status} {body[:200]!r}")
        except OSError as exc:
            findings.add(f"a later review: {exc!r}")
        server.sigterm_during(findings, lambda: server.post_review("/validate", slow_review(2000), timeout=60))
        findings.assert_none(server.log())
