"""The Roles and ClusterRoles bound to an admission request's user, for Kyverno's ``roles``/``clusterRoles`` match
filters and the ``request.roles``/``request.clusterRoles`` variables.

Kyverno's rules: a RoleBinding in any namespace that names the user contributes ``namespace:role`` for a Role, and
the ClusterRole it references only when the binding lives in the request's namespace; a ClusterRoleBinding
contributes its ClusterRole.  Subjects match by user name, group, or service account (``system:serviceaccount:ns:
name``, the subject's namespace defaulting to the binding's).

Bindings are listed through the API and cached for ``ttl_seconds`` (one list of all RoleBindings, one of all
ClusterRoleBindings), so a request costs no API call while the cache is fresh; callers on an event loop check
``needs_fetch()`` and refresh from a thread first.  A grant or revocation is seen within the TTL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from stockade.engine.match import RequestInfo

log = logging.getLogger("stockade.userroles")

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def _get(obj: Any, *names: str) -> Any:
    """Field access that works for kubernetes client models and plain dicts (tests, raw API responses)."""
    for name in names:
        if obj is None:
            return None
        obj = obj.get(name) if isinstance(obj, dict) else getattr(obj, _snake(name), None)
    return obj


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def subjects_match(subjects: Iterable[Any] | None, user: RequestInfo, binding_namespace: str) -> bool:
    for subject in subjects or ():
        kind = _get(subject, "kind")
        name = str(_get(subject, "name") or "")
        if kind == "ServiceAccount":
            namespace = str(_get(subject, "namespace") or binding_namespace)
            if namespace and user.username == f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}":
                return True
        elif kind == "Group":
            if name in user.groups:
                return True
        elif kind == "User":
            if user.username == name:
                return True
    return False


def roles_for(user: RequestInfo, namespace: str, role_bindings: Iterable[Any], cluster_role_bindings: Iterable[Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(sorted Roles as ``namespace:name``, sorted ClusterRoles) bound to ``user`` for a request in ``namespace``."""
    roles: set[str] = set()
    cluster_roles: set[str] = set()
    for binding in role_bindings:
        binding_namespace = str(_get(binding, "metadata", "namespace") or "")
        if not subjects_match(_get(binding, "subjects"), user, binding_namespace):
            continue
        kind = _get(binding, "roleRef", "kind")
        role = str(_get(binding, "roleRef", "name") or "")
        if kind == "Role":
            roles.add(f"{binding_namespace}:{role}")
        elif kind == "ClusterRole" and binding_namespace == namespace:
            cluster_roles.add(role)
    for binding in cluster_role_bindings:
        if _get(binding, "roleRef", "kind") == "ClusterRole" and subjects_match(_get(binding, "subjects"), user, ""):
            cluster_roles.add(str(_get(binding, "roleRef", "name") or ""))
    return tuple(sorted(roles)), tuple(sorted(cluster_roles))


class RoleResolver:
    """Callable ``(user, namespace) -> (roles, cluster_roles)`` for ``AdmissionEvaluator(role_resolver=...)``."""

    def __init__(
        self,
        api_client: Any,
        ttl_seconds: float = 10.0,
        *,
        rbac_api: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rbac_api is None:
            from kubernetes import client

            rbac_api = client.RbacAuthorizationV1Api(api_client)
        self.rbac = rbac_api
        self.ttl = ttl_seconds
        self.clock = clock
        self._bindings: tuple[list[Any], list[Any]] | None = None
        self._fetched_at = 0.0
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()

    def needs_fetch(self, _namespace: str = "") -> bool:
        """True when the next lookup would call the API server (so async callers can do it from a thread)."""
        return self._bindings is None or self.clock() - self._fetched_at >= self.ttl

    def refresh(self) -> None:
        """List every RoleBinding and ClusterRoleBinding now; one thread refreshes while others wait for it."""
        with self._refresh_lock:
            if not self.needs_fetch():
                return  # another thread refreshed while this one waited
            role_bindings = list(self.rbac.list_role_binding_for_all_namespaces(_request_timeout=5).items or [])
            cluster_role_bindings = list(self.rbac.list_cluster_role_binding(_request_timeout=5).items or [])
            with self._lock:
                self._bindings = (role_bindings, cluster_role_bindings)
                self._fetched_at = self.clock()

    def __call__(self, user: RequestInfo, namespace: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        if self.needs_fetch():
            try:
                self.refresh()
            except Exception as exc:  # API trouble: keep the last known bindings rather than fail admission
                log.warning("listing role bindings failed: %s", exc)
                with self._lock:  # retry in a second, not on every request
                    self._fetched_at = self.clock() - self.ttl + min(self.ttl, 1.0)
                    if self._bindings is None:
                        self._bindings = ([], [])
        with self._lock:
            bindings = self._bindings
        if bindings is None:
            return (), ()
        return roles_for(user, namespace, bindings[0], bindings[1])
