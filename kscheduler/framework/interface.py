"""One small Protocol per extension point, and the handle plugins receive.

Every method returns a :class:`~kscheduler.framework.status.Status` or ``None``
(success). Codes a method may return are listed in its docstring; anything
else is treated as an Error. Plugins must not import each other or the API
client: what they need of the cluster comes through :class:`Handle`.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import (
    Awaitable,
    Callable,
    Collection,
    Hashable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.status import Status
from kscheduler.framework.types import NodeInfo, PodInfo, QueuedPodInfo

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0


class ActionType(enum.IntFlag):
    ADD = 1
    DELETE = 2
    UPDATE_NODE_ALLOCATABLE = 4
    UPDATE_NODE_LABEL = 8
    UPDATE_NODE_TAINT = 16
    UPDATE_NODE_CONDITION = 32
    UPDATE_NODE_ANNOTATION = 64
    UPDATE_POD_LABEL = 128
    UPDATE_POD_SCALE_DOWN = 256
    UPDATE_POD_TOLERATION = 512
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1024
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 2048
    UPDATE_OTHER = 4096
    UPDATE_NODE_DECLARED_FEATURE = 8192
    UPDATE = (
        UPDATE_NODE_ALLOCATABLE
        | UPDATE_NODE_LABEL
        | UPDATE_NODE_TAINT
        | UPDATE_NODE_CONDITION
        | UPDATE_NODE_ANNOTATION
        | UPDATE_POD_LABEL
        | UPDATE_POD_SCALE_DOWN
        | UPDATE_POD_TOLERATION
        | UPDATE_POD_SCHEDULING_GATES_ELIMINATED
        | UPDATE_POD_GENERATED_RESOURCE_CLAIM
        | UPDATE_OTHER
        | UPDATE_NODE_DECLARED_FEATURE
    )
    ALL = ADD | DELETE | UPDATE


class Resource(enum.Enum):
    """Kinds whose changes can make an unschedulable pod schedulable."""

    POD = "Pod"  # an assigned pod (or, for its own updates, the unscheduled pod)
    UNSCHEDULED_POD = "UnscheduledPod"
    NODE = "Node"
    PERSISTENT_VOLUME = "PersistentVolume"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
    STORAGE_CLASS = "StorageClass"
    CSI_NODE = "CSINode"
    CSI_DRIVER = "CSIDriver"
    CSI_STORAGE_CAPACITY = "CSIStorageCapacity"
    NAMESPACE = "Namespace"
    SERVICE = "Service"
    VOLUME_ATTACHMENT = "VolumeAttachment"
    RESOURCE_CLAIM = "ResourceClaim"
    RESOURCE_SLICE = "ResourceSlice"
    DEVICE_CLASS = "DeviceClass"
    DEVICE_TAINT_RULE = "DeviceTaintRule"
    WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    resource: Resource
    action: ActionType
    label: str = ""

    def matches(self, other: ClusterEvent) -> bool:
        """Whether this registered event covers the incoming event ``other``."""
        if self.resource is Resource.WILDCARD and self.action == ActionType.ALL:
            return True
        return (self.resource is Resource.WILDCARD or self.resource is other.resource) and bool(
            self.action & other.action
        )

    def __str__(self) -> str:
        return self.label or f"{self.resource.value}{self.action.name or int(self.action)}"


class QueueingHint(enum.Enum):
    QUEUE = "Queue"
    SKIP = "QueueSkip"


#: (pod waiting in the queue, old object or None, new object or None) -> hint. For pod
#: events old/new are PodInfo, for node events NodeRecord; other kinds pass raw dicts.
QueueingHintFn = Callable[[PodInfo, Any, Any], QueueingHint]


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    event: ClusterEvent
    hint: QueueingHintFn | None = None


@dataclass(slots=True)
class PreFilterResult:
    """Node names a PreFilter plugin limits the pod to; None means all nodes."""

    node_names: set[str] | None = None

    def merge(self, other: PreFilterResult | None) -> PreFilterResult:
        if other is None or other.node_names is None:
            return self
        if self.node_names is None:
            return PreFilterResult(set(other.node_names))
        return PreFilterResult(self.node_names & other.node_names)


@dataclass(slots=True)
class PostFilterResult:
    nominated_node_name: str = ""
    #: Pods removed to make room (for the preemption metrics).
    victims: int = 0


class NodeScore:
    __slots__ = ("name", "score")

    def __init__(self, name: str, score: int) -> None:
        self.name = name
        self.score = score

    def __repr__(self) -> str:
        return f"NodeScore({self.name}={self.score})"


@dataclass(slots=True)
class NodeToStatus:
    """Filter verdicts per rejected node; ``absent`` applies to nodes not visited."""

    statuses: dict[str, Status] = field(default_factory=dict)
    absent: Status | None = None

    def get(self, name: str) -> Status | None:
        return self.statuses.get(name, self.absent)

    def grouped(self) -> list[tuple[Status, int]]:
        """Each distinct Status object of ``statuses`` with the number of nodes given
        it, in first-seen order: kept verdicts share one object per distinct verdict,
        so a diagnosis of thousands of nodes sums up in C-level passes."""
        verdicts = self.statuses.values()
        counts = Counter(map(id, verdicts))
        if len(counts) == len(self.statuses):
            return [(st, 1) for st in verdicts]
        by_id = dict(zip(map(id, verdicts), verdicts, strict=True))
        return [(by_id[i], n) for i, n in counts.items()]


class Plugin(Protocol):
    @property
    def name(self) -> str: ...


@runtime_checkable
class PreEnqueuePlugin(Plugin, Protocol):
    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        """Success lets the pod into activeQ; Unschedulable* keeps it gated."""


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """Whether ``a`` is popped before ``b``."""


class QueueSortKey(Protocol):
    def sort_key(self, qp: QueuedPodInfo) -> Any:
        """Optional fast path: a key whose ascending order equals ``less``."""


@runtime_checkable
class EnqueueExtensions(Plugin, Protocol):
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """Cluster events that may make a pod this plugin rejected schedulable."""


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Success, Skip (its Filter is not run), Unschedulable*, Error."""


class PreFilterExtensions(Protocol):
    """Keeps PreFilter state right when preemption or nominated pods add/remove pods."""

    def add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node_info: NodeInfo
    ) -> Status | None: ...

    def remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status | None: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """Success, Unschedulable (preemption may help), UnschedulableAndUnresolvable, Error."""


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    async def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status | None]:
        """Success with a nominated node, Unschedulable, Error."""


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        """Success, Skip (its Score is not run), Error."""


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        """A score (after normalisation within [0, 100]); Error fails the attempt."""


class BatchFilter(Protocol):
    def filter_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> dict[int, Status]:
        """Optional fast path: ``filter`` for every node at once. Returns the rejections
        by position in ``nodes`` (no entry: the node passes); must give exactly what
        ``filter`` gives node by node. The framework prefers it when present."""


class BatchScorer(Protocol):
    def score_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[list[int], Status | None]:
        """Optional fast path: ``score`` for every node at once, in order. Must give
        exactly what ``score`` gives; the framework prefers it when present."""


@runtime_checkable
class ScoreNormalizer(Protocol):
    def normalize_score(
        self, state: CycleState, pod: PodInfo, scores: list[NodeScore]
    ) -> Status | None:
        """Rewrite ``scores`` in place into [0, 100]."""


class BatchNormalizer(Protocol):
    def normalize_scores(
        self, state: CycleState, pod: PodInfo, scores: list[int]
    ) -> tuple[list[int], Status | None]:
        """Optional fast path: ``normalize_score`` over plain ints (in node order), the
        result as a list. Must give exactly what ``normalize_score`` gives; the
        framework prefers it when present."""


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        """Success; anything else unreserves every Reserve plugin and fails the attempt."""

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Undo reserve; must be idempotent."""


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(
        self, state: CycleState, pod: PodInfo, node_name: str
    ) -> tuple[Status | None, float]:
        """Success, Wait with a timeout in seconds, or a rejection."""


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        """Success, Skip, or a failure (the binding cycle fails and the pod is requeued)."""


@dataclass(frozen=True, slots=True)
class PreBindPreFlightResult:
    """What a PreBind plugin's pre-flight tells the framework besides its Status."""

    #: Its PreBind may run at the same time as the PreBind of the neighbouring plugins
    #: that allow it too (consecutive such plugins form one concurrent group; a skipped
    #: plugin that does not allow it still ends the group).
    allow_parallel: bool = False


@runtime_checkable
class PreBindPreFlightPlugin(Plugin, Protocol):
    """The pre-flight of a PreBind plugin, run at the start of the binding cycle
    (NominatedNodeNameForExpectation). Cheap and side-effect free: it says whether
    PreBind will have work for this pod on this node, it does not do the work.

    Every PreBind plugin should have one. A PreBind plugin without it still runs its
    PreBind, but is not counted as having work (so it never causes the pod's
    nominatedNodeName to be set)."""

    def pre_bind_pre_flight(
        self, state: CycleState, pod: PodInfo, node_name: str
    ) -> tuple[PreBindPreFlightResult | None, Status | None]:
        """Success: PreBind will work on the pod (the scheduler then records the node in
        the pod's status.nominatedNodeName before running it); Skip: nothing to do, its
        PreBind is not run; Error fails the binding cycle. Any other code is an error."""


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        """Success, Skip (the next Bind plugin runs), or Error."""


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Informational, after a successful bind."""


@dataclass(frozen=True, slots=True)
class NodeChanges:
    """What :meth:`SharedLister.changes_since` reports."""

    #: Nodes whose Node object or pods changed since the cursor asked about, each once.
    #: None when those changes are not known (no cursor, or the log was reset since):
    #: start over from node_infos().
    names: Collection[str] | None
    #: Where the next call picks up.
    cursor: int


class ImageState(NamedTuple):
    """A container image across the cluster, as ImageLocality scores it."""

    #: Bytes: the size reported by the first node seen holding the image (nodes may
    #: report different sizes for one name; kube-scheduler keeps the first).
    size: int
    #: Nodes holding the image.
    num_nodes: int


@dataclass(slots=True)
class Victims:
    """Pods a preemption would evict on one node (upstream's extenderv1.Victims)."""

    pods: list[PodInfo] = field(default_factory=list)
    num_pdb_violations: int = 0


#: Preemption's candidates (node -> victims) through the HTTP extenders with a preempt
#: verb: the nodes and victims they accept. Raises when a non-ignorable one fails.
PreemptionExtenders = Callable[[PodInfo, Mapping[str, Victims]], Awaitable[dict[str, Victims]]]


class SharedLister(Protocol):
    """Read access to the scheduling cycle's view of the nodes."""

    def node_infos(self) -> Sequence[NodeInfo]: ...

    def get(self, name: str) -> NodeInfo | None: ...

    def have_pods_with_affinity(self) -> Sequence[NodeInfo]: ...

    def have_pods_with_required_anti_affinity(self) -> Sequence[NodeInfo]: ...

    def is_pvc_used_by_pods(self, key: str) -> bool: ...

    def image_state(self, name: str) -> ImageState | None:
        """The image ``name`` (normalized, e.g. "busybox:latest") across the nodes; None
        when no node holds it. Listers without this method make ImageLocality count the
        nodes itself and take each node's own size."""

    def changes_since(self, cursor: int | None) -> NodeChanges | None:
        """The nodes changed since ``cursor`` (from an earlier answer; None at first).

        None when the lister cannot tell now (it keeps no change log, or its view is
        not up to date): read node_infos() in full. Callers also treat a lister
        without this method that way.
        """

    def node_positions(self) -> Mapping[str, int]:
        """Each node's place in node_infos() (the same list object while it holds).
        Optional: without it, values kept per node are looked up by name."""


class ObjectLister(Protocol):
    """Informer-backed read access to other kinds (raw JSON dicts)."""

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]: ...

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...


@runtime_checkable
class ObjectChanges(Protocol):
    """What an ObjectLister may also offer: which objects of a kind changed."""

    def changes_since(self, kind: str, cursor: int | None) -> tuple[int, list[str] | None]:
        """(the cursor now, the keys — ``namespace/name``, or the name of a
        cluster-scoped object — put or removed since ``cursor``); the keys are None
        when ``cursor`` is None or too old: read the whole list."""
        ...


class ClusterClient(Protocol):
    """The writes plugins may make; implemented over the API client."""

    async def bind(self, pod: PodInfo, node_name: str) -> None: ...

    async def delete_pod(self, pod: PodInfo, *, reason: str, message: str) -> None: ...

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None
    ) -> Any: ...


class EventRecorder(Protocol):
    def event(
        self,
        obj: Mapping[str, Any],
        type_: str,
        reason: str,
        action: str,
        note: str,
        related: Mapping[str, Any] | None = None,
    ) -> None: ...


class WaitingPod(Protocol):
    @property
    def pod(self) -> PodInfo: ...

    def allow(self, plugin: str) -> None: ...

    def reject(self, plugin: str, message: str) -> None: ...

    def pending_plugins(self) -> list[str]: ...


class Handle(Protocol):
    """What the framework gives each plugin at construction."""

    @property
    def snapshot(self) -> SharedLister: ...

    @property
    def objects(self) -> ObjectLister: ...

    @property
    def client(self) -> ClusterClient: ...

    @property
    def recorder(self) -> EventRecorder: ...

    @property
    def profile_name(self) -> str: ...

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]: ...

    def iterate_waiting_pods(self) -> list[WaitingPod]: ...

    def get_waiting_pod(self, uid: str) -> WaitingPod | None: ...

    def run_filter_with_nominated_pods(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> Status | None: ...

    def node_local_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """After PreFilter: a key such that this cycle's Filter verdict on a node reads
        only that node's NodeInfo and the key, or None when it reads more (see
        kscheduler.framework.node_memo); also None while the node memo is off."""
        ...

    def run_pre_filter_add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node_info: NodeInfo
    ) -> Status | None: ...

    def run_pre_filter_remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status | None: ...

    def activate_pods(self, uids: Iterable[str]) -> None:
        """Move these pods from the unschedulable pool or backoffQ to activeQ (after
        running PreEnqueue); a pod in its scheduling cycle is requeued at once after it."""
        ...

    def release_gated_pods(self, uids: Iterable[str]) -> None:
        """Pods held at PreEnqueue: run PreEnqueue again, to activeQ if it lets them in
        (cluster events do not move gated pods)."""
        ...

    def preemption_extenders(self) -> PreemptionExtenders | None:
        """The HTTP extenders' preempt verb over preemption candidates, or None when no
        configured extender has one."""
        ...
