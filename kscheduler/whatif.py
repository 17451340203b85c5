"""``kscheduler explain -f FILE``: where would these manifests' pods go, and how many fit.

Read-only against the live cluster, with the daemon's own framework (see
:mod:`kscheduler.explain`): the cluster is listed once through the daemon's
informers, which are then stopped; the manifests' objects (PodDisruptionBudgets,
Services, claims, a Deployment's ReplicaSet, a StatefulSet) are added to the
informers' stores, never to the cluster; the pods the controllers would create
(:mod:`kscheduler.manifests`) are evaluated one after another, each over every
node as ``kscheduler explain`` does, and each placement is assumed in the
scheduler cache before the next, as the daemon assumes a pod it has chosen a
node for. A pod that fits nowhere gets the FailedScheduling text the daemon
would write and the dry-run verdict of PostFilter (preemption): the node it
would nominate and the pods it would evict. When preemption makes room, the
what-if carries on as if it had happened: the victims leave the cache and the
pod is assumed on the nominated node.

Priority comes from the cluster's PriorityClasses (``priorityClassName``, else
the global default), as the Priority admission plugin sets it, and every pod gets
the tolerations DefaultTolerationSeconds adds. A PodDisruptionBudget from the
manifests gets the ``disruptionsAllowed`` the disruption controller would give it
with the pods it then selects (those placed count as healthy).

``--max``: after placing every document but the last pod-producing one, that
one's pod template is placed again and again until a copy fits nowhere; the
answer is how many fitted and the full explanation of the first that does not.
The count is worked out from one PreFilter where it cannot depend on the order
of the placements (:func:`_plan`); the daemon's choices among nodes (scores,
percentageOfNodesToScore sampling, random ties) then change where copies go,
never how many fit, since a cycle finds a feasible node whenever one exists:

* per-node: every filter that runs is node-local (a copy placed on one node
  changes no other node's verdict: resources, ports, taints, node affinity,
  spreading and pod (anti-)affinity whose selectors do not select the pod,
  claims only when each copy's own and every device on one node, see
  :func:`_claims_local`); the count is the sum over nodes of how many copies
  each takes.
* per-domain: one DoNotSchedule spread constraint selects the copies (and no
  anti-affinity does): each domain's room is counted per node as above with the
  other filters, then :func:`spread_quotas` fills the domains to the one end
  every order of placements reaches. Or the required anti-affinity terms that
  select the copies share one topology key: one copy per domain with room.
* required affinity to itself with no pod selected yet: the first copy is
  placed cycle by cycle (it picks the domain), then the rest counted as above.
* otherwise (several constraints that select the copies, other claims, filters
  not known to be node-local) copies are placed cycle by cycle as the daemon would,
  the same cycles with two shortcuts for pods without claims: a node-local
  filter's verdict on a node that has not changed since the last copy is reused
  (:class:`_KeptVerdicts`), and nodes that cannot fit the next copy (a domain
  over a spread constraint's skew) or any later one (a rejection the copies
  cannot undo) are not filtered again (:class:`_RuledOut`).

Not modelled: pending pods already in the cluster competing for the same room,
LimitRange defaults and RuntimeClass overhead (admission), HTTP extenders.
Reserve runs after each placement as in the daemon (volume binding keeps the
volumes it chose for a claim in memory, so the next replica does not count on
them); Permit and the binding cycle do not.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import itertools
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from kscheduler.algorithm import FitError, ScheduleError
from kscheduler.explain import (
    DryRunKubeClient,
    ExplainError,
    Explanation,
    evaluate,
    read_cluster,
)
from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.selectors import LabelSelector
from kscheduler.framework.status import Code, Status
from kscheduler.framework.types import NodeInfo, PodInfo
from kscheduler.kube import ApiError
from kscheduler.manifests import (
    Document,
    ManifestError,
    Workload,
    claim_from_template,
    fake_uid,
    object_of,
    pdb_disruptions_allowed,
    pdb_selector,
    workload,
)
from kscheduler.plugins import inter_pod_affinity as ipa
from kscheduler.plugins import pod_topology_spread as pts

if TYPE_CHECKING:
    from kscheduler.app import SchedulerApp
    from kscheduler.config import KubeSchedulerConfiguration
    from kscheduler.framework.interface import PreFilterResult
    from kscheduler.framework.registry import Registry
    from kscheduler.framework.runtime import BatchFilterFn, FilterFn, Framework

JSON = dict[str, Any]
RESOURCE_API = "/apis/resource.k8s.io/v1"

#: Filter plugins whose verdict on a node depends only on that node and the pod
#: (given the conditions checked in :func:`_plan`).
NODE_LOCAL_FILTERS = frozenset(
    {
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "InterPodAffinity",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "DynamicResources",
    }
)
_VOLUME_FILTERS = frozenset(
    {"VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone"}
)


# --------------------------------------------------------------------------- result


@dataclass(slots=True)
class Placement:
    """One pod of the manifests and where it would go."""

    workload: str
    pod: str
    #: the chosen node ("" when none); with ``preempting`` the node preemption frees
    node: str = ""
    #: every node with the best total (the daemon picks one of them at random)
    best_nodes: list[str] = field(default_factory=list)
    best_total: int | None = None
    feasible: int = 0
    #: the FailedScheduling message when no node fits
    fit_error: str = ""
    #: preemption would make room on ``node`` by evicting these (namespace/name)
    preempting: bool = False
    evictions: list[str] = field(default_factory=list)
    #: PostFilter's verdict when it cannot help (its message ends fit_error)
    post_filter: str = ""
    #: the pod is not created (an OrderedReady StatefulSet waits for an earlier one)
    not_created: str = ""
    #: an Error status, or a PreEnqueue rejection the daemon would hold the pod at
    error: str = ""
    claims: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return bool(self.node) and not self.preempting


@dataclass(slots=True)
class MaxResult:
    workload: str
    count: int
    per_node: dict[str, int]
    #: "per-node" (node-local filters), "per-domain" (one spread constraint or
    #: anti-affinity term selects the copies) or "cycle-by-cycle"
    method: str
    #: why the copies were placed cycle by cycle ("" when they were not)
    why_cycles: str
    seconds: float
    #: the first copy that fits nowhere
    next: Placement | None = None
    #: how the count was made beyond the method (the rules counted by)
    basis: str = ""
    #: required affinity to itself, no pod selected yet: the fewest and the most
    #: copies that fit, as the domain the first copy lands in decides
    span: tuple[int, int] | None = None


@dataclass(slots=True)
class WhatIf:
    profile: str
    num_nodes: int
    placements: list[Placement] = field(default_factory=list)
    #: non-pod objects added to the informers' stores, as Kind namespace/name
    objects: list[str] = field(default_factory=list)
    max: MaxResult | None = None
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- the run


class _Session:
    """The cluster as listed, plus what the what-if has assumed into it."""

    def __init__(
        self,
        app: SchedulerApp,
        kube: DryRunKubeClient,
        profile: str | None,
        priority_classes: list[JSON] | None,
    ) -> None:
        self.app = app
        self.kube = kube
        self.profile = profile
        self.priority_classes = priority_classes
        self.rng = random.Random(0)
        #: manifest PDBs, refreshed before each evaluation
        self.pdbs: list[JSON] = []
        self.seq = 0
        #: ResourceClaimTemplates by (namespace, name): the manifests', then the
        #: cluster's ones the pods name (see :meth:`read_claim_templates`)
        self.claim_templates: dict[tuple[str, str], JSON] = {}

    # ---- the objects ----
    def put(self, kind: str, obj: JSON) -> None:
        inf = self.app.informers.get(kind) or self.app.informers.informer(kind)
        inf.apply("ADDED", obj)

    def exists(self, kind: str, namespace: str, name: str) -> bool:
        inf = self.app.informers.get(kind)
        return inf is not None and inf.get(namespace, name) is not None

    def refresh_pdbs(self) -> None:
        if not self.pdbs:
            return
        inf = self.app.informers.get("poddisruptionbudgets")
        if inf is None:
            return
        for pdb in self.pdbs:
            ns = pdb["metadata"]["namespace"]
            sel = pdb_selector(pdb)
            healthy = 0
            if sel is not None:
                for ni in self.app.snapshot.node_infos():
                    for p in ni.pods.values():
                        if p.namespace == ns and not p.deleting and sel.matches(p.labels):
                            healthy += 1
            allowed = pdb_disruptions_allowed(pdb, healthy, healthy)
            self.seq += 1
            pdb["metadata"]["resourceVersion"] = str(self.seq)
            pdb["status"] = {
                "disruptionsAllowed": allowed,
                "currentHealthy": healthy,
                "expectedPods": healthy,
                "observedGeneration": 1,
            }
            inf.apply("MODIFIED", copy.deepcopy(pdb))

    # ---- the pods ----
    def framework(self, pod: PodInfo) -> Framework:
        name = self.profile or pod.scheduler_name
        fwk = self.app.frameworks.get(name)
        if fwk is None:
            raise ExplainError(
                f"pod {pod.key} has schedulerName {pod.scheduler_name!r}, which no profile of "
                f"the configuration handles (profiles: {', '.join(self.app.frameworks)}); "
                "pass --profile NAME to evaluate it with one",
                exit_code=2,
            )
        return fwk

    def admit(self, doc: Document, raw: JSON) -> PodInfo:
        """uid, creation time and priority as the API server would set them."""
        meta, spec = raw["metadata"], raw["spec"]
        meta["uid"] = fake_uid("pod", meta["namespace"], meta["name"])
        meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["resourceVersion"] = "1"
        self._priority(doc, spec)
        self._claims_from_templates(raw)
        pod = parse_pod(raw)
        if pod.parse_error is not None:  # checked when read; a derived field went wrong
            raise doc.error("", f"derived pod does not parse: {pod.parse_error}")
        return pod

    def _claims_from_templates(self, raw: JSON) -> None:
        """The ResourceClaims the resourceclaim controller makes for the pod's
        entries that name a template, and the pod's status listing them."""
        ns = raw["metadata"]["namespace"]
        statuses = []
        for entry in raw["spec"].get("resourceClaims") or []:
            if not isinstance(entry, dict) or not entry.get("resourceClaimTemplateName"):
                continue
            template = self.claim_templates[ns, entry["resourceClaimTemplateName"]]
            claim = claim_from_template(raw, str(entry.get("name", "")), template)
            self.put("resourceclaims", claim)
            statuses.append(
                {"name": entry.get("name", ""), "resourceClaimName": claim["metadata"]["name"]}
            )
        if statuses:
            raw.setdefault("status", {})["resourceClaimStatuses"] = statuses

    async def read_claim_templates(self, docs: Sequence[Document]) -> None:
        """The ResourceClaimTemplates the pods of ``docs`` name, from the manifests
        or else the cluster; a template found in neither is the manifest's error."""
        for d in docs:
            if d.kind == "ResourceClaimTemplate":
                self.claim_templates[d.namespace, d.name] = object_of(d)[1]
        for d in docs:
            if d.kind not in _POD_KINDS:
                continue
            prefix = "spec." if d.kind == "Pod" else "spec.template.spec."
            spec = d.obj["spec"] if d.kind == "Pod" else d.obj["spec"]["template"]["spec"]
            for i, entry in enumerate(spec.get("resourceClaims") or []):
                name = entry.get("resourceClaimTemplateName") if isinstance(entry, dict) else None
                if not name or (d.namespace, name) in self.claim_templates:
                    continue
                path = f"{RESOURCE_API}/namespaces/{d.namespace}/resourceclaimtemplates/{name}"
                try:
                    self.claim_templates[d.namespace, name] = await self.kube.get_json(path)
                except ApiError as e:
                    field_path = f"{prefix}resourceClaims[{i}].resourceClaimTemplateName"
                    if e.status == 404:
                        raise d.error(
                            field_path,
                            f"no ResourceClaimTemplate {name!r} in namespace {d.namespace!r} "
                            "(neither in the manifests nor in the cluster)",
                        ) from e
                    raise ExplainError(
                        f"{d.source}: document {d.index}: {field_path}: cannot read "
                        f"ResourceClaimTemplate {d.namespace}/{name} from the cluster: {e}"
                    ) from e

    def _priority(self, doc: Document, spec: JSON) -> None:
        name = spec.get("priorityClassName")
        field_path = (
            "spec.priorityClassName"
            if doc.kind == "Pod"
            else ("spec.template.spec.priorityClassName")
        )
        classes = self.priority_classes
        if classes is None:
            if name:
                raise ExplainError(
                    f"{doc.source}: document {doc.index}: {field_path}: cannot read "
                    f"PriorityClass {name!r} from the cluster (no permission to list "
                    "priorityclasses?)"
                )
            return
        chosen: JSON | None = None
        if name:
            chosen = next((c for c in classes if c["metadata"]["name"] == name), None)
            if chosen is None and name not in ("system-cluster-critical", "system-node-critical"):
                raise doc.error(field_path, f"no PriorityClass {name!r} in the cluster")
            if chosen is None:
                chosen = {"value": 2000001000 if name == "system-node-critical" else 2000000000}
        else:
            defaults = [c for c in classes if c.get("globalDefault")]
            if defaults:
                chosen = min(defaults, key=lambda c: int(c.get("value") or 0))
                spec["priorityClassName"] = chosen["metadata"]["name"]
        if chosen is not None:
            spec["priority"] = int(chosen.get("value") or 0)
            if chosen.get("preemptionPolicy") and not spec.get("preemptionPolicy"):
                spec["preemptionPolicy"] = chosen["preemptionPolicy"]
        else:
            spec["priority"] = 0

    def add_claims(self, w: Workload, i: int) -> list[str]:
        names = []
        default_class = self._default_storage_class()
        for claim in w.claims(i):
            meta = claim["metadata"]
            names.append(meta["name"])
            if self.exists("persistentvolumeclaims", meta["namespace"], meta["name"]):
                continue  # the controller reuses a claim that exists
            cspec = claim.setdefault("spec", {})
            if "storageClassName" not in cspec and default_class:
                cspec["storageClassName"] = default_class  # DefaultStorageClass admission
            self.put("persistentvolumeclaims", claim)
        return names

    def _default_storage_class(self) -> str:
        inf = self.app.informers.get("storageclasses")
        if inf is None:
            return ""
        defaults = [
            sc
            for sc in inf.list()
            if (sc.get("metadata", {}).get("annotations") or {}).get(
                "storageclass.kubernetes.io/is-default-class"
            )
            == "true"
        ]
        if not defaults:
            return ""
        newest = max(defaults, key=lambda sc: str(sc["metadata"].get("creationTimestamp", "")))
        return str(newest["metadata"]["name"])

    async def place(self, doc: Document, w: Workload, raw: JSON, claims: list[str]) -> Placement:
        pod = self.admit(doc, raw)
        fwk = self.framework(pod)
        pl = Placement(w.key, pod.key, claims=claims)
        self.refresh_pdbs()
        self.app.snapshot.update()
        start = len(self.kube.writes)
        ex = await evaluate(
            fwk, self.app.algorithm, self.app.snapshot, pod, writes=self.kube.writes
        )
        del self.kube.writes[start:]
        self._record(pl, ex)
        if pl.node:
            if pl.preempting:
                self._evict(pl)
            self.app.snapshot.update()
            ni = self.app.snapshot.get(pl.node)
            state = CycleState()
            _, st, _ = fwk.run_pre_filter(state, pod, self.app.snapshot.node_infos())
            if st is None and ni is not None:
                st = fwk.run_filter_with_nominated_pods(state, pod, ni)
            self.assume(pod, raw, pl.node)
            if st is None:
                self.reserve(fwk, state, pod, pl.node)
        return pl

    def reserve(self, fwk: Framework, state: CycleState, pod: PodInfo, node: str) -> None:
        """Reserve, as the daemon runs it after choosing the node: plugins keep what
        they assume in memory (volume binding: the volumes chosen for the claims)."""
        st = fwk.run_reserve(state, pod, node)
        if st is not None:
            fwk.run_unreserve(state, pod, node)

    def _record(self, pl: Placement, ex: Explanation) -> None:
        if ex.error is not None:
            pl.error = f"{ex.error.plugin or 'error'}: {ex.error.message}"
            return
        if ex.pre_enqueue is not None:
            pl.error = f"PreEnqueue {ex.pre_enqueue.plugin}: {ex.pre_enqueue.message}"
            return
        pl.feasible = len(ex.feasible)
        pl.best_nodes = list(ex.best_nodes)
        pl.best_total = ex.best_total
        if ex.fit_error:
            pl.fit_error = ex.fit_error
            made_room = ex.post_filter is None or ex.post_filter.code == Code.SUCCESS
            if made_room and ex.post_filter_nominated:
                pl.node, pl.preempting = ex.post_filter_nominated, True
                pl.evictions = ex.evictions
            elif ex.post_filter is not None and not made_room:
                pl.post_filter = ex.post_filter.message
            return
        pl.node = ex.would_choose or self.rng.choice(ex.best_nodes)

    def _evict(self, pl: Placement) -> None:
        ni = self.app.snapshot.get(pl.node)
        gone = set(pl.evictions)
        if ni is None:
            return
        for p in list(ni.pods.values()):
            if p.key in gone:
                self.app.cache.remove_pod(p.uid)

    def assume(self, pod: PodInfo, raw: JSON, node: str) -> None:
        bound = dict(raw)
        bound["spec"] = dict(raw["spec"], nodeName=node)
        placed = parse_pod(bound)
        self.app.cache.assume(placed)


async def what_if(
    kube: DryRunKubeClient,
    cfg: KubeSchedulerConfiguration,
    registry: Registry,
    docs: Sequence[Document],
    *,
    profile: str | None = None,
    max_mode: bool = False,
    sync_timeout: float = 60.0,
) -> WhatIf:
    """Place the pods of ``docs`` in order against the cluster read through ``kube``.

    Raises ManifestError (exit 2) for a document the cluster cannot take as it is
    (an unknown PriorityClass, --max without a pod template), ExplainError for
    the cluster (unreadable) or the configuration (no profile for a pod).
    """
    if max_mode:
        daemons = [d for d in docs if d.kind in _POD_KINDS]
        if daemons and daemons[-1].kind == "DaemonSet":
            raise daemons[-1].error(
                "kind", "--max counts copies of one pod; a DaemonSet has one per node"
            )
    app = await read_cluster(kube, cfg, registry, sync_timeout=sync_timeout)
    classes: list[JSON] | None
    try:
        listed = await kube.get_json("/apis/scheduling.k8s.io/v1/priorityclasses")
        classes = list(listed.get("items") or [])
    except ApiError:
        classes = None
    result = await place_documents(
        app, kube, docs, priority_classes=classes, profile=profile, max_mode=max_mode
    )
    if cfg.extenders:
        result.notes.append(
            f"The configuration has {len(cfg.extenders)} extender(s), which explain does not "
            "call: their filtering and scores are not included."
        )
    return result


async def place_documents(
    app: SchedulerApp,
    kube: DryRunKubeClient,
    docs: Sequence[Document],
    *,
    priority_classes: list[JSON] | None,
    profile: str | None = None,
    max_mode: bool = False,
    max_method: str = "auto",
) -> WhatIf:
    """The what-if over ``app``'s cache and informer stores as they are (listed, not
    running); ``kube`` is the app's client, which keeps PostFilter's writes.
    ``max_method="cycles"`` places every --max copy cycle by cycle (to compare)."""
    classes = priority_classes
    workloads = [(d, workload(d)) for d in docs if d.kind in _POD_KINDS]
    if max_mode and not workloads:
        d = docs[-1]
        raise ManifestError(d.source, 0, "", "--max needs a document with a pod template")
    s = _Session(app, kube, profile, classes)
    result = WhatIf(profile=profile or "", num_nodes=len(app.snapshot.node_infos()))
    if classes is None:
        result.notes.append(
            "PriorityClasses could not be read: pods without priorityClassName count as priority 0."
        )
    # Objects first (kubectl apply of a whole set creates them before their pods run).
    for d in docs:
        if d.kind in _POD_KINDS:
            continue
        kind, obj = object_of(d)
        if d.kind == "PodDisruptionBudget":
            s.pdbs.append(obj)
        if d.kind != "ResourceClaimTemplate":  # read by the what-if, not by plugins
            s.put(kind, obj)
        result.objects.append(f"{d.kind} {d.namespace}/{d.name}")
    for _, w in workloads:
        for kind, obj in w.owners:
            s.put(kind, obj)
    await s.read_claim_templates(docs)
    app.snapshot.update()

    to_place = workloads[:-1] if max_mode else workloads
    for doc, w in to_place:
        if w.kind == "DaemonSet":
            nodes = [ni.node for ni in app.snapshot.node_infos() if ni.node is not None]
            for name in w.daemon_nodes(nodes):
                result.placements.append(await s.place(doc, w, w.pod(0, name), []))
            continue
        waiting = ""
        for i in range(w.replicas):
            if waiting:
                raw = w.pod(i)
                result.placements.append(
                    Placement(
                        w.key, f"{doc.namespace}/{raw['metadata']['name']}", not_created=waiting
                    )
                )
                continue
            claims = s.add_claims(w, i)
            pl = await s.place(doc, w, w.pod(i), claims)
            result.placements.append(pl)
            if w.ordered and not pl.node:
                waiting = (
                    f"the StatefulSet (OrderedReady) creates it once {pl.pod} is running and ready"
                )
    if max_mode:
        doc, w = workloads[-1]
        result.max = await _max(s, doc, w, method=max_method)
    if not result.profile and len(app.frameworks) == 1:
        result.profile = next(iter(app.frameworks))
    return result


_POD_KINDS = ("Pod", "Deployment", "ReplicaSet", "StatefulSet", "Job", "DaemonSet")


# --------------------------------------------------------------------------- --max


@dataclass(slots=True)
class _Plan:
    """How --max counts the copies of a pod from the cycle state of one PreFilter."""

    #: "per-node", "per-domain", "first-copy" (place one copy cycle by cycle, then
    #: plan again) or "cycle-by-cycle"
    method: str
    #: cycle-by-cycle: why the copies cannot be counted
    why: str = ""
    #: per-domain: the index in PodTopologySpread's state of the DoNotSchedule
    #: constraint that selects the copies (-1: none) and its topology key
    spread: int = -1
    spread_key: str = ""
    #: per-domain: the topology key of the required anti-affinity terms that
    #: select the copies ("": none)
    anti_key: str = ""
    basis: str = ""


def _cycles(why: str) -> _Plan:
    return _Plan("cycle-by-cycle", why=why)


def _selector_keys(sel: LabelSelector) -> set[str]:
    return {k for k, _ in sel.match_labels} | {r.key for r in sel.requirements}


def _varying_labels(w: Workload) -> set[str]:
    """Label keys whose value differs from copy to copy (a StatefulSet's pod name)."""
    a = (w.pod(0)["metadata"].get("labels") or {}).items()
    b = (w.pod(1)["metadata"].get("labels") or {}).items()
    return {k for k, _ in a ^ b}


def _plan(
    fwk: Framework, state: CycleState, pod: PodInfo, varying: set[str], claims_local: bool = False
) -> _Plan:
    """Which counting is exact for copies of ``pod`` (see the module's docstring).

    A filter is node-local when a copy placed on one node changes no other node's
    verdict. PodTopologySpread and InterPodAffinity are node-local for a pod its
    own constraints do not select (their counts never change); a copy a
    DoNotSchedule constraint selects raises its domain's count, and one that a
    required anti-affinity term selects closes its domain; required affinity
    changes nothing once a pod it selects exists.
    """
    names = [name for name, _, _ in fwk.filters_to_run(state)]
    for name in names:
        if name not in NODE_LOCAL_FILTERS and name != pts.NAME:
            return _cycles(f"filter {name} may depend on other nodes")
    spec = pod.raw.get("spec") or {}
    for v in spec.get("volumes") or []:
        if isinstance(v, dict) and ("persistentVolumeClaim" in v or "ephemeral" in v):
            return _cycles("the pod mounts claims")
    claims = bool(spec.get("resourceClaims"))
    if claims and not claims_local:
        return _cycles(
            "the pod has resource claims that are not each copy's own, or devices that "
            "are not each on one node"
        )
    spread = state.get(pts.PRE_FILTER_KEY) if pts.NAME in names else None
    affinity = state.get(ipa.PRE_FILTER_KEY) if ipa.NAME in names else None
    if spread is not None and not isinstance(spread, pts.FilterState):
        return _cycles("the topology spread state is not readable")
    if affinity is not None and not isinstance(affinity, ipa.FilterState):
        return _cycles("the inter-pod affinity state is not readable")
    selectors: list[LabelSelector] = []
    dynamic: list[int] = []
    if spread is not None:
        for i, c in enumerate(spread.constraints):
            if c.selector is not None:
                selectors.append(c.selector)
            if spread.self_match[i] and c.counts_pods:
                dynamic.append(i)
    anti_keys: set[str] = set()
    first = False
    if affinity is not None:
        selectors += [t.selector for t in (*affinity.affinity, *affinity.anti_affinity)]
        anti_keys = {t.topology_key for t in affinity.anti_affinity if t.matches(pod)}
        first = bool(affinity.affinity) and not affinity.affinity_counts and affinity.self_match
        if varying and affinity.existing_anti_affinity_counts:
            return _cycles(
                "the copies' labels differ and existing pods' anti-affinity selects the pod"
            )
    if varying and any(_selector_keys(sel) & varying for sel in selectors):
        return _cycles(
            f"the copies differ in label(s) {', '.join(sorted(varying))}, which a "
            "constraint of the pod selects on"
        )
    if len(dynamic) > 1:
        return _cycles("the pod has several DoNotSchedule topology spread constraints")
    if len(anti_keys) > 1:
        return _cycles(
            "the pod's required anti-affinity to its own copies has several topology keys"
        )
    if first and claims:
        return _cycles("the pod has resource claims and required affinity to itself")
    if first:
        return _Plan(
            "first-copy", spread=dynamic[0] if dynamic else -1, anti_key=",".join(anti_keys)
        )
    if not dynamic and not anti_keys:
        return _Plan("per-node")
    if claims:
        return _cycles("the pod has resource claims and a constraint that selects its copies")
    plan = _Plan("per-domain")
    rules = []
    if dynamic:
        assert spread is not None
        c = spread.constraints[dynamic[0]]
        plan.spread, plan.spread_key = dynamic[0], c.topology_key
        rules.append(
            f"counted over the domains of the DoNotSchedule topology spread over "
            f"{c.topology_key} (maxSkew {c.max_skew})"
        )
    if anti_keys:
        (plan.anti_key,) = anti_keys
        rules.append(f"one copy per domain of its required anti-affinity over {plan.anti_key}")
    plan.basis = " and ".join(rules)
    return plan


def _fill(
    s: _Session,
    fwk: Framework,
    state: CycleState,
    probe: PodInfo,
    nodes: Sequence[NodeInfo],
    names: Iterator[str],
    limit: Callable[[NodeInfo], int | None],
) -> dict[str, list[PodInfo]]:
    """Assume copies of ``probe`` on each node until the filters (the cycle state of
    one PreFilter) reject the next or ``limit(node)`` is reached: the copies per node."""
    out: dict[str, list[PodInfo]] = {}
    for ni in nodes:
        most = limit(ni)
        placed: list[PodInfo] = []
        while most is None or len(placed) < most:
            if fwk.run_filter_with_nominated_pods(state, probe, ni) is not None:
                break
            name = next(names)
            copy_ = dataclasses.replace(
                probe,
                uid=fake_uid("pod", probe.namespace, name),
                name=name,
                node_name=ni.name,
                ext={},
            )
            s.app.cache.assume(copy_)
            placed.append(copy_)
        if placed:
            out[ni.name] = placed
    return out


def _claims_local(s: _Session, pod: PodInfo) -> bool:
    """Whether DynamicResources is node-local for copies of ``pod``: each claim is
    made from a template for the copy alone, every device is in a ResourceSlice of
    one node (``nodeName``, each pool on one node), and the pod requests no
    extended resource (which devices elsewhere might back)."""
    spec = pod.raw.get("spec") or {}
    entries = spec.get("resourceClaims") or []
    if not entries:
        return False
    if not all(isinstance(e, dict) and e.get("resourceClaimTemplateName") for e in entries):
        return False
    if not _plain_resources_only(pod):
        return False
    inf = s.app.informers.get("resourceslices")
    pools: dict[tuple[str, str], str] = {}
    for sl in inf.list() if inf is not None else []:
        sspec = sl.get("spec") or {}
        node = sspec.get("nodeName")
        if not node or sspec.get("perDeviceNodeSelection"):
            return False
        pool = (str(sspec.get("driver")), str((sspec.get("pool") or {}).get("name")))
        if pools.setdefault(pool, node) != node:
            return False
    return True


def _fill_with_claims(
    s: _Session, doc: Document, w: Workload, fwk: Framework, nodes: Sequence[NodeInfo], first: int
) -> dict[str, int]:
    """Copies per node for a pod whose claims are node-local (:func:`_claims_local`):
    node after node, each copy made with its own claims, through PreFilter and the
    node's filters, then assumed and reserved there as the daemon would (its claims'
    devices taken), until the node takes no more. Copies on one node take nothing
    another node could give, so the order changes no count."""
    out: dict[str, int] = {}
    i = first
    # the copy being placed, through PreFilter; a node that turns it down leaves it
    # as it was for the next node
    cycle: tuple[JSON, PodInfo, CycleState, PreFilterResult | None] | None = None
    for ni in nodes:
        while True:
            if cycle is None:
                raw = w.pod(i)
                pod = s.admit(doc, raw)
                s.app.snapshot.update()
                state = CycleState()
                pre, status, _ = fwk.run_pre_filter(state, pod, s.app.snapshot.node_infos())
                if status is not None:
                    return out  # no copy fits anywhere
                cycle = (raw, pod, state, pre)
            raw, pod, state, pre = cycle
            if pre is not None and pre.node_names is not None and ni.name not in pre.node_names:
                break
            current = s.app.snapshot.get(ni.name)
            if current is None or fwk.run_filter_with_nominated_pods(state, pod, current):
                break
            s.assume(pod, raw, ni.name)
            s.reserve(fwk, state, pod, ni.name)
            out[ni.name] = out.get(ni.name, 0) + 1
            i += 1
            cycle = None
    return out


def spread_quotas(
    counts: Mapping[str, int], capacity: Mapping[str, int], max_skew: int, min_domains: int
) -> dict[str, int]:
    """Copies each domain takes under one DoNotSchedule constraint that selects them.

    ``counts``: matching pods per eligible domain; ``capacity``: copies each domain's
    nodes take by every other filter. A copy fits a domain with room while its
    count + 1 - the smallest count (0 with fewer than ``min_domains`` domains) is at
    most ``max_skew``. Counts only grow, so the smallest never falls, and where the
    placing ends every domain with room is at the smallest final count + maxSkew
    (or above it from the start) and every other is full: one end, whatever the
    order. Filling the least-counted domain first reaches it.
    """
    floor0 = len(counts) < min_domains
    left = {z: capacity.get(z, 0) for z in counts}
    heap = [(n, z) for z, n in counts.items() if left[z] > 0]
    heapq.heapify(heap)
    full_min = min((n for z, n in counts.items() if left[z] <= 0), default=None)
    quota: dict[str, int] = {}
    while heap:
        n, z = heap[0]
        smallest = 0 if floor0 else (n if full_min is None else min(n, full_min))
        if n + 1 - smallest > max_skew:
            break
        heapq.heappop(heap)
        quota[z] = quota.get(z, 0) + 1
        left[z] -= 1
        if left[z] > 0:
            heapq.heappush(heap, (n + 1, z))
        elif full_min is None or n + 1 < full_min:
            full_min = n + 1
    return quota


def _spread_out(quota: int, rooms: Sequence[int]) -> list[int]:
    """``quota`` copies over places with these rooms: each to the place with the most
    room left (as the resource scores favour the emptier node), ties in order."""
    heap = [(-room, i) for i, room in enumerate(rooms) if room > 0]
    heapq.heapify(heap)
    out = [0] * len(rooms)
    for _ in range(quota):
        room, i = heapq.heappop(heap)
        out[i] += 1
        if room + 1 < 0:
            heapq.heappush(heap, (room + 1, i))
    return out


def _per_domain(
    s: _Session,
    fwk: Framework,
    state: CycleState,
    probe: PodInfo,
    nodes: Sequence[NodeInfo],
    plan: _Plan,
    names: Callable[[], Iterator[str]],
) -> dict[str, int] | str:
    """Copies per node under ``plan`` (assumed in the cache), or why they cannot be
    counted per domain.

    The room of each node is counted with the other filters; a required
    anti-affinity domain (the nodes sharing a value of ``plan.anti_key``) then takes
    one copy between its nodes, a node without that key all it has room for. With
    a spread constraint these places are grouped by its domains (an anti-affinity
    domain must lie in one), which :func:`spread_quotas` fills.
    """
    fill_state = state
    spread: pts.FilterState | None = None
    if plan.spread >= 0:
        spread = state.read(pts.PRE_FILTER_KEY)
        assert isinstance(spread, pts.FilterState)
        i = plan.spread
        rest = [j for j in range(len(spread.constraints)) if j != i]
        fill_state = state.clone()
        fill_state.write(
            pts.PRE_FILTER_KEY,
            pts.FilterState(
                tuple(spread.constraints[j] for j in rest),
                [dict(spread.counts[j]) for j in rest],
                [list(spread.paths[j]) for j in rest],
                tuple(spread.self_match[j] for j in rest),
            ),
        )
        # this constraint's own filter: the node must carry its key
        nodes = [ni for ni in nodes if plan.spread_key in ni.labels]
    anti = plan.anti_key
    filled = _fill(
        s,
        fwk,
        fill_state,
        probe,
        nodes,
        names(),
        lambda ni: 1 if anti and anti in ni.labels else None,
    )
    # places: a node without the anti-affinity key, or one anti-affinity domain
    members: list[list[str]] = []
    rooms: list[int] = []
    where: dict[str, int] = {}
    labels: dict[str, Mapping[str, str]] = {}
    for name, copies in filled.items():
        for placed in copies:
            s.app.cache.forget(placed.uid)
        ni = s.app.snapshot.get(name)
        assert ni is not None
        labels[name] = ni.labels
        if anti and anti in ni.labels:
            place = where.setdefault("=" + ni.labels[anti], len(members))
            if place == len(members):
                members.append([])
                rooms.append(1)
        else:
            place = len(members)
            members.append([])
            rooms.append(len(copies))
        members[place].append(name)
    if spread is None:
        quotas = rooms
    else:
        c = spread.constraints[plan.spread]
        counts = spread.counts[plan.spread]
        in_domain: dict[str, list[int]] = {}
        for place, names_ in enumerate(members):
            values = {labels[n][plan.spread_key] for n in names_}
            if len(values) > 1:
                return (
                    f"an anti-affinity domain over {anti} spans several {plan.spread_key} domains"
                )
            (value,) = values
            if value not in counts:
                return "a node with room lies outside the spread constraint's domains"
            in_domain.setdefault(value, []).append(place)
        room = {value: sum(rooms[p] for p in places) for value, places in in_domain.items()}
        by_domain = spread_quotas(counts, room, c.max_skew, c.min_domains)
        quotas = [0] * len(members)
        for value, q in by_domain.items():
            places = in_domain[value]
            for p, n in zip(places, _spread_out(q, [rooms[p] for p in places]), strict=True):
                quotas[p] = n
    per_node: dict[str, int] = {}
    gen = names()
    for place, q in enumerate(quotas):
        if not q:
            continue
        name = members[place][0]
        per_node[name] = q
        for _ in range(q):
            copy_name = next(gen)
            s.app.cache.assume(
                dataclasses.replace(
                    probe,
                    uid=fake_uid("pod", probe.namespace, copy_name),
                    name=copy_name,
                    node_name=name,
                    ext={},
                )
            )
    return per_node


def _first_copy_span(
    s: _Session,
    fwk: Framework,
    state: CycleState,
    probe: PodInfo,
    nodes: Sequence[NodeInfo],
    plan: _Plan,
    first: int,
    w: Workload,
) -> tuple[int, int] | None:
    """The fewest and most copies that fit when a pod's required affinity selects
    it and nothing else yet: the first copy's node decides, since after it only
    the nodes sharing its value of every term's key fit, each with the room the
    other (node-local) filters give it, one copy per domain of ``plan.anti_key``
    among them. None when no node has room."""
    affinity = state.read(ipa.PRE_FILTER_KEY)
    assert isinstance(affinity, ipa.FilterState)
    keys = [t.topology_key for t in affinity.affinity]
    anti = plan.anti_key
    names = (w.pod_name(i) for i in itertools.count(first))
    filled = _fill(
        s, fwk, state, probe, nodes, names, lambda ni: 1 if anti and anti in ni.labels else None
    )
    by_domain: Counter[tuple[str, ...]] = Counter()
    closed: set[tuple[tuple[str, ...], str]] = set()
    for name, copies in filled.items():
        for placed in copies:
            s.app.cache.forget(placed.uid)
        ni = s.app.snapshot.get(name)
        assert ni is not None
        domain = tuple(ni.labels[k] for k in keys)
        if anti and anti in ni.labels:
            if (domain, ni.labels[anti]) in closed:
                continue
            closed.add((domain, ni.labels[anti]))
        by_domain[domain] += len(copies)
    if not by_domain:
        return None
    return min(by_domain.values()), max(by_domain.values())


#: Filters whose verdict on a node depends only on that node (its Node object and
#: pods) and the pod's spec, and that cost more than a lookup: for copies of one pod
#: template a node's verdict holds until the node changes (see _keeps_verdicts).
KEPT_VERDICT_FILTERS = frozenset(
    {"TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit"}
)


def _plain_resource(name: str) -> bool:
    return name in ("cpu", "memory", "ephemeral-storage") or name.startswith("hugepages-")


def _keeps_verdicts(pod: PodInfo) -> bool:
    """Whether KEPT_VERDICT_FILTERS' verdicts on an unchanged node hold for the next
    copy of ``pod``: no claims, and only standard resources (an extended resource
    may be backed by devices that other nodes' placements take)."""
    spec = pod.raw.get("spec") or {}
    if spec.get("resourceClaims"):
        return False
    return _plain_resources_only(pod)


def _plain_resources_only(pod: PodInfo) -> bool:
    """The pod requests and limits only CPU, memory, ephemeral storage and hugepages."""
    spec = pod.raw.get("spec") or {}
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    blocks = [c.get("resources") or {} for c in containers if isinstance(c, dict)]
    blocks.append(spec.get("resources") or {})
    for b in blocks:
        for kind in ("requests", "limits"):
            if not all(_plain_resource(str(r)) for r in b.get(kind) or {}):
                return False
    return all(_plain_resource(str(r)) for r in spec.get("overhead") or {})


class _KeptVerdicts:
    """Verdicts of KEPT_VERDICT_FILTERS per node for the copies of one pod template,
    reused while the node is the same object at the same generation (a node a copy
    was assumed on has a new generation; the nominated-pods path filters a clone)."""

    def __init__(self) -> None:
        #: per plugin: node info -> (its generation then, verdict)
        self.seen: dict[str, dict[NodeInfo, tuple[int, Status | None]]] = {}

    def wrap(
        self, name: str, single: FilterFn, batch: BatchFilterFn | None
    ) -> tuple[FilterFn, BatchFilterFn | None]:
        if name not in KEPT_VERDICT_FILTERS:
            return single, batch
        seen = self.seen.setdefault(name, {})

        def kept_single(state: CycleState, pod: PodInfo, ni: NodeInfo) -> Status | None:
            hit = seen.get(ni)
            if hit is not None and hit[0] == ni.generation:
                return hit[1]
            st = single(state, pod, ni)
            seen[ni] = (ni.generation, st)
            return st

        if batch is None:
            return kept_single, None
        inner = batch

        def kept_batch(
            state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
        ) -> dict[int, Status]:
            out: dict[int, Status] = {}
            missed: list[int] = []
            get = seen.get
            for j, ni in enumerate(nodes):
                hit = get(ni)
                if hit is None or hit[0] != ni.generation:
                    missed.append(j)
                elif hit[1] is not None:
                    out[j] = hit[1]
            if missed:
                todo = [nodes[j] for j in missed]
                got = inner(state, pod, todo)
                for k, j in enumerate(missed):
                    ni = todo[k]
                    st = got.get(k)
                    seen[ni] = (ni.generation, st)
                    if st is not None:
                        out[j] = st
            return out

        return kept_single, kept_batch


#: Filters whose rejection of a node stands for every later copy of one pod template
#: (no claims, standard resources only): they read the node, which only gains copies,
#: and the pod's spec.
FOR_GOOD_FILTERS = frozenset(
    {
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
    }
)


class _RuledOut:
    """Nodes no copy of one pod template can fit, in the next cycle or (``for_good``)
    ever again, while copies are placed cycle by cycle; the cycles skip them
    (:meth:`Algorithm.find_nodes_that_fit`'s ``skip``), which changes no cycle.

    In the next cycle: every node of a domain whose count PodTopologySpread's
    PreFilter found above what one of its DoNotSchedule constraints allows (the
    filter rejects them all on their label alone).

    For good, from the filters' rejections, when nothing the copies add can undo
    the rejection:

    * by a filter in FOR_GOOD_FILTERS (more pods on a node only take more room);
    * by InterPodAffinity: anti-affinity counts only grow; a node missing a pod
      its required affinity needs in its domain gets one only if a copy lands in
      that domain, which needs such a pod there first (or, with none anywhere and
      the pod matching itself, the filter does not reject);
    * by PodTopologySpread, when some constraint rejects the node however its
      smallest count grows: counts only grow, and the smallest count can never
      pass that of an eligible domain all of whose nodes are ruled out for good
      (or 0 with fewer domains than minDomains); a constraint that does not
      select the copies never changes.

    The last two hold only while every copy matches the same selectors: not when
    a selector reads a label that differs between copies, nor when existing pods'
    anti-affinity selects the pod (``topology`` false). Nothing is ruled out while
    pods are nominated to nodes (their filtering adds them)."""

    def __init__(self, all_nodes: Sequence[NodeInfo], topology: bool) -> None:
        self.for_good: set[str] = set()
        self._nodes = all_nodes
        #: whether PodTopologySpread's and InterPodAffinity's rejections may count
        self._topology = topology
        #: per topology key of a spread constraint, per value: its nodes not ruled
        #: out for good (domains without any left out)
        self._domains: dict[str, dict[str, set[str]]] | None = None
        #: per spread constraint: the smallest count of a domain ruled out whole
        self._frozen: list[int] = []
        self._labels: dict[str, Mapping[str, str]] = {}

    def skip(self, state: CycleState) -> AbstractSet[str]:
        """The nodes to skip in the cycle whose PreFilter wrote ``state``."""
        spread = state.get(pts.PRE_FILTER_KEY)
        if not isinstance(spread, pts.FilterState) or not spread.constraints:
            return self.for_good
        domains = self._track(spread)
        out: set[str] | None = None
        for i, c in enumerate(spread.constraints):
            counts = spread.counts[i]
            bound = c.max_skew - spread.self_match[i] + spread.min_match(i)
            good = self._good_bound(spread, i) if self._topology else sys.maxsize
            live = domains[c.topology_key]
            get = counts.get
            for value in [v for v in live if get(v, 0) > bound]:
                names = live[value]
                if counts[value] > good:
                    for name in list(names):
                        self._rule_out(spread, name)
                    continue
                if out is None:
                    out = set(self.for_good)
                out |= names
        return self.for_good if out is None else out

    def _good_bound(self, spread: pts.FilterState, i: int) -> int:
        """The count above which constraint ``i`` rejects a domain for good."""
        c = spread.constraints[i]
        if not (spread.self_match[i] and c.counts_pods):
            return c.max_skew - spread.self_match[i] + spread.min_match(i)
        most = 0 if len(spread.counts[i]) < c.min_domains else self._frozen[i]
        return c.max_skew - 1 + most

    def wrap(
        self, name: str, single: FilterFn, batch: BatchFilterFn | None
    ) -> tuple[FilterFn, BatchFilterFn | None]:
        if name not in FOR_GOOD_FILTERS and not (self._topology and name in (pts.NAME, ipa.NAME)):
            return single, batch
        rejects = (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        check = self._spread_for_good if name == pts.NAME else None

        def note(state: CycleState, ni: NodeInfo) -> None:
            if check is None or check(state, ni):
                spread = state.get(pts.PRE_FILTER_KEY)
                self._rule_out(spread if isinstance(spread, pts.FilterState) else None, ni.name)

        def watched_single(state: CycleState, pod: PodInfo, ni: NodeInfo) -> Status | None:
            st = single(state, pod, ni)
            if st is not None and st.code in rejects:
                note(state, ni)
            return st

        if batch is None:
            return watched_single, None
        inner = batch

        def watched_batch(
            state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
        ) -> dict[int, Status]:
            got = inner(state, pod, nodes)
            for j, st in got.items():
                if st.code in rejects:
                    note(state, nodes[j])
            return got

        return watched_single, watched_batch

    def _spread_for_good(self, state: CycleState, ni: NodeInfo) -> bool:
        spread = state.get(pts.PRE_FILTER_KEY)
        if not isinstance(spread, pts.FilterState):
            return False
        self._track(spread)
        labels = ni.labels
        for i, c in enumerate(spread.constraints):
            value = labels.get(c.topology_key)
            if value is None or spread.counts[i].get(value, 0) > self._good_bound(spread, i):
                return True
        return False

    def _track(self, spread: pts.FilterState) -> dict[str, dict[str, set[str]]]:
        if self._domains is not None:
            return self._domains
        domains: dict[str, dict[str, set[str]]] = {c.topology_key: {} for c in spread.constraints}
        for ni in self._nodes:
            labels = ni.labels
            self._labels[ni.name] = labels
            if ni.name in self.for_good:
                continue
            for k, live in domains.items():
                if k in labels:
                    live.setdefault(labels[k], set()).add(ni.name)
        self._domains = domains
        self._frozen = [sys.maxsize] * len(spread.constraints)
        # domains ruled out whole before the spread state was first read
        for i, c in enumerate(spread.constraints):
            for v, count in spread.counts[i].items():
                if v not in domains[c.topology_key]:
                    self._frozen[i] = min(self._frozen[i], count)
        return domains

    def _rule_out(self, spread: pts.FilterState | None, name: str) -> None:
        if name in self.for_good:
            return
        self.for_good.add(name)
        if spread is None or not spread.constraints:
            return
        if self._domains is None:
            self._track(spread)  # this node already left out
            return
        labels = self._labels[name]
        for key, live in self._domains.items():
            value = labels.get(key)
            names = live.get(value) if value is not None else None
            if names is not None:
                names.discard(name)
                if not names:
                    del live[value]  # type: ignore[arg-type]
        for i, c in enumerate(spread.constraints):
            value = labels.get(c.topology_key)
            if value is None or value in self._domains[c.topology_key]:
                continue
            count = spread.counts[i].get(value)
            if count is not None:
                # an eligible domain no copy can land in: its count stays
                self._frozen[i] = min(self._frozen[i], count)


def _topology_rules_hold(state: CycleState, varying: set[str]) -> bool:
    """Whether every copy matches the same spread and affinity selectors (see
    :class:`_RuledOut`)."""
    if not varying:
        return True
    spread = state.get(pts.PRE_FILTER_KEY)
    if isinstance(spread, pts.FilterState):
        for c in spread.constraints:
            if c.selector is not None and _selector_keys(c.selector) & varying:
                return False
    affinity = state.get(ipa.PRE_FILTER_KEY)
    if isinstance(affinity, ipa.FilterState):
        if affinity.existing_anti_affinity_counts:
            return False
        for t in (*affinity.affinity, *affinity.anti_affinity):
            if _selector_keys(t.selector) & varying:
                return False
    return True


@contextmanager
def _fast_cycles(
    fwk: Framework,
    state: CycleState,
    pod: PodInfo,
    all_nodes: Sequence[NodeInfo],
    varying: set[str],
) -> Iterator[Callable[[CycleState], AbstractSet[str]] | None]:
    """While copies of ``pod`` are placed cycle by cycle: node-local verdicts on
    unchanged nodes reused (:class:`_KeptVerdicts`) and the nodes ruled out for good
    (:class:`_RuledOut`, whose ``skip`` is yielded) skipped; the cycles are the daemon's."""
    if not _keeps_verdicts(pod):
        yield None
        return
    restore = fwk.wrap_filters(_KeptVerdicts().wrap)
    if fwk.nodes_with_nominated_pods():
        try:
            yield None
        finally:
            restore()
        return
    ruled_out = _RuledOut(all_nodes, _topology_rules_hold(state, varying))
    restore_outer = fwk.wrap_filters(ruled_out.wrap)
    try:
        yield ruled_out.skip
    finally:
        restore_outer()
        restore()


def _cycle(
    s: _Session,
    doc: Document,
    w: Workload,
    fwk: Framework,
    i: int,
    skip: Callable[[CycleState], AbstractSet[str]] | None = None,
) -> str:
    """Copy ``i`` placed as the daemon's cycle places it: its node, or "" if none fits
    (``skip``: nodes known to fit no copy)."""
    app = s.app
    raw = w.pod(i)
    s.add_claims(w, i)
    pod = s.admit(doc, raw)
    app.snapshot.update()
    state = CycleState()
    try:
        res = app.algorithm.schedule_pod(fwk, state, pod, app.snapshot, skip=skip)
    except FitError:
        return ""
    except ScheduleError as se:
        raise ExplainError(f"{pod.key}: {se.status.message}") from se
    s.assume(pod, raw, res.suggested_host)
    s.reserve(fwk, state, pod, res.suggested_host)
    return res.suggested_host


async def _max(s: _Session, doc: Document, w: Workload, *, method: str = "auto") -> MaxResult:
    app = s.app
    started = time.perf_counter()
    varying = _varying_labels(w)
    per_node: Counter[str] = Counter()
    count = 0
    basis: list[str] = []
    span: tuple[int, int] | None = None
    while True:
        probe = s.admit(doc, w.pod(count))
        fwk = s.framework(probe)
        app.snapshot.update()
        nodes = app.snapshot.node_infos()
        state = CycleState()
        pre, status, _ = fwk.run_pre_filter(state, probe, nodes)
        if status is not None:
            plan = _cycles("")  # PreFilter rejects the pod: the cycle says why
        elif method == "cycles":
            plan = _cycles("asked to")
        else:
            plan = _plan(fwk, state, probe, varying, _claims_local(s, probe))
        if plan.method != "first-copy":
            break
        if plan.spread < 0:
            candidates = nodes
            if pre is not None and pre.node_names is not None:
                candidates = [ni for ni in nodes if ni.name in pre.node_names]
            span = _first_copy_span(s, fwk, state, probe, candidates, plan, count, w)
        node = _cycle(s, doc, w, fwk, count)
        if not node:
            plan = _cycles("")
            break
        basis.append(
            "the first copy placed cycle by cycle (with required affinity to itself, "
            "its domain decides the rest)"
        )
        per_node[node] += 1
        count += 1
    if pre is not None and pre.node_names is not None:
        nodes = [ni for ni in nodes if ni.name in pre.node_names]

    def names() -> Iterator[str]:
        i = count
        while True:
            yield w.pod_name(i)
            i += 1

    done = False
    if plan.method == "per-node" and probe.spec.get("resourceClaims"):
        for name, n in _fill_with_claims(s, doc, w, fwk, nodes, count).items():
            per_node[name] += n
            count += n
        done = True
    elif plan.method == "per-node":
        filled = _fill(s, fwk, state, probe, nodes, names(), lambda ni: None)
        for name, copies in filled.items():
            per_node[name] += len(copies)
            count += len(copies)
        done = True
    elif plan.method == "per-domain":
        got = _per_domain(s, fwk, state, probe, nodes, plan, names)
        if isinstance(got, str):
            plan = _cycles(got)
        else:
            basis.append(plan.basis)
            for name, n in got.items():
                per_node[name] += n
                count += n
            done = True
    if not done:
        with _fast_cycles(fwk, state, probe, app.snapshot.node_infos(), varying) as skip:
            while node := _cycle(s, doc, w, fwk, count, skip):
                per_node[node] += 1
                count += 1
    # the first copy that does not fit: the full explanation, preemption included
    raw = w.pod(count)
    claims = s.add_claims(w, count)
    nxt = await s.place(doc, w, raw, claims)
    return MaxResult(
        workload=w.key,
        count=count,
        per_node=dict(per_node),
        method=plan.method,
        why_cycles=plan.why,
        seconds=time.perf_counter() - started,
        next=nxt,
        basis="; ".join(basis),
        span=span,
    )


# --------------------------------------------------------------------------- output


def to_dict(r: WhatIf) -> JSON:
    out: JSON = {
        "dryRun": True,
        "profile": r.profile or None,
        "nodes": r.num_nodes,
        "objects": r.objects,
        "placements": [_placement_dict(p) for p in r.placements],
    }
    if r.max is not None:
        m = r.max
        out["max"] = {
            "workload": m.workload,
            "fit": m.count,
            "perNode": dict(sorted(m.per_node.items())),
            "method": m.method,
            "basis": m.basis or None,
            "span": None if m.span is None else {"fewest": m.span[0], "most": m.span[1]},
            "whyCycleByCycle": m.why_cycles or None,
            "seconds": round(m.seconds, 3),
            "next": _placement_dict(m.next) if m.next is not None else None,
        }
    out["notes"] = r.notes
    return out


def _placement_dict(p: Placement) -> JSON:
    return {
        "workload": p.workload,
        "pod": p.pod,
        "node": p.node if p.fits else None,
        "bestNodes": p.best_nodes,
        "bestTotal": p.best_total,
        "feasibleNodes": p.feasible,
        "claims": p.claims,
        "fitError": p.fit_error or None,
        "preemption": None
        if not p.fit_error
        else {
            "node": p.node if p.preempting else None,
            "evictions": p.evictions,
            "verdict": p.post_filter or None,
        },
        "notCreated": p.not_created or None,
        "error": p.error or None,
    }


def render_json(r: WhatIf) -> str:
    return orjson.dumps(to_dict(r), option=orjson.OPT_INDENT_2).decode() + "\n"


def render_yaml(r: WhatIf) -> str:
    import yaml

    return str(yaml.safe_dump(to_dict(r), sort_keys=False, width=1000))


def _outcome(p: Placement) -> tuple[str, str]:
    """(NODE cell, the why) for one placement."""
    if p.not_created:
        return "-", f"not created: {p.not_created}"
    if p.error:
        return "-", p.error
    if p.preempting:
        who = ", ".join(p.evictions) or "nobody"
        return f"{p.node} (preempting)", f"{p.fit_error} -> preemption evicts {who}"
    if p.fit_error:
        return "-", p.fit_error
    if len(p.best_nodes) > 1:
        others = len(p.best_nodes) - 1
        return (
            p.node,
            f"total {p.best_total}, tied with {others} other node(s), of {p.feasible} feasible",
        )
    return p.node, f"total {p.best_total}, best of {p.feasible} feasible"


def render_table(r: WhatIf) -> str:
    from kscheduler.explain import _table, _wrap

    out: list[str] = []
    head = f"What if (dry run against {r.num_nodes} node(s); nothing was written)"
    out.append(head + (f", profile {r.profile}:" if r.profile else ":"))
    if r.objects:
        out += _wrap("Objects added: " + ", ".join(r.objects) + ".", "  ")
    if r.placements:
        out.append("")
        rows = []
        for i, p in enumerate(r.placements, 1):
            node, why = _outcome(p)
            rows.append([str(i), p.pod, node, why])
        out += _table(["#", "POD", "NODE", "WHY"], rows, right={0})
        placed = sum(1 for p in r.placements if p.fits)
        preempting = sum(1 for p in r.placements if p.preempting)
        line = f"{placed} of {len(r.placements)} pod(s) fit"
        if preempting:
            line += f", {preempting} more by preemption"
        out.append("")
        out.append(line + ".")
    if r.max is not None:
        m = r.max
        out.append("")
        out += _wrap(
            f"--max: {m.count} cop{'y' if m.count == 1 else 'ies'} of {m.workload}'s pod fit "
            f"({m.method}, {m.seconds:.2f}s)"
            + (f"; {m.basis}" if m.basis else "")
            + (
                f"; from {m.span[0]} to {m.span[1]} depending on the domain the first copy lands in"
                if m.span is not None and m.span[0] != m.span[1]
                else ""
            )
            + (f"; counted cycle by cycle because {m.why_cycles}" if m.why_cycles else "")
            + "."
        )
        if m.per_node:
            by_count = sorted(m.per_node.items(), key=lambda kv: (-kv[1], kv[0]))
            shown = ", ".join(f"{n} {c}" for n, c in by_count[:10])
            more = f" and {len(by_count) - 10} more node(s)" if len(by_count) > 10 else ""
            out += _wrap(f"Per node: {shown}{more}.", "  ")
        if m.next is not None:
            out += _wrap(f"The next one ({m.next.pod}) does not fit:", "")
            out.append(f"  {m.next.fit_error or m.next.error}")
            if m.next.preempting:
                out += _wrap(
                    f"Preemption would make room on {m.next.node} by evicting "
                    f"{', '.join(m.next.evictions)}.",
                    "  ",
                )
    for n in r.notes:
        out += _wrap(n)
    return "\n".join(out) + "\n"


def render(r: WhatIf, output: str) -> str:
    if output == "json":
        return render_json(r)
    if output == "yaml":
        return render_yaml(r)
    return render_table(r)


# --------------------------------------------------------------------------- command line


def read_files(files: Sequence[str], namespace: str) -> list[Document]:
    """The documents of every file, in order (``-`` is stdin)."""
    from kscheduler.manifests import read_documents

    docs: list[Document] = []
    for f in files:
        if f == "-":
            text, source = sys.stdin.read(), "<stdin>"
        else:
            source = f
            try:
                with open(f, encoding="utf-8") as fh:
                    text = fh.read()
            except OSError as exc:
                raise ManifestError(f, 0, "", f"cannot read: {exc.strerror or exc}") from exc
            except UnicodeDecodeError as exc:
                raise ManifestError(f, 0, "", "not a text file") from exc
        docs += read_documents(source, text, namespace)
    return docs


__all__ = [
    "MaxResult",
    "Placement",
    "WhatIf",
    "read_files",
    "render",
    "render_json",
    "render_table",
    "render_yaml",
    "to_dict",
    "what_if",
]
