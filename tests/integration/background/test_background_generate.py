"""GenerateController against a real kube-apiserver: data, clone, synchronize, resync, trigger deletion."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.generate import GenerateController
from stockade.webhook.admission import parse_review


def policy_yaml(suffix: str) -> str:
    return f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: bg-gen-{suffix}
spec:
  rules:
  - name: default-config
    match:
      any:
      - resources:
          kinds: [Namespace]
          selector:
            matchLabels:
              bg-test: "{suffix}"
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: defaults
      namespace: "{{{{request.object.metadata.name}}}}"
      synchronize: true
      data:
        data:
          owner: "{{{{request.object.metadata.name}}}}"
          level: strict
  - name: deny-all
    match:
      any:
      - resources:
          kinds: [Namespace]
          selector:
            matchLabels:
              bg-test: "{suffix}"
    generate:
      apiVersion: networking.k8s.io/v1
      kind: NetworkPolicy
      name: deny-all
      namespace: "{{{{request.object.metadata.name}}}}"
      synchronize: true
      data:
        spec:
          podSelector: {{}}
          policyTypes: [Ingress, Egress]
  - name: copy-secret
    match:
      any:
      - resources:
          kinds: [Namespace]
          selector:
            matchLabels:
              bg-test: "{suffix}"
    generate:
      apiVersion: v1
      kind: Secret
      name: registry
      namespace: "{{{{request.object.metadata.name}}}}"
      synchronize: true
      clone:
        namespace: bg-src-{suffix}
        name: registry
  - name: derived
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          selector:
            matchLabels:
              derive: "{suffix}"
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: "{{{{request.object.metadata.name}}}}-derived"
      namespace: "{{{{request.object.metadata.namespace}}}}"
      synchronize: true
      data:
        data:
          from: "{{{{request.object.metadata.name}}}}"
"""


def review(operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> Any:
    group, _, version = str(obj.get("apiVersion") or (old or {}).get("apiVersion")).rpartition("/")
    subject = obj or old or {}
    metadata = subject.get("metadata") or {}
    return parse_review(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "r-1",
                "operation": operation,
                "kind": {"group": group, "version": version, "kind": subject["kind"]},
                "resource": {},
                "namespace": metadata.get("namespace", ""),
                "name": metadata.get("name", ""),
                "object": obj or None,
                "oldObject": old or None,
                "userInfo": {"username": "tester"},
            },
        }
    )


def get(cluster: ClusterData, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    return cluster.get_object(api_version, kind, namespace, name, cached=False)


def test_generate_data_clone_resync_and_trigger_deletion(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    source_ns = f"bg-src-{suffix}"
    namespaces(source_ns)
    cluster.request(
        "POST",
        f"/api/v1/namespaces/{source_ns}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry"}, "data": {"token": base64.b64encode(b"one").decode()}},
    )
    store = policy_store(policy_yaml(suffix))
    controller = GenerateController(api_client, store, resync_interval=0)
    controller.start()
    try:
        target = f"bg-team-{suffix}"
        trigger = namespaces(target, {"bg-test": suffix})
        controller.submit(review("CREATE", trigger))
        assert controller.wait_idle()

        config = get(cluster, "v1", "ConfigMap", target, "defaults")
        assert config is not None, controller.stats
        assert config["data"] == {"owner": target, "level": "strict"}
        labels = config["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "kyverno"
        assert labels["generate.kyverno.io/policy-name"] == f"bg-gen-{suffix}"
        assert labels["generate.kyverno.io/rule-name"] == "default-config"
        assert labels["generate.kyverno.io/trigger-kind"] == "Namespace"
        assert labels["generate.kyverno.io/trigger-uid"] == trigger["metadata"]["uid"]
        netpol = get(cluster, "networking.k8s.io/v1", "NetworkPolicy", target, "deny-all")
        assert netpol is not None and netpol["spec"]["policyTypes"] == ["Ingress", "Egress"]
        secret = get(cluster, "v1", "Secret", target, "registry")
        assert secret is not None and base64.b64decode(secret["data"]["token"]) == b"one"

        # drift: edit the ConfigMap, delete the NetworkPolicy, change the clone source.  The periodic pass is Kyverno's
        # policy-event pass: it re-applies synchronized data rules to the triggers their downstream names (the edited
        # ConfigMap), nothing else; the deleted object and the edited source are followed through their admissions
        config["data"]["level"] = "lax"
        config["data"]["extra"] = "added"
        cluster.request("PUT", f"/api/v1/namespaces/{target}/configmaps/defaults", config)
        cluster.request("DELETE", f"/apis/networking.k8s.io/v1/namespaces/{target}/networkpolicies/deny-all")
        source = get(cluster, "v1", "Secret", source_ns, "registry")
        assert source is not None
        edited_source = {**source, "data": {"token": base64.b64encode(b"two").decode()}}
        edited_source = {**cluster.request("PUT", f"/api/v1/namespaces/{source_ns}/secrets/registry", edited_source), "apiVersion": "v1", "kind": "Secret"}

        controller.resync()
        restored = get(cluster, "v1", "ConfigMap", target, "defaults")
        assert restored is not None and restored["data"] == {"owner": target, "level": "strict"}
        assert get(cluster, "networking.k8s.io/v1", "NetworkPolicy", target, "deny-all") is None
        unsynced = get(cluster, "v1", "Secret", target, "registry")
        assert unsynced is not None and base64.b64decode(unsynced["data"]["token"]) == b"one"

        controller.submit(review("DELETE", {}, netpol))
        controller.submit(review("UPDATE", edited_source, source))
        assert controller.wait_idle()
        assert get(cluster, "networking.k8s.io/v1", "NetworkPolicy", target, "deny-all") is not None
        synced = get(cluster, "v1", "Secret", target, "registry")
        assert synced is not None and base64.b64decode(synced["data"]["token"]) == b"two"

        # a synchronized rule's downstream follows its trigger: label removed on UPDATE, then DELETE
        trigger_cm = cluster.request(
            "POST", f"/api/v1/namespaces/{target}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "src", "labels": {"derive": suffix}}}
        )
        trigger_cm = {**trigger_cm, "apiVersion": "v1", "kind": "ConfigMap"}
        controller.submit(review("CREATE", trigger_cm))
        assert controller.wait_idle()
        derived = get(cluster, "v1", "ConfigMap", target, "src-derived")
        assert derived is not None and derived["data"] == {"from": "src"}

        unlabelled = {**trigger_cm, "metadata": {**trigger_cm["metadata"], "labels": {}}}
        updated = cluster.request("PUT", f"/api/v1/namespaces/{target}/configmaps/src", unlabelled)
        controller.submit(review("UPDATE", {**updated, "apiVersion": "v1", "kind": "ConfigMap"}, trigger_cm))
        assert controller.wait_idle()
        assert get(cluster, "v1", "ConfigMap", target, "src-derived") is None

        relabelled = {**updated, "apiVersion": "v1", "kind": "ConfigMap", "metadata": {**updated["metadata"], "labels": {"derive": suffix}}}
        relabelled = {**cluster.request("PUT", f"/api/v1/namespaces/{target}/configmaps/src", relabelled), "apiVersion": "v1", "kind": "ConfigMap"}
        controller.submit(review("UPDATE", relabelled, updated))
        assert controller.wait_idle()
        assert get(cluster, "v1", "ConfigMap", target, "src-derived") is not None

        cluster.request("DELETE", f"/api/v1/namespaces/{target}/configmaps/src")
        controller.submit(review("DELETE", {}, relabelled))
        assert controller.wait_idle()
        assert get(cluster, "v1", "ConfigMap", target, "src-derived") is None
        assert controller.stats.failures == 0
    finally:
        controller.stop()


def test_policy_removal_deletes_synchronized_downstream_and_generate_existing(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str, tmp_path: Any
) -> None:
    """Deleting the policy deletes its synchronized data downstream; the copy of a single ``clone`` stays (Kyverno's
    stated intent, kyverno/kyverno#1401), while cloneList copies would go."""
    target = f"bg-existing-{suffix}"
    source = f"bg-exist-src-{suffix}"
    namespaces(source)
    cluster.request("POST", f"/api/v1/namespaces/{source}/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred"}, "data": {"foo": "YmFy"}})
    namespaces(target, {"bg-exist": suffix})
    text = f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: bg-exist-{suffix}
spec:
  generateExisting: true
  rules:
  - name: quota
    match:
      any:
      - resources:
          kinds: [Namespace]
          selector:
            matchLabels:
              bg-exist: "{suffix}"
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: existing
      namespace: "{{{{request.object.metadata.name}}}}"
      synchronize: true
      data:
        data:
          seen: "yes"
  - name: copy
    match:
      any:
      - resources:
          kinds: [Namespace]
          selector:
            matchLabels:
              bg-exist: "{suffix}"
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: "{{{{request.object.metadata.name}}}}"
      synchronize: true
      clone:
        namespace: {source}
        name: regcred
"""
    store = policy_store(text)
    controller = GenerateController(api_client, store, resync_interval=0)
    controller.start()
    try:
        assert controller.wait_idle()
        assert get(cluster, "v1", "ConfigMap", target, "existing") is not None  # generateExisting on policy load
        assert get(cluster, "v1", "Secret", target, "regcred") is not None

        for path in store.paths:
            for file in __import__("pathlib").Path(path).glob("*.yaml"):
                file.write_text("")
        store.load()
        assert controller.wait_idle()
        assert get(cluster, "v1", "ConfigMap", target, "existing") is None  # synchronize, not orphaned
        assert get(cluster, "v1", "Secret", target, "regcred") is not None  # a single clone's copy stays
    finally:
        controller.stop()
