"""Leader election and replica membership through ``coordination.k8s.io/v1`` Leases.

Several webhook replicas answer admission requests, but background work (webhook registration, background scans,
generate resync) must run once: ``LeaderElector`` lets exactly one replica hold the leader Lease.  The timing
follows client-go's leaderelection so operators can reason about it the same way:

- ``lease_duration``: how long a candidate waits, after it last *saw the record change*, before taking over.  The
  candidate measures this on its own monotonic clock, so clock skew between nodes does not matter.
- ``renew_deadline``: how long the leader keeps retrying a failed renewal before it gives leadership up.
- ``retry_period``: pause between attempts (acquire attempts are jittered so candidates do not move in lockstep).

Every write carries the ``resourceVersion`` it was based on, so two candidates racing for an expired lease cannot
both win: the loser gets a 409 and tries again later.  ``stop()`` releases the lease (empty ``holderIdentity``) so a
successor takes over at once instead of after ``lease_duration``.

``ReplicaMembership`` answers a different question: "is any other replica alive?".  A replica that stops must
remove the cluster's webhook configurations only when it is the last one (otherwise a rolling update would leave
the cluster unprotected); each replica renews a Lease of its own, labelled ``app.kubernetes.io/part-of=stockade``,
and ``others_alive()`` looks for fresh Leases of other holders.

The API calls (`stockade.kube.client.KubeClient`) are synchronous: everything here runs in daemon threads and
callbacks are called from them, never from an asyncio loop.
"""

from __future__ import annotations

import logging
import math
import os
import random
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from stockade.kube.client import KubeClient
from stockade.kube.errors import AlreadyExists, Conflict, Invalid, NotFound

log = logging.getLogger("stockade.controllers.leader")

PART_OF_LABEL = "app.kubernetes.io/part-of"
PART_OF_VALUE = "stockade"
ROLE_LABEL = "stockade.io/lease-role"
ROLE_LEADER = "leader"
ROLE_MEMBER = "member"
ACQUIRE_JITTER = 0.2  # like client-go's JitterFactor 1.2: acquire attempts spread over [retry, 1.2 * retry]
DEFAULT_LEASE_NAME = "stockade-leader"
MEMBER_LEASE_PREFIX = "stockade-replica-"


def make_identity(pod_name: str | None = None) -> str:
    """Pod name plus a random suffix: a restarted container in the same pod must not inherit the old holder's
    lease as if nothing had happened."""
    base = pod_name or os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or "stockade"
    base = "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in base.lower()).strip("-.") or "stockade"
    return f"{base[:200]}-{secrets.token_hex(4)}"


def format_micro_time(moment: datetime) -> str:
    """RFC 3339 with exactly six fractional digits, the form ``MicroTime`` fields require."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class LeaseTiming:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if self.renew_deadline <= (1 + ACQUIRE_JITTER) * self.retry_period:
            raise ValueError("renew_deadline must be greater than 1.2 * retry_period")
        if self.retry_period <= 0:
            raise ValueError("retry_period must be positive")

    @property
    def lease_duration_seconds(self) -> int:
        """Lease records hold whole seconds; round up so the record never promises less than we wait."""
        return max(1, math.ceil(self.lease_duration))

    @property
    def request_timeout(self) -> float:
        """One API call must not eat the whole renew deadline."""
        return max(1.0, min(2 * self.retry_period, self.renew_deadline / 2))


class _LeaseApi:
    """Lease reads and writes as plain JSON dicts (``MicroTime`` fields stay the strings the server wrote)."""

    def __init__(self, api_client: Any, namespace: str, request_timeout: float) -> None:
        self.client = KubeClient(api_client, timeout=request_timeout)
        self.namespace = namespace
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    @staticmethod
    def _object(data: Any) -> dict[str, Any]:
        return data if isinstance(data, dict) else {}

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return self._object(self.client.request("GET", f"{self.path}/{name}"))
        except NotFound:
            return None

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._object(self.client.request("POST", self.path, body))

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._object(self.client.request("PUT", f"{self.path}/{body['metadata']['name']}", body))

    def delete(self, name: str) -> None:
        try:
            self.client.request("DELETE", f"{self.path}/{name}")
        except NotFound:
            pass

    def list(self, label_selector: str) -> list[dict[str, Any]]:
        return list(self._object(self.client.request("GET", self.path, query={"labelSelector": label_selector})).get("items") or [])


def _is_conflict(exc: Exception) -> bool:
    """Another replica wrote the Lease first (create of an existing one, or a stale resourceVersion)."""
    return isinstance(exc, (Conflict, AlreadyExists, Invalid))


class LeaderElector:
    """Campaigns for one Lease in a background thread; ``on_started_leading`` / ``on_stopped_leading`` always come
    in pairs, and a replica that loses the lease becomes a candidate again."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        lease_name: str = DEFAULT_LEASE_NAME,
        identity: str | None = None,
        timing: LeaseTiming | None = None,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
    ) -> None:
        self.namespace = namespace
        self.lease_name = lease_name
        self.identity = identity or make_identity()
        self.timing = timing or LeaseTiming()
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self._leases = _LeaseApi(api_client, namespace, self.timing.request_timeout)
        self._leading = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # serialises lease writes of the campaign thread and release()
        self._observed_key: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._observed_holder = ""
        self._last_renewal = 0.0

    # -- public surface -------------------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    @property
    def leader_identity(self) -> str:
        """The holder this replica last saw ("" when none)."""
        return self._observed_holder

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name=f"leader-election-{self.lease_name}", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; with ``release`` the lease is handed back so a successor need not wait it out.
        ``release=False`` behaves like a crash (the lease expires on its own)."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.timing.renew_deadline + self.timing.request_timeout)
        was_leader = self._leading.is_set()
        if was_leader and release:
            self._release()
        if was_leader:
            self._lose_leadership()

    def wait_for_leadership(self, timeout: float) -> bool:
        """Blocks until this replica leads or ``timeout`` passes (for callers that must not start early)."""
        return self._leading.wait(timeout)

    # -- campaign ---------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            if not self._leading.is_set():
                if self._attempt():
                    self._last_renewal = time.monotonic()
                    self._leading.set()
                    log.info("%s acquired lease %s/%s", self.identity, self.namespace, self.lease_name)
                    self._call(self.on_started_leading)
                    pause = self.timing.retry_period
                else:
                    pause = self.timing.retry_period * (1 + random.random() * ACQUIRE_JITTER)
            else:
                if self._attempt():
                    self._last_renewal = time.monotonic()
                elif time.monotonic() - self._last_renewal >= self.timing.renew_deadline:
                    log.warning("%s could not renew lease %s/%s within %.1fs; stepping down", self.identity, self.namespace, self.lease_name, self.timing.renew_deadline)
                    self._lose_leadership()
                pause = self.timing.retry_period
            self._stopping.wait(pause)

    def _attempt(self) -> bool:
        try:
            with self._lock:
                if self._stopping.is_set():
                    return False
                return self._try_acquire_or_renew()
        except Exception as exc:
            if _is_conflict(exc):
                log.debug("lease %s/%s changed concurrently", self.namespace, self.lease_name)
            else:
                log.warning("lease %s/%s: %s", self.namespace, self.lease_name, exc)
            return False

    def _spec(self, acquire_time: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.timing.lease_duration_seconds,
            "acquireTime": acquire_time,
            "renewTime": format_micro_time(datetime.now(timezone.utc)),
            "leaseTransitions": transitions,
        }

    def _observe(self, spec: dict[str, Any]) -> None:
        key = tuple(spec.get(field) for field in ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions"))
        if key != self._observed_key:
            self._observed_key = key
            self._observed_at = time.monotonic()
            holder = str(spec.get("holderIdentity") or "")
            if holder != self._observed_holder:
                self._observed_holder = holder
                if holder:
                    self._call(self.on_new_leader, holder)

    def _try_acquire_or_renew(self) -> bool:
        now_text = format_micro_time(datetime.now(timezone.utc))
        lease = self._leases.get(self.lease_name)
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.lease_name, "namespace": self.namespace, "labels": {PART_OF_LABEL: PART_OF_VALUE, ROLE_LABEL: ROLE_LEADER}},
                "spec": self._spec(now_text, 0),
            }
            created = self._leases.create(body)
            self._observe(created.get("spec") or {})
            return True
        spec = dict(lease.get("spec") or {})
        self._observe(spec)
        holder = str(spec.get("holderIdentity") or "")
        if holder and holder != self.identity:
            duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration_seconds)
            if time.monotonic() < self._observed_at + duration:
                return False  # someone else holds a lease that has not expired on our clock
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new_spec = self._spec(str(spec.get("acquireTime") or now_text), transitions)
        else:
            new_spec = self._spec(now_text, transitions + 1)
        lease["spec"] = new_spec  # metadata keeps resourceVersion: a concurrent writer makes this a 409
        updated = self._leases.replace(lease)
        self._observe(updated.get("spec") or {})
        return True

    def _release(self) -> None:
        """Hand the lease back: clear the holder and shorten the duration so candidates act on their next try."""
        try:
            with self._lock:
                lease = self._leases.get(self.lease_name)
                if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                    return
                spec = dict(lease.get("spec") or {})
                spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=format_micro_time(datetime.now(timezone.utc)))
                spec.pop("acquireTime", None)
                lease["spec"] = {key: value for key, value in spec.items() if value is not None}
                self._leases.replace(lease)
                log.info("%s released lease %s/%s", self.identity, self.namespace, self.lease_name)
        except Exception as exc:
            log.warning("releasing lease %s/%s failed (it will expire): %s", self.namespace, self.lease_name, exc)

    def _lose_leadership(self) -> None:
        if self._leading.is_set():
            self._leading.clear()
            self._call(self.on_stopped_leading)

    @staticmethod
    def _call(callback: Callable[..., None] | None, *args: Any) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception:
            log.exception("leader election callback failed")


class ReplicaMembership:
    """Each replica keeps a Lease of its own fresh; ``others_alive()`` tells a stopping replica whether it is the
    last one (and so must remove the cluster-wide webhook configurations)."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_interval: float = 5.0,
        pod_name: str | None = None,
        pod_uid: str | None = None,
    ) -> None:
        if renew_interval >= lease_duration:
            raise ValueError("renew_interval must be shorter than lease_duration")
        self.namespace = namespace
        self.identity = identity or make_identity(pod_name)
        self.lease_duration = lease_duration
        self.renew_interval = renew_interval
        self.lease_name = (MEMBER_LEASE_PREFIX + self.identity)[:253].rstrip("-.")
        # with the pod as owner, the garbage collector removes the lease of a replica that crashed
        self.pod_name = pod_name if pod_name is not None else os.environ.get("POD_NAME", "")
        self.pod_uid = pod_uid if pod_uid is not None else os.environ.get("POD_UID", "")
        self._leases = _LeaseApi(api_client, namespace, max(1.0, min(5.0, renew_interval)))
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Publishes the membership lease before returning, so peers see this replica from the start."""
        if self._thread is not None:
            return
        self._stopping.clear()
        self._renew_logged()
        self._thread = threading.Thread(target=self._run, name="replica-membership", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stops renewing and, with ``release``, deletes our lease so peers checking ``others_alive()`` afterwards
        no longer count us (``release=False`` behaves like a crash: the lease expires on its own)."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.renew_interval + 10)
        if not release:
            return
        try:
            with self._lock:
                self._leases.delete(self.lease_name)
        except Exception as exc:
            log.warning("deleting membership lease %s/%s failed (it will expire): %s", self.namespace, self.lease_name, exc)

    def others_alive(self) -> bool:
        """True when another replica renewed its membership within its lease duration.  Errors count as "alive":
        wrongly keeping the webhooks is recoverable (`stockade cleanup`), wrongly removing them is not."""
        try:
            return bool(self.live_peers())
        except Exception as exc:
            log.warning("listing membership leases failed; assuming other replicas are alive: %s", exc)
            return True

    def live_peers(self) -> list[str]:
        """Holder identities of the other replicas whose membership leases are fresh (by the record's renewTime;
        cluster nodes are expected to keep their clocks in sync)."""
        now = datetime.now(timezone.utc)
        peers: list[str] = []
        for lease in self._leases.list(f"{PART_OF_LABEL}={PART_OF_VALUE},{ROLE_LABEL}={ROLE_MEMBER}"):
            if (lease.get("metadata") or {}).get("deletionTimestamp"):
                continue
            spec = lease.get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            renewed = parse_micro_time(spec.get("renewTime"))
            if not holder or holder == self.identity or renewed is None:
                continue
            if (now - renewed).total_seconds() < float(spec.get("leaseDurationSeconds") or 0):
                peers.append(holder)
        return sorted(peers)

    def _run(self) -> None:
        while not self._stopping.wait(self.renew_interval):
            self._renew_logged()

    def _renew_logged(self) -> None:
        try:
            with self._lock:
                if not self._stopping.is_set():
                    self._renew()
        except Exception as exc:
            log.warning("renewing membership lease %s/%s failed: %s", self.namespace, self.lease_name, exc)

    def _renew(self) -> None:
        now_text = format_micro_time(datetime.now(timezone.utc))
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)), "renewTime": now_text}
        lease = self._leases.get(self.lease_name)
        if lease is None:
            metadata: dict[str, Any] = {
                "name": self.lease_name,
                "namespace": self.namespace,
                "labels": {PART_OF_LABEL: PART_OF_VALUE, ROLE_LABEL: ROLE_MEMBER},
            }
            if self.pod_name and self.pod_uid:
                metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": self.pod_name, "uid": self.pod_uid}]
            self._leases.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": {**spec, "acquireTime": now_text}})
            return
        lease["spec"] = {**(lease.get("spec") or {}), **spec}
        self._leases.replace(lease)
