"""NodeResourcesFit: the node must have room for the pod's requests; scores by allocation.

Filter compares the pod's effective request from its spec
(``PodInfo.fit_requests``: containers, sidecars, init containers, pod-level
requests and overhead) with what is left of the node's allocatable (the node's
pods counted as ``PodInfo.requests``, in-place resizes included), and reports
every resource that falls short.

Score applies the configured strategy over the configured resources. CPU and
memory use the non-zero requests (100m / 200Mi for a container that sets none)
of the node's pods and of the incoming pod; other resources use the real ones.
An extended resource the pod does not request is left out of the score.

Extended resources backed by DRA (DRAExtendedResource): a resource the pod requests
that a DeviceClass backs (its ``extendedResourceName``, or
``deviceclass.resource.kubernetes.io/<class>``) is not checked on a node that does
not advertise it in allocatable: DynamicResources allocates devices for it there.
Pods requesting such a resource have no signature (OpportunisticBatching). When
such a resource is one of the scored resources, a node that does not advertise it
is scored with the class's devices there as its allocatable and those allocated
to claims as requested.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kscheduler.framework import (
    MAX_NODE_SCORE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Handle,
    NodeInfo,
    NodeRecord,
    PluginEntry,
    PodInfo,
    PreFilterResult,
    QueueingHint,
    Resource,
    Status,
    signing,
)
from kscheduler.framework.args import ConfigError, Fields
from kscheduler.framework.dra import (
    DEVICE_CLASS_RESOURCE_PREFIX,
    ExtendedResourceDevices,
    extended_resource_classes,
    extended_resource_devices,
    is_dra_extended_resource_name,
)
from kscheduler.framework.helpers import NodeScoreMemo, filter_rejections
from kscheduler.framework.shape import (
    MAX_CUSTOM_PRIORITY_SCORE,
    MAX_UTILIZATION,
    UtilizationShapePoint,
    broken_linear,
    parse_shape,
)
from kscheduler.framework.signing import SignFragment

NAME = "NodeResourcesFit"
PRE_FILTER_KEY = "PreFilter" + NAME
#: The pod's requested resources that DeviceClasses back (DRAExtendedResource).
PRE_FILTER_DRA_KEY = "PreFilter" + NAME + "DRA"
DEVICE_CLASSES = "deviceclasses"
MSG_SIGNATURE_DRA = "signature disabled when dra extended resources are used in the cluster"
PRE_SCORE_KEY = "PreScore" + NAME
#: The devices backing the scored extended resources (None: no class backs one).
PRE_SCORE_DRA_KEY = "PreScore" + NAME + "DRA"

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
STRATEGIES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)

#: Shape scores are given in 0..10 and scaled to the node score range.

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"


# ---- args ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    name: str
    weight: int = 1


DEFAULT_RESOURCES = (ResourceSpec(CPU, 1), ResourceSpec(MEMORY, 1))


@dataclass(frozen=True, slots=True)
class ScoringStrategy:
    type: str = LEAST_ALLOCATED
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES
    #: The RequestedToCapacityRatio shape; set only for that strategy.
    shape: tuple[UtilizationShapePoint, ...] | None = None


@dataclass(frozen=True, slots=True)
class NodeResourcesFitArgs:
    #: Extended resources Filter does not check.
    ignored_resources: frozenset[str] = frozenset()
    #: Extended resource groups (the part before "/") Filter does not check.
    ignored_resource_groups: frozenset[str] = frozenset()
    scoring_strategy: ScoringStrategy = ScoringStrategy()


_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _qualified_name_problem(value: str) -> str | None:
    """Why ``value`` is not a qualified name ([prefix/]name), or None if it is."""
    prefix, sep, name = value.rpartition("/")
    if sep:
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME_PART.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


def parse_resource_specs(
    f: Fields, default: tuple[ResourceSpec, ...]
) -> list[tuple[str, ResourceSpec]]:
    """The ``resources`` list, each entry with its path; weight 0 or absent means 1."""
    out = []
    for r in f.objects("resources"):
        name = r.string("name")
        weight = r.integer("weight", 0)
        r.done()
        out.append((r.path, ResourceSpec(name, weight or 1)))
    if not out:
        return [(f.child("resources"), spec) for spec in default]
    return out


def parse_args(raw: Mapping[str, Any]) -> NodeResourcesFitArgs:
    """NodeResourcesFitArgs with kube-scheduler's defaults and validation."""
    f = Fields(raw)
    ignored = f.strings("ignoredResources")
    groups = f.strings("ignoredResourceGroups")
    ss = f.optional_obj("scoringStrategy")
    f.done()
    for i, name in enumerate(ignored):
        problem = _qualified_name_problem(name)
        if problem:
            raise ConfigError(f"ignoredResources[{i}]", problem)
    for i, group in enumerate(groups):
        if "/" in group:
            raise ConfigError(
                f"ignoredResourceGroups[{i}]", "resource group name can't contain '/'"
            )
        problem = _qualified_name_problem(group)
        if problem:
            raise ConfigError(f"ignoredResourceGroups[{i}]", problem)
    strategy = ScoringStrategy()
    if ss is not None:
        kind = ss.optional_string("type") or ""
        if kind not in STRATEGIES:
            allowed = ", ".join(json.dumps(s) for s in STRATEGIES)
            raise ss.error(
                "type", f"unsupported value {json.dumps(kind)}: must be one of {allowed}"
            )
        specs = parse_resource_specs(ss, DEFAULT_RESOURCES)
        rtcr = ss.optional_obj("requestedToCapacityRatio")
        ss.done()
        for path, spec in specs:
            if not 0 < spec.weight <= 100:
                raise ConfigError(
                    f"{path}.weight", f"resource weight of {spec.name} not in valid range (0, 100]"
                )
        shape = None
        if kind == REQUESTED_TO_CAPACITY_RATIO:
            if rtcr is None:
                raise ss.error(
                    "requestedToCapacityRatio",
                    "must be specified when type is RequestedToCapacityRatio",
                )
            shape = parse_shape(rtcr)
            rtcr.done()
        elif rtcr is not None:
            raise ss.error(
                "requestedToCapacityRatio", "must be nil when type is not RequestedToCapacityRatio"
            )
        strategy = ScoringStrategy(kind, tuple(s for _, s in specs), shape)
    return NodeResourcesFitArgs(frozenset(ignored), frozenset(groups), strategy)


# ---- resource names -----------------------------------------------------------------------


def is_extended_resource(name: str) -> bool:
    """A resource outside the kubernetes.io namespace, e.g. example.com/gpu."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def is_scalar_resource(name: str) -> bool:
    """Extended, hugepages-*, attachable-volumes-* or a prefixed native resource."""
    return (
        is_extended_resource(name)
        or name.startswith(("hugepages-", "attachable-volumes-"))
        or "kubernetes.io/" in name
    )


# ---- filter -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InsufficientResource:
    name: str
    reason: str
    requested: int
    used: int
    capacity: int
    #: The request exceeds the node's whole allocatable: preemption cannot help.
    unresolvable: bool


def fits_plainly(req: Resource, node_info: NodeInfo) -> bool:
    """Whether a request without extended resources fits the node: the common case,
    answered without building insufficient_resources' list."""
    alloc = node_info.allocatable
    used = node_info.requested
    return (
        len(node_info.pods) < alloc.allowed_pods
        and (req.milli_cpu <= 0 or req.milli_cpu <= alloc.milli_cpu - used.milli_cpu)
        and (req.memory <= 0 or req.memory <= alloc.memory - used.memory)
        and (
            req.ephemeral_storage <= 0
            or req.ephemeral_storage <= alloc.ephemeral_storage - used.ephemeral_storage
        )
    )


def insufficient_resources(
    req: Resource,
    node_info: NodeInfo,
    ignored: frozenset[str] = frozenset(),
    ignored_groups: frozenset[str] = frozenset(),
    dra_backed: frozenset[str] = frozenset(),
) -> list[InsufficientResource]:
    """Every resource the node lacks for ``req``, pods first, then cpu, memory,
    ephemeral-storage, then scalar resources by name. A resource of ``dra_backed``
    is not checked on a node without it in allocatable (DRA serves it there)."""
    out: list[InsufficientResource] = []
    alloc = node_info.allocatable
    used = node_info.requested
    n_pods = len(node_info.pods)
    if n_pods + 1 > alloc.allowed_pods:
        out.append(
            InsufficientResource("pods", "Too many pods", 1, n_pods, alloc.allowed_pods, False)
        )
    if not (req.milli_cpu or req.memory or req.ephemeral_storage or req.scalar):
        return out
    for name, want, have, taken in (
        (CPU, req.milli_cpu, alloc.milli_cpu, used.milli_cpu),
        (MEMORY, req.memory, alloc.memory, used.memory),
        (EPHEMERAL_STORAGE, req.ephemeral_storage, alloc.ephemeral_storage, used.ephemeral_storage),
    ):
        if want > 0 and want > have - taken:
            out.append(
                InsufficientResource(name, f"Insufficient {name}", want, taken, have, want > have)
            )
    if req.scalar:
        for name in sorted(req.scalar):
            want = req.scalar[name]
            if want == 0:
                continue
            if is_extended_resource(name) and (
                name in ignored or (ignored_groups and name.split("/", 1)[0] in ignored_groups)
            ):
                continue
            have = alloc.scalar.get(name, 0)
            if have <= 0 and name in dra_backed:
                continue
            taken = used.scalar.get(name, 0)
            if want > have - taken:
                out.append(
                    InsufficientResource(
                        name, f"Insufficient {name}", want, taken, have, want > have
                    )
                )
    return out


def _any_requested_increased(req: Resource, old: Resource, new: Resource) -> bool:
    """Whether the node's allocatable grew in pods or in a resource the pod requests."""
    if new.allowed_pods > old.allowed_pods:
        return True
    if not (req.milli_cpu or req.memory or req.ephemeral_storage or req.scalar):
        return False
    if (
        (req.milli_cpu > 0 and new.milli_cpu > old.milli_cpu)
        or (req.memory > 0 and new.memory > old.memory)
        or (req.ephemeral_storage > 0 and new.ephemeral_storage > old.ephemeral_storage)
    ):
        return True
    return any(
        q and new.scalar.get(name, 0) > old.scalar.get(name, 0) for name, q in req.scalar.items()
    )


def _scaled_down(req: Resource, old: Resource, new: Resource) -> bool:
    """Whether a resource ``req`` asks for went down from ``old`` to ``new``."""
    if req.milli_cpu and old.milli_cpu > new.milli_cpu:
        return True
    if req.memory and old.memory > new.memory:
        return True
    if req.ephemeral_storage and old.ephemeral_storage > new.ephemeral_storage:
        return True
    return any(
        q and is_scalar_resource(name) and old.scalar.get(name, 0) > new.scalar.get(name, 0)
        for name, q in req.scalar.items()
    )


# ---- scoring ------------------------------------------------------------------------------

Scorer = Callable[[Sequence[int], Sequence[int]], int]


def _go_div(a: int, b: int) -> int:
    """Integer division truncating toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _round_half_away(x: float) -> int:
    r = math.floor(x)
    if x - r >= 0.5:
        r += 1
    return int(r)


def least_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def most_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    return min(requested, capacity) * MAX_NODE_SCORE // capacity


def _weighted(per_resource: Callable[[int, int], int], weights: Sequence[int]) -> Scorer:
    def scorer(requested: Sequence[int], allocatable: Sequence[int]) -> int:
        total = weight_sum = 0
        for req, alloc, w in zip(requested, allocatable, weights, strict=True):
            if alloc == 0:
                continue
            total += per_resource(req, alloc) * w
            weight_sum += w
        return total // weight_sum if weight_sum else 0

    return scorer


def requested_to_capacity_ratio_scorer(
    shape: Sequence[UtilizationShapePoint], weights: Sequence[int]
) -> Scorer:
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    raw = broken_linear([(p.utilization, p.score * scale) for p in shape])

    def per_resource(requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return raw(MAX_UTILIZATION)
        return raw(requested * MAX_UTILIZATION // capacity)

    def scorer(requested: Sequence[int], allocatable: Sequence[int]) -> int:
        total = weight_sum = 0
        for req, alloc, w in zip(requested, allocatable, weights, strict=True):
            if alloc == 0:
                continue
            s = per_resource(req, alloc)
            if s > 0:
                total += s * w
                weight_sum += w
        if weight_sum == 0:
            return 0
        return _round_half_away(total / weight_sum)

    return scorer


def build_scorer(strategy: ScoringStrategy) -> Scorer:
    weights = [r.weight for r in strategy.resources]
    if strategy.type == MOST_ALLOCATED:
        return _weighted(most_requested_score, weights)
    if strategy.type == REQUESTED_TO_CAPACITY_RATIO:
        return requested_to_capacity_ratio_scorer(strategy.shape or (), weights)
    return _weighted(least_requested_score, weights)


def pod_score_requests(pod: PodInfo, names: Sequence[str]) -> list[int]:
    """The pod's request per scored resource: non-zero cpu/memory (the incoming pod's
    rule, see PodInfo.score_cpu), real for the rest; from the spec, as kube-scheduler's
    scorer leaves the status out."""
    out = []
    req = pod.fit_requests
    for name in names:
        if name == CPU:
            out.append(pod.score_cpu)
        elif name == MEMORY:
            out.append(pod.score_memory)
        elif name == EPHEMERAL_STORAGE:
            out.append(req.ephemeral_storage)
        else:
            out.append(req.scalar.get(name, 0))
    return out


def allocatable_and_requested(
    node_info: NodeInfo,
    name: str,
    pod_request: int,
    dra: ExtendedResourceDevices | None = None,
) -> tuple[int, int]:
    """(allocatable, requested including the pod) for one scored resource; (0, 0) drops it.
    An extended resource the node does not advertise counts the devices of the class
    backing it there (``dra``), when there are some."""
    alloc = node_info.allocatable
    if name == CPU:
        return alloc.milli_cpu, node_info.non_zero_cpu + pod_request
    if name == MEMORY:
        return alloc.memory, node_info.non_zero_memory + pod_request
    if name == EPHEMERAL_STORAGE:
        return alloc.ephemeral_storage, node_info.requested.ephemeral_storage + pod_request
    if not is_scalar_resource(name) or pod_request == 0:
        return 0, 0
    have = alloc.scalar.get(name)
    if not have and dra is not None:
        node = node_info.node
        devices, in_use = dra.totals(name, node_info.name, node.labels if node else {})
        if devices > 0:
            return devices, in_use + pod_request
    if have is None:
        return 0, 0
    return have, node_info.requested.scalar.get(name, 0) + pod_request


# ---- plugin -------------------------------------------------------------------------------


def _class_extended_name(device_class: Mapping[str, Any]) -> str | None:
    spec = device_class.get("spec")
    ext = spec.get("extendedResourceName") if isinstance(spec, dict) else None
    return str(ext) if ext else None


def dra_backed_resources(
    req: Resource, classes: Callable[[], Mapping[str, Any]] | None
) -> frozenset[str]:
    """The resources ``req`` asks for (non-zero) that a DeviceClass backs; ``classes``
    gives the extended resource -> DeviceClass mapping, looked up only when ``req``
    has a name it could hold."""
    names = [n for n, q in req.scalar.items() if q and is_dra_extended_resource_name(n)]
    if not names or classes is None:
        return frozenset()
    mapping = classes()
    return frozenset(n for n in names if n in mapping)


class NodeResourcesFit:
    name = NAME
    required_kinds = (DEVICE_CLASSES, "resourceslices", "resourceclaims")

    def __init__(self, args: NodeResourcesFitArgs, handle: Handle | None = None) -> None:
        self.args = args
        self.handle = handle
        self._ignored = args.ignored_resources
        self._ignored_groups = args.ignored_resource_groups
        self._names = tuple(r.name for r in args.scoring_strategy.resources)
        self._scorer = build_scorer(args.scoring_strategy)
        #: score_nodes' LeastAllocated scores over cpu and memory, by node
        self._memo = NodeScoreMemo()

    def _cluster_size(self, nodes: Sequence[NodeInfo]) -> int:
        """Nodes in the cluster (the memo keeps up to about twice as many entries)."""
        if self.handle is None:
            return len(nodes)
        return max(len(self.handle.snapshot.node_infos()), len(nodes))

    def _classes(self) -> Mapping[str, Any]:
        assert self.handle is not None
        return extended_resource_classes(self.handle.objects.list(DEVICE_CLASSES))

    def _dra_backed(self, req: Resource) -> frozenset[str]:
        return dra_backed_resources(req, self._classes if self.handle is not None else None)

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The pod's effective requests from its spec (OpportunisticBatching); none when
        it asks for an extended resource backed by DRA."""
        r = pod.fit_requests
        if self._dra_backed(r):
            return [], Status.unschedulable(MSG_SIGNATURE_DRA)
        value = [r.milli_cpu, r.memory, r.ephemeral_storage, sorted(r.scalar.items())]
        return [SignFragment(signing.RESOURCES, value)], None

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeResourcesFit:
        return cls(
            args if isinstance(args, NodeResourcesFitArgs) else NodeResourcesFitArgs(), handle
        )

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN
                ),
                self._after_pod_event,
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE
                ),
                self._after_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE),
                self._after_device_class_change,
            ),
        ]

    @staticmethod
    def _after_device_class_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when the class (newly) backs a resource the pod requests: its implicit
        name on add, its extendedResourceName when added or changed."""
        if not isinstance(new, dict):
            return QueueingHint.QUEUE
        ext = _class_extended_name(new)
        if isinstance(old, dict) and _class_extended_name(old) == ext:
            return QueueingHint.SKIP
        reqs = pod.fit_requests.scalar
        if old is None:
            name = str((new.get("metadata") or {}).get("name", ""))
            if DEVICE_CLASS_RESOURCE_PREFIX + name in reqs:
                return QueueingHint.QUEUE
        if ext and ext in reqs:
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    @staticmethod
    def _after_pod_event(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue on the deletion of an assigned (or nominated) pod, or when a resource the
        pod asks for shrinks on an assigned pod (or on the pod itself)."""
        if new is None:
            if not isinstance(old, PodInfo):
                return QueueingHint.QUEUE
            if not old.node_name and not old.nominated_node_name:
                return QueueingHint.SKIP
            return QueueingHint.QUEUE
        if not isinstance(new, PodInfo) or not isinstance(old, PodInfo):
            return QueueingHint.QUEUE
        if new.uid == pod.uid:
            return QueueingHint.QUEUE
        if not new.node_name:
            return QueueingHint.SKIP
        if _scaled_down(pod.requests, old.requests, new.requests):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when the pod fits the new node and the node is new or grew (a resource
        DRA serves on the node counts as fitting and as not grown)."""
        if not isinstance(new, NodeRecord) or not (old is None or isinstance(old, NodeRecord)):
            return QueueingHint.QUEUE
        req = pod.fit_requests
        backed = self._dra_backed(req)
        if insufficient_resources(req, NodeInfo(new.name, new), dra_backed=backed):
            return QueueingHint.SKIP
        if old is None:
            return QueueingHint.QUEUE
        if _any_requested_increased(req, old.allocatable, new.allocatable):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Success: records the pod's effective request (from its spec) for Filter, and
        which of its resources DeviceClasses back."""
        req = pod.fit_requests
        state.write(PRE_FILTER_KEY, req)
        if req.scalar:
            state.write(PRE_FILTER_DRA_KEY, self._dra_backed(req))
        return None, None

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """Unschedulable listing every short resource; UnschedulableAndUnresolvable when a
        request exceeds the node's whole allocatable (evicting pods would not help)."""
        req = state.get(PRE_FILTER_KEY)
        if req is None:
            return Status.as_error(
                f'error reading "{PRE_FILTER_KEY}" from cycleState: not found', NAME
            )
        if not req.scalar and fits_plainly(req, node_info):
            return None
        backed = state.get(PRE_FILTER_DRA_KEY) if req.scalar else None
        short = insufficient_resources(
            req, node_info, self._ignored, self._ignored_groups, backed or frozenset()
        )
        if not short:
            return None
        code = (
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            if any(r.unresolvable for r in short)
            else Code.UNSCHEDULABLE
        )
        return Status(code, [r.reason for r in short])

    def filter_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """NodeLocalFilter: the pod's effective request and which of its resources
        DeviceClasses back (those are left to DynamicResources)."""
        req = state.get(PRE_FILTER_KEY)
        if req is None:
            return None
        if not req.scalar:
            return (req.milli_cpu, req.memory, req.ephemeral_storage)
        backed = state.get(PRE_FILTER_DRA_KEY) or frozenset()
        scalar = tuple(sorted(req.scalar.items()))
        return (req.milli_cpu, req.memory, req.ephemeral_storage, scalar, backed)

    def filter_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> dict[int, Status]:
        """filter() for many nodes at once: the common case (no extended resources)
        checked inline, filter() itself only for the nodes that fall short."""
        req = state.get(PRE_FILTER_KEY)
        look: Iterable[int]
        if req is None or req.scalar:
            look = range(len(nodes))
        else:
            # fits_plainly inlined: this loop runs over every node a cycle visits
            rc, rm, re = req.milli_cpu, req.memory, req.ephemeral_storage
            short: list[int] = []
            for i, ni in enumerate(nodes):
                node = ni.node
                if node is None:
                    if not fits_plainly(req, ni):
                        short.append(i)
                    continue
                alloc = node.allocatable
                used = ni.requested
                if not (
                    len(ni.pods) < alloc.allowed_pods
                    and (rc <= 0 or rc <= alloc.milli_cpu - used.milli_cpu)
                    and (rm <= 0 or rm <= alloc.memory - used.memory)
                    and (re <= 0 or re <= alloc.ephemeral_storage - used.ephemeral_storage)
                ):
                    short.append(i)
            look = short
        return filter_rejections(self.filter, state, pod, nodes, look)

    def pre_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        """Success: records the pod's request per scored resource (and the devices
        backing the scored extended resources)."""
        state.write(PRE_SCORE_KEY, pod_score_requests(pod, self._names))
        state.write(PRE_SCORE_DRA_KEY, self._dra_devices())
        return None

    def _dra_devices(self) -> ExtendedResourceDevices | None:
        if self.handle is None:
            return None
        return extended_resource_devices(self._names, self.handle.objects.list)

    def score_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """NodeLocalScore: the pod's request per scored resource; None when DRA devices
        back a scored resource (their use is counted across the cluster)."""
        reqs = state.get(PRE_SCORE_KEY)
        if reqs is None or state.get(PRE_SCORE_DRA_KEY) is not None:
            return None
        return tuple(reqs)

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        """The strategy's score in [0, 100]; no normalisation."""
        pod_requests = state.get(PRE_SCORE_KEY)
        if pod_requests is None:
            pod_requests = pod_score_requests(pod, self._names)
            dra = self._dra_devices()
        else:
            dra = state.get(PRE_SCORE_DRA_KEY)
        requested = [0] * len(self._names)
        allocatable = [0] * len(self._names)
        for i, name in enumerate(self._names):
            alloc, req = allocatable_and_requested(node_info, name, pod_requests[i], dra)
            if alloc == 0:
                continue
            allocatable[i] = alloc
            requested[i] = req
        return self._scorer(requested, allocatable), None

    def score_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[list[int], Status | None]:
        """score() for many nodes at once; LeastAllocated over cpu and memory (the
        default) is computed inline with the same integer arithmetic."""
        strategy = self.args.scoring_strategy
        if self._names != ("cpu", "memory") or strategy.type != LEAST_ALLOCATED:
            return [self.score(state, pod, ni)[0] for ni in nodes], None
        reqs = state.get(PRE_SCORE_KEY)
        if reqs is None:
            reqs = pod_score_requests(pod, self._names)
        rc, rm = reqs
        wc, wm = (r.weight for r in strategy.resources)
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
                append(0)
                continue
            alloc = node.allocatable
            ac = alloc.milli_cpu
            am = alloc.memory
            total = wsum = 0
            if ac:
                r = ni.non_zero_cpu + rc
                if r <= ac:
                    total += (ac - r) * MAX_NODE_SCORE // ac * wc
                wsum += wc
            if am:
                r = ni.non_zero_memory + rm
                if r <= am:
                    total += (am - r) * MAX_NODE_SCORE // am * wm
                wsum += wm
            score = total // wsum if wsum else 0
            memo[ni] = (gen, score)
            append(score)
        return out, None


ENTRY = PluginEntry(NAME, NodeResourcesFit, NodeResourcesFit.new, parse_args)
