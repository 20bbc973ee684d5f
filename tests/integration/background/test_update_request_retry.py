"""A stored UpdateRequest whose replay fails is retried on the controller runtime's backoff, its count kept in the
request's status, and completes once the cause goes away: no periodic listing is needed to bring it back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stockade.controllers.clusterdata import ClusterData
from stockade.controllers.generate import GenerateController
from stockade.controllers.updaterequest import PENDING, UpdateRequestController, collection_path, plan_update_requests
from tests.integration.background.test_background_generate import review
from tests.integration.background.test_update_request_recovery import eventually, update_request_crd

__all__ = ["update_request_crd"]  # the CRD fixture shared with the recovery tests


def policy(suffix: str, target: str) -> str:
    return f"""\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: ur-retry-{suffix}}}
spec:
  rules:
  - name: into-target
    match: {{any: [{{resources: {{kinds: [Namespace], selector: {{matchLabels: {{ur-retry: "{suffix}"}}}}}}}}]}}
    skipBackgroundRequests: false
    generate:
      synchronize: false
      apiVersion: v1
      kind: ConfigMap
      name: "from-{{{{ request.object.metadata.name }}}}"
      namespace: {target}
      data:
        data: {{trigger: "{{{{ request.object.metadata.name }}}}"}}
"""


def test_request_failing_for_a_missing_namespace_is_retried_until_it_appears(
    api_client: Any, cluster: ClusterData, namespaces: Callable[..., dict[str, Any]], policy_store: Any, suffix: str, update_request_crd: None
) -> None:
    system, trigger_name, target = f"ur-sys-{suffix}", f"ur-trig-{suffix}", f"ur-target-{suffix}"
    namespaces(system)
    store = policy_store(policy(suffix, target))
    trigger = namespaces(trigger_name, {"ur-retry": suffix})
    # what admission records (the writer's short timeouts are for answering reviews; a loaded test machine needs more)
    [request] = plan_update_requests(system, store.snapshot.policies, review("CREATE", trigger))
    path = collection_path(system)
    cluster.request("POST", path, request)

    def stored() -> list[dict[str, Any]]:
        return list((cluster.request("GET", path) or {}).get("items") or [])

    generator = GenerateController(api_client, store, resync_interval=0)
    controller = UpdateRequestController(generator, system, max_retries=50, backoff_seconds=0.2, max_backoff_seconds=1.0)
    controller.start()
    try:
        def retried_twice() -> dict[str, Any] | None:
            items = stored()
            status = (items[0].get("status") or {}) if items else {}
            return status if status.get("state") == PENDING and int(status.get("retryCount") or 0) >= 2 else None

        status = eventually(retried_twice, "two failed attempts recorded in the request's status")
        assert target in status["message"], status
        assert cluster.get_object("v1", "ConfigMap", target, f"from-{trigger_name}", cached=False) is None

        namespaces(target)
        generated = eventually(lambda: cluster.get_object("v1", "ConfigMap", target, f"from-{trigger_name}", cached=False), "the ConfigMap in the new namespace")
        assert generated.get("data") == {"trigger": trigger_name}
        eventually(lambda: not stored(), "the completed request deleted")
        informer = controller.informer
        assert informer is not None and informer.relists == 1  # the first listing only: retries came from the queue
        assert controller.completed == 1 and controller.failed == 0 and controller.retried >= 2
    finally:
        controller.stop()
