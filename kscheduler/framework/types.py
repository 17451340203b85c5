"""Slim records of pods and nodes, parsed once per object version from raw JSON.

The informers decode the API server's JSON into dicts and build these records;
plugins only ever read records. ``raw`` keeps the decoded object (without
managedFields) for the rarely used fields and for writes back to the server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kscheduler.framework.quantity import parse_quantity
from kscheduler.framework.selectors import (
    LabelSelector,
    NodeSelector,
    PreferredTerm,
    SelectorError,
    parse_preferred_terms,
)

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

#: Requests assumed for containers that set none, for scoring only.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

DEFAULT_SCHEDULER_NAME = "default-scheduler"


class ParseError(ValueError):
    """An object the scheduler cannot understand; the message says which field and why."""


class Resource:
    """A set of resource amounts: CPU in millicores, the rest in base units."""

    __slots__ = ("allowed_pods", "ephemeral_storage", "memory", "milli_cpu", "scalar")

    def __init__(
        self,
        milli_cpu: int = 0,
        memory: int = 0,
        ephemeral_storage: int = 0,
        allowed_pods: int = 0,
        scalar: dict[str, int] | None = None,
    ) -> None:
        self.milli_cpu = milli_cpu
        self.memory = memory
        self.ephemeral_storage = ephemeral_storage
        self.allowed_pods = allowed_pods
        self.scalar: dict[str, int] = scalar if scalar is not None else {}

    @classmethod
    def from_list(cls, raw: Mapping[str, Any] | None, where: str = "resources") -> Resource:
        r = cls()
        if not raw:
            return r
        for name, q in raw.items():
            try:
                if name == CPU:
                    r.milli_cpu = parse_quantity(q, milli=True)
                elif name == MEMORY:
                    r.memory = parse_quantity(q)
                elif name == EPHEMERAL_STORAGE:
                    r.ephemeral_storage = parse_quantity(q)
                elif name == PODS:
                    r.allowed_pods = parse_quantity(q)
                else:
                    r.scalar[name] = parse_quantity(q)
            except ValueError as exc:
                raise ParseError(f"{where}.{name}: {exc}") from exc
        return r

    def get(self, name: str) -> int:
        if name == CPU:
            return self.milli_cpu
        if name == MEMORY:
            return self.memory
        if name == EPHEMERAL_STORAGE:
            return self.ephemeral_storage
        if name == PODS:
            return self.allowed_pods
        return self.scalar.get(name, 0)

    def add(self, other: Resource) -> None:
        self.milli_cpu += other.milli_cpu
        self.memory += other.memory
        self.ephemeral_storage += other.ephemeral_storage
        self.allowed_pods += other.allowed_pods
        if other.scalar:
            s = self.scalar
            for k, v in other.scalar.items():
                s[k] = s.get(k, 0) + v

    def sub(self, other: Resource) -> None:
        self.milli_cpu -= other.milli_cpu
        self.memory -= other.memory
        self.ephemeral_storage -= other.ephemeral_storage
        self.allowed_pods -= other.allowed_pods
        if other.scalar:
            s = self.scalar
            for k, v in other.scalar.items():
                s[k] = s.get(k, 0) - v

    def set_max(self, other: Resource) -> None:
        self.milli_cpu = max(self.milli_cpu, other.milli_cpu)
        self.memory = max(self.memory, other.memory)
        self.ephemeral_storage = max(self.ephemeral_storage, other.ephemeral_storage)
        for k, v in other.scalar.items():
            if v > self.scalar.get(k, 0):
                self.scalar[k] = v

    def copy(self) -> Resource:
        return Resource(
            self.milli_cpu,
            self.memory,
            self.ephemeral_storage,
            self.allowed_pods,
            dict(self.scalar),
        )

    def is_zero(self) -> bool:
        return not (
            self.milli_cpu or self.memory or self.ephemeral_storage or any(self.scalar.values())
        )

    def names(self) -> Iterable[str]:
        yield CPU
        yield MEMORY
        yield EPHEMERAL_STORAGE
        yield from self.scalar

    def as_dict(self) -> dict[str, int]:
        d = {CPU: self.milli_cpu, MEMORY: self.memory}
        if self.ephemeral_storage:
            d[EPHEMERAL_STORAGE] = self.ephemeral_storage
        if self.allowed_pods:
            d[PODS] = self.allowed_pods
        d.update(self.scalar)
        return d

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Resource) and self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        return f"Resource({self.as_dict()})"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def describe(self) -> str:
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


def tolerates_taint(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


@dataclass(frozen=True, slots=True)
class HostPort:
    ip: str
    protocol: str
    port: int


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A pod (anti-)affinity term with its namespaces resolved where static."""

    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str
    weight: int = 0

    def matches_pod_namespace(self, namespace: str, ns_labels: Mapping[str, str] | None) -> bool:
        if namespace in self.namespaces:
            return True
        if self.namespace_selector is None:
            return False
        return self.namespace_selector.matches(ns_labels if ns_labels is not None else {})


@dataclass(slots=True, eq=False)
class PodInfo:
    """What the scheduler knows of one pod version."""

    uid: str
    namespace: str
    name: str
    resource_version: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    node_name: str = ""
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    priority: int = 0
    preemption_policy: str = "PreemptLowerPriority"
    node_selector: dict[str, str] = field(default_factory=dict)
    required_node_affinity: NodeSelector | None = None
    preferred_node_affinity: tuple[PreferredTerm, ...] = ()
    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    #: What the pod counts on a node: its effective request (containers, sidecars,
    #: init containers, pod level, overhead), during an in-place resize the largest
    #: of spec, allocated and actuated resources (see parse.counted_resources).
    requests: Resource = field(default_factory=Resource)
    #: The request from the spec alone, when the status makes ``requests`` differ
    #: (None otherwise); read it through :attr:`fit_requests`.
    spec_requests: Resource | None = None
    #: CPU/memory as a node's totals count the pod: 100m / 200Mi for a missing request
    #: (with pod-level requests, only where nothing mentions the resource).
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    #: CPU/memory as NodeResourcesFit's score counts the pod being scheduled: the
    #: containers with the per-container defaults, never the pod-level requests.
    #: Equal to the two above unless the pod has pod-level requests.
    score_cpu: int = 0
    score_memory: int = 0
    scheduling_gates: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    deleting: bool = False
    creation_timestamp: str = ""
    start_time: str = ""
    nominated_node_name: str = ""
    phase: str = ""
    raw: dict[str, Any] = field(default_factory=dict)
    #: Set when the pod could not be parsed; the scheduler reports it and moves on.
    parse_error: str | None = None
    #: Per-version caches that plugins fill lazily (e.g. parsed spread constraints).
    ext: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def spec(self) -> dict[str, Any]:
        spec = self.raw.get("spec")
        return spec if isinstance(spec, dict) else {}

    def has_affinity(self) -> bool:
        return bool(
            self.required_affinity
            or self.required_anti_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
        )

    @property
    def fit_requests(self) -> Resource:
        """The request NodeResourcesFit's filter (and its queueing hints and pod
        signature) compare with a node: from the spec, never the status."""
        return self.requests if self.spec_requests is None else self.spec_requests

    def is_best_effort(self) -> bool:
        return self.requests.is_zero()

    def with_node(self, node_name: str) -> PodInfo:
        """A copy bound to ``node_name`` (used by assume)."""
        return self.evolve(node_name=node_name)

    def evolve(self, **changes: Any) -> PodInfo:
        """A copy with ``changes``, its per-version caches (``ext``) empty."""
        fields = {f: getattr(self, f) for f in _POD_FIELDS}
        fields.update(changes)
        return PodInfo(**fields)


_POD_FIELDS = [f for f in PodInfo.__dataclass_fields__ if f != "ext"]


@dataclass(slots=True, eq=False)
class NodeRecord:
    name: str
    resource_version: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Resource = field(default_factory=Resource)
    unschedulable: bool = False
    #: image name -> size in bytes, every name of every image on the node.
    images: dict[str, int] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


class NodeInfo:
    """A node with the aggregate of the pods the scheduler has placed on it."""

    __slots__ = (
        "generation",
        "name",
        "node",
        "non_zero_cpu",
        "non_zero_memory",
        "pods",
        "pods_with_affinity",
        "pods_with_required_anti_affinity",
        "pvc_refs",
        "requested",
        "used_ports",
    )

    def __init__(self, name: str, node: NodeRecord | None = None) -> None:
        self.name = name
        self.node = node
        self.pods: dict[str, PodInfo] = {}
        self.requested = Resource()
        self.non_zero_cpu = 0
        self.non_zero_memory = 0
        self.used_ports: dict[tuple[str, int], set[str]] = {}
        self.pods_with_affinity: dict[str, PodInfo] = {}
        self.pods_with_required_anti_affinity: dict[str, PodInfo] = {}
        self.pvc_refs: dict[str, int] = {}
        self.generation = 0

    @property
    def allocatable(self) -> Resource:
        return self.node.allocatable if self.node is not None else Resource()

    @property
    def labels(self) -> dict[str, str]:
        return self.node.labels if self.node is not None else {}

    def add_pod(self, pod: PodInfo) -> None:
        self.pods[pod.uid] = pod
        self._account(pod, 1)

    def remove_pod(self, uid: str) -> PodInfo | None:
        pod = self.pods.pop(uid, None)
        if pod is not None:
            self._account(pod, -1)
        return pod

    def _account(self, pod: PodInfo, sign: int) -> None:
        if sign > 0:
            self.requested.add(pod.requests)
        else:
            self.requested.sub(pod.requests)
        self.non_zero_cpu += sign * pod.non_zero_cpu
        self.non_zero_memory += sign * pod.non_zero_memory
        for hp in pod.host_ports:
            k = (hp.protocol, hp.port)
            if sign > 0:
                self.used_ports.setdefault(k, set()).add(hp.ip)
            else:
                ips = self.used_ports.get(k)
                if ips is not None:
                    ips.discard(hp.ip)
                    if not ips:
                        del self.used_ports[k]
        if pod.has_affinity():
            if sign > 0:
                self.pods_with_affinity[pod.uid] = pod
            else:
                self.pods_with_affinity.pop(pod.uid, None)
        if pod.required_anti_affinity:
            if sign > 0:
                self.pods_with_required_anti_affinity[pod.uid] = pod
            else:
                self.pods_with_required_anti_affinity.pop(pod.uid, None)
        for claim in pod_pvc_names(pod):
            key = f"{pod.namespace}/{claim}"
            n = self.pvc_refs.get(key, 0) + sign
            if n > 0:
                self.pvc_refs[key] = n
            else:
                self.pvc_refs.pop(key, None)
        self.generation += 1

    def ports_conflict(self, wanted: Iterable[HostPort]) -> bool:
        used = self.used_ports
        for hp in wanted:
            ips = used.get((hp.protocol, hp.port))
            if ips and (hp.ip == "0.0.0.0" or hp.ip in ips or "0.0.0.0" in ips):
                return True
        return False

    def clone(self) -> NodeInfo:
        c = NodeInfo(self.name, self.node)
        c.pods = dict(self.pods)
        c.requested = self.requested.copy()
        c.non_zero_cpu = self.non_zero_cpu
        c.non_zero_memory = self.non_zero_memory
        c.used_ports = {k: set(v) for k, v in self.used_ports.items()}
        c.pods_with_affinity = dict(self.pods_with_affinity)
        c.pods_with_required_anti_affinity = dict(self.pods_with_required_anti_affinity)
        c.pvc_refs = dict(self.pvc_refs)
        c.generation = self.generation
        return c

    def __repr__(self) -> str:
        return f"NodeInfo({self.name}, pods={len(self.pods)}, requested={self.requested})"


def pod_pvc_names(pod: PodInfo) -> list[str]:
    vols = pod.spec.get("volumes")
    if not vols:
        return []
    out = []
    for v in vols:
        if isinstance(v, dict):
            claim = v.get("persistentVolumeClaim")
            if isinstance(claim, dict) and isinstance(claim.get("claimName"), str):
                out.append(claim["claimName"])
    return out


__all__ = [
    "AffinityTerm",
    "HostPort",
    "LabelSelector",
    "NodeInfo",
    "NodeRecord",
    "NodeSelector",
    "ParseError",
    "PodInfo",
    "PreferredTerm",
    "Resource",
    "SelectorError",
    "Taint",
    "Toleration",
    "parse_preferred_terms",
    "tolerates_taint",
]


@dataclass(frozen=True, slots=True)
class StatusWrite:
    """A pods/status write of the scheduler: the pod's resourceVersion before it, the
    PodScheduled condition and the nominatedNodeName the pod has after it."""

    resource_version: str
    condition: Mapping[str, Any] | None
    nominated_node_name: str


class QueuedPodInfo:
    """A pod in the scheduling queue with its attempt history."""

    __slots__ = (
        "attempts",
        "backoff_expiry",
        "gated",
        "initial_attempt_timestamp",
        "pending_plugins",
        "pod",
        "status_written",
        "timestamp",
        "unschedulable_plugins",
    )

    def __init__(self, pod: PodInfo, timestamp: float) -> None:
        self.pod: PodInfo = pod
        #: When the pod was (re)added to the queue; PrioritySort's tie-break.
        self.timestamp: float = timestamp
        self.initial_attempt_timestamp: float | None = None
        self.attempts: int = 0
        #: Plugins that rejected the pod in its last attempt; events wake it only for them.
        self.unschedulable_plugins: set[str] = set()
        self.pending_plugins: set[str] = set()
        #: Name of the PreEnqueue plugin holding the pod back, or "".
        self.gated: str = ""
        self.backoff_expiry: float = 0.0
        #: The last PodScheduled condition and nominatedNodeName the scheduler wrote
        #: for the pod, with the resourceVersion the pod had then: until the informer
        #: brings a newer version, that write is what the server holds.
        self.status_written: StatusWrite | None = None

    def __repr__(self) -> str:
        return f"QueuedPodInfo({self.pod.key}, attempts={self.attempts})"
