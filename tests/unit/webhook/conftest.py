"""Fixtures: a webhook server with the test policies, and an HTTPS client for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from webhook_helpers import POLICIES, RunningServer, WebhookClient, start_server

from stockade.webhook.certs import CertificateManager


@pytest.fixture()
def policy_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "policies.yaml").write_text(POLICIES)
    return directory


@pytest.fixture()
def webhook(policy_dir: Path, tmp_path: Path) -> Iterator[RunningServer]:
    certs = CertificateManager(hosts=["localhost", "127.0.0.1"], directory=tmp_path / "certs")
    running = start_server(policy_dir, certs)
    yield running
    running.stop()


@pytest.fixture()
def client(webhook: RunningServer) -> Iterator[WebhookClient]:
    c = webhook.client()
    yield c
    c.close()
