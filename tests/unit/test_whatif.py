"""explain -f: reading manifests, deriving the controllers' pods, bad input, and the
placements and --max over the daemon's app with in-memory stores (the client is
never contacted)."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kscheduler.app import SchedulerApp
from kscheduler.config import load_config
from kscheduler.explain import DryRunKubeClient
from kscheduler.framework.parse import parse_pod
from kscheduler.kube import KubeConfig
from kscheduler.manifests import (
    Document,
    ManifestError,
    pdb_disruptions_allowed,
    read_documents,
    workload,
)
from kscheduler.plugins import in_tree_registry
from kscheduler.whatif import WhatIf, place_documents, render_json, render_table, render_yaml
from tests.unit.builders import node, pod

ROOT = Path(__file__).resolve().parents[2]
SCHED = "kscheduler"
HOST = "kubernetes.io/hostname"


def container(cpu: str = "1", memory: str = "1Gi") -> dict[str, Any]:
    return {
        "name": "c",
        "image": "nginx",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }


def template(labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {"schedulerName": SCHED, "containers": [container(**spec.pop("req", {}))], **spec},
    }


def deployment(name: str, replicas: int, **kw: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template({"app": name}, **kw),
        },
    }


def docs_of(*objs: dict[str, Any], source: str = "m.yaml") -> list[Document]:
    return read_documents(source, yaml.safe_dump_all(objs))


def error_of(text: str) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        read_documents("bad.yaml", text)
    return info.value


# --------------------------------------------------------------------------- reading


def test_multi_document_yaml_json_and_lists_in_order() -> None:
    text = (
        yaml.safe_dump(deployment("web", 2))
        + "---\n"
        + '{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb"},'
        ' "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}\n'
        + "---\n"
        + yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [deployment("a", 1)]})
        + "---\n"
    )
    docs = read_documents("f.yaml", text, namespace="team")
    assert [(d.kind, d.name, d.namespace, d.index) for d in docs] == [
        ("Deployment", "web", "team", 1),
        ("PodDisruptionBudget", "pdb", "team", 2),
        ("Deployment", "a", "team", 3),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [1\n", "bad.yaml: line 2: not YAML or JSON"),
        ("- 1\n- 2\n", "bad.yaml: document 1: not a manifest: expected an object, got list"),
        ("metadata: {name: x}\n", "bad.yaml: document 1: kind: not a manifest: missing"),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            "bad.yaml: document 1: kind: unknown kind 'ConfigMap'",
        ),
        (
            "apiVersion: v1\nkind: Deployment\nmetadata: {name: x}\n",
            "bad.yaml: document 1: apiVersion: 'v1' is not an apiVersion of Deployment",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {containers: [{name: c}]}\n",
            "bad.yaml: document 1: metadata.name: missing",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {}\n",
            "bad.yaml: document 1: spec.containers: a pod needs at least one container",
        ),
        ("", "bad.yaml: no Kubernetes object in it"),
    ],
)
def test_bad_documents_name_file_document_and_field(text: str, expected: str) -> None:
    assert str(error_of(text)).startswith(expected)


def test_pod_template_that_does_not_parse_is_named_with_its_path() -> None:
    bad = deployment("web", 1)
    bad["spec"]["template"]["spec"]["tolerations"] = "nope"
    text = yaml.safe_dump(deployment("ok", 1)) + "---\n" + yaml.safe_dump(bad)
    msg = str(error_of(text))
    assert msg.startswith("bad.yaml: document 2: pod template does not parse: spec.template.spec")
    assert "tolerations" in msg


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (
            lambda d: d["spec"].__setitem__("replicas", "three"),
            "spec.replicas: expected an integer",
        ),
        (lambda d: d["spec"].__setitem__("replicas", -1), "spec.replicas: must not be negative"),
        (lambda d: d["spec"].pop("template"), "spec.template: missing"),
        (lambda d: d["spec"].pop("selector"), "spec.selector: missing"),
        (
            lambda d: d["spec"]["selector"]["matchLabels"].__setitem__("app", "other"),
            "spec.template.metadata.labels: `selector` does not match template `labels`",
        ),
    ],
)
def test_controller_fields_are_checked(change: Any, where: str) -> None:
    d = deployment("web", 1)
    change(d)
    assert f"document 1: {where}" in str(error_of(yaml.safe_dump(d)))


def test_job_and_statefulset_and_pdb_fields_are_checked() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"completionMode": "Indexed", "template": template({})},
    }
    assert "spec.completions: required when completionMode is Indexed" in str(
        error_of(yaml.safe_dump(job))
    )
    sts = statefulset("db", 1)
    sts["spec"]["volumeClaimTemplates"] = [{"spec": {}}]
    assert "spec.volumeClaimTemplates[0].metadata: missing" in str(error_of(yaml.safe_dump(sts)))
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "p"},
        "spec": {"minAvailable": "half"},
    }
    assert "spec.minAvailable: expected an integer or a percentage" in str(
        error_of(yaml.safe_dump(pdb))
    )


# --------------------------------------------------------------------------- derivation


def statefulset(name: str, replicas: int, **kw: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "db"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template({"app": name}, **kw),
        },
    }


def test_deployment_pods_carry_the_hash_label_and_their_replicaset() -> None:
    (doc,) = docs_of(deployment("web", 3))
    w = workload(doc)
    assert w.replicas == 3
    pods = [w.pod(i) for i in range(3)]
    h = w.hash
    rs_kind, rs = w.owners[0]
    assert rs_kind == "replicasets" and rs["metadata"]["name"] == f"web-{h}"
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": h}
    names = [p["metadata"]["name"] for p in pods]
    assert len(set(names)) == 3
    for p in pods:
        meta = p["metadata"]
        assert meta["name"].startswith(f"web-{h}-") and len(meta["name"]) == len(f"web-{h}-") + 5
        assert meta["namespace"] == "default"
        assert meta["labels"] == {"app": "web", "pod-template-hash": h}
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == (
            "ReplicaSet",
            f"web-{h}",
            True,
        )
        keys = {(t["key"], t["effect"]) for t in p["spec"]["tolerations"]}
        assert ("node.kubernetes.io/not-ready", "NoExecute") in keys
        assert parse_pod(p).parse_error is None


def test_statefulset_names_ordinals_and_claims_as_the_controller_does() -> None:
    sts = statefulset("db", 2)
    sts["spec"]["ordinals"] = {"start": 3}
    sts["spec"]["template"]["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    sts["spec"]["volumeClaimTemplates"] = [
        {
            "metadata": {"name": "data", "labels": {"tier": "disk"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    ]
    (doc,) = docs_of(sts)
    w = workload(doc)
    assert w.ordered
    p = w.pod(1)
    assert p["metadata"]["name"] == "db-4"
    assert p["metadata"]["namespace"] == "db"
    assert p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "db-4"
    assert p["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "4"
    assert p["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-4"}}
    ]
    (claim,) = w.claims(1)
    assert claim["metadata"]["name"] == "data-db-4"
    assert claim["metadata"]["labels"] == {"tier": "disk", "app": "db"}
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert w.owners[0][0] == "statefulsets"


def test_job_runs_min_of_parallelism_and_completions_and_indexes_its_pods() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "crunch"},
        "spec": {
            "parallelism": 5,
            "completions": 3,
            "completionMode": "Indexed",
            "template": template({}, restartPolicy="Never"),
        },
    }
    (doc,) = docs_of(job)
    w = workload(doc)
    assert w.replicas == 3
    p = w.pod(2)
    assert p["metadata"]["name"].startswith("crunch-2-")
    assert p["metadata"]["labels"]["job-name"] == "crunch"
    assert p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "2"
    job["spec"].pop("completions")
    job["spec"].pop("completionMode")
    assert workload(docs_of(job)[0]).replicas == 5
    job["spec"]["suspend"] = True
    assert workload(docs_of(job)[0]).replicas == 0


def test_daemonset_one_pod_per_eligible_node_pinned_by_name() -> None:
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": template({"app": "agent"}, nodeSelector={"os": "linux"}),
        },
    }
    (doc,) = docs_of(ds)
    w = workload(doc)
    nodes = [
        node("a").labels(os="linux").record(),
        node("b").labels(os="windows").record(),
        node("c").labels(os="linux").taint("dedicated", "x").record(),
        node("d")
        .labels(os="linux")
        .unschedulable()
        .taint("node.kubernetes.io/unschedulable")
        .record(),
        node("e").labels(os="linux").taint("spot", "", "PreferNoSchedule").record(),
    ]
    assert w.daemon_nodes(nodes) == ["a", "d", "e"]
    p = w.pod(0, "d")
    terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["d"]}]}
        ]
    }
    keys = {t["key"] for t in p["spec"]["tolerations"]}
    assert "node.kubernetes.io/unschedulable" in keys and "node.kubernetes.io/disk-pressure" in keys


def test_pdb_disruptions_allowed_as_the_disruption_controller() -> None:
    def pdb(**spec: Any) -> dict[str, Any]:
        return {"spec": spec}

    assert pdb_disruptions_allowed(pdb(minAvailable=2), 3, 3) == 1
    assert pdb_disruptions_allowed(pdb(minAvailable="50%"), 3, 3) == 1  # 2 rounded up
    assert pdb_disruptions_allowed(pdb(maxUnavailable=1), 4, 4) == 1
    assert pdb_disruptions_allowed(pdb(maxUnavailable="50%"), 3, 3) == 2
    assert pdb_disruptions_allowed(pdb(minAvailable=5), 3, 3) == 0


# --------------------------------------------------------------------------- placement


def app_with(nodes: list[Any], pods: list[Any] = ()) -> tuple[SchedulerApp, DryRunKubeClient]:  # type: ignore[assignment]
    registry = in_tree_registry()
    cfg = load_config("", registry=registry)
    kube = DryRunKubeClient(KubeConfig("http://127.0.0.1:9"))
    app = SchedulerApp(cfg, registry, kube)
    for n in nodes:
        app.cache.add_node(n)
    for p in pods:
        app.cache.add_pod(p)
    app.snapshot.update()
    return app, kube


def run(app: SchedulerApp, kube: DryRunKubeClient, docs: list[Document], **kw: Any) -> WhatIf:
    kw.setdefault("priority_classes", [])
    return asyncio.run(place_documents(app, kube, docs, **kw))


def test_replicas_are_placed_one_after_another_each_assumed() -> None:
    # big takes two 3-cpu pods; small takes one; the fourth fits nowhere
    app, kube = app_with(
        [
            node("big").alloc(cpu="7", memory="32Gi", pods="110").record(),
            node("small").alloc(cpu="4", memory="32Gi", pods="110").record(),
        ]
    )
    r = run(app, kube, docs_of(deployment("web", 4, req={"cpu": "3"})))
    nodes = [p.node if p.fits else "" for p in r.placements]
    assert sorted(nodes[:3]) == ["big", "big", "small"]
    assert nodes[0] == "big"  # least allocated first
    last = r.placements[3]
    assert not last.fits
    assert last.fit_error.startswith("0/2 nodes are available: 2 Insufficient cpu.")
    assert "preemption: 0/2 nodes are available: 2 No preemption victims found" in last.fit_error
    assert kube.writes == []
    assert app.cache.pod_count() == 3  # the assumed replicas, in this process only
    table = render_table(r)
    assert "3 of 4 pod(s) fit." in table
    assert last.fit_error in table
    data = yaml.safe_load(render_yaml(r))
    assert [p["node"] for p in data["placements"]][:3] == nodes[:3]
    assert data["placements"][3]["preemption"]["node"] is None
    assert yaml.safe_load(render_json(r)) == data


def test_preemption_names_its_victims_and_the_what_if_carries_on() -> None:
    low = pod("low", "batch").req(cpu="3", memory="1Gi").priority(0).build().with_node("n1")
    app, kube = app_with([node("n1").alloc(cpu="4", memory="8Gi", pods="110").record()], [low])
    dep = deployment("web", 2, req={"cpu": "2"}, priorityClassName="high")
    classes = [{"metadata": {"name": "high"}, "value": 1000}]
    r = run(app, kube, docs_of(dep), priority_classes=classes)
    first, second = r.placements
    assert first.preempting and first.node == "n1"
    assert first.evictions == ["batch/low"]
    assert second.fits and second.node == "n1"  # low is gone, the first is assumed on n1
    assert "preemption evicts batch/low" in render_table(r)


def test_pdb_from_the_manifests_steers_preemption() -> None:
    nodes = [node(n).alloc(cpu="2", memory="8Gi", pods="110").record() for n in ("n1", "n2")]
    guarded = pod("guarded", "default").req(cpu="2").labels(app="db").priority(0).build()
    # without a PDB the less important victim (guarded, priority 0) would go
    free = pod("free", "default").req(cpu="2").labels(app="cache").priority(10).build()
    app, kube = app_with(nodes, [guarded.with_node("n1"), free.with_node("n2")])
    dep = deployment("web", 1, req={"cpu": "1"}, priorityClassName="high")
    classes = [{"metadata": {"name": "high"}, "value": 1000}]
    (unguarded,) = run(app, kube, docs_of(dep), priority_classes=classes).placements
    assert unguarded.evictions == ["default/guarded"]
    app, kube = app_with(nodes, [guarded.with_node("n1"), free.with_node("n2")])
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "db"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }
    r = run(app, kube, docs_of(pdb, dep), priority_classes=classes)
    assert r.objects == ["PodDisruptionBudget default/db"]
    (p,) = r.placements
    assert p.preempting and p.evictions == ["default/free"]
    assert p.node == "n2"


def test_unknown_priority_class_is_a_manifest_error() -> None:
    app, kube = app_with([node("n1").alloc(cpu="4", memory="8Gi", pods="110").record()])
    dep = deployment("web", 1, priorityClassName="nope")
    with pytest.raises(ManifestError) as info:
        run(app, kube, docs_of(dep))
    assert str(info.value) == (
        "m.yaml: document 1: spec.template.spec.priorityClassName: no PriorityClass 'nope' "
        "in the cluster"
    )


def test_statefulset_ordered_ready_stops_at_the_first_that_does_not_fit() -> None:
    app, kube = app_with([node("n1").alloc(cpu="2", memory="8Gi", pods="110").record()])
    r = run(app, kube, docs_of(statefulset("db", 3, req={"cpu": "1500m"})))
    a, b, c = r.placements
    assert a.fits and a.pod == "db/db-0"
    assert not b.fits and b.fit_error
    assert c.not_created and "db/db-1" in c.not_created


def test_daemonset_placed_per_node_and_fails_where_full() -> None:
    busy = pod("busy", "x").req(cpu="4").build().with_node("b")
    app, kube = app_with(
        [
            node("a").alloc(cpu="4", memory="8Gi", pods="110").record(),
            node("b").alloc(cpu="4", memory="8Gi", pods="110").record(),
            node("c").alloc(cpu="4", memory="8Gi", pods="110").taint("gpu", "x").record(),
        ],
        [busy],
    )
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": template({"app": "agent"}, req={"cpu": "1"}),
        },
    }
    r = run(app, kube, docs_of(ds))
    assert [(p.node if p.fits else "") for p in r.placements] == ["a", ""]
    assert r.placements[1].fit_error.startswith(
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) "
        "[NodeAffinity]."
    )


def uneven_cluster(n: int, seed: int = 3) -> tuple[list[Any], list[Any]]:
    rng = random.Random(seed)
    nodes, pods = [], []
    for i in range(n):
        name = f"node-{i:04d}"
        b = node(name).alloc(cpu=str(rng.choice([2, 4, 8])), memory="16Gi", pods="20")
        if i % 7 == 3:
            b.taint("dedicated", "batch")
        nodes.append(b.record())
        used = rng.randrange(0, 3)
        if used:
            pods.append(pod(f"load-{i}", "other").req(cpu=str(used)).build().with_node(name))
    return nodes, pods


def test_max_per_node_count_equals_cycle_by_cycle_placement() -> None:
    nodes, pods = uneven_cluster(200)
    dep = deployment("web", 1, req={"cpu": "700m", "memory": "1Gi"})
    app, kube = app_with(nodes, pods)
    fast = run(app, kube, docs_of(dep), max_mode=True)
    assert fast.max is not None and fast.max.method == "per-node"
    app2, kube2 = app_with(nodes, pods)
    slow = run(app2, kube2, docs_of(dep), max_mode=True, max_method="cycles")
    assert slow.max is not None and slow.max.method == "cycle-by-cycle"
    assert fast.max.count == slow.max.count > 0
    assert fast.max.per_node == slow.max.per_node
    assert fast.max.next is not None and not fast.max.next.fits
    assert fast.max.next.fit_error == slow.max.next.fit_error if slow.max.next else False
    assert "--max: " in render_table(fast)


ZONE = "topology.kubernetes.io/zone"


def random_cluster(rng: random.Random) -> tuple[list[Any], list[Any]]:
    """A few zones of uneven nodes (some tainted, some without a zone or hostname
    label, some labelled disk=ssd), with load and some pods that the constraints
    below select (app=web, in this namespace or another)."""
    nodes, pods = [], []
    zones = [f"z{i}" for i in range(rng.randint(1, 4))]
    for i in range(rng.randint(2, 12)):
        name = f"n{i}"
        b = node(name).alloc(cpu=str(rng.choice([1, 2, 3, 4, 6])), memory="16Gi", pods="30")
        if rng.random() < 0.9:
            b.label(ZONE, rng.choice(zones))
        if rng.random() < 0.95:
            b.label(HOST, name)
        if rng.random() < 0.5:
            b.label("disk", "ssd")
        if rng.random() < 0.15:
            b.taint("dedicated", "batch")
        nodes.append(b.record())
        for j in range(rng.randint(0, 2)):
            ns = rng.choice(["default", "default", "other"])
            app_label = rng.choice(["web", "db"])
            p = pod(f"load-{i}-{j}", ns).req(cpu=rng.choice(["500m", "1"])).labels(app=app_label)
            pods.append(p.build().with_node(name))
    return nodes, pods


def random_template_spec(rng: random.Random) -> dict[str, Any]:
    """Constraints the fast --max paths count per domain, node-local ones, and ones
    left to cycle-by-cycle placement (the comparison holds for all)."""
    web = {"matchLabels": {"app": "web"}}
    spec: dict[str, Any] = {}
    kind = rng.choice(["spread", "spread", "anti", "anti", "affinity", "preferred", "mixed"])
    key = rng.choice([ZONE, HOST])
    if kind in ("spread", "mixed"):
        c: dict[str, Any] = {
            "maxSkew": rng.choice([1, 1, 2, 3]),
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": rng.choice([web, web, {"matchLabels": {"app": "other"}}]),
        }
        if rng.random() < 0.3:
            c["minDomains"] = rng.randint(1, 5)
        if rng.random() < 0.3:
            c["nodeTaintsPolicy"] = "Honor"
        spec["topologySpreadConstraints"] = [c]
    if kind in ("anti", "mixed"):
        spec.setdefault("affinity", {})["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": web, "topologyKey": rng.choice([ZONE, HOST])}
            ]
        }
    if kind == "affinity":
        spec["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": web, "topologyKey": key}
                ]
            }
        }
        if rng.random() < 0.5:
            spec["affinity"]["podAntiAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": web, "topologyKey": HOST}
                ]
            }
    if kind == "preferred":
        spec["affinity"] = {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": {"labelSelector": web, "topologyKey": key}}
                ]
            }
        }
    if rng.random() < 0.3:
        spec["nodeSelector"] = {"disk": "ssd"}
    return spec


@pytest.mark.parametrize("seed", range(60))
def test_max_per_domain_count_equals_cycle_by_cycle_placement(seed: int) -> None:
    rng = random.Random(seed)
    nodes, pods = random_cluster(rng)
    spec = random_template_spec(rng)
    dep = deployment("web", 1, req={"cpu": rng.choice(["500m", "1"]), "memory": "1Gi"}, **spec)
    app, kube = app_with(nodes, pods)
    fast = run(app, kube, docs_of(dep), max_mode=True)
    app2, kube2 = app_with(nodes, pods)
    slow = run(app2, kube2, docs_of(dep), max_mode=True, max_method="cycles")
    assert fast.max is not None and slow.max is not None
    assert slow.max.method == "cycle-by-cycle"
    if fast.max.span is not None:
        # required affinity to itself: the domain of the first copy (a tie the
        # daemon breaks at random) decides
        fewest, most = fast.max.span
        assert fewest <= slow.max.count <= most and fewest <= fast.max.count <= most
    else:
        assert fast.max.count == slow.max.count, (fast.max, slow.max.per_node, spec)
    assert sum(fast.max.per_node.values()) == fast.max.count
    assert fast.max.next is not None and not fast.max.next.fits


def test_max_counts_spread_and_anti_affinity_per_domain() -> None:
    """The fast paths are the ones taken, with the counts worked out by hand."""
    nodes = [
        node("a1").alloc(cpu="8", memory="16Gi", pods="110").labels(**{ZONE: "a", HOST: "a1"}),
        node("a2").alloc(cpu="8", memory="16Gi", pods="110").labels(**{ZONE: "a", HOST: "a2"}),
        node("b1").alloc(cpu="3", memory="16Gi", pods="110").labels(**{ZONE: "b", HOST: "b1"}),
        node("c1").alloc(cpu="16", memory="16Gi", pods="110").labels(**{ZONE: "c", HOST: "c1"}),
    ]
    records = [n.record() for n in nodes]
    web = {"matchLabels": {"app": "web"}}
    spread = deployment(
        "web",
        1,
        req={"cpu": "1", "memory": "1Gi"},
        topologySpreadConstraints=[
            {
                "maxSkew": 2,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": web,
            }
        ],
    )
    app, kube = app_with(records)
    r = run(app, kube, docs_of(spread), max_mode=True)
    assert r.max is not None and r.max.method == "per-domain"
    # zone b is full at 3: a and c stop at 3 + maxSkew 2 = 5
    assert r.max.count == 13
    assert r.max.per_node == {"a1": 3, "a2": 2, "b1": 3, "c1": 5}
    assert r.max.basis == (
        f"counted over the domains of the DoNotSchedule topology spread over {ZONE} (maxSkew 2)"
    )
    assert r.max.next is not None
    assert "3 node(s) didn't match pod topology spread constraints" in r.max.next.fit_error
    assert "counted over the domains of the DoNotSchedule topology spread" in " ".join(
        render_table(r).split()
    )

    anti = deployment(
        "web",
        1,
        req={"cpu": "1", "memory": "1Gi"},
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": web, "topologyKey": ZONE}
                ]
            }
        },
    )
    app, kube = app_with(records)
    r = run(app, kube, docs_of(anti), max_mode=True)
    assert r.max is not None and r.max.method == "per-domain"
    assert r.max.count == 3 and sorted(r.max.per_node.values()) == [1, 1, 1]

    # required affinity to itself over zones, nothing selected yet: the first copy
    # picks the zone (a with 16 copies' room, b with 3, c with 16)
    together = deployment(
        "web",
        1,
        req={"cpu": "1", "memory": "1Gi"},
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": web, "topologyKey": ZONE}
                ]
            }
        },
    )
    app, kube = app_with(records)
    r = run(app, kube, docs_of(together), max_mode=True)
    assert r.max is not None and r.max.span == (3, 16)
    assert r.max.count in (3, 16)
    assert len({app.snapshot.get(n).labels[ZONE] for n in r.max.per_node}) == 1  # type: ignore[union-attr]
    assert "from 3 to 16 depending on the domain the first copy lands in" in " ".join(
        render_table(r).split()
    )

    # spread over zones and one copy per node: zones hold 2, 1 and 1 places
    both = deployment(
        "web",
        1,
        req={"cpu": "1", "memory": "1Gi"},
        topologySpreadConstraints=[
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": web,
            }
        ],
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": web, "topologyKey": HOST}
                ]
            }
        },
    )
    app, kube = app_with(records)
    r = run(app, kube, docs_of(both), max_mode=True)
    assert r.max is not None and r.max.method == "per-domain"
    assert r.max.count == 4 and r.max.per_node == {"a1": 1, "a2": 1, "b1": 1, "c1": 1}


def test_max_is_fast_on_5000_nodes() -> None:
    nodes, pods = uneven_cluster(5000)
    app, kube = app_with(nodes, pods)
    dep = deployment("web", 1, req={"cpu": "500m", "memory": "256Mi"})
    started = time.perf_counter()
    r = run(app, kube, docs_of(dep), max_mode=True)
    took = time.perf_counter() - started
    assert r.max is not None and r.max.count > 10000
    assert r.max.next is not None and r.max.next.fit_error.startswith("0/5000 nodes are available")
    assert took < 30, took


def test_max_with_spread_over_zones_is_fast_on_5000_nodes() -> None:
    nodes, pods = uneven_cluster(5000)
    for i, n in enumerate(nodes):
        n.labels[ZONE] = f"zone-{i % 5}"
    app, kube = app_with(nodes, pods)
    spread = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    dep = deployment(
        "web", 1, req={"cpu": "500m", "memory": "256Mi"}, topologySpreadConstraints=[spread]
    )
    started = time.process_time()
    r = run(app, kube, docs_of(dep), max_mode=True)
    took = time.process_time() - started
    assert r.max is not None and r.max.method == "per-domain"
    per_zone: dict[str, int] = {}
    for name, n in r.max.per_node.items():
        z = f"zone-{int(name.removeprefix('node-')) % 5}"
        per_zone[z] = per_zone.get(z, 0) + n
    assert max(per_zone.values()) - min(per_zone.values()) <= 1
    assert sum(per_zone.values()) == r.max.count > 10000
    assert took < 30, took


def test_max_with_a_daemonset_last_is_refused() -> None:
    app, kube = app_with([node("a").alloc(cpu="1", memory="1Gi", pods="110").record()])
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": template({"a": "b"})},
    }
    from kscheduler.whatif import what_if

    with pytest.raises(ManifestError, match="document 1: kind: --max counts copies"):
        asyncio.run(what_if(kube, app.cfg, in_tree_registry(), docs_of(ds), max_mode=True))


# --------------------------------------------------------------------------- command line


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kscheduler", "explain", *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_bad_manifest_exits_2_naming_file_document_and_field(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(deployment("web", 1)))
    res = cli(
        "-f", str(good), "-f", "-", stdin="apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"
    )
    assert res.returncode == 2
    assert res.stdout == ""
    assert "<stdin>: document 1: kind: unknown kind 'Secret'" in res.stderr
    res = cli("-f", str(tmp_path / "missing.yaml"))
    assert res.returncode == 2 and "missing.yaml: cannot read" in res.stderr
    res = cli("--max")
    assert res.returncode == 2 and "--max: needs -f FILE" in res.stderr
    res = cli("ns/pod", "-f", str(good))
    assert res.returncode == 2 and "not both" in res.stderr


def test_statefulset_replicas_do_not_share_the_volume_reserve_took() -> None:
    app, kube = app_with(
        [
            node(n).alloc(cpu="8", memory="16Gi", pods="110").labels(**{HOST: n}).record()
            for n in ("n1", "n2")
        ]
    )
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "local", "uid": "sc", "resourceVersion": "1"},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "disk-n2", "uid": "pv", "resourceVersion": "1"},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local",
            "local": {"path": "/mnt"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": HOST, "operator": "In", "values": ["n2"]}]}
                    ]
                }
            },
        },
        "status": {"phase": "Available"},
    }
    for kind, obj in (("storageclasses", sc), ("persistentvolumes", pv)):
        inf = app.informers.get(kind)
        assert inf is not None
        inf.apply("ADDED", obj)
    sts = statefulset("db", 2, req={"cpu": "1"})
    sts["spec"]["podManagementPolicy"] = "Parallel"
    sts["spec"]["volumeClaimTemplates"] = [
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "local",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    ]
    r = run(app, kube, docs_of(sts))
    first, second = r.placements
    assert first.fits and first.node == "n2" and first.claims == ["data-db-0"]
    assert not second.fits
    assert "didn't find available persistent volumes to bind" in second.fit_error
