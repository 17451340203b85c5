"""``kscheduler demo``: a real control plane, a few nodes and pods, kscheduler placing them.

Starts etcd + kube-apiserver on loopback (unless --kubeconfig names a cluster),
creates demo nodes and pods, runs kscheduler in the foreground with its log
visible, then prints where each pod went or why it is pending.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from typing import Any

import structlog

from kscheduler.controlplane.builders import (
    ZONE,
    create_namespace,
    create_nodes,
    create_pods,
    make_node,
    make_pod,
    taint,
    toleration,
)

NAMESPACE = "kscheduler-demo"
SCHEDULER = "kscheduler"


def demo_nodes() -> list[dict[str, Any]]:
    return [
        make_node("node-a1", cpu="4", memory="8Gi", labels={ZONE: "zone-a"}),
        make_node("node-b1", cpu="4", memory="8Gi", labels={ZONE: "zone-b"}),
        make_node("node-a2", cpu="8", memory="16Gi", labels={ZONE: "zone-a", "accelerator": "gpu"}),
        make_node(
            "node-infra",
            cpu="2",
            memory="4Gi",
            labels={ZONE: "zone-b"},
            taints=[taint("dedicated", "infra")],
        ),
    ]


def demo_pods() -> list[dict[str, Any]]:
    pods = [
        make_pod(
            f"web-{i}",
            NAMESPACE,
            cpu="500m",
            memory="512Mi",
            scheduler_name=SCHEDULER,
            labels={"app": "web"},
        )
        for i in range(1, 5)
    ]
    pods += [
        make_pod("batch-1", NAMESPACE, cpu="2", memory="2Gi", scheduler_name=SCHEDULER),
        make_pod(
            "gpu-job",
            NAMESPACE,
            cpu="1",
            memory="1Gi",
            scheduler_name=SCHEDULER,
            node_selector={"accelerator": "gpu"},
        ),
        make_pod(
            "infra-agent",
            NAMESPACE,
            cpu="100m",
            memory="64Mi",
            scheduler_name=SCHEDULER,
            tolerations=[toleration("dedicated", "infra")],
            node_selector={ZONE: "zone-b"},
        ),
        make_pod("too-big", NAMESPACE, cpu="64", memory="1Gi", scheduler_name=SCHEDULER),
        make_pod("not-ours", NAMESPACE, cpu="100m", scheduler_name="some-other-scheduler"),
    ]
    return pods


def _condition_message(pod: dict[str, Any]) -> str:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"{c.get('reason')}: {c.get('message')}"
    return ""


def placement_table(pods: list[dict[str, Any]]) -> str:
    rows = [("POD", "SCHEDULER", "NODE", "WHY")]
    for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
        spec = p.get("spec") or {}
        node = spec.get("nodeName") or "<pending>"
        why = (
            ""
            if spec.get("nodeName")
            else (_condition_message(p) or "not ours: left to its own scheduler")
        )
        rows.append((p["metadata"]["name"], spec.get("schedulerName", ""), node, why))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in rows
    )


async def _run(args: argparse.Namespace, kubeconfig: str, rest: Any) -> int:
    from kscheduler.app import Options, SchedulerApp
    from kscheduler.config import load_config
    from kscheduler.kube import KubeClient
    from kscheduler.plugins import full_registry

    log = structlog.get_logger("kscheduler.demo")
    await create_namespace(rest, NAMESPACE)
    await create_nodes(rest, demo_nodes())
    log.info("created demo nodes", count=len(demo_nodes()))
    registry = full_registry()
    cfg = load_config("", registry=registry)
    kube = await KubeClient.from_kubeconfig(kubeconfig, qps=50, burst=100)
    app = SchedulerApp(cfg, registry, kube, Options(leader_elect=False))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = asyncio.create_task(app.run(stop), name="kscheduler")
    try:
        await app.synced.wait()
        await create_pods(rest, demo_pods())
        log.info("created demo pods", count=len(demo_pods()))
        expected_pending = {"too-big", "not-ours"}
        deadline = time.monotonic() + args.timeout
        pods: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not stop.is_set():
            pods = (await rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods"))["items"]
            done = all(
                (p.get("spec") or {}).get("nodeName")
                or (
                    p["metadata"]["name"] in expected_pending
                    and (_condition_message(p) or p["metadata"]["name"] == "not-ours")
                )
                for p in pods
            )
            if done and pods:
                break
            await asyncio.sleep(0.3)
        print("\n" + placement_table(pods) + "\n", flush=True)
    finally:
        stop.set()
        await runner
        await kube.close()
    return 0


class _KubeRest:
    """The builders' small REST interface over KubeClient (any kubeconfig auth)."""

    def __init__(self, kube: Any) -> None:
        self.kube = kube

    async def get(self, path: str, params: Any = None) -> Any:
        return await self.kube.get_json(path, params)

    async def post(self, path: str, body: Any, params: Any = None) -> Any:
        return await self.kube.post_json(path, body, params=params)

    async def put(self, path: str, body: Any, params: Any = None) -> Any:
        return await self.kube.put_json(path, body, params=params)

    async def delete(self, path: str, params: Any = None, body: Any = None) -> Any:
        return await self.kube.delete(path, body, params=params)

    async def list(self, path: str, params: Any = None) -> list[Any]:
        return list((await self.kube.get_json(path, params)).get("items") or [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kscheduler demo", description=__doc__)
    p.add_argument("--kubeconfig", help="use this cluster instead of starting one")
    p.add_argument("--keep", action="store_true", help="leave the control plane up for kubectl")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for placements")
    args = p.parse_args(argv)

    from kscheduler.logs import configure

    configure(1, json=False)
    import uvloop

    if args.kubeconfig:

        async def on_cluster() -> int:
            from kscheduler.kube import KubeClient

            async with await KubeClient.from_kubeconfig(args.kubeconfig) as kube:
                return await _run(args, args.kubeconfig, _KubeRest(kube))

        return int(uvloop.run(on_cluster()))

    from kscheduler.controlplane.harness import ControlPlane

    print("starting a local control plane (etcd + kube-apiserver) ...", flush=True)
    cp = ControlPlane(keep_workdir=args.keep)
    cp.start()
    try:
        print(f"control plane ready in {cp.startup_seconds:.1f}s at {cp.url}", flush=True)

        async def on_harness() -> int:
            async with cp.client() as rest:
                return await _run(args, str(cp.scheduler_kubeconfig), rest)

        rc = int(uvloop.run(on_harness()))
        if args.keep:
            print(
                f"the control plane stays up; in another shell:\n"
                f"  export KUBECONFIG={cp.admin_kubeconfig}\n"
                f"  kubectl get pods -n {NAMESPACE} -o wide\n"
                "press Ctrl-C to stop it",
                flush=True,
            )
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
        return rc
    finally:
        cp.stop()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
