"""Randomized differential test: generated clusters and pods, kube-scheduler against kscheduler.

:func:`generate` turns a seed into a :class:`Case`: a handful of nodes (zones,
labels for every node-affinity operator, taints of every effect, images, extended
resources, small pod capacities, cordoned nodes), two labelled namespaces, and a
sequence of pods drawing on everything the default profile looks at: container,
init and sidecar requests, pod-level resources, host ports, node selectors,
required and preferred node affinity (In, NotIn, Exists, DoesNotExist, Gt, Lt,
matchFields), tolerations, hard and soft topology spread (minDomains, node
inclusion policies, matchLabelKeys), inter-pod affinity and anti-affinity with
namespaces and namespace selectors, and images. The same seed always gives the
same case.

:func:`run_case` plays a case on a control plane: the nodes are created, the
reference kube-scheduler (the pinned binary) is started, and the pods are created
one at a time, each only when the previous one is settled. For every pod the
reference decides; then kscheduler evaluates the same pod on the same cluster
(read-only, with :mod:`kscheduler.explain`'s machinery: every node filtered,
every feasible node scored, per-plugin weighted scores kept) and the two are
compared:

- the reference bound the pod: the node must be among kscheduler's equally best
  nodes (kube-scheduler breaks ties at random). Where the reference scored nodes
  (it logs each plugin's weighted score per node at ``--vmodule=schedule_one=10``),
  its scored nodes must be kscheduler's feasible nodes and every plugin's score on
  every node must be kscheduler's. Where it scored nothing (one feasible node, or
  a node hinted by opportunistic batching, logged at ``batch=3``), kscheduler must
  find exactly one feasible node, or the hinted node feasible.
- the reference left the pod unschedulable: kscheduler must find no node, and
  the PodScheduled message must be kscheduler's FitError message word for word.
  The pod is then deleted, so that a later event cannot bring it back and change
  the cluster under the next pods.

The cluster thus always follows the reference's decisions: a difference shows in
the pod where it arises and does not cascade.

``python -m kscheduler.randomdiff --seed 7`` replays one seed on a fresh control
plane (``--seeds 1-50`` a range); the exit status is 1 when any pod differs.
Every report names its seed.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import random
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from kscheduler.controlplane.builders import (
    create_namespace,
    create_nodes,
    delete_all_nodes,
    delete_namespace,
    make_node,
    taint,
)
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.controlplane.rest import JSON, ApiError, RestClient
from kscheduler.difftest import KSCHEDULER, REFERENCE, kscheduler_config
from kscheduler.explain import DryRunKubeClient, Explanation, evaluate, read_cluster
from kscheduler.framework.status import is_success

ZONE: Final = "topology.kubernetes.io/zone"
REGION: Final = "topology.kubernetes.io/region"
HOSTNAME: Final = "kubernetes.io/hostname"
GPU: Final = "example.com/gpu"
IMAGES: Final = {
    "registry.example/web:1": 300 * 1024 * 1024,
    "registry.example/db:2": 900 * 1024 * 1024,
    "registry.example/cache:3": 60 * 1024 * 1024,
    "registry.example/tiny:1": 2 * 1024 * 1024,
    "registry.example/batch:5": 1500 * 1024 * 1024,
}
APPS: Final = ("web", "db", "cache")
TAINT_KEYS: Final = ("dedicated", "maintenance", "spot")
TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NODE_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")

DEFAULT_PODS = 18
POD_TIMEOUT_SECONDS = 30.0


# --------------------------------------------------------------------------- the case


@dataclass(slots=True)
class Case:
    """One seed's cluster and pods (the pods' schedulerName is set when they are created)."""

    seed: int
    namespaces: list[tuple[str, dict[str, str]]]
    nodes: list[JSON]
    pods: list[JSON]

    def pod_key(self, pod: JSON) -> str:
        return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _pick(rng: random.Random, p: float) -> bool:
    return rng.random() < p


def generate(seed: int, *, pods: int = DEFAULT_PODS) -> Case:
    """The case of ``seed``: the same seed always gives the same nodes and pods."""
    rng = random.Random(seed)
    namespaces = [(f"rd{seed}-a", {"team": "a"}), (f"rd{seed}-b", {"team": "b"})]
    ns_names = [n for n, _ in namespaces]
    node_count = rng.randint(4, 8)
    zones = rng.randint(2, 3)
    nodes = [_node(rng, i, zones) for i in range(node_count)]
    node_names = [n["metadata"]["name"] for n in nodes]
    out = [_pod(rng, i, ns_names, node_names) for i in range(pods)]
    return Case(seed=seed, namespaces=namespaces, nodes=nodes, pods=out)


def _node(rng: random.Random, i: int, zones: int) -> JSON:
    labels = {
        ZONE: f"z{i % zones}",
        REGION: "r0" if i % zones == 0 else "r1",
        "disk": rng.choice(("ssd", "hdd")),
        "gen": str(rng.randint(1, 5)),
    }
    if _pick(rng, 0.4):
        labels["accel"] = rng.choice(("a", "b"))
    taints = []
    if _pick(rng, 0.25):
        for key in rng.sample(TAINT_KEYS, rng.randint(1, 2)):
            value = rng.choice((None, "x", "y"))
            taints.append(taint(key, value, rng.choice(TAINT_EFFECTS)))
    images = {name: size for name, size in IMAGES.items() if _pick(rng, 0.4)}
    extended = {GPU: rng.randint(1, 4)} if _pick(rng, 0.3) else None
    return make_node(
        f"n{i}",
        cpu=rng.choice(("2", "4", "8")),
        memory=rng.choice(("4Gi", "8Gi", "16Gi")),
        pods=rng.choice((4, 110, 110)),
        labels=labels,
        taints=taints,
        images=images,
        extended=extended,
        unschedulable=_pick(rng, 0.1),
    )


def _requests(rng: random.Random, *, empty: float = 0.2) -> dict[str, int]:
    """cpu in millicores, memory in MiB (either may be missing)."""
    out: dict[str, int] = {}
    if not _pick(rng, empty):
        out["cpu"] = rng.choice((50, 100, 250, 500, 1000, 1500))
    if not _pick(rng, empty):
        out["memory"] = rng.choice((64, 128, 512, 1024, 3072))
    return out


def _resources(req: dict[str, int], gpu: int = 0) -> JSON:
    requests: dict[str, str] = {}
    if "cpu" in req:
        requests["cpu"] = f"{req['cpu']}m"
    if "memory" in req:
        requests["memory"] = f"{req['memory']}Mi"
    out: JSON = {}
    if gpu:
        requests[GPU] = str(gpu)
        out["limits"] = {GPU: str(gpu)}
    if requests:
        out["requests"] = requests
    return out


def _container(rng: random.Random, name: str, req: dict[str, int], gpu: int = 0) -> JSON:
    c: JSON = {"name": name, "image": rng.choice(list(IMAGES))}
    res = _resources(req, gpu)
    if res:
        c["resources"] = res
    return c


def _selector(rng: random.Random) -> JSON:
    apps = rng.sample(APPS, rng.randint(1, 2))
    if _pick(rng, 0.5):
        return {"matchLabels": {"app": apps[0]}}
    op = rng.choice(("In", "NotIn", "Exists"))
    expr: JSON = {"key": "app", "operator": op}
    if op != "Exists":
        expr["values"] = apps
    return {"matchExpressions": [expr]}


def _node_expression(rng: random.Random, node_names: Sequence[str]) -> JSON:
    op = rng.choice(NODE_OPERATORS)
    if op in ("Gt", "Lt"):
        return {"key": "gen", "operator": op, "values": [str(rng.randint(1, 4))]}
    key = rng.choice(("disk", "accel", ZONE))
    values = {
        "disk": ["ssd", "hdd"],
        "accel": ["a", "b"],
        ZONE: ["z0", "z1", "z2"],
    }[key]
    expr: JSON = {"key": key, "operator": op}
    if op in ("In", "NotIn"):
        expr["values"] = rng.sample(values, rng.randint(1, 2))
    return expr


def _node_term(rng: random.Random, node_names: Sequence[str]) -> JSON:
    term: JSON = {}
    if _pick(rng, 0.15):
        term["matchFields"] = [
            {
                "key": "metadata.name",
                "operator": rng.choice(("In", "NotIn")),
                "values": [rng.choice(list(node_names))],  # the API takes one
            }
        ]
    if not term or _pick(rng, 0.5):
        term["matchExpressions"] = [
            _node_expression(rng, node_names) for _ in range(rng.randint(1, 2))
        ]
    return term


def _toleration(rng: random.Random) -> JSON:
    out: JSON = {}
    if _pick(rng, 0.1):
        return {"operator": "Exists"}  # tolerates everything
    out["key"] = rng.choice(TAINT_KEYS)
    if _pick(rng, 0.5):
        out["operator"] = "Exists"
    else:
        out["operator"] = "Equal"
        out["value"] = rng.choice(("", "x", "y"))
    effect = rng.choice(("", *TAINT_EFFECTS))
    if effect:
        out["effect"] = effect
    if effect == "NoExecute" and _pick(rng, 0.5):
        out["tolerationSeconds"] = 3600  # well beyond the run: nothing is evicted
    return out


def _spread(rng: random.Random, app: str) -> JSON:
    hard = _pick(rng, 0.5)
    c: JSON = {
        "maxSkew": rng.randint(1, 2),
        "topologyKey": rng.choice((ZONE, HOSTNAME, REGION)),
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app": app}} if _pick(rng, 0.7) else _selector(rng),
    }
    if hard and _pick(rng, 0.25):
        c["minDomains"] = rng.randint(2, 4)
    if _pick(rng, 0.3):
        c["nodeAffinityPolicy"] = rng.choice(("Honor", "Ignore"))
    if _pick(rng, 0.3):
        c["nodeTaintsPolicy"] = rng.choice(("Honor", "Ignore"))
    if _pick(rng, 0.2):
        c["matchLabelKeys"] = ["rev"]
    return c


def _pod_term(rng: random.Random, ns_names: Sequence[str]) -> JSON:
    term: JSON = {
        "labelSelector": _selector(rng),
        "topologyKey": rng.choice((ZONE, HOSTNAME, REGION)),
    }
    which = rng.random()
    if which < 0.2:
        term["namespaces"] = rng.sample(list(ns_names), rng.randint(1, 2))
    elif which < 0.35:
        term["namespaceSelector"] = {}
    elif which < 0.5:
        term["namespaceSelector"] = {"matchLabels": {"team": rng.choice(("a", "b"))}}
    return term


def _pod_affinity(rng: random.Random, ns_names: Sequence[str]) -> JSON:
    out: JSON = {}
    if _pick(rng, 0.5):
        out["requiredDuringSchedulingIgnoredDuringExecution"] = [
            _pod_term(rng, ns_names) for _ in range(rng.randint(1, 2))
        ]
    if not out or _pick(rng, 0.5):
        out["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.randint(1, 100), "podAffinityTerm": _pod_term(rng, ns_names)}
            for _ in range(rng.randint(1, 2))
        ]
    return out


def _pod(rng: random.Random, i: int, ns_names: Sequence[str], node_names: Sequence[str]) -> JSON:
    app = rng.choice(APPS)
    labels = {"app": app, "rev": rng.choice(("1", "2"))}
    gpu = rng.randint(1, 2) if _pick(rng, 0.1) else 0
    container_reqs = [_requests(rng) for _ in range(rng.randint(1, 2))]
    containers = [
        _container(rng, f"c{k}", req, gpu if k == 0 else 0) for k, req in enumerate(container_reqs)
    ]
    spec: JSON = {"containers": containers, "terminationGracePeriodSeconds": 0}
    init_reqs: list[dict[str, int]] = []
    if _pick(rng, 0.35):
        inits = []
        for k in range(rng.randint(1, 2)):
            req = _requests(rng, empty=0.3)
            init_reqs.append(req)
            c = _container(rng, f"init{k}", req)
            if _pick(rng, 0.5):
                c["restartPolicy"] = "Always"  # a sidecar
            inits.append(c)
        spec["initContainers"] = inits
    if _pick(rng, 0.2):
        # pod-level requests: at least what every container asks for together
        pod_req: dict[str, str] = {}
        for resource, unit in (("cpu", "m"), ("memory", "Mi")):
            if _pick(rng, 0.8):
                total = sum(r.get(resource, 0) for r in [*container_reqs, *init_reqs])
                extra = rng.choice((0, 100, 500)) if resource == "cpu" else rng.choice((0, 256))
                pod_req[resource] = f"{max(total + extra, 10)}{unit}"
        if pod_req:
            spec["resources"] = {"requests": pod_req}
    if _pick(rng, 0.2):
        port = rng.choice((8080, 8081))
        cport: JSON = {
            "containerPort": port,
            "hostPort": port,
            "protocol": rng.choice(("TCP", "TCP", "UDP")),
        }
        if _pick(rng, 0.3):
            cport["hostIP"] = rng.choice(("127.0.0.1", "0.0.0.0"))
        containers[0]["ports"] = [cport]
    if _pick(rng, 0.15):
        spec["nodeSelector"] = {"disk": rng.choice(("ssd", "hdd"))}
    affinity: JSON = {}
    node_affinity: JSON = {}
    if _pick(rng, 0.25):
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [_node_term(rng, node_names) for _ in range(rng.randint(1, 2))]
        }
    if _pick(rng, 0.25):
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.randint(1, 100), "preference": _node_term(rng, node_names)}
            for _ in range(rng.randint(1, 2))
        ]
    if node_affinity:
        affinity["nodeAffinity"] = node_affinity
    if _pick(rng, 0.25):
        affinity["podAffinity"] = _pod_affinity(rng, ns_names)
    if _pick(rng, 0.25):
        affinity["podAntiAffinity"] = _pod_affinity(rng, ns_names)
    if affinity:
        spec["affinity"] = affinity
    if _pick(rng, 0.45):
        spec["tolerations"] = [_toleration(rng) for _ in range(rng.randint(1, 2))]
    if _pick(rng, 0.3):
        spec["topologySpreadConstraints"] = [_spread(rng, app) for _ in range(rng.randint(1, 2))]
        keys = [
            (c["topologyKey"], c["whenUnsatisfiable"]) for c in spec["topologySpreadConstraints"]
        ]
        if len(set(keys)) != len(keys):  # the API refuses duplicate key/unsatisfiable pairs
            spec["topologySpreadConstraints"] = spec["topologySpreadConstraints"][:1]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i:02d}", "namespace": rng.choice(ns_names), "labels": labels},
        "spec": spec,
    }


# --------------------------------------------------------------------------- outcomes


@dataclass(slots=True)
class ReferenceDecision:
    """What kube-scheduler did with one pod, from the API and its log."""

    node: str = ""
    message: str = ""
    #: (plugin, node) -> weighted score, as logged; empty when it scored nothing
    scores: dict[tuple[str, str], int] = field(default_factory=dict)
    hint: str = ""


@dataclass(slots=True)
class PodResult:
    seed: int
    index: int
    pod: JSON
    reference: ReferenceDecision
    ours: Explanation | None
    differences: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line: the pod and what the reference did with it."""
        name = f"{self.pod['metadata']['namespace']}/{self.pod['metadata']['name']}"
        ref = self.reference
        if ref.node:
            how = f"{len({n for _, n in ref.scores})} scored" if ref.scores else "not scored"
            what = f"-> {ref.node} ({how})"
        else:
            what = f"unschedulable: {ref.message}"
        return f"{name} {what}{'  DIFFERS' if self.differences else ''}"

    def describe(self) -> str:
        name = f"{self.pod['metadata']['namespace']}/{self.pod['metadata']['name']}"
        ref = f"bound to {self.reference.node}" if self.reference.node else "unschedulable"
        lines = [f"seed {self.seed}, pod #{self.index} {name}: reference {ref}"]
        if self.reference.message:
            lines.append(f"  reference message: {self.reference.message}")
        ex = self.ours
        if ex is not None:
            lines.append(
                f"  kscheduler: feasible {sorted(v.node for v in ex.feasible)}, "
                f"best {ex.best_nodes} (total {ex.best_total})"
            )
            if ex.fit_error:
                lines.append(f"  kscheduler message: {ex.fit_error}")
            for v in ex.feasible:
                cells = ", ".join(f"{p}={s.weighted}" for p, s in sorted(v.scores.items()))
                lines.append(f"    {v.node}: {cells}")
        lines += [f"  - {d}" for d in self.differences]
        lines.append(f"  pod spec: {self.pod['spec']}")
        lines.append(f"  replay: python -m kscheduler.randomdiff --seed {self.seed}")
        return "\n".join(lines)


@dataclass(slots=True)
class CaseResult:
    seed: int
    pods: list[PodResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self) -> list[PodResult]:
        return [p for p in self.pods if p.differences]

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        bound = sum(1 for p in self.pods if p.reference.node)
        scored = sum(1 for p in self.pods if p.reference.scores)
        status = "ok" if self.ok else f"{len(self.failures)} pod(s) differ"
        return (
            f"seed {self.seed}: {len(self.pods)} pods ({bound} bound, {scored} with "
            f"per-plugin scores, {len(self.pods) - bound} unschedulable) in "
            f"{self.seconds:.1f}s: {status}"
        )

    def report(self, *, verbose: bool = False) -> str:
        lines = [self.summary()]
        if verbose:
            lines += [f"  {p.line()}" for p in self.pods]
        return "\n".join([*lines, *(p.describe() for p in self.failures)])


_SCORE_LINE = re.compile(
    r'"Plugin scored node for pod" pod="(?P<pod>[^"]+)" plugin="(?P<plugin>[^"]+)" '
    r'node="(?P<node>[^"]+)" score=(?P<score>-?\d+)'
)
_HINT_LINE = re.compile(
    r'"OpportunisticBatch provided node hint" .*pod="(?P<pod>[^"]+)".* hint="(?P<hint>[^"]+)"'
)


def parse_reference_log(text: str, pod_key: str) -> tuple[dict[tuple[str, str], int], str]:
    """The per-plugin scores and the batching hint kube-scheduler logged for ``pod_key``."""
    scores: dict[tuple[str, str], int] = {}
    hint = ""
    for line in text.splitlines():
        m = _SCORE_LINE.search(line)
        if m is not None and m["pod"] == pod_key:
            scores[(m["plugin"], m["node"])] = int(m["score"])
            continue
        h = _HINT_LINE.search(line)
        if h is not None and h["pod"] == pod_key:
            hint = h["hint"]
    return scores, hint


def compare_decision(ref: ReferenceDecision, ex: Explanation) -> list[str]:
    """Every way kscheduler's evaluation disagrees with the reference's decision."""
    out: list[str] = []
    if ex.error is not None:
        return [f"kscheduler failed to evaluate the pod: {ex.error.message}"]
    if not is_success(ex.pre_enqueue):
        assert ex.pre_enqueue is not None
        out.append(f"kscheduler would hold the pod at PreEnqueue: {ex.pre_enqueue.message}")
    feasible = {v.node for v in ex.feasible}
    if not ref.node:
        if feasible:
            out.append(
                f"the reference found no node but kscheduler finds {sorted(feasible)} feasible"
            )
        elif ex.fit_error != ref.message:
            out.append(
                f"messages differ:\n      reference:  {ref.message}\n"
                f"      kscheduler: {ex.fit_error}"
            )
        return out
    if ref.node not in feasible:
        verdict = next((v for v in ex.verdicts if v.node == ref.node), None)
        why = (
            f"{verdict.rejecting_plugin}: {verdict.status.message}"
            if verdict is not None and verdict.status is not None
            else "not a node kscheduler knows"
        )
        out.append(f"the reference bound it to {ref.node}, which kscheduler rejects ({why})")
        return out
    if ref.scores:
        ref_nodes = {node for _, node in ref.scores}
        if ref_nodes != feasible:
            out.append(
                f"feasible nodes differ: reference scored {sorted(ref_nodes)}, "
                f"kscheduler finds {sorted(feasible)}"
            )
        ours = {(plugin, v.node): s.weighted for v in ex.feasible for plugin, s in v.scores.items()}
        for key in sorted(set(ref.scores) | set(ours)):
            # a plugin that does not score adds 0 (the reference logs VolumeBinding and
            # DynamicResources at 0 for pods without claims; kscheduler skips them)
            a, b = ref.scores.get(key, 0), ours.get(key, 0)
            if a != b and key[1] in ref_nodes & feasible:
                out.append(
                    f"{key[0]} scores node {key[1]} {_show(a)} in the reference, "
                    f"{_show(b)} in kscheduler"
                )
        if not out and ref.node not in ex.best_nodes:
            out.append(
                f"the reference chose {ref.node}, not among kscheduler's best {ex.best_nodes}"
            )
    elif ref.hint:
        if ref.hint != ref.node:
            out.append(f"the reference was hinted {ref.hint} but bound the pod to {ref.node}")
    elif len(feasible) != 1:
        out.append(
            f"the reference scored nothing (one feasible node, {ref.node}); kscheduler finds "
            f"{sorted(feasible)} feasible"
        )
    return out


def _show(score: int | None) -> str:
    return "nothing" if score is None else str(score)


# --------------------------------------------------------------------------- running


class CaseRunner:
    """Plays cases on one control plane; an admin client sets up and creates pods."""

    def __init__(self, cp: ControlPlane, api: RestClient) -> None:
        self.cp = cp
        self.api = api
        from kscheduler.config import load_config
        from kscheduler.plugins import full_registry

        self.registry = full_registry()
        self.cfg = load_config(kscheduler_config({}), registry=self.registry)

    async def run(self, case: Case) -> CaseResult:
        began = time.monotonic()
        result = CaseResult(seed=case.seed)
        await delete_all_nodes(self.api)
        for name, labels in case.namespaces:
            await create_namespace(self.api, name, labels=labels)
        await create_nodes(self.api, copy.deepcopy(case.nodes))
        reference = ReferenceScheduler.for_control_plane(
            self.cp,
            scheduler_name=REFERENCE,
            workdir=self.cp.workdir / f"kube-scheduler-random-{case.seed}",
            extra_args=["--vmodule=schedule_one=10,batch=3"],
        )
        kube = await DryRunKubeClient.from_kubeconfig(
            str(self.cp.scheduler_kubeconfig), qps=-1, burst=1000
        )
        assert isinstance(kube, DryRunKubeClient)
        try:
            await reference.astart()
            log = reference.process.log_path
            for index, pod in enumerate(case.pods):
                offset = log.stat().st_size
                decision = await self._reference_decides(pod)
                text = _read_from(log, offset)
                decision.scores, decision.hint = parse_reference_log(text, case.pod_key(pod))
                raw = await self.api.get(_pod_path(pod))
                ex = await self._kscheduler_evaluates(kube, raw)
                diffs = compare_decision(decision, ex)
                result.pods.append(PodResult(case.seed, index, pod, decision, ex, diffs))
                if not decision.node:
                    await self._delete(pod)
        finally:
            await reference.astop()
            await kube.close()
            for name, _ in case.namespaces:
                await delete_namespace(self.api, name)
            await delete_all_nodes(self.api)
        result.seconds = time.monotonic() - began
        return result

    async def _reference_decides(self, pod: JSON) -> ReferenceDecision:
        body = copy.deepcopy(pod)
        body["spec"]["schedulerName"] = REFERENCE
        ns = pod["metadata"]["namespace"]
        await self.api.post(f"/api/v1/namespaces/{ns}/pods", body)
        deadline = time.monotonic() + POD_TIMEOUT_SECONDS
        path = _pod_path(pod)
        while True:
            raw: JSON = await self.api.get(path)
            node = raw.get("spec", {}).get("nodeName") or ""
            if node:
                return ReferenceDecision(node=node)
            for cond in raw.get("status", {}).get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                    return ReferenceDecision(message=str(cond.get("message", "")))
            if time.monotonic() > deadline:
                raise TimeoutError(f"the reference did not decide on {path} in time")
            await asyncio.sleep(0.05)

    async def _kscheduler_evaluates(self, kube: DryRunKubeClient, raw: JSON) -> Explanation:
        from kscheduler.framework.parse import parse_pod

        raw = copy.deepcopy(raw)
        raw["spec"].pop("nodeName", None)
        pod = parse_pod(raw)
        app = await read_cluster(kube, self.cfg, self.registry)
        app.cache.remove_pod(pod.uid)
        app.queue.delete(pod.uid)
        app.snapshot.update()
        fwk = app.frameworks[KSCHEDULER]
        return await evaluate(fwk, app.algorithm, app.snapshot, pod, writes=kube.writes)

    async def _delete(self, pod: JSON) -> None:
        path = _pod_path(pod)
        try:
            await self.api.delete(path, {"gracePeriodSeconds": 0})
        except ApiError as exc:
            if exc.status != 404:
                raise
        await self.api.wait_deleted(path)


def _pod_path(pod: JSON) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


async def run_seeds(
    cp: ControlPlane, api: RestClient, seeds: Sequence[int], *, pods: int = DEFAULT_PODS
) -> list[CaseResult]:
    runner = CaseRunner(cp, api)
    return [await runner.run(generate(seed, pods=pods)) for seed in seeds]


# --------------------------------------------------------------------------- command line


def parse_seeds(text: str) -> list[int]:
    """ "7", "1-20" or "1,5,9-12"."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"seeds: expected N, N-M or a comma list, got {text!r}")
        out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    return out


async def _main_async(seeds: Sequence[int], pods: int, verbose: bool) -> int:
    async with ControlPlane() as cp, cp.client() as api:
        failed = False
        runner = CaseRunner(cp, api)
        for seed in seeds:
            result = await runner.run(generate(seed, pods=pods))
            print(result.report(verbose=verbose), flush=True)
            failed = failed or not result.ok
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m kscheduler.randomdiff",
        description="Randomized differential test against the pinned kube-scheduler.",
    )
    p.add_argument("--seed", "--seeds", dest="seeds", default="1", help="N, N-M or N,M,...")
    p.add_argument("--pods", type=int, default=DEFAULT_PODS, help="pods per seed")
    p.add_argument("-v", "--verbose", action="store_true", help="a line for every pod")
    args = p.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        p.error(str(exc))
    if args.pods < 1:
        p.error("--pods: must be at least 1")
    from kscheduler.logs import configure

    configure(0, json=False)
    return asyncio.run(_main_async(seeds, args.pods, args.verbose))


if __name__ == "__main__":
    sys.exit(main())
