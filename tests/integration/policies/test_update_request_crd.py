"""deploy/crds' UpdateRequest on a real kube-apiserver: the deprecated ``deleteDownstream`` fields stay required
but are filled in as false when a request omits them (Kyverno's CRD refuses such a request; see
stockade.testing.kyvernocrds.DELIBERATE_DIFFERENCES), and the rest of the schema still refuses what Kyverno's does."""

from __future__ import annotations

import uuid
from typing import Any

from policies_cluster import Api

NAMESPACE = "default"
PATH = f"/apis/kyverno.io/v2/namespaces/{NAMESPACE}/updaterequests"


def update_request(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "policy": "some-policy",
        "rule": "some-rule",
        "requestType": "generate",
        "resource": {"apiVersion": "v1", "kind": "Namespace", "name": "some-namespace"},
        "context": {},
        "ruleContext": [{"rule": "some-rule", "trigger": {"apiVersion": "v1", "kind": "Namespace", "name": "some-namespace"}}],
    }
    body.update(spec)
    return {"apiVersion": "kyverno.io/v2", "kind": "UpdateRequest", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": body}


def test_omitted_delete_downstream_is_stored_as_false(api: Api) -> None:
    name = f"ur-{uuid.uuid4().hex[:6]}"
    status, stored = api.request("POST", PATH, update_request(name))
    try:
        assert status == 201, stored
        assert stored["spec"]["deleteDownstream"] is False
        assert stored["spec"]["ruleContext"][0]["deleteDownstream"] is False
    finally:
        api.request("DELETE", f"{PATH}/{name}")


def test_explicit_delete_downstream_is_kept(api: Api) -> None:
    name = f"ur-{uuid.uuid4().hex[:6]}"
    status, stored = api.request("POST", PATH, update_request(name, deleteDownstream=True))
    try:
        assert status == 201, stored
        assert stored["spec"]["deleteDownstream"] is True
    finally:
        api.request("DELETE", f"{PATH}/{name}")


def test_other_required_fields_are_still_refused(api: Api) -> None:
    name = f"ur-{uuid.uuid4().hex[:6]}"
    body = update_request(name)
    del body["spec"]["policy"]
    status, answer = api.request("POST", PATH, body)
    assert status == 422, answer
    assert "spec.policy" in answer.get("message", "")
