"""accepted_documents: the controllers' view of a snapshot (picked kinds, rejected documents left out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stockade.policy.loader import Document
from stockade.webhook.policystore import PolicyIdentity, accepted_documents, policy_identity


@dataclass
class Snapshot:
    documents: tuple[Document, ...] = ()
    errors: dict[PolicyIdentity, str] = field(default_factory=dict)


def document(kind: str, name: str, index: int) -> Document:
    return Document({"apiVersion": "policies.kyverno.io/v1", "kind": kind, "metadata": {"name": name}}, "cluster", index)


def is_generating(data: dict[str, Any]) -> bool:
    return data.get("kind") == "GeneratingPolicy"


def test_picked_documents_the_store_did_not_reject_in_their_order() -> None:
    good, rejected, other, later = document("GeneratingPolicy", "a", 0), document("GeneratingPolicy", "b", 1), document("DeletingPolicy", "c", 2), document("GeneratingPolicy", "d", 3)
    snapshot = Snapshot((good, rejected, other, later), {policy_identity(rejected.data): "invalid CEL"})
    assert accepted_documents(snapshot, is_generating) == [good, later]


def test_no_snapshot_yet_or_a_bare_one_gives_nothing() -> None:
    assert accepted_documents(None, is_generating) == []
    assert accepted_documents(object(), is_generating) == []
