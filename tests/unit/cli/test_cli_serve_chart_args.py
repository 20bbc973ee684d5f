"""The arguments our manifests give the container are ones `stockade serve` accepts (a typo would crash-loop pods)."""

from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from stockade.cli.serve_cmd import serve

ROOT = Path(__file__).resolve().parents[3]


def deployment_args() -> list[str]:
    for document in yaml.safe_load_all((ROOT / "deploy" / "install.yaml").read_text()):
        if document and document["kind"] == "Deployment":
            return list(document["spec"]["template"]["spec"]["containers"][0]["args"])
    raise AssertionError("install.yaml has no Deployment")


def test_install_yaml_serve_arguments_parse(tmp_path: Path) -> None:
    args = deployment_args()
    assert args[0] == "serve"
    mounted = [tmp_path if arg == "/policies" else arg for arg in args[1:]]  # the ConfigMap mount point
    context = serve.make_context("serve", [str(a) for a in mounted])
    params: dict[str, Any] = context.params
    assert params["from_cluster"] and params["register_webhooks"] and params["leader_election"]
    assert params["tls_secret"] and params["generate"] and params["events"]


def test_an_unknown_flag_is_rejected() -> None:
    with pytest.raises(click.UsageError):
        serve.make_context("serve", ["--from-cluster", "--no-such-flag"])
