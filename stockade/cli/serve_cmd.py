"""`stockade serve` (the admission webhook) and `stockade cleanup` (remove webhook configurations left behind)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from stockade.cli.common import FAILURE_EXIT, USAGE_EXIT, print_error
from stockade.errors import StockadeError

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
@click.option("--tls-key-algorithm", type=click.Choice(["RSA", "ECDSA", "Ed25519"], case_sensitive=False), default="ECDSA", show_default=True, help="Key algorithm of the self-managed CA and serving certificate (Kyverno's tlsKeyAlgorithm); a stored pair of another algorithm is replaced.")
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
@click.option("--enable-reporting", default=",".join(("validate", "mutate", "mutateExisting", "imageVerify", "generate")), show_default=True, help="Comma-separated rule kinds whose results go into reports (Kyverno's --enableReporting).")
@click.option("--allowed-results", default="pass,fail,warn,error,skip", show_default=True, help="Comma-separated rule results that go into reports (Kyverno's --allowedResults), e.g. fail to keep only violations.")
@click.option("--openreports", is_flag=True, default=False, help="Write reports as openreports.io/v1alpha1 Reports and ClusterReports instead of wgpolicyk8s.io PolicyReports (Kyverno's openreportsEnabled; needs the openreports.io CRDs).")
@click.option("--leader-election/--no-leader-election", default=True, show_default=True, help="With --register-webhooks: replicas elect a leader (a Lease in --namespace) for registration, policy status, background scans and generate resync; webhooks are removed only by the last replica to stop.")
@click.option("--lease-name", default="stockade-leader", show_default=True, help="Name of the leader election Lease.")
@click.option("--background-scan-interval", default=3600.0, show_default=True, type=click.FloatRange(min=0), help="With --register-webhooks: seconds between background scans of existing resources into PolicyReports (0 disables).")
@click.option("--generate/--no-generate", default=True, show_default=True, help="With --register-webhooks: apply generate rules in the cluster (create and synchronise downstream resources).")
@click.option("--update-requests/--no-update-requests", default=True, show_default=True, help="With --generate: record admitted generate and mutate-existing work as Kyverno's UpdateRequests (kyverno.io/v2) in --namespace before answering, so the leader completes it after a crash or restart; off: in memory only.")
@click.option("--background-service-account", default="", help="With --register-webhooks: the background controller's user (Kyverno's --backgroundServiceAccountName, e.g. system:serviceaccount:kyverno:kyverno-background-controller): a generate rule must fit its RBAC permissions, checked by SubjectAccessReview when the policy is created or updated, and its requests are background requests that MutatingPolicies skip unless spec.evaluation.skipBackgroundRequests is false (default: none, no check).")
@click.option("--admission-service-account", default="", help="With --register-webhooks: the admission controller's user (e.g. system:serviceaccount:kyverno:kyverno-admission-controller): GlobalContextEntry data for admission is loaded as this user (impersonated), so its RBAC applies as it does to Kyverno's admission controller; an API call it may not make fails with \"permission denied\" (default: our own rights).")
@click.option("--cleanup-service-account", default="", help="With --register-webhooks: the cleanup controller's user (e.g. system:serviceaccount:kyverno:kyverno-cleanup-controller): DeletingPolicies and CleanupPolicies list and delete their targets as this user (impersonated), so objects its RBAC does not cover stay, as with Kyverno's cleanup controller (default: our own rights).")
@click.option("--reports-service-account", default="", help="With --register-webhooks: the reports controller's user (Kyverno's reports controller service account, e.g. system:serviceaccount:kyverno:kyverno-reports-controller): a CEL policy with background processing on is ready for reporting only when this account may get, list and watch what it matches (SubjectAccessReview), as Kyverno's RBACPermissionsGranted condition says (default: none, always granted).")
@click.option("--events/--no-events", default=True, show_default=True, help="With --register-webhooks: record a Kubernetes Event for each denial.")
@click.option("--force-failure-policy-ignore", is_flag=True, default=False, help="Treat every policy as failurePolicy Ignore (Kyverno's forceFailurePolicyIgnore install option): its webhooks are registered with Ignore and its evaluation errors admit.")
@click.option("--allow-http-in-namespaced-policies", is_flag=True, default=False, help="Namespaced CEL policies (NamespacedValidatingPolicy and the other namespaced kinds, or a namespaced ValidatingPolicy...) may call http.Get/Post (Kyverno's --allowHTTPInNamespacedPolicies). Off by default: a namespace's policy author could otherwise make the server call any address it reaches (server-side request forgery); enable it only with a restrictive --http-blocklist or network policies.")
@click.option("--http-blocklist", "http_blocklist", multiple=True, metavar="HOST_OR_CIDR", help="A host name or CIDR range that CEL http.Get/Post and apiCall service.url calls must not reach (Kyverno's --httpBlocklist; repeatable, or comma-separated). Host names match the URL's host; ranges match every address the host resolves to (through a proxy too: a destination that cannot be resolved then is refused); redirects are checked hop by hop. Given at all, it replaces the default list (Kyverno's: 169.254.169.254/32, 169.254.169.253/32, fd00:ec2::254/128, metadata.google.internal, 127.0.0.0/8, ::1/128); --http-blocklist '' blocks nothing.")
@click.option("--event-components", type=click.Choice(["kyverno", "stockade"]), default="stockade", show_default=True, help="reportingComponent of Events: stockade = 'stockade' for all; kyverno = Kyverno's names (kyverno-admission, kyverno-generate, kyverno-mutate, kyverno-cleanup), a compatibility setting for tools and tests that select Kyverno's Events.")
@click.option("--webhook-names", type=click.Choice(["stockade", "kyverno"]), default="stockade", show_default=True, help="Names and managed-by label of the webhook configurations: stockade = stockade-resource-*-webhook-cfg, label webhook.stockade.io/managed-by; kyverno = Kyverno's (kyverno-resource-*-webhook-cfg, webhook.kyverno.io/managed-by: kyverno, kept registered even when empty), a compatibility setting for tooling and tests written against Kyverno. Do not run it beside Kyverno itself.")
@click.option("--config-map", "config_map", default="kyverno/kyverno", show_default=True, help="With --from-cluster: Kyverno's dynamic configuration ConfigMap (NAMESPACE/NAME), watched: resourceFilters, excluded users/groups/roles, defaultRegistry, webhooks selectors, matchConditions, webhook labels/annotations, generateSuccessEvents.")
@click.option("--validating-admission-policy-reports", is_flag=True, default=False, help="With --from-cluster and background scans: report on ValidatingAdmissionPolicies labelled reports.kyverno.io/enabled=true, with their bindings (Kyverno's validatingAdmissionPolicyReports).")
@click.option("--mutating-admission-policy-reports", is_flag=True, default=False, help="With --from-cluster and background scans: report on MutatingAdmissionPolicies labelled reports.kyverno.io/enabled=true, with their bindings (Kyverno's mutatingAdmissionPolicyReports).")
@click.option("--kyverno-tls-secrets", is_flag=True, default=False, help="With --register-webhooks and self-managed certificates: also publish the CA and serving pair as Kyverno's Secrets (<service>.<namespace>.svc.kyverno-tls-ca / -tls-pair), a compatibility setting for tools that read them.")
@click.option("--policy-exceptions/--no-policy-exceptions", default=True, show_default=True, help="Honour PolicyExceptions (kyverno.io and policies.kyverno.io); off is Kyverno's policyExceptions.enabled=false install option.")
@click.option("--exception-namespace", "exception_namespaces", multiple=True, help="Honour PolicyExceptions only in these namespaces (repeatable; default: every namespace).")
@click.option("--tracing-endpoint", default="", help="OTLP collector (http/protobuf: base URL such as http://otel-collector:4318; grpc: host:port or URL); spans per request, policy, rule and registry check.")
@click.option("--tracing-protocol", default="http/protobuf", type=click.Choice(["http/protobuf", "grpc"]), show_default=True, help="OTLP transport.")
@click.option("--tracing-header", "tracing_headers", multiple=True, help="KEY=VALUE header sent with every OTLP export (repeatable), e.g. an API key.")
@click.option("--tracing-sampling-ratio", default=1.0, show_default=True, type=click.FloatRange(0.0, 1.0), help="Share of requests traced when the apiserver sends no sampled traceparent (its decision wins when it does).")
@click.option("--tls-handshake-timeout", default=10.0, show_default=True, type=click.FloatRange(min=0, min_open=True), help="Seconds a client has to complete its TLS handshake.")
@click.option("--header-timeout", default=10.0, show_default=True, type=click.FloatRange(min=0, min_open=True), help="Seconds a client has to send a request line and headers (from connecting, or from the first byte after a keep-alive pause).")
@click.option("--body-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True), help="Seconds a client has to send a request body after its headers, and to read a response it has stopped reading.")
@click.option("--idle-timeout", default=120.0, show_default=True, type=click.FloatRange(min=0, min_open=True), help="Seconds an idle keep-alive connection stays open.")
@click.option("--max-connections", default=1000, show_default=True, type=click.IntRange(min=1), help="Open connections per process (TLS handshakes included); further ones are closed at once.")
@click.option("--metrics-namespace", "metrics_namespaces", multiple=True, help="Namespace reported by name in metric labels (repeatable); other namespaces are reported as \"other\".")
@click.option("--workers", default=None, type=click.IntRange(1, 64), help="Worker processes evaluating admission reviews (default: the usable cores); a review that runs past its budget gets its failurePolicy answer and its worker is replaced.")
@click.option("--min-workers", default=1, show_default=True, type=click.IntRange(1, 64), help="Worker processes started with the server; more, up to --workers, start when a review finds every worker busy (each holds the compiled policies: an idle webhook keeps only the workers its load needed).")
@click.option("--worker-memory", default=None, type=click.IntRange(64, 1 << 20), help="Data-segment cap per worker in MiB (default: the container memory limit, or 512 MiB, minus the server's share, divided among the workers).")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]), show_default=True)
@click.option("--decision-log", default="", help="Append one JSON object per admission decision (user, resource, rule results, trace id; bounded fields) to this file; rotated to FILE.1 at --decision-log-max-mib.")
@click.option("--decision-log-max-mib", default=100, show_default=True, type=click.IntRange(1, 1 << 20), help="Size at which the decision log file is rotated.")
@click.option("--log-format", default="text", type=click.Choice(["text", "json"]), show_default=True, help="json: one JSON object per line, with trace_id/span_id when tracing is on.")
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
    from stockade.controllers.egress import BlocklistError, EgressPolicy
    from stockade.controllers.reports import ReportingConfig

    try:
        EgressPolicy.parse(http_blocklist(options))
    except BlocklistError as exc:
        raise click.BadParameter(str(exc), param_hint="--http-blocklist") from None
    try:
        ReportingConfig.parse(options["enable_reporting"], options["allowed_results"])
    except ValueError as exc:
        raise click.UsageError(f"--enable-reporting/--allowed-results: {exc}") from None
    from stockade.webhook.isolation import LOG_FORMAT
    from stockade.webhook.logs import configure_logging

    trace_ids = None
    if options["tracing_endpoint"]:
        from stockade.webhook.tracing import current_trace_ids

        trace_ids = current_trace_ids
    configure_logging(options["log_level"], options["log_format"] == "json", LOG_FORMAT, trace_ids)
    from stockade.cli.allocator import tune

    tune()  # before any thread or worker process starts: they inherit it
    sys.exit(run_serve(list(policies), **options))


def http_blocklist(options: dict[str, Any]) -> tuple[str, ...]:
    """The blocklist entries in force: --http-blocklist's (repeated and/or comma-separated; an empty value clears
    the list), Kyverno's default list when the option is not given."""
    from stockade.controllers.egress import KYVERNO_DEFAULT_BLOCKLIST, split_entries

    given = tuple(options.get("http_blocklist") or ())
    return split_entries(given) if given else KYVERNO_DEFAULT_BLOCKLIST


def run_serve(policies: list[str], **options: Any) -> int:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        return asyncio.run(_serve(policies, **options))
    except _StartupError as exc:
        print_error(str(exc))
        return exc.exit_code


class _StartupError(StockadeError):
    """The server cannot start (the cluster is unreachable, the port is taken...): exit status 1."""

    exit_code = FAILURE_EXIT


class _StartupInputError(_StartupError):
    """A file or setting given to the server cannot be used (a policy, a certificate, --cert-dir): exit status 2."""

    exit_code = USAGE_EXIT


async def _serve(policies: list[str], **options: Any) -> int:
    import tempfile

    if os.environ.get("STOCKADE_HEAP_REPORT"):  # a benchmark's diagnosis aid (stockade/cli/heapreport.py)
        from stockade.cli.heapreport import install

        install(asyncio.get_running_loop())

    from stockade.policy.loader import LoadError
    from stockade.webhook.certs import CertificateFileError, CertificateManager, KeyAlgorithm, ensure_private_directory
    from stockade.webhook.httplimits import HttpLimits
    from stockade.webhook.policystore import PolicyStore
    from stockade.webhook.isolation import SHUTDOWN_DRAIN_SECONDS, IsolatedEvaluations
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
            raise _StartupInputError(f"--cert-dir {exc}") from None
    certs = CertificateManager(
        hosts=list(dict.fromkeys(hosts)),
        directory=None if options["tls_cert_file"] else cert_dir,
        cert_file=options["tls_cert_file"],
        key_file=options["tls_key_file"],
        ca_file=options["tls_ca_file"],
        algorithm=KeyAlgorithm.parse(str(options.get("tls_key_algorithm") or "ECDSA")),
    )

    api_client = None
    cluster_client = None
    if options["register_webhooks"] or options["from_cluster"]:
        from stockade.kube.connection import load_api_client

        try:
            cluster_client = load_api_client(options["kubeconfig"])
        except Exception as exc:
            raise _StartupError(f"cannot reach Kubernetes: {exc}") from exc
    if options["register_webhooks"]:
        api_client = cluster_client
        if options["tls_secret"] and not certs.user_provided:
            from stockade.controllers.tlssecret import SecretStore

            certs.store = SecretStore(api_client, namespace, options["tls_secret"])
        if options.get("kyverno_tls_secrets") and not certs.user_provided:
            from stockade.controllers.tlssecret import KyvernoTlsSecrets

            certs.on_pair_change = KyvernoTlsSecrets(api_client, namespace, service).publish

    settings = EvaluationSettings(
        kubeconfig=options["kubeconfig"],
        cluster=bool(options["register_webhooks"]),
        insecure_registries=tuple(options["insecure_registries"]),
        registry_ca_file=options["registry_ca_file"],
        webhook_timeout=float(options["webhook_timeout"]),
        exception_namespaces=tuple(options["exception_namespaces"]),
        policy_exceptions=bool(options.get("policy_exceptions", True)),
        background_user=str(options.get("background_service_account") or ""),
        admission_user=str(options.get("admission_service_account") or ""),
        http_blocklist=http_blocklist(options),
        allow_namespaced_http=bool(options.get("allow_http_in_namespaced_policies")),
    )
    cluster_source = _start_cluster_source(cluster_client, options) if options["from_cluster"] else None
    kyverno_config, config_watch = _start_config_watch(cluster_client, options) if options["from_cluster"] else (None, None)
    store_options = evaluation_store_options(settings, api_client)
    if kyverno_config is not None:
        store_options["engine_factory"] = _configured_engine_factory(store_options.get("engine_factory"), kyverno_config)
    if options["register_webhooks"]:
        store_options["controller_kinds"] = _controller_kinds(options)
    store = PolicyStore(
        policies,
        sources=[source for source in (cluster_source, kyverno_config) if source is not None],
        force_failure_policy_ignore=bool(options["force_failure_policy_ignore"]),
        **store_options,
    )
    services = _cluster_services(api_client, certs, store, cluster_source, options, namespace)
    try:
        store.load()
    except (LoadError, OSError, ValueError) as exc:
        if cluster_source is not None:
            cluster_source.stop()
        raise _StartupInputError(str(exc)) from exc
    snapshot = store.snapshot
    assert snapshot is not None
    if snapshot.unsupported:
        log.warning("not served by the webhook yet (CEL/admission policies): %s", ", ".join(snapshot.unsupported))

    state = ServerState(store=store, kyverno_config=kyverno_config)
    if services is not None and services.registration is not None:
        services.registration.kyverno_config = kyverno_config
    pool = _start_evaluation_pool(settings, options)
    try:
        await pool.start(list(snapshot.documents), _engine_settings(kyverno_config), snapshot.generation, snapshot.document_keys)
    except Exception as exc:
        await pool.close(0)
        if cluster_source is not None:
            cluster_source.stop()
        raise _StartupError(f"evaluation workers did not start: {exc}") from exc
    # the workers get each snapshot before it is installed: no review is decided against policies they lack
    store.before_install.append(
        lambda changed: pool.publish(list(changed.documents), _engine_settings(kyverno_config), changed.generation, changed.document_keys)
    )
    store.start()  # watch events rebuild at once from here on
    state.evaluations = IsolatedEvaluations(pool)
    if api_client is not None:
        _attach_cluster_workers(state, services, api_client, store, options)
        if state.generator is not None:
            # whether a request is the background controller's own is asked on the event loop for every admitted
            # request: learn our own user (one SelfSubjectReview) now, off the loop, rather than on the first one
            await asyncio.to_thread(state.generator.target.own_username)
    if options["tracing_endpoint"]:
        from stockade.webhook.tracing import Tracing, TracingConfigurationError, TracingSettings, parse_headers

        try:
            tracing_settings = TracingSettings(
                options["tracing_endpoint"],
                protocol=options["tracing_protocol"],
                headers=parse_headers(options["tracing_headers"]),
                sampling_ratio=options["tracing_sampling_ratio"],
            )
            state.tracing = Tracing(tracing_settings)
        except TracingConfigurationError as exc:
            raise click.UsageError(str(exc)) from exc
    if options["decision_log"]:
        from stockade.webhook.decisionlog import DecisionLog

        try:
            state.decision_log = DecisionLog(options["decision_log"], options["decision_log_max_mib"] * 1024 * 1024)
        except OSError as exc:
            raise click.BadParameter(f"{options['decision_log']}: {exc.strerror or exc}", param_hint="--decision-log") from exc
    config = ServerConfig(
        host=options["host"],
        port=options["port"],
        metrics_port=options["metrics_port"],
        reload_interval=options["reload_interval"],
        cert_check_interval=options["cert_check_interval"],
        limits=HttpLimits(
            tls_handshake_timeout=options["tls_handshake_timeout"],
            header_timeout=options["header_timeout"],
            body_timeout=options["body_timeout"],
            idle_timeout=options["idle_timeout"],
            max_connections=options["max_connections"],
        ),
        metrics_namespaces=tuple(options["metrics_namespaces"]),
    )
    server = WebhookServer(state, certs, config)
    try:
        await server.start()
    except CertificateFileError as exc:
        if cluster_source is not None:
            cluster_source.stop()
        await pool.close(0)  # the workers' socketpairs would otherwise outlive the loop
        raise _StartupInputError(f"TLS certificate: {exc}") from None
    except OSError as exc:
        await pool.close(0)
        raise _StartupError(f"cannot listen on {options['host']}:{options['port']}: {exc}") from exc
    # membership, leadership and registration first: "serving" then means other replicas can count on this one
    if services is not None:
        try:
            await asyncio.to_thread(services.start)
        except Exception as exc:
            await pool.close(0)
            await server.stop()
            raise _StartupError(f"webhook registration failed: {exc}") from exc
    click.echo(f"stockade webhook serving {len(snapshot.policies) + len(snapshot.cel_policies)} policies on https://{options['host']}:{server.port}", err=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("shutting down")
    state.shutting_down = True
    # in-flight reviews get a short drain, then their workers are killed and they get the failurePolicy answer;
    # webhook removal runs meanwhile, so the whole stop stays well inside the pod's grace period
    removal = asyncio.create_task(_remove_webhooks(services, log))
    await pool.close(SHUTDOWN_DRAIN_SECONDS)
    await removal
    await server.stop()
    await asyncio.to_thread(store.stop)
    if cluster_source is not None:
        await asyncio.to_thread(cluster_source.stop)
    if config_watch is not None:
        await asyncio.to_thread(config_watch.stop)
    for closable in (state.events, state.reports):
        if closable is not None:
            await asyncio.to_thread(closable.close)
    return 0


async def _remove_webhooks(services: Any, log: logging.Logger) -> None:
    if services is None:
        return
    try:
        removed = await asyncio.to_thread(services.stop)
        log.info("removed %d webhook configurations", removed)
    except Exception:
        log.exception("could not remove webhook configurations; run `stockade cleanup`")


@dataclass(frozen=True)
class EvaluationSettings:
    """What evaluation needs besides the policies; picklable, so each worker process builds the same from it."""

    kubeconfig: str | None
    cluster: bool  # namespace labels, roles and configMap/apiCall context come from the API server
    insecure_registries: tuple[str, ...]
    registry_ca_file: str | None
    webhook_timeout: float
    exception_namespaces: tuple[str, ...]
    background_user: str = ""
    policy_exceptions: bool = True  # False: no PolicyException counts (Kyverno's policyExceptions.enabled=false)
    admission_user: str = ""
    http_blocklist: tuple[str, ...] = ()  # what policies' HTTP calls must not reach (see stockade.controllers.egress)
    allow_namespaced_http: bool = False  # namespaced CEL policies may use http.* (--allow-http-in-namespaced-policies)


def evaluation_store_options(settings: EvaluationSettings, api_client: Any = None) -> dict[str, Any]:
    """PolicyStore keyword arguments for evaluation, built the same way in the server and in every worker (a worker
    passes no client and makes its own from the same kubeconfig: its lookups then die with it when it is killed)."""
    from functools import partial

    from stockade.cli.registry_access import make_image_verifier
    from stockade.controllers.egress import EgressPolicy, configure

    # Kyverno's --httpBlocklist holds for every HTTP call of the process: this runs in the server and in each worker
    configure(EgressPolicy.parse(settings.http_blocklist))
    verifier, verification_cache = make_image_verifier(settings.insecure_registries, settings.registry_ca_file)
    options: dict[str, Any] = {
        "allow_namespaced_http": settings.allow_namespaced_http,
        "image_verifier": verifier,
        "verification_cache": verification_cache,
        "evaluator_options": {"default_timeout_seconds": settings.webhook_timeout, "background_username": settings.background_user},
        "exception_namespaces": (list(settings.exception_namespaces) or None) if settings.policy_exceptions else [],
    }
    if settings.cluster:
        from stockade.controllers.clusterdata import ClusterCelHttp, ClusterCelResources, ClusterData, ClusterGlobalContext
        from stockade.controllers.registration import NamespaceLabelCache, ServedKinds
        from stockade.kube.connection import load_api_client
        from stockade.controllers.userroles import RoleResolver
        from stockade.engine.engine import Engine

        client = api_client if api_client is not None else load_api_client(settings.kubeconfig)
        cluster_data = ClusterData(client)  # configMap/apiCall context entries and clone sources
        # global context entries (ClusterPolicy globalReference and the CEL globalContext library share them); their
        # data is read anew for each review, as Kyverno's entries follow the cluster, with the admission account
        reader = ClusterData(client, ttl_seconds=0.0, impersonate=settings.admission_user) if settings.admission_user else None
        cluster_data.global_context = ClusterGlobalContext(cluster_data, reuse_seconds=0.0, reader=reader)
        options["engine_factory"] = partial(Engine, providers=cluster_data.providers(), resource_lookup=cluster_data.lookup)
        # CEL policies' resource/http/globalContext libraries and authorizer checks
        options["cel_providers"] = {
            "resource": ClusterCelResources(cluster_data),
            "http": ClusterCelHttp(),
            "globalContext": cluster_data.global_context,
        }
        options["cel_authorize"] = cluster_data.authorize
        options["evaluator_options"]["role_resolver"] = RoleResolver(client)
        options["evaluator_options"]["kind_resolver"] = ServedKinds(client)  # Deployment/scale, Pod/ephemeralcontainers
        options["namespace_labels"] = NamespaceLabelCache(client)
    return options


# what evaluation_store_options imports for a cluster (the connection, the cluster data readers)
CLUSTER_WORKER_MODULES = ("stockade.kube.connection", "stockade.controllers.clusterdata", "stockade.controllers.registration", "stockade.controllers.userroles")


def _start_evaluation_pool(settings: EvaluationSettings, options: dict[str, Any]) -> Any:
    from functools import partial

    from stockade.webhook.isolation import EvaluationPool, default_worker_memory, usable_cores

    workers = options["workers"] or usable_cores()
    memory = options["worker_memory"] * 1024 * 1024 if options["worker_memory"] else default_worker_memory(workers)
    minimum = min(options.get("min_workers") or 1, workers)
    logging.getLogger("stockade.serve").info("%d-%d evaluation workers, %d MiB data each", minimum, workers, memory // (1024 * 1024))
    # a worker in a cluster builds its client and lookups (evaluation_store_options) right after it is forked: those
    # modules come from the forkserver, shared, rather than imported again in every worker
    preload = CLUSTER_WORKER_MODULES if settings.cluster else ()
    return EvaluationPool(workers, partial(evaluation_store_options, settings), memory, preload=preload, min_size=minimum)


def _cluster_services(api_client: Any, certs: Any, store: Any, cluster_source: Any, options: dict[str, Any], namespace: str) -> Any:
    """Leadership and registration; None for runs without --register-webhooks."""
    if api_client is None:
        if cluster_source is not None:
            store.listeners.append(cluster_source.publish_status)
        return None
    from stockade.controllers.manager import ClusterServices, LeadershipOptions, WebhookRegistration
    from stockade.controllers.webhookconfig import WEBHOOK_NAMINGS, WebhookTarget

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
        naming=WEBHOOK_NAMINGS[options.get("webhook_names") or "stockade"],
    )
    if cluster_source is not None:
        store.listeners.append(services.publish_status_if_leader)
    from stockade.controllers.crdwatch import CrdWatch

    # a kind a policy names may be installed (or removed) later: rebuild the webhook rules when CRDs change
    services.crd_watch = CrdWatch(api_client, [services.registration.apply_if_leader])
    services.background.append(services.crd_watch)
    return services


def _attach_cluster_workers(state: Any, services: Any, api_client: Any, store: Any, options: dict[str, Any]) -> None:
    """Reports, events and (on the primary) generate and background scans."""
    if options["policy_reports"]:
        from stockade.controllers.reports import OPEN_REPORTS, POLICY_REPORTS, ReportingConfig, ReportWriter

        state.reports = ReportWriter(
            api_client,
            report_api=OPEN_REPORTS if options.get("openreports") else POLICY_REPORTS,
            reporting=ReportingConfig.parse(options.get("enable_reporting"), options.get("allowed_results")),
        )
        if services is not None and services.crd_watch is not None:  # the report CRDs may be installed after we started
            services.crd_watch.listeners.append(state.reports.crds_changed)
    if options["events"]:
        from stockade.controllers.events import EventRecorder

        state.events = EventRecorder(api_client, options.get("event_components") or "stockade", kyverno_config=state.kyverno_config)
    from stockade.controllers.clusterdata import ClusterData
    from stockade.controllers.policychecks import ClusterPolicyChecks

    # the policy webhook's checks that need discovery and RBAC (generate target scopes and permissions)
    state.policy_checker = ClusterPolicyChecks(ClusterData(api_client, ttl_seconds=0.0), background_user=options.get("background_service_account") or "")
    if services is None:
        return
    if options["generate"]:
        from stockade.controllers.generate import GenerateController
        from stockade.controllers.manager import DeduplicatingSubmitter

        generator = GenerateController(
            api_client, store, is_leader=services.is_leader, events=state.events, reports=state.reports,
            background_username=str(options.get("background_service_account") or ""),
        )
        # mutate.targets rules skip the background controller's own requests as generate rules do (one test of who
        # that is: the generate controller's)
        generator.mutate_existing.is_background = generator.is_background_request
        # MutatingPolicy targets named by the ConfigMap's resourceFilters are left alone, as Kyverno's processor does
        generator.cel_mutate.kyverno_config = state.kyverno_config
        services.background.append(generator)
        state.generator = DeduplicatingSubmitter(generator)
        if options["update_requests"]:
            from stockade.controllers.updaterequest import UpdateRequestController, UpdateRequestWriter

            # admitted generate/mutate-existing work survives crashes: UpdateRequests in our namespace, replayed
            # by the leader (Kyverno's kyverno.io/v2 UpdateRequests)
            generator.update_requests = UpdateRequestWriter(api_client, options["namespace"])
            services.background.append(UpdateRequestController(generator, options["namespace"]))
    from stockade.controllers.cleanup import ScheduledDeletionController

    # DeletingPolicy / CleanupPolicy schedules (runs only while leading)
    services.background.append(
        ScheduledDeletionController(api_client, store, events=state.events, acting_user=str(options.get("cleanup_service_account") or ""))
    )
    from stockade.controllers.globalcontextstatus import GlobalContextStatusController

    admission_user = str(options.get("admission_service_account") or "")
    # apiCall GlobalContextEntries get Kyverno's Ready status, loaded as the admission account
    services.background.append(
        GlobalContextStatusController(api_client, reader=ClusterData(api_client, ttl_seconds=0.0, impersonate=admission_user) if admission_user else None)
    )
    from stockade.controllers.ttl import TtlController

    # cleanup.kyverno.io/ttl: watched, leader only, as the cleanup controller's account when one is given
    services.background.append(TtlController(api_client, acting_user=str(options.get("cleanup_service_account") or "")))
    if options["background_scan_interval"] > 0:
        from stockade.controllers.background import BackgroundScanner

        scanner = BackgroundScanner(
            api_client, store, state.reports, interval=options["background_scan_interval"], is_leader=services.is_leader, events=state.events,
            admission_policy_kinds=_reported_admission_kinds(options),
        )
        services.background.append(scanner)
        store.listeners.append(scanner.on_snapshot)  # policy and exception changes rescan existing resources
        state.scanner = scanner


def _start_config_watch(api_client: Any, options: dict[str, Any]) -> tuple[Any, Any]:
    """Kyverno's ConfigMap, watched; the first state is awaited briefly, then defaults apply until it arrives."""
    from stockade.controllers.kyvernoconfigwatch import ConfigMapWatch, InvalidConfigMapReference, LiveKyvernoConfig, parse_configmap_reference

    try:
        namespace, name = parse_configmap_reference(options["config_map"])
    except InvalidConfigMapReference as exc:
        raise _StartupInputError(str(exc)) from exc
    live = LiveKyvernoConfig(source=f"{namespace}/{name}")
    watch = ConfigMapWatch(api_client, live, namespace, name)
    watch.start()
    if not watch.wait_synced(timeout=15):
        logging.getLogger("stockade.serve").warning("ConfigMap %s/%s not read within 15s: Kyverno's defaults apply until it is", namespace, name)
    return live, watch


def _controller_kinds(options: dict[str, Any]) -> tuple[str, ...]:
    """Policy kinds the cluster controllers started with these options carry out (their status then says Ready)."""
    from stockade.controllers.cleanup import DELETING_POLICY_KINDS
    from stockade.controllers.generate import GENERATING_POLICY_KINDS

    return DELETING_POLICY_KINDS + (GENERATING_POLICY_KINDS if options["generate"] else ()) + _reported_admission_kinds(options)


def _reported_admission_kinds(options: dict[str, Any]) -> tuple[str, ...]:
    """The Kubernetes admission policy kinds background scans report on (their bindings are watched with them)."""
    if options.get("background_scan_interval", 0) <= 0:
        return ()
    kinds = ("ValidatingAdmissionPolicy",) if options.get("validating_admission_policy_reports") else ()
    return kinds + (("MutatingAdmissionPolicy",) if options.get("mutating_admission_policy_reports") else ())


def _engine_settings(live: Any) -> dict[str, Any]:
    """The Engine keyword arguments Kyverno's ConfigMap decides; evaluation workers receive them with each policy set."""
    if live is None:
        return {}
    config = live.current
    return {"default_registry": config.default_registry, "registry_mutation": config.enable_default_registry_mutation}


def _configured_engine_factory(base: Any, live: Any) -> Any:
    """Engines built for each policy snapshot take the ConfigMap's defaultRegistry settings in force then."""
    from stockade.engine.engine import Engine

    build = base or Engine

    def factory(**kwargs: Any) -> Any:
        return build(**_engine_settings(live), **kwargs)

    return factory


def _start_cluster_source(api_client: Any, options: dict[str, Any]) -> Any:
    """Watch the cluster's policies and wait for the first complete listing, so the first snapshot has them all.
    """
    from stockade.controllers.policywatch import ADMISSION_POLICY_WATCHES, WATCHED_KINDS, ClusterPolicySource

    reporting_permissions = None
    if options.get("reports_service_account"):
        from stockade.controllers.clusterdata import ClusterData
        from stockade.controllers.reportingrbac import ReportingPermissions

        reporting_permissions = ReportingPermissions(ClusterData(api_client, ttl_seconds=0.0).request, str(options["reports_service_account"])).missing
    kinds = WATCHED_KINDS + tuple(w for kind in _reported_admission_kinds(options) for w in ADMISSION_POLICY_WATCHES[kind])
    source = ClusterPolicySource(api_client, kinds=kinds, write_status=True, reporting_permissions=reporting_permissions)
    source.start()
    if not source.wait_synced(timeout=60):
        source.stop()
        raise _StartupError("policies from the cluster were not listed within 60s (is the API server reachable, and may we list the policy CRDs?)")
    if source.missing_kinds:
        logging.getLogger("stockade.serve").info("policy kinds not installed in the cluster: %s", ", ".join(source.missing_kinds))
    return source


@click.command("cleanup")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False), default=None, help="Kubeconfig (default: in-cluster, then $KUBECONFIG / ~/.kube/config).")
@click.option("--webhook-names", type=click.Choice(["stockade", "kyverno"]), default="stockade", show_default=True, help="The naming `serve --webhook-names` used: its managed-by label finds the configurations to remove.")
def cleanup(kubeconfig: str | None, webhook_names: str) -> None:
    """Remove the webhook configurations stockade created (e.g. after a crash left them behind)."""
    from stockade.controllers.registration import WebhookRegistrar
    from stockade.kube.connection import load_api_client
    from stockade.controllers.webhookconfig import WEBHOOK_NAMINGS

    try:
        removed = WebhookRegistrar(load_api_client(kubeconfig), WEBHOOK_NAMINGS[webhook_names]).remove_all()
    except Exception as exc:
        print_error(str(exc))
        sys.exit(FAILURE_EXIT)
    click.echo(f"removed {removed} webhook configuration(s)")
