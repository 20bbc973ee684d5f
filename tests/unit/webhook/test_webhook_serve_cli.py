"""`stockade serve` fails fast, naming the problem, before it listens or touches a cluster."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from stockade.cli.serve_cmd import serve


def test_broken_policy_file_is_reported_with_its_name(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: [oops\n")
    result = CliRunner().invoke(serve, [str(broken), "--port", "0", "--host", "127.0.0.1", "--cert-dir", str(tmp_path / "c")])
    assert result.exit_code == 2  # an input error
    assert "Error: " in result.output and "broken.yaml" in result.output


def test_cert_file_without_key_is_refused(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec: {rules: []}\n")
    cert = tmp_path / "tls.crt"
    cert.write_text("x")
    result = CliRunner().invoke(serve, [str(policy), "--tls-cert-file", str(cert)])
    assert result.exit_code != 0
    assert "--tls-key-file" in result.output
