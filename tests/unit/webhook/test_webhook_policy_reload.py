"""Policy files are re-read when they change; a broken edit keeps the last good policies."""

from __future__ import annotations

import json
import os
from pathlib import Path

from webhook_helpers import POLICIES, RunningServer, WebhookClient, pod, review

from stockade.webhook.policystore import PolicyStore


def test_reload_swaps_policies_and_keeps_old_on_error(policy_dir: Path, webhook: RunningServer, client: WebhookClient) -> None:
    store = webhook.server.state.store
    assert client.post_review("/validate", review(pod()))["response"]["allowed"] is False
    target = policy_dir / "policies.yaml"
    target.write_text(POLICIES.replace("Enforce", "Audit"))
    os.utime(target, ns=(1, 1))  # a distinct mtime even on coarse clocks
    assert webhook.call(_reload(store)) is True
    response = client.post_review("/validate", review(pod()))["response"]
    assert response["allowed"] is True and any("require-team-label.check-team" in w for w in response["warnings"])

    target.write_text("apiVersion: kyverno.io/v1\nkind: [broken\n")
    assert webhook.call(_reload(store)) is False
    assert store.last_error
    assert client.post_review("/validate", review(pod()))["response"]["allowed"] is True
    assert webhook.call(_reload(store)) is False  # still broken: still the old snapshot
    status, data = client.request("GET", "/health/readiness")
    assert status == 200 and json.loads(data)["policies"] == 3


async def _reload(store: PolicyStore) -> bool:
    return store.reload_if_changed()
