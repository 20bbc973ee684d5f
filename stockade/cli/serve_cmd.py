"""`stockade serve` (the admission webhook) and `stockade cleanup` (remove webhook configurations left behind)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

DEFAULT_NAMESPACE = os.environ.get("STOCKADE_NAMESPACE", "stockade")
DEFAULT_SERVICE = os.environ.get("STOCKADE_SERVICE", "stockade-svc")


@click.command("serve")
@click.argument("policies", nargs=-1, required=False, type=click.Path(exists=True))
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option("--port", default=9443, show_default=True, type=int, help="HTTPS port (0 picks a free one).")
@click.option("--metrics-port", type=int, default=None, help="Also serve /metrics over plain HTTP on this port.")
@click.option("--cert-dir", type=click.Path(file_okay=False, path_type=Path), default=None, help="Where the self-signed CA and serving pair are kept (default: a temp dir). Must be owned by us and not group/world-writable; created mode 0700 if missing.")
@click.option("--tls-cert-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Serving certificate (PEM); reloaded when it changes.")
@click.option("--tls-key-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Serving key (PEM).")
@click.option("--tls-ca-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="CA bundle for caBundle when using --tls-cert-file.")
@click.option("--tls-secret", default="", help="With --register-webhooks: share the self-signed CA and serving pair through this Secret in --namespace (needed for several replicas).")
@click.option("--san", "sans", multiple=True, help="Extra DNS name or IP for the self-signed certificate (repeatable).")
@click.option("--from-cluster", is_flag=True, default=False, help="Also serve the policies stored in the cluster (ClusterPolicy, Policy, PolicyException and the policies.kyverno.io kinds), kept current by a watch; their status is written back.")
@click.option("--register-webhooks/--no-register-webhooks", default=False, show_default=True, help="Create webhook configurations for the loaded policies and remove them on SIGTERM.")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None, help="Kubeconfig (default: in-cluster, then $KUBECONFIG / ~/.kube/config).")
@click.option("--webhook-url", default="", help="Base URL the apiserver should call (instead of the Service), e.g. https://127.0.0.1:9443.")
@click.option("--service-name", default=DEFAULT_SERVICE, show_default=True, help="Service fronting the webhook.")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True, help="Namespace we run in (excluded from webhooks).")
@click.option("--exclude-namespace", "exclude_namespaces", multiple=True, help="More namespaces the webhooks skip (kube-system and --namespace always are).")
@click.option("--webhook-timeout", default=10, show_default=True, type=click.IntRange(1, 30), help="timeoutSeconds of the webhooks.")
@click.option("--reload-interval", default=5.0, show_default=True, type=float, help="Seconds between checks of policy files for changes.")
@click.option("--cert-check-interval", default=3600.0, show_default=True, type=float, help="Seconds between certificate renewal/reload checks.")
@click.option("--insecure-registry", "insecure_registries", multiple=True, help="Registry (host[:port]) reached without TLS verification for verifyImages (repeatable).")
@click.option("--registry-ca-file", type=click.Path(exists=True, dir_okay=False), default=None, help="Extra CA bundle for registries (verifyImages).")
@click.option("--policy-reports/--no-policy-reports", default=True, show_default=True, help="With --register-webhooks: write a PolicyReport per admitted resource (needs the wgpolicyk8s.io CRDs).")
@click.option("--leader-election/--no-leader-election", default=True, show_default=True, help="With --register-webhooks: replicas elect a leader (a Lease in --namespace) for registration, policy status, background scans and generate resync; webhooks are removed only by the last replica to stop.")
@click.option("--lease-name", default="stockade-leader", show_default=True, help="Name of the leader election Lease.")
@click.option("--background-scan-interval", default=3600.0, show_default=True, type=click.FloatRange(min=0), help="With --register-webhooks: seconds between background scans of existing resources into PolicyReports (0 disables).")
@click.option("--generate/--no-generate", default=True, show_default=True, help="With --register-webhooks: apply generate rules in the cluster (create and synchronise downstream resources).")
@click.option("--events/--no-events", default=True, show_default=True, help="With --register-webhooks: record a Kubernetes Event for each denial.")
@click.option("--config-map", "config_map", default="kyverno/kyverno", show_default=True, help="With --from-cluster: Kyverno's dynamic configuration ConfigMap (NAMESPACE/NAME), watched: resourceFilters, excluded users/groups/roles, defaultRegistry, webhooks selectors, matchConditions, webhook labels/annotations, generateSuccessEvents.")
@click.option("--exception-namespace", "exception_namespaces", multiple=True, help="Honour PolicyExceptions only in these namespaces (repeatable; default: every namespace).")
@click.option("--tracing-endpoint", default="", help="OTLP/HTTP collector base URL (e.g. http://otel-collector:4318); one span per admission request.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64), help="Processes answering admission requests on the same port (policy evaluation is CPU-bound).")
@click.option("--worker", "worker_mode", is_flag=True, hidden=True, help="Internal: run as a worker of a primary `serve`.")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]), show_default=True)
def serve(policies: tuple[str, ...], **options: Any) -> None:
    """Serve POLICIES (files or directories) and/or the cluster's policies (--from-cluster) as an HTTPS admission webhook."""
    if not policies and not options["from_cluster"]:
        raise click.UsageError("nothing to serve: give POLICIES (files or directories) and/or --from-cluster")
    if (options["tls_cert_file"] is None) != (options["tls_key_file"] is None):
        raise click.UsageError("--tls-cert-file and --tls-key-file go together")
    if options["tls_ca_file"] is not None and options["tls_cert_file"] is None:
        raise click.UsageError("--tls-ca-file only applies with --tls-cert-file/--tls-key-file")
    if "/" not in options["config_map"].strip("/") or options["config_map"].count("/") != 1:
        raise click.BadParameter(f"expected NAMESPACE/NAME, got {options['config_map']!r}", param_hint="--config-map")
    if options["tls_secret"] and not options["register_webhooks"]:
        raise click.UsageError("--tls-secret needs --register-webhooks (it is stored in the cluster)")
    if options["workers"] > 1 and options["port"] == 0:
        raise click.UsageError("--workers needs a fixed --port")
    logging.basicConfig(level=options["log_level"].upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(run_serve(list(policies), **options))


def run_serve(policies: list[str], **options: Any) -> int:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        return asyncio.run(_serve(policies, **options))
    except _StartupError as exc:
        click.echo(f"stockade serve: {exc}", err=True)
        return 1


class _StartupError(Exception):
    pass


async def _serve(policies: list[str], **options: Any) -> int:
    import tempfile

    from stockade.policy.loader import LoadError
    from stockade.webhook.certs import CertificateFileError, CertificateManager, ensure_private_directory
    from stockade.webhook.policystore import PolicyStore
    from stockade.webhook.server import ServerConfig, ServerState, WebhookServer

    log = logging.getLogger("stockade.serve")
    namespace = options["namespace"]
    hosts = ["localhost", "127.0.0.1", *options["sans"]]
    service = options["service_name"]
    hosts += [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
    cert_dir = options["cert_dir"] or Path(tempfile.mkdtemp(prefix="stockade-certs-"))
    if not options["tls_cert_file"]:
        try:
            ensure_private_directory(cert_dir)
        except CertificateFileError as exc:
            raise _StartupError(f"--cert-dir {exc}") from None
    certs = CertificateManager(
        hosts=list(dict.fromkeys(hosts)),
        directory=None if options["tls_cert_file"] else cert_dir,
        cert_file=options["tls_cert_file"],
        key_file=options["tls_key_file"],
        ca_file=options["tls_ca_file"],
    )

    api_client = None
    cluster_client = None
    if options["worker_mode"]:
        # workers use the cluster (namespace labels, reports) but leave registration to the primary
        options = {**options, "metrics_port": None}
    if options["register_webhooks"] or options["from_cluster"]:
        from stockade.controllers.registration import load_api_client

        try:
            cluster_client = load_api_client(options["kubeconfig"])
        except Exception as exc:
            raise _StartupError(f"cannot reach Kubernetes: {exc}") from exc
    if options["register_webhooks"]:
        from stockade.controllers.registration import NamespaceLabelCache

        api_client = cluster_client
        namespace_labels = NamespaceLabelCache(api_client)
        if options["tls_secret"] and not certs.user_provided and not options["worker_mode"]:
            from stockade.controllers.tlssecret import SecretStore

            certs.store = SecretStore(api_client, namespace, options["tls_secret"])
    else:
        namespace_labels = None

    from stockade.cli.registry_access import make_image_verifier

    verifier, verification_cache = make_image_verifier(tuple(options["insecure_registries"]), options["registry_ca_file"])
    cluster_source = _start_cluster_source(cluster_client, options) if options["from_cluster"] else None
    kyverno_config, config_watch = _start_config_watch(cluster_client, options) if options["from_cluster"] else (None, None)
    engine_factory: Any = None
    evaluator_options: dict[str, Any] = {"default_timeout_seconds": float(options["webhook_timeout"])}
    if api_client is not None:
        from functools import partial

        from stockade.controllers.clusterdata import ClusterData
        from stockade.controllers.userroles import RoleResolver
        from stockade.engine.engine import Engine

        # configMap/apiCall context entries and clone sources answered by the API server
        cluster_data = ClusterData(api_client)
        engine_factory = partial(Engine, providers=cluster_data.providers(), resource_lookup=cluster_data.lookup)
        evaluator_options["role_resolver"] = RoleResolver(api_client)
    if kyverno_config is not None:
        engine_factory = _configured_engine_factory(engine_factory, kyverno_config)
    store = PolicyStore(
        policies,
        namespace_labels=namespace_labels,
        image_verifier=verifier,
        verification_cache=verification_cache,
        sources=[source for source in (cluster_source, kyverno_config) if source is not None],
        evaluator_options=evaluator_options,
        exception_namespaces=list(options["exception_namespaces"]) or None,
        **({"engine_factory": engine_factory} if engine_factory is not None else {}),
    )
    services = _cluster_services(api_client, certs, store, cluster_source, options, namespace)
    try:
        store.load()
    except (LoadError, OSError, ValueError) as exc:
        if cluster_source is not None:
            cluster_source.stop()
        raise _StartupError(str(exc)) from exc
    snapshot = store.snapshot
    assert snapshot is not None
    if snapshot.unsupported:
        log.warning("not served by the webhook yet (CEL/admission policies): %s", ", ".join(snapshot.unsupported))

    state = ServerState(store=store, kyverno_config=kyverno_config)
    if services is not None and services.registration is not None:
        services.registration.kyverno_config = kyverno_config
    if api_client is not None:
        _attach_cluster_workers(state, services, api_client, store, options)
    if options["tracing_endpoint"]:
        from stockade.webhook.tracing import Tracing

        state.tracing = Tracing(options["tracing_endpoint"])
    config = ServerConfig(
        host=options["host"],
        port=options["port"],
        metrics_port=options["metrics_port"],
        reload_interval=options["reload_interval"],
        cert_check_interval=options["cert_check_interval"],
        reuse_port=options["workers"] > 1 or options["worker_mode"],
    )
    server = WebhookServer(state, certs, config)
    try:
        await server.start()
    except CertificateFileError as exc:
        if cluster_source is not None:
            cluster_source.stop()
        raise _StartupError(f"TLS certificate: {exc}") from None
    except OSError as exc:
        raise _StartupError(f"cannot listen on {options['host']}:{options['port']}: {exc}") from exc
    click.echo(f"stockade webhook serving {len(snapshot.policies)} policies on https://{options['host']}:{server.port}", err=True)

    workers = _start_workers(policies, options, certs, cert_dir) if options["workers"] > 1 else []

    if services is not None:
        try:
            await asyncio.to_thread(services.start)
        except Exception as exc:
            _stop_workers(workers)
            await server.stop()
            raise _StartupError(f"webhook registration failed: {exc}") from exc

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("shutting down")
    if services is not None:
        try:
            removed = await asyncio.to_thread(services.stop)
            log.info("removed %d webhook configurations", removed)
        except Exception:
            log.exception("could not remove webhook configurations; run `stockade cleanup`")
    await asyncio.to_thread(_stop_workers, workers)
    await server.stop()
    if cluster_source is not None:
        await asyncio.to_thread(cluster_source.stop)
    if config_watch is not None:
        await asyncio.to_thread(config_watch.stop)
    for closable in (state.events, state.reports):
        if closable is not None:
            await asyncio.to_thread(closable.close)
    return 0


def _cluster_services(api_client: Any, certs: Any, store: Any, cluster_source: Any, options: dict[str, Any], namespace: str) -> Any:
    """Leadership and registration for the primary process; None for workers and runs without --register-webhooks."""
    if api_client is None or options["worker_mode"]:
        if cluster_source is not None and not options["worker_mode"]:
            store.listeners.append(cluster_source.publish_status)
        return None
    from stockade.controllers.manager import ClusterServices, LeadershipOptions, WebhookRegistration
    from stockade.controllers.webhookconfig import WebhookTarget

    leadership = LeadershipOptions(namespace=namespace, leader_election=options["leader_election"], lease_name=options["lease_name"])
    services = ClusterServices(api_client, leadership, status_publisher=cluster_source, store=store)
    if options["webhook_url"]:
        target = WebhookTarget(url=options["webhook_url"])
    else:
        target = WebhookTarget(service_name=options["service_name"], service_namespace=namespace)
    services.registration = WebhookRegistration(
        api_client,
        certs,
        store,
        target,
        excluded_namespaces=["kube-system", namespace, *options["exclude_namespaces"]],
        timeout_seconds=options["webhook_timeout"],
        is_leader=services.is_leader,
    )
    if cluster_source is not None:
        store.listeners.append(services.publish_status_if_leader)
    return services


def _attach_cluster_workers(state: Any, services: Any, api_client: Any, store: Any, options: dict[str, Any]) -> None:
    """Reports, events and (on the primary) generate and background scans."""
    if options["policy_reports"]:
        from stockade.controllers.reports import ReportWriter

        state.reports = ReportWriter(api_client)
    if options["events"]:
        from stockade.controllers.events import EventRecorder

        state.events = EventRecorder(api_client, kyverno_config=state.kyverno_config)
    if services is None:
        return
    if options["generate"]:
        from stockade.controllers.generate import GenerateController
        from stockade.controllers.manager import DeduplicatingSubmitter

        generator = GenerateController(api_client, store, is_leader=services.is_leader)
        services.background.append(generator)
        state.generator = DeduplicatingSubmitter(generator)
    from stockade.controllers.cleanup import ScheduledDeletionController

    # DeletingPolicy / CleanupPolicy schedules (the controller acts only while leading)
    services.background.append(ScheduledDeletionController(api_client, store, events=state.events, is_leader=services.is_leader))
    from stockade.controllers.ttl import TtlController

    services.background.append(TtlController(api_client, is_leader=services.is_leader))  # cleanup.kyverno.io/ttl
    if options["background_scan_interval"] > 0:
        from stockade.controllers.background import BackgroundScanner

        scanner = BackgroundScanner(api_client, store, state.reports, interval=options["background_scan_interval"], is_leader=services.is_leader)
        services.background.append(scanner)


def _start_config_watch(api_client: Any, options: dict[str, Any]) -> tuple[Any, Any]:
    """Kyverno's ConfigMap, watched; the first state is awaited briefly, then defaults apply until it arrives."""
    from stockade.controllers.kyvernoconfigwatch import ConfigMapWatch, InvalidConfigMapReference, LiveKyvernoConfig, parse_configmap_reference

    try:
        namespace, name = parse_configmap_reference(options["config_map"])
    except InvalidConfigMapReference as exc:
        raise _StartupError(str(exc)) from exc
    live = LiveKyvernoConfig(source=f"{namespace}/{name}")
    watch = ConfigMapWatch(api_client, live, namespace, name)
    watch.start()
    if not watch.wait_synced(timeout=15):
        logging.getLogger("stockade.serve").warning("ConfigMap %s/%s not read within 15s: Kyverno's defaults apply until it is", namespace, name)
    return live, watch


def _configured_engine_factory(base: Any, live: Any) -> Any:
    """Engines built for each policy snapshot take the ConfigMap's defaultRegistry settings in force then."""
    from stockade.engine.engine import Engine

    build = base or Engine

    def factory(**kwargs: Any) -> Any:
        config = live.current
        return build(default_registry=config.default_registry, registry_mutation=config.enable_default_registry_mutation, **kwargs)

    return factory


def _start_cluster_source(api_client: Any, options: dict[str, Any]) -> Any:
    """Watch the cluster's policies and wait for the first complete listing, so the first snapshot has them all.
    Workers only read: the primary writes status."""
    from stockade.controllers.policywatch import ClusterPolicySource

    source = ClusterPolicySource(api_client, write_status=not options["worker_mode"])
    source.start()
    if not source.wait_synced(timeout=60):
        source.stop()
        raise _StartupError("policies from the cluster were not listed within 60s (is the API server reachable, and may we list the policy CRDs?)")
    if source.missing_kinds:
        logging.getLogger("stockade.serve").info("policy kinds not installed in the cluster: %s", ", ".join(source.missing_kinds))
    return source


def _start_workers(policies: list[str], options: dict[str, Any], certs: Any, cert_dir: Path) -> list[Any]:
    """Extra processes bound to the same port; they read the serving pair the primary keeps in files and reload it
    when it changes, so rotation reaches them without a restart."""
    import subprocess

    if certs.user_provided:
        tls = ["--tls-cert-file", str(options["tls_cert_file"]), "--tls-key-file", str(options["tls_key_file"])]
    else:
        tls = ["--tls-cert-file", str(cert_dir / "tls.crt"), "--tls-key-file", str(cert_dir / "tls.key")]
    command = [
        sys.executable, "-c", "from stockade.cli.main import main; main()", "serve", *policies, "--worker",
        "--host", options["host"], "--port", str(options["port"]), *tls,
        "--reload-interval", str(options["reload_interval"]),
        "--cert-check-interval", str(min(options["cert_check_interval"], 60.0)),
        "--log-level", options["log_level"],
        *(["--tracing-endpoint", options["tracing_endpoint"]] if options["tracing_endpoint"] else []),
        *(["--register-webhooks"] if options["register_webhooks"] else []),
        *(["--from-cluster", "--config-map", options["config_map"]] if options["from_cluster"] else []),
        *(["--kubeconfig", options["kubeconfig"]] if options["kubeconfig"] else []),
        *([] if options["policy_reports"] else ["--no-policy-reports"]),
        *[arg for registry in options["insecure_registries"] for arg in ("--insecure-registry", registry)],
        *(["--registry-ca-file", options["registry_ca_file"]] if options["registry_ca_file"] else []),
    ]
    return [subprocess.Popen(command) for _ in range(options["workers"] - 1)]


def _stop_workers(workers: list[Any]) -> None:
    import subprocess

    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


@click.command("cleanup")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None, help="Kubeconfig (default: in-cluster, then $KUBECONFIG / ~/.kube/config).")
def cleanup(kubeconfig: str | None) -> None:
    """Remove the webhook configurations stockade created (e.g. after a crash left them behind)."""
    from stockade.controllers.registration import WebhookRegistrar, load_api_client

    try:
        removed = WebhookRegistrar(load_api_client(kubeconfig)).remove_all()
    except Exception as exc:
        click.echo(f"stockade cleanup: {exc}", err=True)
        sys.exit(1)
    click.echo(f"removed {removed} webhook configuration(s)")
