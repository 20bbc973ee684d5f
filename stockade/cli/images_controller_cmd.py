"""`stockade images controller`: Flux's image reflector (and update automation) as a controller in the cluster.

A separate process rather than a `stockade serve` flag: image automation needs registry egress, git
credentials and write access to git, none of which the admission webhook should hold, and its scans must
never compete with admission requests for the same worker. It is the same binary and uses the same lease
based leader election as serve, with a lease of its own.
"""

from __future__ import annotations

import logging
import signal
import tempfile
import threading
from typing import Any

import click

log = logging.getLogger("stockade.images.controller")

DEFAULT_LEASE = "stockade-image-automation"


@click.command("controller")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None, help="Kubeconfig (default: in-cluster, then $KUBECONFIG / ~/.kube/config).")
@click.option("--store", "store_dir", type=click.Path(file_okay=False), default=None, help="Tag database directory (default: a fresh temporary directory; tags are rescanned after a restart, as in Flux).")
@click.option("--resync", type=click.FloatRange(min=0.1), default=30.0, show_default=True, help="Seconds before an ImageUpdateAutomation is tried again after a transient failure (its spec.interval when shorter). Objects are reconciled on watch events and requeued after their spec.interval; nothing is relisted.")
@click.option("--max-clone-size", type=click.IntRange(min=1024), default=256 * 1024 * 1024, show_default=True, help="Bytes: ImageUpdateAutomation refuses a repository whose fetched pack or checked-out files would be larger.")
@click.option("--leader-election/--no-leader-election", default=True, show_default=True, help="Reconcile only while holding the lease.")
@click.option("--namespace", default="default", show_default=True, help="Namespace of the leader Lease.")
@click.option("--lease-name", default=DEFAULT_LEASE, show_default=True)
@click.option("--automation/--no-automation", default=True, show_default=True, help="Also run ImageUpdateAutomation (git commits and pushes).")
@click.option("--event-components", type=click.Choice(["flux", "stockade"]), default="flux", show_default=True, help="reportingController/source.component of Events: flux = Flux's controller names (image-reflector-controller, image-automation-controller), so `flux events` and tools selecting Flux's Events work unchanged; stockade = 'stockade' for all.")
def controller(kubeconfig: str | None, store_dir: str | None, resync: float, max_clone_size: int, leader_election: bool, namespace: str, lease_name: str, automation: bool, event_components: str) -> None:
    """Reconcile ImageRepository, ImagePolicy (image.toolkit.fluxcd.io/v1) and ImageUpdateAutomation objects
    until SIGTERM/SIGINT, writing their status as Flux's controllers do."""
    from stockade.controllers.events import EventRecorder
    from stockade.controllers.flux_runtime import FluxImageRuntime
    from stockade.controllers.leader import LeaderElector
    from stockade.kube.connection import load_api_client
    from stockade.reflector.store import TagStore

    from stockade.cli.allocator import tune

    tune()  # before the informer and queue threads start
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api_client = load_api_client(kubeconfig)
    elector_factory = None
    if leader_election:
        def elector_factory(gained: Any, lost: Any) -> LeaderElector:
            return LeaderElector(api_client, namespace, lease_name, on_started_leading=gained, on_stopped_leading=lost)
    recorder = EventRecorder(api_client, event_components)
    store = TagStore(store_dir or tempfile.mkdtemp(prefix="stockade-tags-"))
    runtime = FluxImageRuntime(api_client, store, automation=automation, recorder=recorder, retry_seconds=resync,
                               max_clone_bytes=max_clone_size, elector_factory=elector_factory)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    runtime.start()
    log.info("image controllers running (leader election %s)", "on" if leader_election else "off")
    stop.wait()
    runtime.stop()
