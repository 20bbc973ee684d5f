"""The local condition matcher used when the shared pattern module is unavailable."""

from __future__ import annotations

import pytest

from stockade.engine.mutate import _conditions, apply_strategic_merge


@pytest.fixture
def without_shared_matcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_conditions, "_load_validate_pattern", lambda: None)
    monkeypatch.setattr(_conditions, "_match_value", _conditions._fallback_match_value)


@pytest.mark.usefixtures("without_shared_matcher")
def test_fallback_matches_maps_lists_and_wildcards() -> None:
    resource = {"labels": {"app": "web-1"}, "ports": [{"port": 80}, {"port": 81}]}
    assert _conditions.condition_holds(resource, {"labels": {"app": "web-?"}})
    assert not _conditions.condition_holds(resource, {"labels": {"app": "db*"}})
    assert _conditions.condition_holds(resource["ports"], [{"port": "8?"}])
    assert not _conditions.condition_holds(resource["ports"], [{"port": 80}])
    assert _conditions.condition_holds("nginx:1.25", "!*:latest | redis")


@pytest.mark.usefixtures("without_shared_matcher")
def test_fallback_drives_conditional_anchor() -> None:
    resource = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"tier": "db"}}}
    outcome = apply_strategic_merge(resource, {"metadata": {"(labels)": {"tier": "web"}, "annotations": {"a": "b"}}})
    assert outcome.skipped
    assert "does not match" in outcome.reason
