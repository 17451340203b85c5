"""A throwaway local cluster for trying kscheduler: etcd, kube-apiserver,
kube-controller-manager and kwok (which plays every node's kubelet).

    python -m kscheduler.controlplane.devcluster [--nodes 3]
    kscheduler dev-cluster [--nodes 3]

Prints what runs and how to use it, runs until Ctrl-C or SIGTERM, then removes
everything. Workloads behave as in a cluster (Deployments roll out, claims bind,
namespaces finish deleting), but no container ever runs: kwok reports bound pods
Running without starting anything.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType

from kscheduler.controlplane.binaries import BinariesNotFoundError
from kscheduler.controlplane.builders import create_nodes, make_node
from kscheduler.controlplane.harness import CONTROLLERS, ControlPlane, ControlPlaneError


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="kscheduler dev-cluster",
        description="Run a local cluster (etcd, kube-apiserver, kube-controller-manager, "
        "kwok) until interrupted.",
    )
    parser.add_argument(
        "--nodes", type=int, default=3, help="fake Ready nodes to create (default 3)"
    )
    parser.add_argument("--node-cpu", default="4", help="CPU of each fake node (default 4)")
    parser.add_argument(
        "--node-memory", default="32Gi", help="memory of each fake node (default 32Gi)"
    )
    parser.add_argument(
        "--keep-workdir", action="store_true", help="keep the state directory after exit"
    )
    return parser


async def _create_nodes(cp: ControlPlane, count: int, cpu: str, memory: str) -> None:
    async with cp.client() as rest:
        await create_nodes(rest, [make_node(f"node-{i}", cpu, memory) for i in range(count)])


_USE_KSCHEDULER = '{"spec":{"template":{"spec":{"schedulerName":"kscheduler"}}}}'


def _print_instructions(cp: ControlPlane, nodes: int) -> None:
    admin = shlex.quote(str(cp.admin_kubeconfig))
    # kubectl is built beside the cluster's binaries when it is not on PATH already
    kubectl = cp.binaries.kube_apiserver.parent / "kubectl"
    path_line = ""
    if shutil.which("kubectl") is None and kubectl.is_file():
        path_line = f"\n  export PATH={shlex.quote(str(kubectl.parent))}:$PATH"
    scheduler = shlex.quote(str(cp.scheduler_kubeconfig))
    print(
        f"""
cluster ready in {cp.startup_seconds or 0:.1f}s: kube-apiserver {cp.url}, {nodes} nodes.

  runs:      etcd ({cp.etcd_endpoint}), kube-apiserver, kube-controller-manager
             (controllers {CONTROLLERS}), kwok (every node's kubelet:
             Ready nodes with Lease heartbeats, bound pods Running with a pod IP)
  does not:  no container runtime, so no container ever runs; no kube-scheduler
             (pods that name no scheduler stay Pending: give them
             schedulerName: kscheduler), no kube-proxy, no DNS

  admin kubeconfig:      {cp.admin_kubeconfig}
  scheduler kubeconfig:  {cp.scheduler_kubeconfig}   (user system:kube-scheduler)
  logs:                  {cp.workdir}/*.log

  export KUBECONFIG={admin}{path_line}
  kubectl get nodes
  kscheduler --kubeconfig {scheduler}
  kubectl create deployment web --image=nginx --replicas=3
  kubectl patch deployment web -p {shlex.quote(_USE_KSCHEDULER)}
  kubectl rollout status deployment/web

Press Ctrl-C to stop and remove everything.""",
        flush=True,
    )


def run(
    *, nodes: int = 3, node_cpu: str = "4", node_memory: str = "32Gi", keep_workdir: bool = False
) -> int:
    """Start the control plane, print how to use it, block until Ctrl-C/SIGTERM, tear down."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    cp: ControlPlane | None = None
    try:
        cp = ControlPlane(keep_workdir=keep_workdir)
        print("starting etcd, kube-apiserver, kube-controller-manager and kwok ...", flush=True)
        cp.start()
        if nodes > 0:
            asyncio.run(_create_nodes(cp, nodes, node_cpu, node_memory))
        _print_instructions(cp, nodes)
        while cp.is_running():
            time.sleep(0.5)
        print("a control-plane process exited unexpectedly:\n" + cp.log_tails(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    except (BinariesNotFoundError, ControlPlaneError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if cp is not None:
            cp.stop()
            if keep_workdir and cp.is_prepared():
                print(f"state kept in {cp.workdir}")
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(
        nodes=args.nodes,
        node_cpu=args.node_cpu,
        node_memory=args.node_memory,
        keep_workdir=args.keep_workdir,
    )


if __name__ == "__main__":
    sys.exit(main())
