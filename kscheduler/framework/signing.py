"""Pod signatures and opportunistic batching (the OpportunisticBatching gate).

A pod's *signature* (``Framework.sign_pod``) says which pods the profile would
treat alike: two pods with the same signature pass the same filters and get the
same scores on the same nodes in the same cluster state. Every PreFilter, Filter,
PreScore and Score plugin of the profile must implement :class:`SignPlugin`, or the
profile signs nothing (an out-of-tree plugin without ``sign_pod`` turns batching off
for its profile, as do HTTP extenders). A plugin refuses a pod it cannot sign
(any non-success status: the pod then has no signature); otherwise it gives
fragments, each a key and a JSON-serialisable value. The signature is the JSON of
the schedulerName and every fragment, keys sorted.

The in-tree rules (as kube-scheduler 1.37's): InterPodAffinity refuses pods with
pod affinity or anti-affinity and signs the labels; PodTopologySpread refuses pods
with constraints and every pod of a profile with default constraints (the
system defaults included, so the default profile batches nothing); the resource
plugins sign the effective requests, NodeAffinity the affinity and node selector,
NodePorts the host ports, TaintToleration and NodeUnschedulable the tolerations,
ImageLocality the image names, the volume plugins the volumes other than
ConfigMaps and Secrets, NodeName the node name, NodeDeclaredFeatures the inferred
features.

:class:`OpportunisticBatch` reuses one cycle's scores in the next: after a pod
with a signature is placed, the other feasible nodes, sorted by score, are kept.
The next cycle, when it comes right after (no other pod in between, within 0.5s),
its pod has the same signature and no nominated node, and the node just taken no
longer passes the filters for it (one pod per node), gets the best remaining node
as a *hint*: the scheduler checks that node alone and takes it if it passes. If
the node just taken still fits, it is scored again and put back among the
candidates (its scores normalised anew with theirs). A hint that fails filtering
falls back to the full cycle.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.status import Status, is_success
from kscheduler.framework.types import NodeInfo, PodInfo

#: Fragment keys (upstream's names, so that signatures read alike in logs).
SCHEDULER_NAME: Final = "v1.Pod.Spec.SchedulerName"
IMAGE_NAMES: Final = "v1.Pod.Spec.CanonicalImageNames()"
LABELS: Final = "v1.Pod.Labels"
NODE_NAME: Final = "v1.Pod.Spec.NodeName"
NODE_AFFINITY: Final = "v1.Pod.Spec.Affinity.NodeAffinity"
NODE_SELECTOR: Final = "v1.Pod.Spec.Affinity.NodeSelector"
HOST_PORTS: Final = "v1.Pod.Spec.HostPorts()"
RESOURCES: Final = "v1.Pod.Spec.ContainerRequestsAndOverheads()"
TOLERATIONS: Final = "v1.Pod.Spec.Tolerations"
VOLUMES: Final = "v1.Pod.Spec.Volumes.NonSyntheticSources()"
FEATURES: Final = "v1.Pod.Spec.RequiredFeatures()"

MAX_BATCH_AGE: Final = 0.5
"""Seconds a kept result stays usable."""


@dataclass(frozen=True, slots=True)
class SignFragment:
    key: str
    value: Any


@runtime_checkable
class SignPlugin(Protocol):
    name: str

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The pod's fragments for this plugin, or a non-success status: the pod
        cannot be signed (no batching for it). Must depend on the pod alone."""


@runtime_checkable
class ProfileSignRefusal(Protocol):
    """Optional for a SignPlugin: says once, for the whole profile, that it refuses
    every pod (its configuration alone decides it). Such a profile skips signing
    and batching altogether: every cycle would sign the pod only to throw the
    signature away."""

    def refuses_every_pod(self) -> bool: ...


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


# --------------------------------------------------------------------------- signers


def _spec(pod: PodInfo) -> Mapping[str, Any]:
    spec = pod.raw.get("spec")
    return spec if isinstance(spec, dict) else {}


def _containers(pod: PodInfo) -> list[Mapping[str, Any]]:
    spec = _spec(pod)
    out: list[Mapping[str, Any]] = []
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                out.append(c)
    return out


def host_ports(pod: PodInfo) -> list[int]:
    """The distinct host ports of every container, sorted."""
    ports: set[int] = set()
    for c in _containers(pod):
        for p in c.get("ports") or []:
            if isinstance(p, dict) and p.get("hostPort"):
                ports.add(int(p["hostPort"]))
    return sorted(ports)


def tolerations(pod: PodInfo) -> list[Any]:
    """The tolerations, ordered by key then value (a stable sort, as upstream's)."""
    raw = [t for t in _spec(pod).get("tolerations") or [] if isinstance(t, dict)]
    return sorted(raw, key=lambda t: (str(t.get("key") or ""), str(t.get("value") or "")))


def _requirements(reqs: Any) -> list[str]:
    out = []
    for r in reqs or []:
        if isinstance(r, dict):
            r = dict(r)
            if isinstance(r.get("values"), list):
                r["values"] = sorted(str(v) for v in r["values"])
            out.append(canonical(r))
    return sorted(out)


def _term(term: Any) -> dict[str, list[str]]:
    term = term if isinstance(term, dict) else {}
    return {
        "matchExpressions": _requirements(term.get("matchExpressions")),
        "matchFields": _requirements(term.get("matchFields")),
    }


def node_affinity(pod: PodInfo) -> Any:
    """The node affinity, terms and requirements in a canonical order; None without."""
    affinity = _spec(pod).get("affinity")
    na = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    if not isinstance(na, dict):
        return None
    required = na.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    preferred = na.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    return {
        "required": sorted(canonical(_term(t)) for t in terms or []),
        "preferred": sorted(
            canonical({"weight": p.get("weight"), "preference": _term(p.get("preference"))})
            for p in preferred
            if isinstance(p, dict)
        ),
    }


def node_selector(pod: PodInfo) -> Any:
    return _spec(pod).get("nodeSelector") or None


def volumes(pod: PodInfo) -> list[str]:
    """The pod's volumes other than ConfigMaps and Secrets (their sources), sorted."""
    out = []
    for v in _spec(pod).get("volumes") or []:
        if not isinstance(v, dict) or "configMap" in v or "secret" in v:
            continue
        out.append(canonical({k: x for k, x in v.items() if k != "name"}))
    return sorted(out)


def has_pod_affinity(pod: PodInfo) -> bool:
    affinity = _spec(pod).get("affinity")
    return isinstance(affinity, dict) and bool(
        affinity.get("podAffinity") is not None or affinity.get("podAntiAffinity") is not None
    )


def sign(
    scheduler_name: str, plugins: Sequence[SignPlugin], pod: PodInfo
) -> tuple[bytes | None, str]:
    """The signature, or None and the plugin that refused the pod."""
    parts: dict[str, Any] = {SCHEDULER_NAME: scheduler_name}
    for p in plugins:
        fragments, st = p.sign_pod(pod)
        if not is_success(st):
            return None, p.name
        for f in fragments:
            parts[f.key] = f.value
    return canonical(parts).encode(), ""


# --------------------------------------------------------------------------- batching


@dataclass(slots=True)
class ScoredNode:
    """A candidate node of a kept result: raw score per plugin and the weighted total."""

    name: str
    raw: dict[str, int]
    total: int
    randomizer: float


class BatchHandle(Protocol):
    """What the batch needs of its framework."""

    def run_filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """None when the node passes."""

    def node_info(self, name: str) -> NodeInfo | None: ...

    def rescore(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        cached: Sequence[Mapping[str, int]],
    ) -> tuple[list[tuple[dict[str, int], int]], Status | None]:
        """PreScore over ``nodes``; raw scores of the last node; every plugin's raw
        scores (``cached`` for the others) normalised together and weighted. Returns
        per node (raw scores, weighted total), in the order of ``nodes``."""


@dataclass(slots=True)
class _LastCycle:
    cycle: int = -1
    chosen: str = ""


@dataclass(slots=True)
class BatchStats:
    hints: int = 0
    hints_used: int = 0
    flushed: dict[str, int] | None = None


class OpportunisticBatch:
    """The kept result of the previous cycle of one profile."""

    def __init__(
        self,
        handle: BatchHandle,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.handle = handle
        self.clock = clock
        self.rng = rng or random.Random()
        self.signature: bytes | None = None
        #: best first
        self.sorted: list[ScoredNode] = []
        self.created = 0.0
        self.last = _LastCycle()
        self.stats = BatchStats(flushed={})

    def _flush(self, reason: str) -> bool:
        assert self.stats.flushed is not None
        self.stats.flushed[reason] = self.stats.flushed.get(reason, 0) + 1
        self.signature = None
        self.sorted = []
        return False

    def sort(self, nodes: list[ScoredNode]) -> list[ScoredNode]:
        return sorted(nodes, key=lambda n: (-n.total, -n.randomizer))

    def scored(self, name: str, raw: dict[str, int], total: int) -> ScoredNode:
        return ScoredNode(name, raw, total, self.rng.random())

    def node_hint(
        self, state: CycleState, pod: PodInfo, signature: bytes | None, cycle: int
    ) -> str:
        """The node to try alone first, or "" (then the full cycle runs)."""
        if not self._compatible(pod, signature, cycle):
            return ""
        if not self._refresh(state, pod):
            return ""
        self.stats.hints += 1
        return self.sorted.pop(0).name

    def _compatible(self, pod: PodInfo, signature: bytes | None, cycle: int) -> bool:
        if not self.sorted:
            return False
        if cycle != self.last.cycle + 1:
            return self._flush("pod_skipped")
        if pod.nominated_node_name:
            return self._flush("pod_nominated")
        if signature is None or signature != self.signature:
            return self._flush("pod_incompatible")
        if self.clock() > self.created + MAX_BATCH_AGE:
            return self._flush("expired")
        return True

    def _refresh(self, state: CycleState, pod: PodInfo) -> bool:
        last = self.handle.node_info(self.last.chosen)
        if last is None:
            return self._flush("node_missing")
        st = self.handle.run_filter(state, pod, last)
        if st is None:
            return self._rescore(state, pod, last)
        if not st.is_rejection():
            return self._flush("filter_error")
        return True

    def _rescore(self, state: CycleState, pod: PodInfo, last: NodeInfo) -> bool:
        infos: list[NodeInfo] = []
        for n in self.sorted:
            ni = self.handle.node_info(n.name)
            if ni is None:
                return self._flush("node_missing")
            infos.append(ni)
        infos.append(last)
        cached = [n.raw for n in self.sorted]
        scored, st = self.handle.rescore(state.clone(), pod, infos, cached)
        if st is not None:
            return self._flush("rescore_error")
        nodes = [
            ScoredNode(ni.name, raw, total, old.randomizer)
            for ni, (raw, total), old in zip(
                infos, scored, [*self.sorted, self.scored(last.name, {}, 0)], strict=True
            )
        ]
        self.sorted = self.sort(nodes)
        return True

    def store(
        self,
        signature: bytes | None,
        hinted: str,
        chosen: str,
        others: list[ScoredNode] | None,
        cycle: int,
    ) -> None:
        """After a placement: keep ``others`` (sorted, best first) for the next cycle."""
        self.last = _LastCycle(cycle, chosen)
        if hinted and hinted == chosen:
            self.stats.hints_used += 1
            return
        if signature is not None and others:
            self.signature = signature
            self.sorted = others
            self.created = self.clock()
        else:
            self._flush("pod_not_batchable" if others else "empty_list")
