"""Kyverno's request filter: requests the ``kyverno`` ConfigMap excludes are admitted before any policy runs.

Kept as one small function so the admission path calls it once per request, whatever process evaluates policies.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stockade.engine.kyvernoconfig import KyvernoConfig
from stockade.webhook.admission import AdmissionRequest, RoleLookup


def configuration_skip_reason(config: KyvernoConfig | None, request: AdmissionRequest, role_resolver: RoleLookup | None = None) -> str | None:
    """Why Kyverno would let ``request`` through unevaluated (excluded requester, or named by ``resourceFilters``),
    else ``None``.  Roles are looked up only when the configuration excludes by role."""
    if config is None:
        return None
    info = request.user_info
    if config.needs_roles and role_resolver is not None and not (info.roles or info.cluster_roles):
        roles, cluster_roles = role_resolver(info, request.namespace)
        info = dataclasses.replace(info, roles=tuple(roles), cluster_roles=tuple(cluster_roles))
    return config.admission_skip_reason(request.kind, request.namespace, request.name, info)


def needs_io(config: KyvernoConfig | None, role_resolver: Any) -> bool:
    """Whether ``configuration_skip_reason`` may call the API server (run it off the event loop then)."""
    return config is not None and config.needs_roles and role_resolver is not None
