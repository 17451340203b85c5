"""`kscheduler explain -f` against the real control plane (with its controllers) agrees
with what the daemon then does when the manifests are applied."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from kscheduler.controlplane.builders import create_nodes, create_pods, make_node, make_pod, taint
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import RestClient
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for

ROOT = Path(__file__).resolve().parents[2]

PATHS = {
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "ResourceClaimTemplate": "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates",
}


def template(labels: dict[str, str], cpu: str, memory: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
            **spec,
        },
    }


def controller(kind: str, name: str, replicas: int | None, tmpl: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": tmpl["metadata"]["labels"]},
        "template": tmpl,
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


async def run_explain(
    cp: ControlPlane,
    tmp: Path,
    namespace: str,
    docs: tuple[dict[str, Any], ...],
    *,
    extra: tuple[str, ...] = (),
    kubeconfig: Path | None = None,
    prefix: str = "doc",
) -> tuple[int, bytes, str]:
    """explain -f (one file per document, in order), as the scheduler's identity unless
    ``kubeconfig`` says otherwise: (exit status, stdout, stderr)."""
    args: list[str] = []
    for i, d in enumerate(docs):
        f = tmp / f"{prefix}-{i}.yaml"
        f.write_text(yaml.safe_dump(d))
        args += ["-f", str(f)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kscheduler",
        "explain",
        *args,
        *extra,
        "-n",
        namespace,
        "--kubeconfig",
        str(kubeconfig or cp.scheduler_kubeconfig),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out, err.decode()


async def what_if(
    cp: ControlPlane,
    tmp: Path,
    namespace: str,
    *docs: dict[str, Any],
    extra: tuple[str, ...] = (),
    kubeconfig: Path | None = None,
) -> dict[str, Any]:
    """explain -f ... -o json; it must succeed."""
    rc, out, err = await run_explain(
        cp, tmp, namespace, docs, extra=(*extra, "-o", "json"), kubeconfig=kubeconfig
    )
    assert rc == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


async def what_if_fails(
    cp: ControlPlane, tmp: Path, namespace: str, *docs: dict[str, Any]
) -> tuple[int, str]:
    """explain -f ... that must print nothing on stdout: (exit status, stderr)."""
    rc, out, err = await run_explain(cp, tmp, namespace, docs, prefix="bad")
    assert out == b""
    return rc, err


async def apply(rest: RestClient, namespace: str, doc: dict[str, Any]) -> None:
    body = json.loads(json.dumps(doc))
    body["metadata"]["namespace"] = namespace
    await rest.post(PATHS[doc["kind"]].format(ns=namespace), body)


async def pods_of(rest: RestClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    return await rest.list(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": selector})


def pending_message(pod: dict[str, Any]) -> str:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message") or "")
    return ""


async def settle(
    rest: RestClient, namespace: str, selector: str, expected: int, pending: int
) -> tuple[Counter[str], list[str]]:
    """Wait until ``expected`` pods exist, all but ``pending`` bound and those marked
    unschedulable; returns (nodes bound to, messages of the pending pods)."""

    async def check() -> tuple[Counter[str], list[str]] | None:
        pods = await pods_of(rest, namespace, selector)
        if len(pods) != expected:
            return None
        bound = Counter(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName"))
        messages = [pending_message(p) for p in pods if not p["spec"].get("nodeName")]
        if sum(bound.values()) != expected - pending or not all(messages):
            return None
        return bound, messages

    result: tuple[Counter[str], list[str]] = await wait_for(
        check, timeout=60, what=f"{expected} pods of {selector} settled"
    )
    return result


def predicted(data: dict[str, Any], workload: str) -> tuple[Counter[str], list[str]]:
    nodes: Counter[str] = Counter()
    errors: list[str] = []
    for p in data["placements"]:
        if p["workload"] != workload:
            continue
        # a scenario without ties: the daemon's placements are then fixed
        assert p["node"] is None or len(p["bestNodes"]) == 1, p
        if p["node"]:
            nodes[p["node"]] += 1
        else:
            errors.append(p["fitError"])
    return nodes, errors


def three_nodes() -> list[dict[str, Any]]:
    return [
        make_node("n1", cpu="8", memory="16Gi"),
        make_node("n2", cpu="6", memory="20Gi"),
        make_node("n3", cpu="4", memory="12Gi"),
        make_node("n4", cpu="16", memory="64Gi", taints=[taint("dedicated", "db")]),
    ]


async def test_deployment_what_if_and_max_match_the_daemon(
    control_plane: ControlPlane,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
    tmp_path: Path,
) -> None:
    await create_nodes(rest, three_nodes())
    tmpl = template({"app": "web"}, "3", "1Gi")
    one = controller("Deployment", "web", 1, tmpl)
    data = await what_if(control_plane, tmp_path, namespace, one, extra=("--max",))
    fit = data["max"]["fit"]
    assert fit == 5 and data["max"]["perNode"] == {"n1": 2, "n2": 2, "n3": 1}, data["max"]
    reason = data["max"]["next"]["fitError"]
    assert reason.startswith(
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), 3 Insufficient cpu."
    )
    assert data["placements"] == []

    # what if fit + 1 replicas: the same answer, replica by replica
    dep = controller("Deployment", "web", fit + 1, tmpl)
    data = await what_if(control_plane, tmp_path, namespace, dep)
    nodes, errors = predicted(data, f"Deployment/{namespace}/web")
    assert nodes == Counter({"n1": 2, "n2": 2, "n3": 1}) and errors == [reason]
    assert await pods_of(rest, namespace, "app=web") == [], "the what-if created pods"

    async with running_kscheduler(control_plane):
        await apply(rest, namespace, dep)
        bound, messages = await settle(rest, namespace, "app=web", fit + 1, 1)
    assert bound == nodes
    assert messages == [reason]


def zoned_nodes() -> list[dict[str, Any]]:
    """One node per zone (the daemon's placements are then fixed) and a tainted node
    without a zone, which no spread constraint over zones counts."""
    zone = "topology.kubernetes.io/zone"
    return [
        make_node("n1", cpu="8", memory="16Gi", labels={zone: "a"}),
        make_node("n2", cpu="6", memory="16Gi", labels={zone: "b"}),
        make_node("n3", cpu="4", memory="16Gi", labels={zone: "c"}),
        make_node("n4", cpu="16", memory="64Gi", taints=[taint("dedicated", "db")]),
    ]


async def max_then_apply(
    cp: ControlPlane, rest: RestClient, namespace: str, tmp: Path, tmpl: dict[str, Any]
) -> dict[str, Any]:
    """--max of a Deployment of ``tmpl``; then fit + 1 replicas applied bind as many,
    where --max put them, and the last stays Pending with --max's reason."""
    data = await what_if(
        cp, tmp, namespace, controller("Deployment", "web", 1, tmpl), extra=("--max",)
    )
    got = data["max"]
    dep = controller("Deployment", "web", got["fit"] + 1, tmpl)
    async with running_kscheduler(cp):
        await apply(rest, namespace, dep)
        bound, messages = await settle(rest, namespace, "app=web", got["fit"] + 1, 1)
    assert bound == Counter(got["perNode"]), (bound, got)
    assert messages == [got["next"]["fitError"]]
    return dict(got)


async def test_max_with_topology_spread_over_zones_matches_the_daemon(
    control_plane: ControlPlane,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
    tmp_path: Path,
) -> None:
    await create_nodes(rest, zoned_nodes())
    spread = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    tmpl = template({"app": "web"}, "1", "1Gi", topologySpreadConstraints=[spread])
    got = await max_then_apply(control_plane, rest, namespace, tmp_path, tmpl)
    # zone c is full at 4 copies: a and b stop at 4 + maxSkew 1
    assert got["fit"] == 14 and got["perNode"] == {"n1": 5, "n2": 5, "n3": 4}, got
    assert got["method"] == "per-domain"
    assert got["next"]["fitError"].startswith(
        "0/4 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint(s), "
        "2 node(s) didn't match pod topology spread constraints."
    )


async def test_max_with_required_anti_affinity_matches_the_daemon(
    control_plane: ControlPlane,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
    tmp_path: Path,
) -> None:
    await create_nodes(rest, zoned_nodes())
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "web"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    tmpl = template({"app": "web"}, "1", "1Gi", affinity=anti)
    got = await max_then_apply(control_plane, rest, namespace, tmp_path, tmpl)
    assert got["fit"] == 3 and got["perNode"] == {"n1": 1, "n2": 1, "n3": 1}, got
    assert got["method"] == "per-domain"
    assert got["next"]["fitError"].startswith(
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), "
        "3 node(s) didn't match pod anti-affinity rules."
    )


async def test_max_with_claims_from_a_template_matches_the_daemon(
    control_plane: ControlPlane,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
    tmp_path: Path,
) -> None:
    """Each copy gets its own claim from the template (the controller-manager makes
    them when the Deployment is applied): the devices decide how many fit."""
    driver = f"wi-{uuid.uuid4().hex[:6]}.example.com"
    api = "/apis/resource.k8s.io/v1"
    await create_nodes(rest, [make_node(n, cpu="8", memory="16Gi") for n in ("n1", "n2", "n3")])
    cluster_scoped = [
        (
            f"{api}/deviceclasses",
            {
                "metadata": {"name": driver},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
            },
        )
    ]
    for node_name, devices in (("n1", 2), ("n2", 1)):
        spec = {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"dev-{i}"} for i in range(devices)],
        }
        cluster_scoped.append(
            (f"{api}/resourceslices", {"metadata": {"name": f"{node_name}-{driver}"}, "spec": spec})
        )
    claim_template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-device"},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": driver}}]}
            }
        },
    }
    claims = [{"name": "dev", "resourceClaimTemplateName": "one-device"}]
    tmpl = template({"app": "web"}, "100m", "64Mi", resourceClaims=claims)
    try:
        for path, obj in cluster_scoped:
            await rest.post(path, obj)
        data = await what_if(
            control_plane,
            tmp_path,
            namespace,
            claim_template,
            controller("Deployment", "web", 1, tmpl),
            extra=("--max",),
        )
        got = data["max"]
        assert got["fit"] == 3 and got["perNode"] == {"n1": 2, "n2": 1}, got
        assert got["method"] == "per-node"  # the devices are each on one node
        assert "cannot allocate all claims" in got["next"]["fitError"], got
        async with running_kscheduler(control_plane):
            await apply(rest, namespace, claim_template)
            await apply(rest, namespace, controller("Deployment", "web", 4, tmpl))
            bound, messages = await settle(rest, namespace, "app=web", 4, 1)
        assert bound == Counter(got["perNode"])
        assert messages == [got["next"]["fitError"]]
    finally:
        for path, obj in cluster_scoped:
            await rest.delete(f"{path}/{obj['metadata']['name']}")


async def test_several_files_in_order_replicaset_job_pod(
    control_plane: ControlPlane,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
    tmp_path: Path,
) -> None:
    await create_nodes(rest, three_nodes())
    rs = controller("ReplicaSet", "front", 3, template({"app": "front"}, "1500m", "2Gi"))
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "crunch"},
        "spec": {
            "parallelism": 3,
            "completions": 6,
            "template": template({"app": "crunch"}, "1", "3Gi", restartPolicy="Never"),
        },
    }
    solo = make_pod("solo", namespace, cpu="2", memory="1Gi", scheduler_name=SCHEDULER)
    solo["metadata"]["labels"] = {"app": "solo"}
    data = await what_if(control_plane, tmp_path, namespace, rs, job, solo)
    expect = [
        ("ReplicaSet/{ns}/front", "app=front", 3),
        ("Job/{ns}/crunch", "app=crunch", 3),
        ("Pod/{ns}/solo", "app=solo", 1),
    ]
    assert [p["workload"] for p in data["placements"]] == [
        w.format(ns=namespace) for w, _, n in expect for _ in range(n)
    ]
    async with running_kscheduler(control_plane):
        for doc, (workload, selector, n) in zip((rs, job, solo), expect, strict=True):
            nodes, errors = predicted(data, workload.format(ns=namespace))
            assert not errors
            await apply(rest, namespace, doc)
            bound, _ = await settle(rest, namespace, selector, n, 0)
            assert bound == nodes, (workload, bound, nodes)


async def test_statefulset_claims_follow_the_what_if(
    control_plane: ControlPlane,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
    tmp_path: Path,
) -> None:
    await create_nodes(rest, three_nodes())
    sc_name = f"wffc-{namespace}"
    await rest.post(
        "/apis/storage.k8s.io/v1/storageclasses",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": sc_name},
            "provisioner": "example.com/nowhere",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    )
    try:
        sts = controller("StatefulSet", "db", 2, template({"app": "db"}, "3", "4Gi"))
        sts["spec"]["podManagementPolicy"] = "Parallel"
        sts["spec"]["serviceName"] = "db"
        sts["spec"]["volumeClaimTemplates"] = [
            {
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": sc_name,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        ]
        data = await what_if(control_plane, tmp_path, namespace, sts)
        placements = data["placements"]
        assert [p["pod"] for p in placements] == [f"{namespace}/db-0", f"{namespace}/db-1"]
        assert [p["claims"] for p in placements] == [["data-db-0"], ["data-db-1"]]
        nodes, errors = predicted(data, f"StatefulSet/{namespace}/db")
        assert not errors
        claims = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"
        assert await rest.list(claims) == [], "the what-if created claims"
        async with running_kscheduler(control_plane):
            await apply(rest, namespace, sts)

            async def selected() -> Counter[str] | None:
                got = Counter(
                    (c["metadata"].get("annotations") or {}).get(
                        "volume.kubernetes.io/selected-node", ""
                    )
                    for c in await rest.list(claims)
                )
                return got if sum(got.values()) == 2 and "" not in got else None

            # the daemon chose the nodes and handed them to provisioning (nothing
            # provisions this class, so the pods stay in PreBind)
            chosen = await wait_for(selected, timeout=60, what="claims with a selected node")
        assert chosen == nodes
    finally:
        await rest.delete(f"/apis/storage.k8s.io/v1/storageclasses/{sc_name}")


async def test_daemonset_one_pod_per_node_and_the_full_one_pending(
    control_plane: ControlPlane,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
    tmp_path: Path,
) -> None:
    await create_nodes(
        rest,
        [
            make_node("d1", cpu="4", memory="8Gi"),
            make_node("d2", cpu="4", memory="8Gi"),
            make_node("d3", cpu="4", memory="8Gi", labels={"pool": "other"}),
            make_node("d4", cpu="4", memory="8Gi", taints=[taint("dedicated", "db")]),
        ],
    )
    await create_pods(rest, [make_pod("hog", namespace, cpu="3500m", node_name="d2")])
    ds = controller("DaemonSet", "agent", None, template({"app": "agent"}, "1", "256Mi"))
    ds["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "DoesNotExist"}]}
                ]
            }
        }
    }
    data = await what_if(control_plane, tmp_path, namespace, ds)
    nodes, errors = predicted(data, f"DaemonSet/{namespace}/agent")
    assert nodes == Counter({"d1": 1}), data["placements"]
    assert len(errors) == 1 and errors[0].startswith("0/4 nodes are available: 1 Insufficient cpu")
    async with running_kscheduler(control_plane):
        await apply(rest, namespace, ds)
        bound, messages = await settle(rest, namespace, "app=agent", 2, 1)
    assert bound == nodes
    assert messages == errors


async def test_pdb_from_the_manifests_steers_the_preemption_the_daemon_then_does(
    control_plane: ControlPlane,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
    tmp_path: Path,
) -> None:
    await create_nodes(
        rest, [make_node("p1", cpu="2", memory="8Gi"), make_node("p2", cpu="2", memory="8Gi")]
    )
    classes = {f"{namespace}-low": 0, f"{namespace}-mid": 10, f"{namespace}-high": 1000}
    for name, value in classes.items():
        await rest.post(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )
    try:
        # without a PDB the less important pod (guarded, priority 0) is the victim
        await create_pods(
            rest,
            [
                make_pod(
                    "guarded",
                    namespace,
                    cpu="2",
                    labels={"app": "db"},
                    priority_class_name=f"{namespace}-low",
                    node_name="p1",
                ),
                make_pod(
                    "free",
                    namespace,
                    cpu="2",
                    labels={"app": "cache"},
                    priority_class_name=f"{namespace}-mid",
                    node_name="p2",
                ),
            ],
        )
        pdb = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        }
        tmpl = template({"app": "urgent"}, "1", "256Mi", priorityClassName=f"{namespace}-high")
        dep = controller("Deployment", "urgent", 1, tmpl)
        # an operator's identity: the scheduler's may not read PriorityClasses
        admin = control_plane.admin_kubeconfig
        rc, err = await what_if_fails(control_plane, tmp_path, namespace, dep)
        assert rc == 1 and "cannot read PriorityClass" in err, err
        alone = await what_if(control_plane, tmp_path, namespace, dep, kubeconfig=admin)
        (p,) = alone["placements"]
        assert p["preemption"]["node"] == "p1", p
        assert p["preemption"]["evictions"] == [f"{namespace}/guarded"]

        guarded = await what_if(control_plane, tmp_path, namespace, pdb, dep, kubeconfig=admin)
        (p,) = guarded["placements"]
        assert guarded["objects"] == [f"PodDisruptionBudget {namespace}/db"]
        assert p["fitError"].startswith("0/2 nodes are available: 2 Insufficient cpu.")
        assert p["preemption"]["node"] == "p2", p
        assert p["preemption"]["evictions"] == [f"{namespace}/free"]

        await apply(rest, namespace, pdb)

        async def counted() -> bool:
            got = await rest.get(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/db")
            status = got.get("status") or {}
            return status.get("observedGeneration") == 1 and status.get("currentHealthy") == 1

        await wait_for(counted, timeout=60, what="the disruption controller counted the PDB")
        async with running_kscheduler(control_plane):
            await apply(rest, namespace, dep)
            bound, _ = await settle(rest, namespace, "app=urgent", 1, 0)
        assert bound == Counter({"p2": 1})
        names = {
            p["metadata"]["name"] for p in await rest.list(f"/api/v1/namespaces/{namespace}/pods")
        }
        assert "guarded" in names and "free" not in names
    finally:
        for name in classes:
            await rest.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
