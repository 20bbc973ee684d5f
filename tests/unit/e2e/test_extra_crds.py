"""The e2e harness's stand-in CRDs cover only kinds deploy/crds does not ship, so the API server of the e2e cluster
holds every kind Stockade implements to its real schema (deploy/crds, generated from stockade.policy.schema)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
EXTRA_CRDS = ROOT / "hack" / "e2e" / "extra-crds.yaml"


def _names(path: Path) -> set[str]:
    return {d["metadata"]["name"] for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "CustomResourceDefinition"}


def test_stand_ins_never_shadow_a_shipped_crd() -> None:
    shipped = set().union(*(_names(path) for path in (ROOT / "deploy" / "crds").glob("*.yaml")))
    assert "globalcontextentries.kyverno.io" in shipped and "updaterequests.kyverno.io" in shipped
    assert _names(EXTRA_CRDS) and not _names(EXTRA_CRDS) & shipped


def test_global_context_entries_need_exactly_one_data_source() -> None:
    """Kyverno's GlobalContextEntry CRD: spec is oneOf kubernetesResource / apiCall, a kubernetesResource needs resource
    and version, a projection needs name and jmesPath, and apiCall fields get Kyverno's defaults."""
    crd = next(d for d in yaml.safe_load_all((ROOT / "deploy" / "crds" / "policies.yaml").read_text()) if d and d["spec"]["names"]["kind"] == "GlobalContextEntry")
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert spec["oneOf"] == [{"required": ["kubernetesResource"]}, {"required": ["apiCall"]}]
        assert spec["properties"]["kubernetesResource"]["required"] == ["resource", "version"]
        assert sorted(spec["properties"]["projections"]["items"]["required"]) == ["jmesPath", "name"]
        call = spec["properties"]["apiCall"]["properties"]
        assert (call["method"]["default"], call["refreshInterval"]["default"], call["retryLimit"]["default"]) == ("GET", "10m", 3)
