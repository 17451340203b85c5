"""``kscheduler demo``: a local cluster, a few workloads, kscheduler placing them.

Starts a cluster on loopback (etcd, kube-apiserver, kube-controller-manager and
kwok; unless --kubeconfig names a cluster), creates demo nodes, local volumes and
workloads (a Deployment, a StatefulSet whose claims the PV controller binds, and
single pods, one of which cannot fit), runs kscheduler in the foreground with its
log visible, then prints where each pod went or why it is pending.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Sequence
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


STORAGE_CLASS = "local-wffc"
WEB_REPLICAS = 4
DB_REPLICAS = 2


def demo_storage() -> list[tuple[str, dict[str, Any]]]:
    """A WaitForFirstConsumer class and one pre-created local volume on each of three
    nodes: the StatefulSet's claims are bound to the volume on the node its pod lands on."""
    objects: list[tuple[str, dict[str, Any]]] = [
        (
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": STORAGE_CLASS},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        )
    ]
    for node in ("node-a1", "node-b1", "node-a2"):
        objects.append(
            (
                "/api/v1/persistentvolumes",
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": {"name": f"local-{node}"},
                    "spec": {
                        "capacity": {"storage": "10Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": STORAGE_CLASS,
                        "persistentVolumeReclaimPolicy": "Retain",
                        "local": {"path": "/mnt/disks/ssd1"},
                        "nodeAffinity": {
                            "required": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "kubernetes.io/hostname",
                                                "operator": "In",
                                                "values": [node],
                                            }
                                        ]
                                    }
                                ]
                            }
                        },
                    },
                },
            )
        )
    return objects


def _template(labels: dict[str, str], cpu: str, memory: str) -> dict[str, Any]:
    pod = make_pod("x", NAMESPACE, cpu=cpu, memory=memory, scheduler_name=SCHEDULER)
    return {"metadata": {"labels": labels}, "spec": pod["spec"]}


def demo_workloads() -> list[tuple[str, dict[str, Any]]]:
    """A Deployment and a StatefulSet with a volumeClaimTemplate, both naming kscheduler."""
    web = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": NAMESPACE},
        "spec": {
            "replicas": WEB_REPLICAS,
            "selector": {"matchLabels": {"app": "web"}},
            "template": _template({"app": "web"}, "500m", "512Mi"),
        },
    }
    db_template = _template({"app": "db"}, "1", "1Gi")
    db_template["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    db = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": NAMESPACE},
        "spec": {
            "replicas": DB_REPLICAS,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": db_template,
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": STORAGE_CLASS,
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
    }
    return [
        (f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", web),
        (f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets", db),
    ]


def demo_pods() -> list[dict[str, Any]]:
    pods = [
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


def placement_table(pods: Sequence[dict[str, Any]], claims: Sequence[dict[str, Any]] = ()) -> str:
    """POD, SCHEDULER, NODE, PHASE, and for a pending pod why, for a pod with claims
    the volumes the PV controller bound them to."""
    volumes = {
        c["metadata"]["name"]: (c.get("spec") or {}).get("volumeName") or "<unbound>"
        for c in claims
    }
    rows = [("POD", "SCHEDULER", "NODE", "PHASE", "WHY / VOLUMES")]
    for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
        spec = p.get("spec") or {}
        node = spec.get("nodeName") or "<pending>"
        bound = [
            f"{v['persistentVolumeClaim']['claimName']} -> "
            f"{volumes.get(v['persistentVolumeClaim']['claimName'], '<missing>')}"
            for v in spec.get("volumes") or []
            if v.get("persistentVolumeClaim")
        ]
        why = (
            ", ".join(bound)
            if spec.get("nodeName")
            else (_condition_message(p) or "not ours: left to its own scheduler")
        )
        phase = (p.get("status") or {}).get("phase", "")
        rows.append((p["metadata"]["name"], spec.get("schedulerName", ""), node, phase, why))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(
        "  ".join(f"{r[i]:<{widths[i]}}" for i in range(4)) + f"  {r[4]}" for r in rows
    )


def _settled(pods: list[dict[str, Any]], workloads: dict[str, dict[str, Any]]) -> bool:
    """Every workload rolled out, every single pod placed (or, for the ones meant to
    stay pending, with its reason written)."""
    web, db = workloads.get("web") or {}, workloads.get("db") or {}
    if (web.get("status") or {}).get("availableReplicas") != WEB_REPLICAS:
        return False
    if (db.get("status") or {}).get("readyReplicas") != DB_REPLICAS:
        return False
    singles = {p["metadata"]["name"] for p in demo_pods()}
    expected_pending = {"too-big", "not-ours"}
    for p in pods:
        name = p["metadata"]["name"]
        if name not in singles:
            continue
        if (p.get("spec") or {}).get("nodeName"):
            continue
        if name not in expected_pending:
            return False
        if name == "too-big" and not _condition_message(p):
            return False
    return len([p for p in pods if p["metadata"]["name"] in singles]) == len(singles)


async def _run(args: argparse.Namespace, kubeconfig: str, rest: Any) -> int:
    from kscheduler.app import Options, SchedulerApp
    from kscheduler.config import load_config
    from kscheduler.kube import KubeClient
    from kscheduler.plugins import full_registry

    log = structlog.get_logger("kscheduler.demo")
    await create_namespace(rest, NAMESPACE)
    await create_nodes(rest, demo_nodes())
    log.info("created demo nodes", count=len(demo_nodes()))
    for path, obj in demo_storage():
        await _create(rest, path, obj)
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
        for path, obj in demo_workloads():
            await _create(rest, path, obj)
        log.info("created demo workloads", deployment="web", statefulset="db")
        await create_pods(rest, demo_pods())
        log.info("created demo pods", count=len(demo_pods()))
        deadline = time.monotonic() + args.timeout
        pods: list[dict[str, Any]] = []
        claims: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not stop.is_set():
            pods = (await rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods"))["items"]
            claims = (await rest.get(f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims"))[
                "items"
            ]
            workloads = {
                w["metadata"]["name"]: w
                for kind in ("deployments", "statefulsets")
                for w in (await rest.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/{kind}"))["items"]
            }
            if _settled(pods, workloads):
                break
            await asyncio.sleep(0.3)
        else:
            log.warning("not every workload settled in time", timeout=args.timeout)
        print("\n" + placement_table(pods, claims) + "\n", flush=True)
    finally:
        stop.set()
        await runner
        await kube.close()
    return 0


async def _create(rest: Any, path: str, obj: dict[str, Any]) -> None:
    try:
        await rest.post(path, obj)
    except Exception as exc:  # the two REST clients raise different types
        if getattr(exc, "status", None) != 409:
            raise


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
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for placements")
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

    print(
        "starting a local cluster (etcd, kube-apiserver, kube-controller-manager, kwok) ...",
        flush=True,
    )
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
