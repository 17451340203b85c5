"""Command line: ``kscheduler [run] --config FILE``, plus ``demo``, ``dev-cluster``, ``explain``.

Exit status: 0 after a graceful shutdown, 1 on a runtime failure, 2 for bad
flags or a bad config file (the message names the field and the reason).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from kscheduler import __version__

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from kscheduler.app import SchedulerApp
    from kscheduler.kube import KubeClient
    from kscheduler.serving.tls import ServingTLS

SUBCOMMANDS = ("run", "demo", "dev-cluster", "explain")


def _bool(text: str) -> bool:
    v = text.lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _port(text: str) -> int:
    try:
        n = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from exc
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"port must be within 0..65535, got {n}")
    return n


def _duration(text: str) -> float:
    from kscheduler.framework.args import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a duration such as 10s, got {text!r}") from exc
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return seconds


def run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kscheduler",
        description="A Kubernetes scheduler in Python: schedules pods whose "
        "spec.schedulerName names one of its profiles.",
    )
    p.add_argument("--config", type=Path, help="KubeSchedulerConfiguration v1 file")
    p.add_argument(
        "--kubeconfig",
        help="kubeconfig file (overrides clientConnection.kubeconfig); default: "
        "in-cluster config, then $KUBECONFIG / ~/.kube/config",
    )
    p.add_argument(
        "--leader-elect",
        type=_bool,
        default=None,
        metavar="BOOL",
        help="override leaderElection.leaderElect",
    )
    p.add_argument(
        "--bind-address", default="0.0.0.0", help="address for /metrics, /debug/* and health"
    )
    p.add_argument(
        "--secure-port",
        type=_port,
        default=10259,
        help="HTTPS port for /metrics, /debug/* (delegated authentication and "
        "authorization) and /healthz /livez /readyz (open); 0: off",
    )
    p.add_argument(
        "--insecure-port",
        type=_port,
        default=0,
        help="also serve everything over plain HTTP, without authentication, on this "
        "port (local runs only; 0: off, the default)",
    )
    p.add_argument(
        "--tls-cert-file",
        metavar="FILE",
        help="PEM certificate (chain) for the secure port; without it and "
        "--tls-private-key-file a self-signed one is made in memory at start",
    )
    p.add_argument("--tls-private-key-file", metavar="FILE", help="PEM key of --tls-cert-file")
    p.add_argument(
        "--client-ca-file",
        metavar="FILE",
        help="CA bundle for client certificates; default: client-ca-file of the ConfigMap "
        "kube-system/extension-apiserver-authentication",
    )
    p.add_argument(
        "--authentication-token-webhook-cache-ttl",
        type=_duration,
        default=10.0,
        metavar="DURATION",
        help="how long TokenReview answers are cached (default 10s)",
    )
    p.add_argument(
        "--authorization-webhook-cache-authorized-ttl",
        type=_duration,
        default=10.0,
        metavar="DURATION",
        help="how long allowed SubjectAccessReview answers are cached (default 10s)",
    )
    p.add_argument(
        "--authorization-webhook-cache-unauthorized-ttl",
        type=_duration,
        default=10.0,
        metavar="DURATION",
        help="how long denied SubjectAccessReview answers are cached (default 10s)",
    )
    p.add_argument(
        "--shutdown-grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long in-flight binds may take after SIGTERM",
    )
    p.add_argument(
        "--bind-concurrency", type=int, default=64, help="binds in flight at once (connection pool)"
    )
    p.add_argument(
        "--simulator-annotations",
        default="",
        metavar="PROFILE[,PROFILE]",
        help="write each attempt's results on the pod as kube-scheduler-simulator "
        "annotations, for these profiles (off by default: anyone who can read the pod "
        "can read them)",
    )
    p.add_argument(
        "--feature-gates",
        default="",
        metavar="NAME=BOOL[,NAME=BOOL]",
        help="kube-scheduler feature gates kscheduler implements, with v1.37's defaults "
        "(see docs/feature-gates.md); an unknown gate is an error",
    )
    p.add_argument("-v", "--verbose", action="count", default=1, help="more logs (-vv: debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="warnings only")
    p.add_argument("--log-format", choices=("auto", "json", "console"), default="auto")
    p.add_argument("--version", action="version", version=f"kscheduler {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        cmd, rest = argv[0], argv[1:]
    else:
        cmd, rest = "run", argv
    if cmd == "demo":
        from kscheduler.demo import main as demo_main

        return demo_main(rest)
    if cmd == "dev-cluster":
        from kscheduler.controlplane.devcluster import main as dev_main

        return dev_main(rest)
    if cmd == "explain":
        from kscheduler.explain import main as explain_main

        return int(explain_main(rest))
    return run_main(rest)


def run_main(argv: list[str]) -> int:
    parser = run_parser()
    args = parser.parse_args(argv)  # exits 2 on bad flags
    if args.bind_concurrency < 1:
        parser.error("--bind-concurrency: must be at least 1")
    if args.shutdown_grace < 0:
        parser.error("--shutdown-grace: must not be negative")
    if args.secure_port and args.secure_port == args.insecure_port:
        parser.error("--insecure-port: must differ from --secure-port")
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        parser.error("--tls-cert-file and --tls-private-key-file: give both or neither")

    from kscheduler.config import ConfigError, load_config
    from kscheduler.framework import features
    from kscheduler.logs import configure
    from kscheduler.plugins import PluginDiscoveryError, full_registry

    try:
        features.configure(features.gates_from(features.parse_feature_gates(args.feature_gates)))
    except features.FeatureGateError as exc:
        print(f"kscheduler: --feature-gates: {exc}", file=sys.stderr)
        return 2

    try:
        registry = full_registry()
    except PluginDiscoveryError as exc:
        print(f"kscheduler: {exc}", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args.config if args.config else "", registry=registry)
    except ConfigError as exc:
        where = f"{args.config}: " if args.config else ""
        print(f"kscheduler: invalid configuration: {where}{exc}", file=sys.stderr)
        return 2
    if args.simulator_annotations:
        from kscheduler.annotations import parse_profiles

        try:
            parse_profiles(args.simulator_annotations, [p.scheduler_name for p in cfg.profiles])
        except ValueError as exc:
            print(f"kscheduler: --simulator-annotations: {exc}", file=sys.stderr)
            return 2
    # the scheduler allocates many short-lived objects per cycle and keeps a large,
    # long-lived cache: collect the young generation far less often than the default
    import gc

    gc.set_threshold(50_000, 20, 100)
    tls = None
    if args.secure_port:
        tls = serving_tls(args)
        if tls is None:
            return 2
    verbosity = 0 if args.quiet else args.verbose
    json_logs = {"auto": None, "json": True, "console": False}[args.log_format]
    configure(verbosity, json=json_logs)
    import uvloop

    try:
        return int(uvloop.run(serve(cfg, registry, args, tls)))
    except KeyboardInterrupt:
        return 130


def serving_tls(args: argparse.Namespace) -> ServingTLS | None:
    """The secure port's TLS from the flags; None (after a message) when a file is bad."""
    import ssl

    from kscheduler.serving.tls import ServingTLS, default_hosts

    try:
        tls = ServingTLS(
            cert_file=args.tls_cert_file,
            key_file=args.tls_private_key_file,
            hosts=default_hosts(args.bind_address),
        )
    except (OSError, ssl.SSLError) as exc:
        print(f"kscheduler: --tls-cert-file/--tls-private-key-file: {exc}", file=sys.stderr)
        return None
    if args.client_ca_file:
        try:
            text = Path(args.client_ca_file).read_text()
            if not tls.add_client_cas(text):
                raise ValueError("no PEM certificate in it")
        except (OSError, ssl.SSLError, ValueError) as exc:
            print(f"kscheduler: --client-ca-file: {exc}", file=sys.stderr)
            return None
    return tls


async def serve(
    cfg: object, registry: object, args: argparse.Namespace, tls: ServingTLS | None = None
) -> int:
    from kscheduler.app import Options, SchedulerApp
    from kscheduler.config import KubeSchedulerConfiguration
    from kscheduler.framework.registry import Registry
    from kscheduler.kube import KubeClient
    from kscheduler.metrics import Metrics

    assert isinstance(cfg, KubeSchedulerConfiguration) and isinstance(registry, Registry)
    log = structlog.get_logger("kscheduler")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal(sig: signal.Signals) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("shutting down", signal=sig.name)
            stop.set()
        else:
            log.warning("second signal: exiting now", signal=sig.name)
            os._exit(1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    cc = cfg.client_connection
    kubeconfig = args.kubeconfig or cc.kubeconfig or None
    try:
        kube = await KubeClient.from_kubeconfig(
            kubeconfig, qps=cc.qps, burst=cc.burst, pool_size=args.bind_concurrency + 16
        )
    except Exception as exc:
        log.error("cannot reach the cluster", error=str(exc))
        return 1
    metrics = Metrics()
    try:
        app = SchedulerApp(
            cfg,
            registry,
            kube,
            Options(
                leader_elect=args.leader_elect,
                shutdown_grace=args.shutdown_grace,
                bind_concurrency=args.bind_concurrency,
            ),
            observer=metrics.scheduler_observer(),
        )
        metrics.attach(app)
        if args.simulator_annotations:
            from kscheduler.annotations import SimulatorAnnotations, parse_profiles

            names = parse_profiles(args.simulator_annotations, app.frameworks)
            app.scheduler.annotations = SimulatorAnnotations(names)
        closers = await start_servers(app, kube, metrics.registry, args, tls)
        profiles = ", ".join(app.frameworks)
        log.info(
            "starting", version=__version__, profiles=profiles, leader_elect=app._leader_elect()
        )
        try:
            return await app.run(stop)
        finally:
            for close in closers:
                await close()
    finally:
        await kube.close()


async def start_servers(
    app: SchedulerApp,
    kube: KubeClient,
    registry: CollectorRegistry,
    args: argparse.Namespace,
    tls: ServingTLS | None,
) -> list[Callable[[], Awaitable[None]]]:
    """Start the secure port (HTTPS, delegated authentication and authorization)
    and, when asked for, the plain one; returns what stops them, in order."""
    out: list[Callable[[], Awaitable[None]]] = []
    try:
        await _start_servers(app, kube, registry, args, tls, out)
    except BaseException:
        for close in out:
            await close()
        raise
    return out


async def _start_servers(
    app: SchedulerApp,
    kube: KubeClient,
    registry: CollectorRegistry,
    args: argparse.Namespace,
    tls: ServingTLS | None,
    out: list[Callable[[], Awaitable[None]]],
) -> None:
    from kscheduler.kube import KubeClient, TokenBucketRateLimiter
    from kscheduler.server import HealthServer
    from kscheduler.serving.auth import AuthSettings, DelegatedAuth
    from kscheduler.serving.tls import follow_client_ca

    log = structlog.get_logger("kscheduler")
    if args.secure_port and tls is not None:
        # Reviews get their own connections and rate limit (kube-scheduler's delegated
        # authn/authz client: 200 QPS, burst 400), so that a bind storm cannot starve a
        # scrape; no retries: a review that fails refuses the request at once.
        reviews = KubeClient(
            kube.config,
            pool_size=8,
            stream_pool_size=1,
            timeout=10.0,
            max_retries=0,
            rate_limiter=TokenBucketRateLimiter(200.0, 400),
        )
        out.append(reviews.close)
        if not args.client_ca_file:
            task = asyncio.create_task(follow_client_ca(reviews.get_json, tls), name="client-ca")
            out.insert(0, partial(_cancel, task))
        auth = DelegatedAuth(
            reviews.post_json,
            AuthSettings(
                token_ttl=args.authentication_token_webhook_cache_ttl,
                allow_ttl=args.authorization_webhook_cache_authorized_ttl,
                deny_ttl=args.authorization_webhook_cache_unauthorized_ttl,
            ),
            registry=registry,
        )
        secure = HealthServer(
            app,
            host=args.bind_address,
            port=args.secure_port,
            registry=registry,
            ssl_context=tls.context,
            auth=auth,
        )
        port = await secure.start()
        out.insert(0, secure.stop)
        log.info(
            "serving",
            address=f"https://{_host(args.bind_address)}:{port}",
            certificate="self-signed" if tls.self_signed else args.tls_cert_file,
            open_paths=" ".join(auth.settings.always_allow),
            authorized_paths="/metrics /debug/*",
        )
    if args.insecure_port:
        plain = HealthServer(
            app, host=args.bind_address, port=args.insecure_port, registry=registry
        )
        port = await plain.start()
        out.insert(0, plain.stop)
        log.warning(
            "serving plain HTTP without authentication: anyone who reaches this port reads "
            "/metrics and /debug/* (pods, nodes, pending reasons); for local runs only",
            address=f"http://{_host(args.bind_address)}:{port}",
        )


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
