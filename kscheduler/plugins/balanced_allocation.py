"""NodeResourcesBalancedAllocation: favours nodes whose resource usage stays even.

For each configured resource f = min(1, requested / allocatable), counting the
node's pods and the incoming pod with their real requests (no non-zero
defaults). A node's balance is (1 - std(f)) * 100, truncated; with two resources
std is |f1 - f2| / 2. The score rewards the change the pod makes to it (as
kube-scheduler 1.37 scores): 50 + (50 + with - without) / 2 in integer division
toward zero, where ``with`` is the balance with the pod placed and ``without``
the node's balance as it is, so a pod that evens a node out scores above 75 and
one that unbalances it below. A resource with no allocatable, or an extended
resource the pod does not request, is left out. Pods requesting none of the
resources are not scored (PreScore returns Skip), so best-effort pods do not
pile up on one node. An extended resource backed by a DeviceClass
(DRAExtendedResource) on a node that does not advertise it counts the class's
devices there as allocatable and those allocated to claims as requested.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kscheduler.framework import (
    MAX_NODE_SCORE,
    CycleState,
    Handle,
    NodeInfo,
    PluginEntry,
    PodInfo,
    Status,
    signing,
)
from kscheduler.framework.args import ConfigError, Fields
from kscheduler.framework.dra import ExtendedResourceDevices, extended_resource_devices
from kscheduler.framework.helpers import NodeScoreMemo
from kscheduler.framework.signing import SignFragment

NAME = "NodeResourcesBalancedAllocation"
PRE_SCORE_KEY = "PreScore" + NAME
#: The devices backing the scored extended resources (None: no class backs one).
PRE_SCORE_DRA_KEY = "PreScore" + NAME + "DRA"

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    name: str
    weight: int = 1


DEFAULT_RESOURCES = (ResourceSpec(CPU, 1), ResourceSpec(MEMORY, 1))


@dataclass(frozen=True, slots=True)
class BalancedAllocationArgs:
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES


def parse_args(raw: Mapping[str, Any]) -> BalancedAllocationArgs:
    """``resources``: [{name, weight}], default cpu and memory; every weight must be 1."""
    f = Fields(raw)
    items = f.objects("resources")
    f.done()
    specs = []
    seen: set[str] = set()
    for r in items:
        name = r.string("name")
        weight = r.integer("weight", 0)
        r.done()
        if name in seen:
            raise ConfigError(r.child("name"), f"duplicate value {name!r}")
        seen.add(name)
        if weight == 0:
            weight = 1
        if weight != 1:
            raise ConfigError(r.child("weight"), f"must be 1, got {weight}")
        specs.append(ResourceSpec(name, weight))
    return BalancedAllocationArgs(tuple(specs) if specs else DEFAULT_RESOURCES)


def _is_scalar_resource(name: str) -> bool:
    """Extended (domain/name), hugepages-*, attachable-volumes-* or kubernetes.io/ prefixed."""
    if name.startswith(("hugepages-", "attachable-volumes-")) or "kubernetes.io/" in name:
        return True
    return "/" in name and not name.startswith("requests.")


def pod_requests(pod: PodInfo, names: Sequence[str]) -> list[int]:
    """The pod's real request for each resource (pod-level requests and overhead included)."""
    req = pod.requests
    out = []
    for name in names:
        if name == CPU:
            out.append(req.milli_cpu)
        elif name == MEMORY:
            out.append(req.memory)
        elif name == EPHEMERAL_STORAGE:
            out.append(req.ephemeral_storage)
        else:
            out.append(req.scalar.get(name, 0))
    return out


def change_score(with_pod: int, without_pod: int) -> int:
    """50 + (50 + with - without) / 2, the division truncating toward zero as Go's."""
    half = MAX_NODE_SCORE // 2
    delta = half + with_pod - without_pod
    step = delta // 2 if delta >= 0 else -((-delta) // 2)
    return half + step


def _allocatable_and_requested(
    node_info: NodeInfo, name: str, pod_request: int, dra: ExtendedResourceDevices | None = None
) -> tuple[int, int]:
    alloc = node_info.allocatable
    used = node_info.requested
    if name == CPU:
        return alloc.milli_cpu, used.milli_cpu + pod_request
    if name == MEMORY:
        return alloc.memory, used.memory + pod_request
    if name == EPHEMERAL_STORAGE:
        return alloc.ephemeral_storage, used.ephemeral_storage + pod_request
    if not _is_scalar_resource(name) or pod_request == 0:
        return 0, 0
    have = alloc.scalar.get(name)
    if not have and dra is not None:  # devices of the class backing it (DRAExtendedResource)
        node = node_info.node
        devices, in_use = dra.totals(name, node_info.name, node.labels if node else {})
        if devices > 0:
            return devices, in_use + pod_request
    if have is None:
        return 0, 0
    return have, used.scalar.get(name, 0) + pod_request


def balanced_score(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """(1 - standard deviation of the usage fractions) * 100, truncated."""
    fractions: list[float] = []
    total = 0.0
    for req, alloc in zip(requested, allocatable, strict=True):
        if alloc == 0:
            continue
        fraction = req / alloc
        if fraction > 1:
            fraction = 1.0
        total += fraction
        fractions.append(fraction)
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = total / len(fractions)
        acc = 0.0
        for fraction in fractions:
            acc = acc + (fraction - mean) * (fraction - mean)
        std = math.sqrt(acc / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


class NodeResourcesBalancedAllocation:
    name = NAME
    required_kinds = ("deviceclasses", "resourceslices", "resourceclaims")

    def __init__(self, args: BalancedAllocationArgs, handle: Handle | None = None) -> None:
        self.args = args
        self.handle = handle
        self._names = tuple(r.name for r in args.resources)
        #: score_nodes' scores over cpu and memory, by node (see NodeScoreMemo)
        self._memo = NodeScoreMemo()

    def _cluster_size(self, nodes: Sequence[NodeInfo]) -> int:
        """Nodes in the cluster (the memo keeps up to about twice as many entries)."""
        if self.handle is None:
            return len(nodes)
        return max(len(self.handle.snapshot.node_infos()), len(nodes))

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The pod's effective requests from its spec (OpportunisticBatching)."""
        r = pod.fit_requests
        value = [r.milli_cpu, r.memory, r.ephemeral_storage, sorted(r.scalar.items())]
        return [SignFragment(signing.RESOURCES, value)], None

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeResourcesBalancedAllocation:
        return cls(
            args if isinstance(args, BalancedAllocationArgs) else BalancedAllocationArgs(), handle
        )

    def pre_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        """Skip when the pod requests none of the resources; else Success."""
        requests = pod_requests(pod, self._names)
        if not any(requests):
            return Status.skip()
        state.write(PRE_SCORE_KEY, requests)
        state.write(PRE_SCORE_DRA_KEY, self._dra_devices())
        return None

    def _dra_devices(self) -> ExtendedResourceDevices | None:
        if self.handle is None:
            return None
        return extended_resource_devices(self._names, self.handle.objects.list)

    def score_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """NodeLocalScore: the pod's request per resource; None when DRA devices back
        one of them (their use is counted across the cluster)."""
        requests = state.get(PRE_SCORE_KEY)
        if requests is None or state.get(PRE_SCORE_DRA_KEY) is not None:
            return None
        return tuple(requests)

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        """A score in [0, 100]; no normalisation."""
        requests = state.get(PRE_SCORE_KEY)
        if requests is None:
            requests = pod_requests(pod, self._names)
            if not any(requests):
                return 0, None
            dra = self._dra_devices()
        else:
            dra = state.get(PRE_SCORE_DRA_KEY)
        n = len(self._names)
        requested = [0] * n
        allocated = [0] * n
        allocatable = [0] * n
        for i, name in enumerate(self._names):
            alloc, req = _allocatable_and_requested(node_info, name, requests[i], dra)
            if alloc == 0:
                continue
            allocatable[i] = alloc
            requested[i] = req
            allocated[i] = req - requests[i]
        with_pod = balanced_score(requested, allocatable)
        return change_score(with_pod, balanced_score(allocated, allocatable)), None

    def score_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[list[int], Status | None]:
        """score() for many nodes at once; over cpu and memory (the default) the
        two-fraction case (std = |f0 - f1| / 2) is computed inline, same floats."""
        half = MAX_NODE_SCORE // 2
        reqs = state.get(PRE_SCORE_KEY)
        if self._names != ("cpu", "memory") or reqs is None:
            return [self.score(state, pod, ni)[0] for ni in nodes], None
        rc, rm = reqs
        out: list[int] = []
        append = out.append
        memo = self._memo.table((rc, rm), self._cluster_size(nodes))
        seen = memo.get
        for ni in nodes:
            gen = ni.generation
            m = seen(ni)
            if m is not None and m[0] == gen:
                append(m[1])
                continue
            node = ni.node
            if node is None:
                append(change_score(MAX_NODE_SCORE, MAX_NODE_SCORE))
                continue
            alloc = node.allocatable
            ac = alloc.milli_cpu
            am = alloc.memory
            if ac and am:
                used = ni.requested
                f0 = (used.milli_cpu + rc) / ac
                f1 = (used.memory + rm) / am
                if f0 > 1.0:
                    f0 = 1.0
                if f1 > 1.0:
                    f1 = 1.0
                d = (f0 - f1) / 2
                with_pod = int((1 - (d if d >= 0 else -d)) * MAX_NODE_SCORE)
                g0 = used.milli_cpu / ac
                g1 = used.memory / am
                if g0 > 1.0:
                    g0 = 1.0
                if g1 > 1.0:
                    g1 = 1.0
                e = (g0 - g1) / 2
                without_pod = int((1 - (e if e >= 0 else -e)) * MAX_NODE_SCORE)
                delta = half + with_pod - without_pod
                score = half + (delta // 2 if delta >= 0 else -((-delta) // 2))
            else:  # one fraction or none: no spread, no change
                score = change_score(MAX_NODE_SCORE, MAX_NODE_SCORE)
            memo[ni] = (gen, score)
            append(score)
        return out, None


ENTRY = PluginEntry(
    NAME, NodeResourcesBalancedAllocation, NodeResourcesBalancedAllocation.new, parse_args
)
