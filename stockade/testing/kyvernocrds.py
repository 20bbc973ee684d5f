"""Kyverno's own CRD schemas, read from its Go module, to hold Stockade's schema definitions to them in tests.

Stockade writes its schemas itself (``stockade.policy.schema``); these tests prove that the field names, types,
enums, required lists and Kubernetes extensions equal those of the Kyverno release Stockade follows, so a policy the
API server would accept under Kyverno's CRDs is accepted under ours, and the reverse.  The module is fetched from the
Go module proxy (``go mod download``, a zip of a few MB) on first use and read from the module cache after that.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from stockade.errors import StockadeError

KYVERNO_MODULE = "github.com/kyverno/kyverno"
KYVERNO_VERSION = "v1.19.1"
# Node keys that carry prose or rendering hints, not structure: not compared.
IGNORED_KEYS = frozenset({"description"})


class UpstreamUnavailable(StockadeError, RuntimeError):
    """The Go toolchain could not fetch Kyverno's module."""


def module_dir() -> Path:
    """Kyverno's module directory in the Go module cache, downloading it if needed."""
    try:
        output = subprocess.run(
            ["go", "mod", "download", "-json", f"{KYVERNO_MODULE}@{KYVERNO_VERSION}"],
            check=True, capture_output=True, text=True, timeout=600, env={**os.environ, "GOFLAGS": "-mod=mod"},
        ).stdout
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        raise UpstreamUnavailable(f"go mod download {KYVERNO_MODULE}@{KYVERNO_VERSION} failed: {error}") from error
    return Path(json.loads(output)["Dir"])


def crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(group, kind) -> CRD document, for every CRD under the module's config/crds."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted((module_dir() / "config" / "crds").glob("*/*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                spec = document["spec"]
                found[(spec["group"], spec["names"]["kind"])] = document
    return found


def structure(node: Any) -> Any:
    """``node`` without the keys that are not structure (descriptions)."""
    if isinstance(node, dict):
        return {key: structure(value) for key, value in node.items() if key not in IGNORED_KEYS}
    if isinstance(node, list):
        return [structure(item) for item in node]
    return node


def differences(ours: Any, theirs: Any, path: str = "") -> Iterator[str]:
    """Every place two schema nodes differ in structure, as ``path: what``."""
    ours, theirs = structure(ours), structure(theirs)
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in sorted(set(ours) | set(theirs)):
            where = f"{path}.{key}" if path else key
            if key not in ours:
                yield f"{where}: missing in ours (upstream: {_short(theirs[key])})"
            elif key not in theirs:
                yield f"{where}: not upstream (ours: {_short(ours[key])})"
            else:
                yield from differences(ours[key], theirs[key], where)
    elif isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs) and all(isinstance(i, dict) for i in ours + theirs):
        for index, (mine, upstream) in enumerate(zip(ours, theirs)):
            yield from differences(mine, upstream, f"{path}[{index}]")
    elif ours != theirs:
        yield f"{path}: ours {_short(ours)} != upstream {_short(theirs)}"


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 160 else text[:157] + "..."


# Where Stockade's schema departs from Kyverno's CRD on purpose: (kind, difference) -> why.  The comparison
# reports these like any other difference; the tests expect exactly this set, so a new one needs a reason here.
DELIBERATE_DIFFERENCES: dict[tuple[str, str], str] = {
    (
        "UpdateRequest",
        "v2: spec.properties.deleteDownstream.default: not upstream (ours: false)",
    ): "deprecated and unused; Kyverno's CRD refuses a request that omits it, ours fills in false",
    (
        "UpdateRequest",
        "v2: spec.properties.ruleContext.items.properties.deleteDownstream.default: not upstream (ours: false)",
    ): "a rule context that omits it is read as false (as Kyverno's Go types read it) instead of being refused",
}


def deliberate_differences(kind: str) -> list[str]:
    """The documented departures of one kind, in the form ``schema_differences`` reports them."""
    return sorted(difference for owner, difference in DELIBERATE_DIFFERENCES if owner == kind)


def schema_differences(kind: Any, upstream: dict[str, Any]) -> list[str]:
    """How Stockade's ``KindSchema`` differs from Kyverno's CRD: identity, served versions, and each served
    version's ``spec`` schema and top-level ``required`` (status is left open on purpose)."""
    from stockade.policy.schema.crd import object_schema

    spec = upstream["spec"]
    found: list[str] = []
    names = spec["names"]
    for label, ours, theirs in (
        ("scope", kind.scope, spec["scope"]),
        ("plural", kind.plural, names["plural"]),
        ("singular", kind.singular or kind.kind.lower(), names.get("singular")),
        ("shortNames", list(kind.short_names), names.get("shortNames", [])),
        ("categories", list(kind.categories), names.get("categories", [])),
    ):
        if ours != theirs:
            found.append(f"{label}: ours {ours!r} != upstream {theirs!r}")
    subresource = any("status" in (v.get("subresources") or {}) for v in spec["versions"])
    if kind.status_subresource != subresource:
        found.append(f"status subresource: ours {kind.status_subresource} != upstream {subresource}")
    served = [v["name"] for v in spec["versions"] if v.get("served")]
    if sorted(kind.versions) != sorted(served):
        found.append(f"served versions: ours {sorted(kind.versions)} != upstream {sorted(served)}")
    storage = [v["name"] for v in spec["versions"] if v.get("storage")]
    if [kind.storage_version] != storage:
        found.append(f"storage version: ours {kind.storage_version} != upstream {storage}")
    for version in spec["versions"]:
        if not version.get("served") or version["name"] not in kind.versions:
            continue
        theirs = version["schema"]["openAPIV3Schema"]
        ours = object_schema(kind, version["name"])
        prefix = f"{version['name']}:"
        found += [f"{prefix} {line}" for line in differences(ours["properties"]["spec"], theirs["properties"]["spec"], "spec")]
        if ours.get("required", []) != theirs.get("required", []):
            found.append(f"{prefix} required: ours {ours.get('required', [])} != upstream {theirs.get('required', [])}")
    return found
