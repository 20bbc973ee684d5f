"""The controller bridge's translation of Kyverno's admission controller flags into `stockade serve` flags, and
its stand-in Deployments: what cel/http's patched args must turn into, and what serve must accept."""

from __future__ import annotations

from stockade.cli.serve_cmd import http_blocklist, serve
from stockade.testing.controllerbridge import (
    GATE,
    HARNESS_DEFAULT_BLOCKLIST,
    baseline_serve_args,
    controller_deployments,
    parse_go_flags,
    translate,
)


def test_go_flag_spellings() -> None:
    assert parse_go_flags(["--a=1", "-b=x", "--allowHTTPInNamespacedPolicies", "--c", "v", "plain", "--d"]) == [
        ("a", "1"), ("b", "x"), ("allowHTTPInNamespacedPolicies", None), ("c", "v"), ("d", None)
    ]


def test_cel_http_patches_become_serve_flags_and_the_last_one_wins() -> None:
    base = list(controller_deployments()[0]["spec"]["template"]["spec"]["containers"][0]["args"])
    assert translate(base) == baseline_serve_args() == (HARNESS_DEFAULT_BLOCKLIST,)
    allowed = translate([*base, "--allowHTTPInNamespacedPolicies=true"])
    assert allowed == ("--allow-http-in-namespaced-policies", HARNESS_DEFAULT_BLOCKLIST)
    blocked = translate([*base, "--allowHTTPInNamespacedPolicies=true", "--httpBlocklist=json-server.test-cel-http.svc.cluster.local"])
    assert blocked == ("--allow-http-in-namespaced-policies", "--http-blocklist=json-server.test-cel-http.svc.cluster.local")
    assert translate(["--allowHTTPInNamespacedPolicies=true", "--allowHTTPInNamespacedPolicies=false"]) == (HARNESS_DEFAULT_BLOCKLIST,)
    assert translate(["--enablePolicyException=false", "--forceFailurePolicyIgnore"]) == ("--no-policy-exceptions", "--force-failure-policy-ignore", HARNESS_DEFAULT_BLOCKLIST)
    # serve accepts what the bridge produces
    params = serve.make_context("serve", ["--from-cluster", *blocked]).params
    assert params["allow_http_in_namespaced_policies"] and http_blocklist(params) == ("json-server.test-cel-http.svc.cluster.local",)


def test_unknown_flags_are_reported_and_ignored() -> None:
    warnings: list[str] = []
    assert translate(["--someFutureFlag=1"], warn=warnings.append) == (HARNESS_DEFAULT_BLOCKLIST,)
    assert warnings == ["Kyverno flag --someFutureFlag has no stockade serve counterpart here: ignored"]


def test_stand_ins_carry_kyvernos_labels_and_the_gate() -> None:
    deployments = {d["metadata"]["name"]: d for d in controller_deployments()}
    assert set(deployments) == {"kyverno-admission-controller", "kyverno-background-controller", "kyverno-cleanup-controller", "kyverno-reports-controller"}
    admission = deployments["kyverno-admission-controller"]["spec"]
    assert admission["selector"]["matchLabels"] == {"app.kubernetes.io/component": "admission-controller", "app.kubernetes.io/instance": "kyverno", "app.kubernetes.io/part-of": "kyverno"}
    assert admission["template"]["spec"]["containers"][0]["name"] == "kyverno"  # the lease tests' container name
    assert all(d["spec"]["template"]["spec"]["schedulingGates"] == [{"name": GATE}] for d in deployments.values())
