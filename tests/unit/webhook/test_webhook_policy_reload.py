"""Policy files are re-read when they change; a broken edit keeps the last good policies."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from webhook_helpers import POLICIES, RunningServer, WebhookClient, pod, review

from stockade.policy.loader import LoadError
from stockade.webhook.policystore import PolicyStore


def test_reload_swaps_policies_and_keeps_old_on_error(policy_dir: Path, webhook: RunningServer, client: WebhookClient) -> None:
    store = webhook.server.state.store
    assert client.post_review("/validate", review(pod()))["response"]["allowed"] is False
    target = policy_dir / "policies.yaml"
    target.write_text(POLICIES.replace("Enforce", "Audit"))
    os.utime(target, ns=(1, 1))  # a distinct mtime even on coarse clocks
    assert webhook.call(_reload(store)) is True
    response = client.post_review("/validate", review(pod()))["response"]
    assert response["allowed"] is True and "warnings" not in response  # Audit failures come back only with emitWarning

    target.write_text("apiVersion: kyverno.io/v1\nkind: [broken\n")
    assert webhook.call(_reload(store)) is False
    assert store.last_error
    assert client.post_review("/validate", review(pod()))["response"]["allowed"] is True
    assert webhook.call(_reload(store)) is False  # still broken: still the old snapshot
    status, data = client.request("GET", "/health/readiness")
    problems = json.loads(data)["problems"]
    assert status == 503 and len(problems) == 1 and "policy reload failed" in problems[0] and str(target) in problems[0]
    target.write_text(POLICIES)
    os.utime(target, ns=(2, 2))
    assert webhook.call(_reload(store)) is True
    status, data = client.request("GET", "/health/readiness")
    assert status == 200 and json.loads(data)["policies"] == 3 and json.loads(data)["documents"] == 3
    # a policy removed from the source leaves the cache: the count callers wait on (the e2e runner's cleanup) drops
    target.write_text(POLICIES.split("\n---\n", 1)[1])
    os.utime(target, ns=(3, 3))
    assert webhook.call(_reload(store)) is True
    status, data = client.request("GET", "/health/readiness")
    assert status == 200 and json.loads(data)["documents"] == 2


ALIAS_BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n" for previous, name in zip("abcdefgh", "bcdefghi")
)


def test_alias_bomb_reload_keeps_previous_snapshot_and_fails_readiness(
    policy_dir: Path, webhook: RunningServer, client: WebhookClient
) -> None:
    store = webhook.server.state.store
    served = store.snapshot
    bomb = policy_dir / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 700
    assert webhook.call(_reload(store)) is False
    assert store.snapshot is served
    assert str(bomb) in store.last_error and "alias" in store.last_error
    assert client.post_review("/validate", review(pod()))["response"]["allowed"] is False  # old policies still enforced
    status, data = client.request("GET", "/health/readiness")
    assert status == 503 and str(bomb) in json.loads(data)["problems"][0]


def test_alias_bomb_at_start_up_is_a_load_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(ALIAS_BOMB)
    store = PolicyStore([str(tmp_path)])
    with pytest.raises(LoadError, match="bomb.yaml \\(document 1\\): aliases expand to more than"):
        store.load()
    assert store.readiness_problem() == "policies not loaded"


async def _reload(store: PolicyStore) -> bool:
    return store.reload_if_changed()


def test_configmap_mount_layout_loads_each_policy_once(tmp_path: Path) -> None:
    # kubelet layout: ..<timestamp>/file, ..data -> ..<timestamp>, file -> ..data/file
    mount = tmp_path / "policies"
    versioned = mount / "..2026_11_21_00_00_00.000000001"
    versioned.mkdir(parents=True)
    (versioned / "policies.yaml").write_text(POLICIES)
    (mount / "..data").symlink_to(versioned.name)
    (mount / "policies.yaml").symlink_to("..data/policies.yaml")
    snapshot = PolicyStore([str(mount)]).load()
    assert sorted(p.name for p in snapshot.policies) == ["add-managed-label", "disallow-latest", "require-team-label"]
