"""mutate.targets UpdateRequests on the real API server, as Kyverno's webhook records them and its background
controller replays them: a deleted trigger records (and runs) only the rules that list the DELETE operation, and a
target named exactly that does not exist yet fails the request, which is retried until the target appears."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.generate import GenerateController
from stockade.controllers.updaterequest import PENDING, UpdateRequestController, collection_path, plan_update_requests
from tests.integration.background.test_background_generate import review
from tests.integration.background.test_update_request_recovery import eventually, update_request_crd

__all__ = ["update_request_crd"]  # the CRD fixture shared with the recovery tests


def policy(suffix: str, namespace: str) -> str:
    def rule(name: str, operations: str, target: str) -> str:
        return f"""\
  - name: {name}
    match: {{any: [{{resources: {{kinds: [ConfigMap], names: [trigger], namespaces: [{namespace}]{operations}}}}}]}}
    mutate:
      targets:
      - {{apiVersion: v1, kind: Secret, name: {target}, namespace: "{{{{ request.object.metadata.namespace }}}}"}}
      patchStrategicMerge:
        metadata: {{labels: {{{name}: "{{{{ request.object.metadata.name }}}}"}}}}
"""

    return f"""\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: me-life-{suffix}}}
spec:
  rules:
{rule("any-operation", "", "target")}{rule("on-delete", ", operations: [DELETE]", "target")}{rule("named-later", ", operations: [CREATE]", "later")}"""


def secret_labels(cluster: ClusterData, namespace: str, name: str) -> dict[str, str] | None:
    found = cluster.get_object("v1", "Secret", namespace, name, cached=False)
    return None if found is None else dict((found.get("metadata") or {}).get("labels") or {})


def test_delete_triggers_and_missing_named_targets_follow_kyvernos_update_requests(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str, update_request_crd: None
) -> None:
    system, workload = f"me-sys-{suffix}", f"me-work-{suffix}"
    namespaces(system)
    namespaces(workload)
    store = policy_store(policy(suffix, workload))
    cluster.request("POST", f"/api/v1/namespaces/{workload}/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "target"}})
    trigger = cluster.request("POST", f"/api/v1/namespaces/{workload}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trigger"}})
    trigger = {**trigger, "apiVersion": "v1", "kind": "ConfigMap"}
    path = collection_path(system)

    def stored() -> list[dict[str, Any]]:
        return list((cluster.request("GET", path) or {}).get("items") or [])

    # admission of the CREATE records the rules its operation admits (the any-operation one is not stored here, so
    # that the target later shows what the DELETE alone runs)
    created = plan_update_requests(system, store.snapshot.policies, review("CREATE", trigger))
    assert sorted(r["spec"]["rule"] for r in created) == ["any-operation", "named-later"]
    cluster.request("POST", path, next(r for r in created if r["spec"]["rule"] == "named-later"))

    generator = GenerateController(api_client, store, resync_interval=0)
    controller = UpdateRequestController(generator, system, max_retries=50, backoff_seconds=0.2, max_backoff_seconds=1.0)
    controller.start()
    try:
        def retried() -> dict[str, Any] | None:
            items = stored()
            status = (items[0].get("status") or {}) if items else {}
            return status if status.get("state") == PENDING and int(status.get("retryCount") or 0) >= 2 else None

        # the exactly named target does not exist yet: an error of the rule, retried with its count in the status
        status = eventually(retried, "the missing target's request retried")
        assert "not found" in status["message"], status
        cluster.request("POST", f"/api/v1/namespaces/{workload}/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "later"}})
        eventually(lambda: secret_labels(cluster, workload, "later") == {"named-later": "trigger"}, "the late target mutated by a retry")
        eventually(lambda: not stored(), "the completed request deleted")

        # the DELETE records (and runs) only the rule that lists DELETE, with the deleted object as request.object
        cluster.request("DELETE", f"/api/v1/namespaces/{workload}/configmaps/trigger")
        deleted = plan_update_requests(system, store.snapshot.policies, review("DELETE", {}, trigger))
        assert [r["spec"]["rule"] for r in deleted] == ["on-delete"]
        cluster.request("POST", path, deleted[0])
        eventually(lambda: secret_labels(cluster, workload, "target") == {"on-delete": "trigger"}, "the DELETE rule's label on the target")
        eventually(lambda: not stored(), "the completed request deleted")
        assert controller.failed == 0 and controller.completed == 2
    finally:
        controller.stop()
