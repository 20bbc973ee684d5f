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
from stockade.kube.client import KubeClient

log = logging.getLogger("stockade.userroles")

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
RBAC_PATH = "/apis/rbac.authorization.k8s.io/v1"


def _get(obj: Any, *names: str) -> Any:
    """``obj[names[0]][names[1]]...``, None where a level is missing or not an object."""
    for name in names:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(name)
    return obj


def _binding_essentials(binding: Any) -> dict[str, Any]:
    """What ``roles_for`` reads of a binding; the rest (managedFields, annotations ...) is not kept in the cache."""
    return {"metadata": {"namespace": _get(binding, "metadata", "namespace")}, "subjects": _get(binding, "subjects"), "roleRef": _get(binding, "roleRef")}


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
        client: KubeClient | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client if client is not None else KubeClient(api_client, timeout=5)
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
            role_bindings = [_binding_essentials(b) for b in self.client.request("GET", f"{RBAC_PATH}/rolebindings").get("items") or []]
            cluster_role_bindings = [_binding_essentials(b) for b in self.client.request("GET", f"{RBAC_PATH}/clusterrolebindings").get("items") or []]
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
