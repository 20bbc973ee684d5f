"""The e2e harness's stand-in CRDs keep the schema constraints of Kyverno's CRDs that decide admission."""

from __future__ import annotations

from pathlib import Path

import yaml

EXTRA_CRDS = Path(__file__).resolve().parents[3] / "hack" / "e2e" / "extra-crds.yaml"


def test_global_context_entries_need_exactly_one_data_source() -> None:
    """Kyverno's GlobalContextEntry CRD: spec is oneOf kubernetesResource / apiCall, a kubernetesResource needs resource
    and version, a projection needs name and jmesPath, and apiCall fields get Kyverno's defaults."""
    crd = next(d for d in yaml.safe_load_all(EXTRA_CRDS.read_text()) if d and d["spec"]["names"]["kind"] == "GlobalContextEntry")
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert spec["oneOf"] == [{"required": ["kubernetesResource"]}, {"required": ["apiCall"]}]
        assert spec["properties"]["kubernetesResource"]["required"] == ["resource", "version"]
        assert spec["properties"]["projections"]["items"]["required"] == ["jmesPath", "name"]
        call = spec["properties"]["apiCall"]["properties"]
        assert (call["method"]["default"], call["refreshInterval"]["default"], call["retryLimit"]["default"]) == ("GET", "10m", 3)
