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
@click.option("--resync", type=click.FloatRange(min=0.1), default=5.0, show_default=True, help="Seconds between passes over the objects.")
@click.option("--leader-election/--no-leader-election", default=True, show_default=True, help="Reconcile only while holding the lease.")
@click.option("--namespace", default="default", show_default=True, help="Namespace of the leader Lease.")
@click.option("--lease-name", default=DEFAULT_LEASE, show_default=True)
@click.option("--automation/--no-automation", default=True, show_default=True, help="Also run ImageUpdateAutomation (git commits and pushes).")
@click.option("--event-components", type=click.Choice(["flux", "stockade"]), default="flux", show_default=True, help="reportingController/source.component of Events: flux = Flux's controller names (image-reflector-controller, image-automation-controller), so `flux events` and tools selecting Flux's Events work unchanged; stockade = 'stockade' for all.")
def controller(kubeconfig: str | None, store_dir: str | None, resync: float, leader_election: bool, namespace: str, lease_name: str, automation: bool, event_components: str) -> None:
    """Reconcile ImageRepository, ImagePolicy (image.toolkit.fluxcd.io/v1) and ImageUpdateAutomation objects
    until SIGTERM/SIGINT, writing their status as Flux's controllers do."""
    from stockade.controllers.events import EventRecorder
    from stockade.controllers.flux_image import ClusterObjects, ImageReflectorController
    from stockade.controllers.leader import LeaderElector
    from stockade.controllers.registration import load_api_client
    from stockade.reflector.store import TagStore

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    api_client = load_api_client(kubeconfig)
    leading = threading.Event()
    elector: LeaderElector | None = None
    if leader_election:
        elector = LeaderElector(api_client, namespace, lease_name, on_started_leading=leading.set, on_stopped_leading=leading.clear)
        elector.start()
    else:
        leading.set()
    objects = ClusterObjects(api_client)
    recorder = EventRecorder(api_client, event_components)
    store = TagStore(store_dir or tempfile.mkdtemp(prefix="stockade-tags-"))
    workers: list[Any] = [ImageReflectorController(objects, store, is_leader=leading.is_set, resync=resync, recorder=recorder)]
    if automation:
        from stockade.controllers.flux_automation import ImageUpdateAutomationController

        workers.append(ImageUpdateAutomationController(objects, is_leader=leading.is_set, resync=resync, recorder=recorder))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    for worker in workers:
        worker.start()
    log.info("image controllers running (leader election %s)", "on" if leader_election else "off")
    stop.wait()
    for worker in workers:
        worker.stop()
    if elector is not None:
        elector.stop()
