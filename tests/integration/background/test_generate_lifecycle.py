"""The generate lifecycle cells of Kyverno's background controller (the table in stockade/controllers/generate.py),
against a real kube-apiserver: policy changes, triggers that stop matching, DELETE operations, failure Events."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.events import EventSpec
from stockade.controllers.generate import GenerateController

from test_background_generate import get, review  # type: ignore[import-not-found]


class CollectedEvents:
    """The recorder interface the controller writes Events through, keeping them for assertions."""

    def __init__(self) -> None:
        self.events: list[EventSpec] = []

    def submit(self, spec: EventSpec) -> None:
        self.events.append(spec)

    def submit_success(self, spec: EventSpec) -> None:
        self.events.append(spec)


def data_policy(suffix: str, *, items: str, sync: str = "true", operations: str = "") -> str:
    ops = f"\n          operations: [{operations}]" if operations else ""
    return f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: life-{suffix}
spec:
  rules:
  - name: settings
    match:
      any:
      - resources:
          kinds: [Namespace]{ops}
          selector:
            matchLabels:
              life: "{suffix}"
    generate:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: Role
      name: readers
      namespace: "{{{{request.object.metadata.name}}}}"
      synchronize: {sync}
      data:
        rules:
{items}
"""


GET_PODS = """        - apiGroups: [""]
          resources: [pods]
          verbs: [get]
"""
LIST_PODS = """        - apiGroups: [""]
          resources: [pods]
          verbs: [list]
"""


def rewrite(store: Any, text: str) -> None:
    for path in store.paths:
        for file in Path(path).glob("*.yaml"):
            file.write_text(text)
    store.load()


def namespace(cluster: ClusterData, name: str) -> dict[str, Any]:
    return {**cluster.request("GET", f"/api/v1/namespaces/{name}"), "apiVersion": "v1", "kind": "Namespace"}


def relabel(cluster: ClusterData, name: str, labels: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    old = namespace(cluster, name)
    new = {**old, "metadata": {**old["metadata"], "labels": labels}}
    stored = {**cluster.request("PUT", f"/api/v1/namespaces/{name}", new), "apiVersion": "v1", "kind": "Namespace"}
    return stored, old


def test_policy_change_removes_a_data_list_element_from_synchronized_downstream(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    store = policy_store(data_policy(suffix, items=GET_PODS + LIST_PODS))
    controller = GenerateController(api_client, store, resync_interval=0)
    controller.start()
    try:
        target = f"life-a-{suffix}"
        controller.submit(review("CREATE", namespaces(target, {"life": suffix})))
        assert controller.wait_idle()
        role = get(cluster, "rbac.authorization.k8s.io/v1", "Role", target, "readers")
        assert role is not None and [r["verbs"] for r in role["rules"]] == [["get"], ["list"]]

        rewrite(store, data_policy(suffix, items=GET_PODS))  # the policy changes, no trigger event follows
        assert controller.wait_idle()
        role = get(cluster, "rbac.authorization.k8s.io/v1", "Role", target, "readers")
        assert role is not None and [r["verbs"] for r in role["rules"]] == [["get"]]
    finally:
        controller.stop()


def test_policy_change_leaves_nosync_downstream_alone(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    store = policy_store(data_policy(suffix, items=GET_PODS + LIST_PODS, sync="false"))
    controller = GenerateController(api_client, store, resync_interval=0)
    controller.start()
    try:
        target = f"life-b-{suffix}"
        controller.submit(review("CREATE", namespaces(target, {"life": suffix})))
        assert controller.wait_idle()
        rewrite(store, data_policy(suffix, items=GET_PODS, sync="false"))
        assert controller.wait_idle()
        role = get(cluster, "rbac.authorization.k8s.io/v1", "Role", target, "readers")
        assert role is not None and len(role["rules"]) == 2
        # an edit of nosync downstream is not reverted, a trigger UPDATE does not rewrite it either
        role["rules"] = role["rules"][:1]
        cluster.request("PUT", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{target}/roles/readers", role)
        new, old = relabel(cluster, target, {"life": suffix, "touched": "yes"})
        controller.submit(review("UPDATE", new, old))
        assert controller.wait_idle()
        role = get(cluster, "rbac.authorization.k8s.io/v1", "Role", target, "readers")
        assert role is not None and len(role["rules"]) == 1
    finally:
        controller.stop()


def test_trigger_that_stops_matching_loses_synchronized_downstream_only_when_it_matched_before(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    store = policy_store(data_policy(suffix, items=GET_PODS))
    controller = GenerateController(api_client, store, resync_interval=0)
    controller.start()
    try:
        first, second = f"life-c-{suffix}", f"life-d-{suffix}"
        for name in (first, second):
            controller.submit(review("CREATE", namespaces(name, {"life": suffix})))
        assert controller.wait_idle()
        # label removed: the old object matched, the new does not -> Kyverno's fail verdict deletes the downstream
        new, old = relabel(cluster, first, {})
        controller.submit(review("UPDATE", new, old))
        assert controller.wait_idle()
        assert get(cluster, "rbac.authorization.k8s.io/v1", "Role", first, "readers") is None

        # the policy changes so that the second trigger no longer matches; its next UPDATE matched neither before
        # nor after: nothing happens, its downstream stays
        rewrite(store, data_policy(suffix, items=GET_PODS).replace(f'life: "{suffix}"', f'life: "other-{suffix}"'))
        assert controller.wait_idle()
        new, old = relabel(cluster, second, {"life": suffix, "touched": "yes"})
        controller.submit(review("UPDATE", new, old))
        assert controller.wait_idle()
        assert get(cluster, "rbac.authorization.k8s.io/v1", "Role", second, "readers") is not None
    finally:
        controller.stop()


def test_trigger_delete_cleans_up_only_for_rules_matching_the_delete_operation(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    store = policy_store(data_policy(suffix, items=GET_PODS, operations="CREATE, UPDATE"))
    controller = GenerateController(api_client, store, resync_interval=0)
    controller.start()
    try:
        # a ConfigMap trigger (namespaces are not removed without a namespace controller): a second policy
        target = f"life-e-{suffix}"
        namespaces(target)
        text = f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: life-cm-{suffix}
spec:
  rules:
  - name: create-only
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          operations: [CREATE, UPDATE]
          selector:
            matchLabels:
              life-cm: "{suffix}"
    generate:
      apiVersion: v1
      kind: Secret
      name: "{{{{request.object.metadata.name}}}}-a"
      namespace: "{{{{request.object.metadata.namespace}}}}"
      synchronize: true
      data:
        stringData:
          k: v
  - name: any-operation
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          selector:
            matchLabels:
              life-cm: "{suffix}"
    generate:
      apiVersion: v1
      kind: ServiceAccount
      name: "{{{{request.object.metadata.name}}}}-b"
      namespace: "{{{{request.object.metadata.namespace}}}}"
      synchronize: true
      data: {{}}
"""
        rewrite(store, text)
        assert controller.wait_idle()
        cm = cluster.request("POST", f"/api/v1/namespaces/{target}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t", "labels": {"life-cm": suffix}}})
        cm = {**cm, "apiVersion": "v1", "kind": "ConfigMap"}
        controller.submit(review("CREATE", cm))
        assert controller.wait_idle()
        assert get(cluster, "v1", "Secret", target, "t-a") is not None
        assert get(cluster, "v1", "ServiceAccount", target, "t-b") is not None
        cluster.request("DELETE", f"/api/v1/namespaces/{target}/configmaps/t")
        controller.submit(review("DELETE", {}, cm))
        assert controller.wait_idle()
        # Kyverno: the DELETE matches only the rule without operations; its cleanup selects the trigger's downstream
        # of that rule's kinds (ServiceAccount), so the Secret of the CREATE/UPDATE-only rule stays
        assert get(cluster, "v1", "ServiceAccount", target, "t-b") is None
        assert get(cluster, "v1", "Secret", target, "t-a") is not None
    finally:
        controller.stop()


def test_missing_clone_source_yields_a_policy_error_event(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    text = f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: life-clone-{suffix}
spec:
  rules:
  - name: copy
    match:
      any:
      - resources:
          kinds: [Namespace]
          selector:
            matchLabels:
              life-clone: "{suffix}"
    generate:
      apiVersion: v1
      kind: Secret
      name: copied
      namespace: "{{{{request.object.metadata.name}}}}"
      synchronize: true
      clone:
        namespace: default
        name: absent-{suffix}
"""
    events = CollectedEvents()
    controller = GenerateController(api_client, policy_store(text), resync_interval=0, events=events, max_attempts=2, backoff_seconds=0.05)
    controller.start()
    try:
        target = f"life-f-{suffix}"
        controller.submit(review("CREATE", namespaces(target, {"life-clone": suffix})))
        assert controller.wait_idle()
        assert get(cluster, "v1", "Secret", target, "copied") is None
        errors = [e for e in events.events if e.reason == "PolicyError"]
        assert errors, events.events
        event = errors[0]
        assert event.type == "Warning" and event.source == "generate"
        assert dict(event.regarding)["kind"] == "ClusterPolicy" and dict(event.regarding)["name"] == f"life-clone-{suffix}"
        assert dict(event.related) == {"kind": "Namespace", "name": target}
        assert event.message.startswith(f"policy life-clone-{suffix}/copy error: ") and f"absent-{suffix}" in event.message
    finally:
        controller.stop()


def test_clone_source_is_labelled_and_its_changes_reach_the_copies(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    source_ns = f"life-src-{suffix}"
    namespaces(source_ns)
    cluster.request("POST", f"/api/v1/namespaces/{source_ns}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "base"}, "data": {"v": "1"}})
    text = f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: life-src-{suffix}
spec:
  rules:
  - name: copy
    match:
      any:
      - resources:
          kinds: [Namespace]
          selector:
            matchLabels:
              life-src: "{suffix}"
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: copied
      namespace: "{{{{request.object.metadata.name}}}}"
      synchronize: true
      clone:
        namespace: {source_ns}
        name: base
"""
    controller = GenerateController(api_client, policy_store(text), resync_interval=0)
    controller.start()
    try:
        target = f"life-g-{suffix}"
        controller.submit(review("CREATE", namespaces(target, {"life-src": suffix})))
        assert controller.wait_idle()
        source = get(cluster, "v1", "ConfigMap", source_ns, "base")
        assert source is not None and source["metadata"]["labels"]["generate.kyverno.io/clone-source"] == ""
        copy_ = get(cluster, "v1", "ConfigMap", target, "copied")
        assert copy_ is not None and copy_["data"] == {"v": "1"}
        assert copy_["metadata"]["labels"]["generate.kyverno.io/source-uid"] == source["metadata"]["uid"]

        # a user edits the source: the copy follows
        edited = {**source, "data": {"v": "2"}}
        edited = {**cluster.request("PUT", f"/api/v1/namespaces/{source_ns}/configmaps/base", edited), "apiVersion": "v1", "kind": "ConfigMap"}
        controller.submit(review("UPDATE", edited, {**source, "apiVersion": "v1", "kind": "ConfigMap"}))
        assert controller.wait_idle()
        copy_ = get(cluster, "v1", "ConfigMap", target, "copied")
        assert copy_ is not None and copy_["data"] == {"v": "2"}

        # a user deletes the synchronized copy: it is re-created from its trigger
        cluster.request("DELETE", f"/api/v1/namespaces/{target}/configmaps/copied")
        controller.submit(review("DELETE", {}, {**copy_, "apiVersion": "v1", "kind": "ConfigMap"}))
        assert controller.wait_idle()
        assert get(cluster, "v1", "ConfigMap", target, "copied") is not None

        # the source is deleted: the trigger's copies go with it
        cluster.request("DELETE", f"/api/v1/namespaces/{source_ns}/configmaps/base")
        controller.submit(review("DELETE", {}, edited))
        assert controller.wait_idle()
        assert get(cluster, "v1", "ConfigMap", target, "copied") is None
    finally:
        controller.stop()


def foreach_policy(suffix: str, prefix: str, level: str) -> str:
    return f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: life-each-{suffix}
spec:
  rules:
  - name: per-team
    match:
      any:
      - resources:
          kinds: [Namespace]
          selector:
            matchLabels:
              life-each: "{suffix}"
    generate:
      generateExisting: false
      synchronize: true
      foreach:
      - list: "split(request.object.metadata.annotations.teams, ',')"
        apiVersion: v1
        kind: ConfigMap
        name: "{prefix}-{{{{element}}}}"
        namespace: "{{{{request.object.metadata.name}}}}"
        data:
          data:
            level: "{level}"
"""


def test_foreach_rule_change_resyncs_data_and_a_retargeted_entry_keeps_its_old_downstream_until_the_trigger_goes(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    store = policy_store(foreach_policy(suffix, "team", "low"))
    controller = GenerateController(api_client, store, resync_interval=0)
    controller.start()
    try:
        target = f"life-h-{suffix}"
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": target, "labels": {"life-each": suffix}, "annotations": {"teams": "a,b"}}}
        trigger = {**cluster.request("POST", "/api/v1/namespaces", body), "apiVersion": "v1", "kind": "Namespace"}
        controller.submit(review("CREATE", trigger))
        assert controller.wait_idle()
        assert all(get(cluster, "v1", "ConfigMap", target, f"team-{t}") is not None for t in "ab")

        rewrite(store, foreach_policy(suffix, "team", "high"))  # data changed: both elements' objects follow
        assert controller.wait_idle()
        assert [(get(cluster, "v1", "ConfigMap", target, f"team-{t}") or {}).get("data") for t in "ab"] == [{"level": "high"}] * 2

        rewrite(store, foreach_policy(suffix, "crew", "high"))  # retargeted: new names on the next trigger event
        assert controller.wait_idle()
        new, old = relabel(cluster, target, {"life-each": suffix, "touched": "yes"})
        controller.submit(review("UPDATE", new, old))
        assert controller.wait_idle()
        kept = get(cluster, "v1", "ConfigMap", target, "team-a")
        assert kept is not None and kept["metadata"]["labels"]["generate.kyverno.io/rule-name"] == "per-team"
        assert get(cluster, "v1", "ConfigMap", target, "crew-a") is not None

        # the trigger stops matching: everything the policy made for it of the rule's kinds goes, old names included
        new, old = relabel(cluster, target, {})
        controller.submit(review("UPDATE", new, old))
        assert controller.wait_idle()
        assert [get(cluster, "v1", "ConfigMap", target, n) for n in ("team-a", "team-b", "crew-a", "crew-b")] == [None] * 4
    finally:
        controller.stop()
        cluster.request("DELETE", f"/api/v1/namespaces/life-h-{suffix}")


def test_generating_policy_matching_delete_generates_from_the_deleted_trigger(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    text = f"""
apiVersion: policies.kyverno.io/v1beta1
kind: GeneratingPolicy
metadata:
  name: life-tomb-{suffix}
spec:
  evaluation:
    synchronize:
      enabled: true
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["DELETE"]
      resources: ["configmaps"]
    objectSelector:
      matchLabels:
        life-tomb: "{suffix}"
  generate:
  - expression: |
      generator.Apply(oldObject.metadata.namespace, [
        {{
          "kind": dyn("ConfigMap"),
          "apiVersion": dyn("v1"),
          "metadata": dyn({{"name": dyn("tomb-" + oldObject.metadata.name)}}),
          "data": dyn({{"was": dyn(oldObject.metadata.name)}})
        }}
      ])
"""
    controller = GenerateController(api_client, policy_store(text), resync_interval=0)
    controller.start()
    try:
        target = f"life-i-{suffix}"
        namespaces(target)
        cm = cluster.request("POST", f"/api/v1/namespaces/{target}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gone", "labels": {"life-tomb": suffix}}})
        cm = {**cm, "apiVersion": "v1", "kind": "ConfigMap"}
        controller.submit(review("CREATE", cm))
        assert controller.wait_idle()
        assert get(cluster, "v1", "ConfigMap", target, "tomb-gone") is None  # CREATE is not among its operations
        cluster.request("DELETE", f"/api/v1/namespaces/{target}/configmaps/gone")
        controller.submit(review("DELETE", {}, cm))
        assert controller.wait_idle()
        tomb = get(cluster, "v1", "ConfigMap", target, "tomb-gone")
        assert tomb is not None and tomb["data"] == {"was": "gone"}
        assert controller.stats.failures == 0
    finally:
        controller.stop()


def test_namespace_selector_turning_false_leaves_the_downstream_of_a_namespaced_trigger(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    text = f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: life-nssel-{suffix}
spec:
  rules:
  - name: derive
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          names: [seed]
          namespaceSelector:
            matchLabels:
              life-nssel: "{suffix}"
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: derived
      namespace: "{{{{request.object.metadata.namespace}}}}"
      synchronize: true
      data:
        data:
          from: seed
"""
    controller = GenerateController(api_client, policy_store(text), resync_interval=0)
    controller.start()
    try:
        target = f"life-j-{suffix}"
        namespaces(target, {"life-nssel": suffix})
        seed = cluster.request("POST", f"/api/v1/namespaces/{target}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "seed"}})
        seed = {**seed, "apiVersion": "v1", "kind": "ConfigMap"}
        controller.submit(review("CREATE", seed))
        assert controller.wait_idle()
        assert get(cluster, "v1", "ConfigMap", target, "derived") is not None

        relabel(cluster, target, {})  # the namespace selector no longer holds; no trigger event for that
        edited = {**cluster.request("PUT", f"/api/v1/namespaces/{target}/configmaps/seed", {**seed, "data": {"x": "y"}}), "apiVersion": "v1", "kind": "ConfigMap"}
        controller.submit(review("UPDATE", edited, seed))
        assert controller.wait_idle()
        # Kyverno judges old and new object with today's namespace labels: neither matches, the downstream stays
        assert get(cluster, "v1", "ConfigMap", target, "derived") is not None
        controller.resync()  # the periodic pass never deletes either
        assert get(cluster, "v1", "ConfigMap", target, "derived") is not None
    finally:
        controller.stop()


def test_an_update_is_judged_once_stored_so_a_trigger_that_is_its_own_clone_source_is_copied_as_updated(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    source_ns, first, second = f"life-k-{suffix}", f"life-k1-{suffix}", f"life-k2-{suffix}"
    for name in (source_ns, first, second):
        namespaces(name)
    text = f"""
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: life-self-{suffix}
spec:
  rules:
  - name: spread
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          namespaces: [{source_ns}]
          annotations:
            target: "?*"
    generate:
      namespace: "{{{{request.object.metadata.annotations.target}}}}"
      synchronize: true
      cloneList:
        namespace: {source_ns}
        kinds: [v1/ConfigMap]
        selector:
          matchLabels:
            spread: "yes"
"""
    controller = GenerateController(api_client, policy_store(text), resync_interval=0)
    controller.start()
    try:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "self", "labels": {"spread": "yes"}, "annotations": {"target": first}}, "data": {"k": "v"}}
        created = {**cluster.request("POST", f"/api/v1/namespaces/{source_ns}/configmaps", body), "apiVersion": "v1", "kind": "ConfigMap"}
        controller.submit(review("CREATE", created))
        assert controller.wait_idle()
        assert get(cluster, "v1", "ConfigMap", first, "self") is not None

        # the UPDATE is admitted (queued) before the API server stores it, as a webhook sees it
        current = get(cluster, "v1", "ConfigMap", source_ns, "self")
        assert current is not None
        updated = {**current, "metadata": {**current["metadata"], "annotations": {"target": second}}}
        controller.submit(review("UPDATE", updated, current))
        time.sleep(0.2)
        cluster.request("PUT", f"/api/v1/namespaces/{source_ns}/configmaps/self", updated)
        assert controller.wait_idle()
        copy_ = get(cluster, "v1", "ConfigMap", second, "self")
        assert copy_ is not None and copy_["metadata"]["annotations"] == {"target": second}
    finally:
        controller.stop()


def test_server_side_applied_generating_policy_renders_again_on_a_trigger_update_keeping_other_managers_fields(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    """Kyverno's generator.apply re-applies (server-side, with useServerSideApply) an object this policy made for the
    trigger on each evaluation, synchronize or not: a drifted value is restored by the trigger's next UPDATE, and an
    annotation another manager added stays (e2e generating-policies/ssa/update)."""
    text = f"""
apiVersion: policies.kyverno.io/v1beta1
kind: GeneratingPolicy
metadata:
  name: life-ssa-{suffix}
spec:
  useServerSideApply: true
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["namespaces"]
    objectSelector:
      matchLabels:
        life-ssa: "{suffix}"
  generate:
  - expression: |
      generator.Apply(object.metadata.name, [
        {{
          "kind": dyn("ConfigMap"),
          "apiVersion": dyn("v1"),
          "metadata": dyn({{"name": "ssa-config"}}),
          "data": dyn({{"key": "original"}})
        }}
      ])
"""
    controller = GenerateController(api_client, policy_store(text), resync_interval=0)
    controller.start()
    try:
        name = f"life-ssa-{suffix}"
        ns = namespaces(name, {"life-ssa": suffix})
        controller.submit(review("CREATE", ns))
        assert controller.wait_idle()
        generated = get(cluster, "v1", "ConfigMap", name, "ssa-config")
        assert generated is not None and generated["data"] == {"key": "original"}
        cluster.request(
            "PATCH", f"/api/v1/namespaces/{name}/configmaps/ssa-config",
            {"metadata": {"annotations": {"other-controller-managed": "true"}}, "data": {"key": "drifted"}},
            content_type="application/merge-patch+json",
        )
        assert controller.wait_idle() and get(cluster, "v1", "ConfigMap", name, "ssa-config")["data"] == {"key": "drifted"}
        new, old = relabel(cluster, name, {"life-ssa": suffix, "trigger-update": "1"})
        controller.submit(review("UPDATE", new, old))
        assert controller.wait_idle()
        restored = get(cluster, "v1", "ConfigMap", name, "ssa-config")
        assert restored is not None and restored["data"] == {"key": "original"}
        assert restored["metadata"]["annotations"]["other-controller-managed"] == "true"
        assert controller.stats.failures == 0
    finally:
        controller.stop()


def test_others_additions_to_synchronized_downstream_are_reverted_and_a_trigger_delete_waits_until_stored(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str
) -> None:
    """Kyverno replaces a synchronized downstream object with the rule's rendering (a label and a rule another writer
    added go), and cleans up after a deleted trigger only once the deletion is stored (here: the namespace
    terminating; without a namespace controller nothing else would remove the Role)."""
    controller = GenerateController(api_client, policy_store(data_policy(suffix, items=GET_PODS)), resync_interval=0)
    controller.start()
    try:
        target = f"life-p-{suffix}"
        controller.submit(review("CREATE", namespaces(target, {"life": suffix})))
        assert controller.wait_idle()
        role = get(cluster, "rbac.authorization.k8s.io/v1", "Role", target, "readers")
        assert role is not None
        extra_rule = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
        edited = {**role, "metadata": {**role["metadata"], "labels": {**role["metadata"]["labels"], "added": "by-user"}}, "rules": role["rules"] + [extra_rule]}
        path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{target}/roles/readers"
        edited = {**cluster.request("PUT", path, edited), "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role"}
        controller.submit(review("UPDATE", edited, role))
        assert controller.wait_idle()
        restored = get(cluster, "rbac.authorization.k8s.io/v1", "Role", target, "readers")
        assert restored is not None and "added" not in restored["metadata"]["labels"]
        assert [rule["resources"] for rule in restored["rules"]] == [["pods"]]

        retries = controller.stats.retries
        controller.submit(review("DELETE", {}, namespace(cluster, target)))  # admitted, not stored yet
        deadline = time.monotonic() + 30
        while controller.stats.retries == retries and time.monotonic() < deadline:
            time.sleep(0.01)
        assert controller.stats.retries > retries
        assert get(cluster, "rbac.authorization.k8s.io/v1", "Role", target, "readers") is not None
        cluster.request("DELETE", f"/api/v1/namespaces/{target}")  # now terminating
        assert controller.wait_idle()
        assert get(cluster, "rbac.authorization.k8s.io/v1", "Role", target, "readers") is None
    finally:
        controller.stop()
