"""Command line: ``kscheduler [run] --config FILE``, plus ``demo``, ``dev-cluster``, ``explain``.

Exit status: 0 after a graceful shutdown, 1 on a runtime failure, 2 for bad
flags or a bad config file (the message names the field and the reason).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

import structlog

from kscheduler import __version__

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
    p.add_argument("--bind-address", default="0.0.0.0", help="address for /metrics and health")
    p.add_argument(
        "--port", type=_port, default=10259, help="port for /metrics and health (0: off)"
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

    from kscheduler.config import ConfigError, load_config
    from kscheduler.logs import configure
    from kscheduler.plugins import PluginDiscoveryError, full_registry

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
    verbosity = 0 if args.quiet else args.verbose
    json_logs = {"auto": None, "json": True, "console": False}[args.log_format]
    configure(verbosity, json=json_logs)
    import uvloop

    try:
        return int(uvloop.run(serve(cfg, registry, args)))
    except KeyboardInterrupt:
        return 130


async def serve(cfg: object, registry: object, args: argparse.Namespace) -> int:
    from kscheduler.app import Options, SchedulerApp
    from kscheduler.config import KubeSchedulerConfiguration
    from kscheduler.framework.registry import Registry
    from kscheduler.kube import KubeClient
    from kscheduler.metrics import Metrics
    from kscheduler.server import HealthServer

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
        server = None
        if args.port:
            server = HealthServer(
                app, host=args.bind_address, port=args.port, registry=metrics.registry
            )
            port = await server.start()
            log.info(
                "serving",
                address=f"http://{args.bind_address}:{port}",
                paths="/metrics /healthz /readyz",
            )
        profiles = ", ".join(app.frameworks)
        log.info(
            "starting", version=__version__, profiles=profiles, leader_elect=app._leader_elect()
        )
        try:
            return await app.run(stop)
        finally:
            if server is not None:
                await server.stop()
    finally:
        await kube.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
