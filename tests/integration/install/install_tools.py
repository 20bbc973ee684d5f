"""Helpers of the installation tests: helm and kubectl (built into .cache/bin) pointed at the shared apiserver."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stockade.testing.apiserver import ControlPlane

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART = REPO_ROOT / "deploy" / "helm" / "stockade"
INSTALL_YAML = REPO_ROOT / "deploy" / "install.yaml"
BIN = REPO_ROOT / ".cache" / "bin"
PART_OF = "app.kubernetes.io/part-of=stockade"


@dataclass
class Tools:
    plane: ControlPlane
    helm_path: Path
    kubectl_path: Path

    def _env(self) -> dict[str, str]:
        home = self.plane.workdir / "helm-home"
        return {
            **os.environ,
            "KUBECONFIG": str(self.plane.kubeconfig),
            # keep helm's cache/config/data out of the user's home
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, tool: Path, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(tool), *args], input=stdin, capture_output=True, text=True, env=self._env(), timeout=300)
        if check and result.returncode != 0:
            raise AssertionError(f"{tool.name} {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(self.helm_path, *args, check=check)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(self.kubectl_path, *args, stdin=stdin, check=check)

    def template(self, *args: str, namespace: str = "stockade") -> str:
        return self.helm("template", "stockade", str(CHART), "--namespace", namespace, *args).stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [doc for doc in docs if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]
