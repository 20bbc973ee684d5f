"""The Helm chart: lint, render with several values, server-side dry run, and our own PSS policy on its pods."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from install_tools import CHART, INSTALL_YAML, REPO_ROOT, Tools, documents, find

PSS_RESTRICTED = REPO_ROOT / "bench" / "policies" / "pss-restricted.yaml"


@pytest.fixture()
def namespace(tools: Tools) -> Iterator[str]:
    """Server-side dry runs of namespaced objects need their namespace to exist."""
    name = f"install-{uuid.uuid4().hex[:8]}"
    tools.kubectl("create", "namespace", name)
    yield name
    tools.kubectl("delete", "namespace", name, "--wait=false")


def test_chart_lints(tools: Tools) -> None:
    tools.helm("lint", "--strict", str(CHART))
    tools.helm("lint", "--strict", str(CHART), "--set", "replicaCount=3", "--set", "tls.existingSecret=my-tls")


def test_lint_rejects_zero_replicas(tools: Tools) -> None:
    result = tools.helm("template", "stockade", str(CHART), "--set", "replicaCount=0", check=False)
    assert result.returncode != 0
    assert "replicaCount must be at least 1" in result.stderr


def test_default_render_is_accepted_by_the_apiserver(tools: Tools, namespace: str) -> None:
    rendered = tools.template("--include-crds", namespace=namespace)
    result = tools.kubectl("apply", "--dry-run=server", "--server-side", "--force-conflicts", "-f", "-", stdin=rendered)
    for kind in ("deployment.apps/stockade", "poddisruptionbudget.policy/stockade", "service/stockade-svc", "lease.coordination.k8s.io/stockade-leader"):
        assert kind in result.stdout
    # nothing was stored
    assert tools.kubectl("get", "deployments", "-n", namespace, "-o", "name").stdout.strip() == ""


def test_default_values_give_an_available_deployment(tools: Tools) -> None:
    docs = documents(tools.template())
    deployment = find(docs, "Deployment", "stockade")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pod = spec["template"]["spec"]
    preferred = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    container = pod["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health/readiness", "port": "https", "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health/liveness", "port": "https", "scheme": "HTTPS"}
    args = container["args"]
    for flag in ("--from-cluster", "--register-webhooks", "--leader-election", "--lease-name=stockade-leader", "--tls-secret=stockade-tls", "--generate", "--events", "--policy-reports"):
        assert flag in args
    assert {env["name"] for env in container["env"]} >= {"POD_NAME", "POD_UID"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    pdb = find(docs, "PodDisruptionBudget", "stockade")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": spec["selector"]["matchLabels"]}}
    assert find(docs, "Service", "stockade-svc")["spec"]["selector"] == spec["selector"]["matchLabels"]
    hook = find(docs, "Job", "stockade-webhooks-cleanup")
    assert hook["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert hook["spec"]["template"]["spec"]["containers"][0]["args"] == ["cleanup"]


def test_rbac_limits_webhook_configurations_and_secrets_by_name(tools: Tools) -> None:
    docs = documents(tools.template())
    core = find(docs, "ClusterRole", "stockade-stockade")["rules"]
    webhook_rules = [
        rule for rule in core
        if "admissionregistration.k8s.io" in rule.get("apiGroups", []) and any(r.endswith("webhookconfigurations") for r in rule["resources"])
    ]
    named = [rule for rule in webhook_rules if rule.get("resourceNames")]
    unnamed_verbs = {verb for rule in webhook_rules if not rule.get("resourceNames") for verb in rule["verbs"]}
    assert unnamed_verbs == {"create", "list"}  # the only verbs Kubernetes cannot limit by name
    assert set(named[0]["verbs"]) == {"get", "update", "patch", "delete"}
    from stockade.controllers.webhookconfig import MUTATING_CONFIG_NAME, POLICY_VALIDATING_CONFIG_NAME, VALIDATING_CONFIG_NAME

    # every configuration the server writes, or registration fails with 403 in a real cluster
    assert set(named[0]["resourceNames"]) == {MUTATING_CONFIG_NAME, VALIDATING_CONFIG_NAME, POLICY_VALIDATING_CONFIG_NAME}
    # generated admission policies (Kyverno's VAP/MAP generation) are a separate rule, never webhook configurations
    generated = [rule for rule in core if "validatingadmissionpolicies" in rule.get("resources", [])]
    assert len(generated) == 1 and not any(r.endswith("webhookconfigurations") for r in generated[0]["resources"])
    # nothing but the webhook role's own rules mentions secrets cluster-wide
    assert not any("secrets" in rule.get("resources", []) for rule in core)
    role = find(docs, "Role", "stockade")["rules"]
    secret_rules = [rule for rule in role if "secrets" in rule["resources"]]
    assert {tuple(rule.get("resourceNames", [])): tuple(rule["verbs"]) for rule in secret_rules} == {("stockade-tls",): ("get", "update"), (): ("create",)}
    lease_rule = next(rule for rule in role if "leases" in rule["resources"])
    assert set(lease_rule["verbs"]) == {"get", "list", "create", "update", "delete"}
    background = find(docs, "ClusterRole", "stockade-stockade-background")["rules"]
    assert background == [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]


@pytest.mark.parametrize(
    ("values", "expect"),
    [
        (["--set", "replicaCount=3", "--set", "podDisruptionBudget.minAvailable=2"], "replicas"),
        (["--set", "tls.existingSecret=cert-manager-tls"], "existing-tls"),
        (["--set-json", 'generate.kinds=[{"apiGroups":[""],"resources":["configmaps","secrets"]},{"apiGroups":["networking.k8s.io"],"resources":["networkpolicies"]}]'], "generate"),
        (["--set", "generate.enabled=false", "--set", "backgroundScan.rules=null", "--set", "events.enabled=false", "--set", "leaderElection.enabled=false", "--set", "podDisruptionBudget.enabled=false"], "minimal"),
    ],
)
def test_values_variations(tools: Tools, namespace: str, values: list[str], expect: str) -> None:
    rendered = tools.template(*values, namespace=namespace)
    tools.kubectl("apply", "--dry-run=server", "--server-side", "--force-conflicts", "-f", "-", stdin=rendered)
    docs = documents(rendered)
    deployment = find(docs, "Deployment", "stockade")
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in docs}
    if expect == "replicas":
        assert deployment["spec"]["replicas"] == 3
        assert find(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 2
    elif expect == "existing-tls":
        assert "--tls-cert-file=/tls/tls.crt" in args
        assert not any(arg.startswith("--tls-secret") for arg in args)
        assert {"name": "tls", "secret": {"secretName": "cert-manager-tls"}} in pod["volumes"]
        assert ("Secret", "stockade-tls") not in kinds  # nothing of ours to share
        assert not any("secrets" in rule["resources"] for rule in find(docs, "Role", "stockade")["rules"])
    elif expect == "generate":
        rules = find(docs, "ClusterRole", f"stockade-{namespace}-background")["rules"]
        writes = [rule for rule in rules if "create" in rule["verbs"]]
        assert [(rule["apiGroups"], rule["resources"]) for rule in writes] == [([""], ["configmaps", "secrets"]), (["networking.k8s.io"], ["networkpolicies"])]
        assert "--generate" in args
    else:
        assert {"--no-generate", "--no-events", "--no-leader-election"} <= set(args)
        assert find(docs, "ClusterRole", f"stockade-{namespace}-background")["rules"] == []
        assert ("Lease", "stockade-leader") not in kinds
        assert not any(doc["kind"] == "PodDisruptionBudget" for doc in docs)


def test_install_yaml_is_the_rendered_chart() -> None:
    """deploy/install.yaml must be regenerated (hack/render-install.sh) whenever the chart or the CRDs change."""
    rendered = subprocess.run([str(REPO_ROOT / "hack" / "render-install.sh"), "-"], capture_output=True, text=True, check=True).stdout
    assert rendered == INSTALL_YAML.read_text(), "deploy/install.yaml is stale: run hack/render-install.sh"


def _pss_result(policy: Path, resource: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO_ROOT / ".venv" / "bin" / "stockade"), "apply", str(policy), "--resource", str(resource)], capture_output=True, text=True, timeout=120)


def test_our_own_pods_pass_our_pss_restricted_policy(tools: Tools, tmp_path: Path) -> None:
    docs = documents(tools.template())
    workloads = [find(docs, "Deployment", "stockade"), find(docs, "Job", "stockade-webhooks-cleanup")]
    manifest = tmp_path / "workloads.yaml"
    manifest.write_text(yaml.safe_dump_all(workloads))
    result = _pss_result(PSS_RESTRICTED, manifest)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fail: 0" in result.stdout and "error: 0" in result.stdout
    assert "pass: 0" not in result.stdout  # autogen rules did apply to the Deployment and the Job

    # the same check catches a regression in the chart's security settings
    container = workloads[0]["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["allowPrivilegeEscalation"] = True
    container["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"]}
    manifest.write_text(yaml.safe_dump(workloads[0]))
    broken = _pss_result(PSS_RESTRICTED, manifest)
    assert broken.returncode != 0
    assert "fail: 0" not in broken.stdout


def test_force_failure_policy_ignore_value_passes_the_serve_flag(tools: Tools) -> None:
    default_args = find(documents(tools.template()), "Deployment", "stockade")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--force-failure-policy-ignore" not in default_args
    forced = documents(tools.template("--set", "webhook.forceFailurePolicyIgnore=true"))
    assert "--force-failure-policy-ignore" in find(forced, "Deployment", "stockade")["spec"]["template"]["spec"]["containers"][0]["args"]


def test_policy_exceptions_value_passes_the_serve_flag(tools: Tools) -> None:
    default_args = find(documents(tools.template()), "Deployment", "stockade")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-policy-exceptions" not in default_args
    disabled = documents(tools.template("--set", "policyExceptions.enabled=false"))
    assert "--no-policy-exceptions" in find(disabled, "Deployment", "stockade")["spec"]["template"]["spec"]["containers"][0]["args"]


def test_admission_policy_report_values_pass_the_serve_flags(tools: Tools) -> None:
    default_args = find(documents(tools.template()), "Deployment", "stockade")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not {"--validating-admission-policy-reports", "--mutating-admission-policy-reports"} & set(default_args)
    enabled = documents(tools.template("--set", "policyReports.validatingAdmissionPolicies=true", "--set", "policyReports.mutatingAdmissionPolicies=true"))
    args = find(enabled, "Deployment", "stockade")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--validating-admission-policy-reports", "--mutating-admission-policy-reports"} <= set(args)


def test_kyverno_tls_secrets_value_passes_the_flag_and_grants_only_those_secrets(tools: Tools) -> None:
    default = documents(tools.template())
    assert "--kyverno-tls-secrets" not in find(default, "Deployment", "stockade")["spec"]["template"]["spec"]["containers"][0]["args"]
    enabled = documents(tools.template("--set", "webhook.kyvernoTlsSecrets=true"))
    assert "--kyverno-tls-secrets" in find(enabled, "Deployment", "stockade")["spec"]["template"]["spec"]["containers"][0]["args"]
    granted = [name for doc in enabled if doc.get("kind") == "Role" for rule in doc.get("rules", []) for name in rule.get("resourceNames", [])]
    assert {"stockade-svc.stockade.svc.kyverno-tls-ca", "stockade-svc.stockade.svc.kyverno-tls-pair"} <= set(granted)


def _user_roles(tools: Tools, *values: str) -> dict[str, dict[str, Any]]:
    docs = documents(tools.helm("template", "stockade", str(CHART), "--show-only", "templates/user-roles.yaml", *values).stdout)
    return {doc["metadata"]["name"]: doc for doc in docs}


def test_user_roles_aggregate_into_admin_and_view_under_kyvernos_names(tools: Tools) -> None:
    """Kyverno's chart gives policy users <release>:rbac:{admin,view}:{policies,policyreports,reports,updaterequests},
    labelled for aggregation into the built-in admin and view roles; namePrefix keeps Kyverno's names."""
    roles = _user_roles(tools)
    sets = ("policies", "policyreports", "reports", "updaterequests")
    assert set(roles) == {f"stockade:rbac:{role}:{name}" for role in ("admin", "view") for name in sets}
    for name, doc in roles.items():
        role = name.split(":")[2]
        assert doc["metadata"]["labels"][f"rbac.authorization.k8s.io/aggregate-to-{role}"] == "true"
        verbs = {verb for rule in doc["rules"] for verb in rule["verbs"]}
        assert verbs == ({"create", "delete", "get", "list", "patch", "update", "watch"} if role == "admin" else {"get", "list", "watch"})
    assert set(_user_roles(tools, "--set", "rbac.userRoles.namePrefix=kyverno")) == {n.replace("stockade:", "kyverno:", 1) for n in roles}
    disabled = documents(tools.template("--set", "rbac.userRoles.enabled=false"))
    assert not [doc for doc in disabled if ":rbac:" in doc["metadata"]["name"]]


def test_user_roles_grant_what_they_say_on_the_apiserver(tools: Tools, namespace: str) -> None:
    """Bound in a namespace, the view role reads Policies and reports but cannot write them; the admin role writes."""
    rendered = tools.helm("template", "stockade", str(CHART), "--show-only", "templates/user-roles.yaml", "--set", f"rbac.userRoles.namePrefix={namespace}").stdout
    tools.kubectl("apply", "--server-side", "-f", "-", stdin=rendered)
    try:
        for user, role in (("viewer", "view"), ("owner", "admin")):
            for name in ("policies", "policyreports"):
                tools.kubectl("create", "rolebinding", f"{user}-{name}", f"--clusterrole={namespace}:rbac:{role}:{name}", f"--user={user}", "-n", namespace)

        def can(user: str, verb: str, resource: str) -> bool:
            """The API server's own answer (a SubjectAccessReview; no CRD needs to be served for it)."""
            plural, _, group = resource.partition(".")
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": user, "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group, "resource": plural}},
            }
            answer = tools.kubectl("create", "-f", "-", "-o", "jsonpath={.status.allowed}", stdin=yaml.safe_dump(review))
            return answer.stdout.strip() == "true"

        # the API server's RBAC authorizer sees new bindings through its informers, a moment later
        deadline = time.monotonic() + 20
        while not can("owner", "delete", "policyreports.wgpolicyk8s.io") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert can("viewer", "list", "policies.kyverno.io") and can("viewer", "get", "policyreports.wgpolicyk8s.io")
        assert not can("viewer", "create", "policies.kyverno.io") and not can("viewer", "delete", "policyreports.wgpolicyk8s.io")
        assert can("owner", "create", "policies.kyverno.io") and can("owner", "delete", "policyreports.wgpolicyk8s.io")
        assert not can("owner", "create", "updaterequests.kyverno.io")  # not bound here
    finally:
        tools.kubectl("delete", "-f", "-", stdin=rendered, check=False)
