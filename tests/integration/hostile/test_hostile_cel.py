"""Case 4: CEL expressions that build huge values.  One is refused statically (by /policyvalidate, naming the
expression, and by file-policy serve, which either refuses it with a clear error or serves without it); one that
depends on the object's size must be stopped at run time by the cost budget or the worker memory cap."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from hostile_server import HOSTILE_BUDGET, ServeProcess, cluster_policy, pod, review, run_case, serving


def sixteenfold_binds(levels: int) -> str:
    """Each level binds sixteen copies of the previous level's string joined together: 16**levels copies of an
    8-byte string from a short text, with only 16 comprehension iterations per level, so cel-cpp's runtime budget of
    10,000 iterations would never stop it (only a static cost limit can refuse it).

    (Nesting the maps instead, ``range.map(i, range.map(j, ...).join()).join()``, needs 16**levels iterations to
    build the same string; cel-cpp stops it after 10,000, at a few hundred KB, so that form is not a memory hazard.)"""
    sixteen = "[" + ", ".join(str(i) for i in range(16)) + "]"
    body = f"size(s{levels}) > 0"
    for level in range(levels, 0, -1):
        previous = f"s{level - 1}" if level > 1 else "'xxxxxxxx'"
        body = f"cel.bind(s{level}, {sixteen}.map(i, {previous}).join(), {body})"
    return body


HUGE_EXPRESSION = sixteenfold_binds(7)  # 2 GiB if it ever ran
RUNTIME_EXPRESSION = "size(object.spec.items.map(a, object.spec.items.map(b, object.metadata.annotations.blob + a + b).join()).join()) > 0"


def validating_policy(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "policies.kyverno.io/v1beta1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": name},
        "spec": {
            "validationActions": ["Deny"],
            "failurePolicy": "Fail",
            "webhookConfiguration": {"timeoutSeconds": HOSTILE_BUDGET},
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{"expression": expression, "message": "too big"}],
        },
    }


ORDINARY = cluster_policy("require-team", """
validate:
  message: "label team is required"
  pattern:
    metadata:
      labels:
        team: "?*"
""")


def policy_review(document: dict[str, Any]) -> dict[str, Any]:
    body = review(document)
    body["request"]["kind"] = {"group": "policies.kyverno.io", "version": "v1beta1", "kind": document["kind"]}
    body["request"]["resource"] = {"group": "policies.kyverno.io", "version": "v1beta1", "resource": "validatingpolicies"}
    body["request"]["namespace"] = ""
    return body


def test_policyvalidate_refuses_a_statically_huge_expression(tmp_path: Path) -> None:
    with serving(tmp_path, {"p.yaml": ORDINARY}) as server:
        response = run_case(server, lambda: policy_review(validating_policy("huge-string", HUGE_EXPRESSION)), path="/policyvalidate", expect_allowed=False)
        assert response is not None
        message = str((response.get("status") or {}).get("message", ""))
        assert "spec.validations[0].expression" in message, message


def test_file_policy_serve_refuses_or_leaves_out_a_statically_huge_expression(tmp_path: Path) -> None:
    document = yaml.safe_dump(validating_policy("huge-string", HUGE_EXPRESSION))
    server = ServeProcess(tmp_path, {"huge.yaml": document}, wait=False)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.process.poll() is None and not (server.cert_dir / "ca.crt").exists():
            time.sleep(0.1)
        time.sleep(0.5)
        if server.process.poll() is not None:  # refused at start-up: a clear error, no traceback
            log = server.log()
            assert server.process.returncode != 0 and "huge-string" in log and "Traceback" not in log, log
            return
        server.wait_ready()
        log = server.log()
        named = [line for line in log.splitlines() if "huge-string" in line]
        # named once, with the field and the reason (not once more by every evaluation worker)
        assert len(named) == 1 and "spec.validations[0].expression" in named[0] and "cost" in named[0], "the policy left out is not named once with its reason:\n" + log
        # served without it: a pod the expression would have looked at is admitted at once
        run_case(server, lambda: review(pod("plain")), expect_allowed=True)
    finally:
        server.kill()


def test_object_sized_expression_is_stopped_at_run_time(tmp_path: Path) -> None:
    """Under a static limit the object's size is unknown; 200 × 200 joins of a 100 KB annotation is 4 GB: the runtime
    cost budget or the worker memory cap must end it, within the policy's budget + 2 s, with the server's memory flat."""
    documents = {"runtime.yaml": yaml.safe_dump(validating_policy("object-sized", RUNTIME_EXPRESSION)), "ordinary.yaml": ORDINARY}

    def hostile() -> dict[str, Any]:
        obj = pod("hostile", labels={"team": "a"})
        obj["metadata"]["annotations"] = {"blob": "b" * 100_000}
        obj["spec"]["items"] = [str(i) for i in range(200)]
        return review(obj)

    with serving(tmp_path, documents) as server:
        run_case(server, hostile)
