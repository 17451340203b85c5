"""Timing of ``kscheduler explain -f FILE --max`` on a large in-memory cluster.

    python -m bench.whatif_max [--nodes 5000] [--before-copies 200] [--out DIR]

The cluster (nodes and pods in the daemon's cache, no API server) has
``--nodes`` nodes in five zones (racks of four nodes), 2, 4 or 8 CPUs and room for 20 pods each,
every seventh tainted, and a random load of 0-2 CPUs. For each case the
``--max`` what-if of a Deployment's pod (500m CPU, 256Mi) runs as the command
runs it (:func:`kscheduler.whatif.place_documents`, the first copy that does
not fit explained in full), and reports the count, the method and the seconds
(CPU seconds of the process, which a shared machine inflates less than wall
seconds, and wall seconds).

"Before" is the cycle-by-cycle placement every case but the node-local one
took until the per-domain counting: the first ``--before-copies`` copies are
placed cycle by cycle, and the seconds per copy times the count estimate the
whole (the copies get no cheaper as the cluster fills). ``--before-copies 0``
skips it; ``--full-before`` places every copy cycle by cycle instead (long).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from kscheduler.app import SchedulerApp
from kscheduler.config import load_config
from kscheduler.explain import DryRunKubeClient
from kscheduler.framework.parse import parse_node, parse_pod
from kscheduler.kube import KubeConfig
from kscheduler.manifests import read_documents, workload
from kscheduler.plugins import in_tree_registry
from kscheduler.whatif import _cycle, _Session, place_documents

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
RACK = "example.com/rack"
WEB = {"matchLabels": {"app": "web"}}


def cluster(n: int, seed: int = 3) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    nodes, pods = [], []
    for i in range(n):
        name = f"node-{i:04d}"
        raw: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    HOST: name,
                    ZONE: f"zone-{i % 5}",
                    RACK: f"rack-{i % 5}-{i // 20}",  # 4 nodes, one zone
                },
            },
            "spec": {},
            "status": {
                "allocatable": {"cpu": str(rng.choice([2, 4, 8])), "memory": "16Gi", "pods": "20"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        if i % 7 == 3:
            raw["spec"]["taints"] = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
        nodes.append(raw)
        used = rng.randrange(0, 3)
        if used:
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"load-{i}",
                        "namespace": "other",
                        "uid": f"uid-load-{i}",
                        "labels": {"app": "load"},
                    },
                    "spec": {
                        "nodeName": name,
                        "containers": [
                            {"name": "c", "resources": {"requests": {"cpu": str(used)}}}
                        ],
                    },
                    "status": {"phase": "Running"},
                }
            )
    return nodes, pods


def spread(key: str, max_skew: int) -> dict[str, Any]:
    return {
        "topologySpreadConstraints": [
            {
                "maxSkew": max_skew,
                "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": WEB,
            }
        ]
    }


CASES: dict[str, dict[str, Any]] = {
    "node-local only": {},
    "spread on zone (maxSkew 1)": spread(ZONE, 1),
    "spread on hostname (maxSkew 1)": spread(HOST, 1),
    "required anti-affinity on hostname": {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": WEB, "topologyKey": HOST}
                ]
            }
        }
    },
    "spread on zone, anti-affinity on hostname": {
        **spread(ZONE, 1),
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": WEB, "topologyKey": HOST}
                ]
            }
        },
    },
    "spread on zone and hostname (maxSkew 1)": {
        "topologySpreadConstraints": [
            *spread(ZONE, 1)["topologySpreadConstraints"],
            *spread(HOST, 1)["topologySpreadConstraints"],
        ]
    },
    "anti-affinity on hostname and rack": {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": WEB, "topologyKey": HOST},
                    {"labelSelector": WEB, "topologyKey": RACK},
                ]
            }
        }
    },
    "spread on hostname, affinity to itself on zone": {
        **spread(HOST, 1),
        "affinity": {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": WEB, "topologyKey": ZONE}
                ]
            }
        },
    },
    "one device per copy (claim template)": {
        "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "one-device"}]
    },
    "one device per copy, network-attached devices (claim template)": {
        "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "one-device"}]
    },
    "preferred affinity on zone": {
        "affinity": {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": {"labelSelector": WEB, "topologyKey": ZONE}}
                ]
            }
        }
    },
}


def deployment(extra: dict[str, Any]) -> str:
    template = yaml.safe_dump(CLAIM_TEMPLATE) + "---\n" if "resourceClaims" in extra else ""
    return template + yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "schedulerName": "kscheduler",
                        "containers": [
                            {
                                "name": "c",
                                "image": "nginx",
                                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
                            }
                        ],
                        **extra,
                    },
                },
            },
        }
    )


DRIVER = "dev.example.com"
CLAIM_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-device", "namespace": "default"},
    "spec": {
        "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": "dev"}}]}}
    },
}


def app_of(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], devices: int = 0
) -> SchedulerApp:
    """The cluster in a daemon's cache; ``devices``: a ResourceSlice of that many
    devices on each node (negative: that many in slices of 8 that every node
    reaches, ``allNodes``), and a DeviceClass ``dev`` selecting them."""
    registry = in_tree_registry()
    cfg = load_config("", registry=registry)
    app = SchedulerApp(cfg, registry, DryRunKubeClient(KubeConfig("http://127.0.0.1:9")))
    for n in nodes:
        app.cache.add_node(parse_node(copy.deepcopy(n)))
    for p in pods:
        app.cache.add_pod(parse_pod(copy.deepcopy(p)))
    slices = app.informers.informer("resourceslices")
    for k in range(-devices // 8):
        spec = {
            "driver": DRIVER,
            "allNodes": True,
            "pool": {"name": f"shared-{k}", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"dev-{i}"} for i in range(8)],
        }
        meta = {"name": f"shared-{k}", "uid": f"slice-shared-{k}", "resourceVersion": "1"}
        slices.apply("ADDED", {"metadata": meta, "spec": spec})
    if devices > 0:
        for n in nodes:
            name = n["metadata"]["name"]
            spec = {
                "driver": DRIVER,
                "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"dev-{i}"} for i in range(devices)],
            }
            meta = {"name": f"{name}-dev", "uid": f"slice-{name}", "resourceVersion": "1"}
            slices.apply("ADDED", {"metadata": meta, "spec": spec})
    if devices:
        expression = f'device.driver == "{DRIVER}"'
        app.informers.informer("deviceclasses").apply(
            "ADDED",
            {
                "metadata": {"name": "dev", "uid": "class-dev", "resourceVersion": "1"},
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            },
        )
    app.snapshot.update()
    return app


def after(app: SchedulerApp, text: str, method: str) -> dict[str, Any]:
    docs = read_documents("web.yaml", text)
    started, cpu = time.perf_counter(), time.process_time()
    kube = app.kube
    assert isinstance(kube, DryRunKubeClient)
    r = asyncio.run(
        place_documents(app, kube, docs, priority_classes=[], max_mode=True, max_method=method)
    )
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert r.max is not None and r.max.next is not None
    return {
        "count": r.max.count,
        "method": r.max.method,
        "basis": r.max.basis,
        "seconds": round(took, 2),
        "cpu_seconds": round(cpu, 2),
        "next": r.max.next.fit_error.split(" preemption:")[0],
    }


def before(app: SchedulerApp, text: str, copies: int) -> float:
    """CPU seconds per copy placed cycle by cycle (the first ``copies`` copies)."""
    docs = read_documents("web.yaml", text)
    doc = docs[-1]
    w = workload(doc)
    kube = app.kube
    assert isinstance(kube, DryRunKubeClient)
    s = _Session(app, kube, None, [])
    asyncio.run(s.read_claim_templates(docs))
    fwk = next(iter(app.frameworks.values()))
    started = time.process_time()
    for i in range(copies):
        if not _cycle(s, doc, w, fwk, i):
            break
    return (time.process_time() - started) / copies


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.whatif_max", description=__doc__)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--before-copies", type=int, default=200)
    p.add_argument("--full-before", action="store_true")
    p.add_argument("--case", action="append", help="only these cases (by name prefix)")
    p.add_argument("--out", type=Path, help="write whatif-max-<time>.json and .md here")
    args = p.parse_args(argv)
    nodes, pods = cluster(args.nodes)
    rows = []
    for name, extra in CASES.items():
        if args.case and not any(name.startswith(c) for c in args.case):
            continue
        text = deployment(extra)
        devices = 0
        if "resourceClaims" in extra:
            devices = -64 if "network-attached" in name else 4
        row: dict[str, Any] = {
            "case": name,
            **after(app_of(nodes, pods, devices), text, "auto"),
        }
        if args.full_before:
            full = after(app_of(nodes, pods, devices), text, "cycles")
            assert full["count"] == row["count"], (full, row)
            row["before_seconds"] = full["cpu_seconds"]
            row["before"] = "measured"
        elif args.before_copies > 0:
            per_copy = before(
                app_of(nodes, pods, devices), text, min(args.before_copies, row["count"])
            )
            row["before_ms_per_copy"] = round(per_copy * 1000, 1)
            row["before_seconds"] = round(per_copy * row["count"], 1)
            row["before"] = f"estimated from {min(args.before_copies, row['count'])} copies"
        rows.append(row)
        print(json.dumps(row), flush=True)
    md = [
        f"--max on {args.nodes} nodes (bench/whatif_max.py, one process, in-memory cluster).",
        "CPU seconds of the process (the machine is shared; wall seconds in the JSON).",
        "Cycle by cycle: every copy through PreFilter, Filter and Score as the daemon",
        "places it (~: CPU seconds per copy over the first copies times the count);",
        "now: the whole --max as the command runs it, the next copy's explanation included.",
        "",
        "| case | copies | method now | cycle by cycle (CPU s) | now (CPU s) | now (wall s) |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        b = r.get("before_seconds", "")
        if r.get("before", "").startswith("estimated"):
            b = f"~{b} ({r['before_ms_per_copy']} ms/copy)"
        md.append(
            f"| {r['case']} | {r['count']} | {r['method']} | {b} | {r['cpu_seconds']} "
            f"| {r['seconds']} |"
        )
    print("\n".join(md))
    if args.out:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"whatif-max-{stamp}.json").write_text(json.dumps(rows, indent=2) + "\n")
        (args.out / f"whatif-max-{stamp}.md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
