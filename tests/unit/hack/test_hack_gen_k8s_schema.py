"""The checked-in merge-strategy table is exactly what hack/gen_k8s_schema.py derives from the Kubernetes spec.

The spec (3.7 MB) is not vendored: it is in the Go module cache wherever the project's Go parts are built,
and the test fails (never skips) with the command to fetch it when it is missing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_k8s_schema", REPO_ROOT / "hack" / "gen_k8s_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_checked_in_table_matches_the_generator(capsys: pytest.CaptureFixture[str]) -> None:
    generator = _generator()
    try:
        spec_path = generator.default_spec()
    except generator.SpecNotFound as missing:
        pytest.fail(f"cannot check stockade/engine/mutate/_k8s_schema.py: {missing}")
    assert generator.main([str(spec_path), "--check"]) == 0, capsys.readouterr().err


def test_derivation_follows_the_patch_extensions() -> None:
    spec = {
        "definitions": {
            "io.k8s.api.demo.v1.Thing": {
                "x-kubernetes-group-version-kind": [{"group": "demo.io", "version": "v1", "kind": "Thing"}],
                "properties": {
                    "items": {"type": "array", "items": {"$ref": "#/definitions/io.k8s.api.demo.v1.Item"},
                              "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
                    "ports": {"type": "array", "x-kubernetes-patch-strategy": "merge,retainKeys",
                              "x-kubernetes-patch-merge-key": "port", "x-kubernetes-list-map-keys": ["port", "protocol"]},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "plain": {"$ref": "#/definitions/io.k8s.api.demo.v1.Plain"},
                },
            },
            "io.k8s.api.demo.v1.Item": {
                "properties": {"finalizers": {"type": "array", "x-kubernetes-patch-strategy": "merge"}},
            },
            "io.k8s.api.demo.v1.Plain": {"properties": {"name": {"type": "string"}}},
        }
    }
    types, roots = _generator().derive(spec)
    assert types == {
        "demo.v1.Item": {"finalizers": ("list", None, ())},
        "demo.v1.Thing": {
            "items": ("list", "demo.v1.Item", ("name",)),
            "ports": ("list", None, ("port", "protocol")),
        },
    }
    assert roots == {"demo.io/v1 Thing": "demo.v1.Thing"}
