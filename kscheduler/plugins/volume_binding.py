"""VolumeBinding: a pod's PersistentVolumeClaims must be, or become, usable on the node.

PreFilter
    No claims (``persistentVolumeClaim`` or generic ``ephemeral`` volumes) -> Skip.
    A claim that is missing, Lost, being deleted, or (ephemeral) not owned by the
    pod -> UnschedulableAndUnresolvable. Claims are then sorted into *bound* (a
    volumeName and the bind-completed annotation), *delayed* (unbound, class with
    WaitForFirstConsumer) and *immediate* (anything else unbound, including claims
    pre-bound to a volume by name); any immediate claim ->
    UnschedulableAndUnresolvable "pod has unbound immediate PersistentVolumeClaims"
    (the PV controller is expected to bind those). The candidate volumes of the
    delayed claims' classes are listed once here.

Filter (all rejections UnschedulableAndUnresolvable, several reasons possible)
    Bound claims: the PV must exist ("... bound to non-existent pv(s)") and its
    ``spec.nodeAffinity`` must match the node ("didn't match PersistentVolume's node affinity").
    Delayed claims, smallest request first: a claim already given a node
    (``volume.kubernetes.io/selected-node``) fits only that node; otherwise the
    smallest matching volume is chosen (one pre-bound to the claim wins at once):
    same class, volume mode and attributes class, capacity >= request, phase
    Available, claim selector, access modes, node affinity, not chosen for another
    claim of the pod. Claims left over must be dynamically provisionable: the
    class has a provisioner other than ``kubernetes.io/no-provisioner`` and its
    allowedTopologies match the node; else "didn't find available persistent
    volumes to bind". When the class's CSI driver asks for capacity tracking
    (CSIDriver ``spec.storageCapacity``), a CSIStorageCapacity of the class whose
    nodeTopology selects the node must hold the request (``maximumVolumeSize``,
    else ``capacity``); else "did not have enough free storage".

Reserve / Unreserve
    The chosen volumes are assumed bound to their claims (and claims to provision
    assumed to carry the selected node) in an in-memory cache that overlays the
    informer objects until the informer delivers a newer version, so the next pods
    do not pick the same volume. Unreserve drops those assumptions.

PreBind
    As kube-scheduler: each chosen static volume is updated (PUT, with the
    resourceVersion seen in Filter) with the claim's reference in ``spec.claimRef``
    and ``pv.kubernetes.io/bound-by-controller`` when it was not already bound to
    the claim; each claim to provision is updated (PUT) with the
    ``volume.kubernetes.io/selected-node`` annotation. The PV controller does the
    rest (PV and claim status, the claim's volumeName and bind-completed
    annotation, provisioning through the external provisioner); the plugin polls
    its informer view every second, up to ``bindTimeoutSeconds``, until every
    claim is fully bound, and fails (the pod is retried) when the controller
    undoes a binding or the provisioner gives up.

PreScore / Score (StorageCapacityScoring, on by default since 1.37)
    Per storage class, the claims' requests over the capacity they take on the
    node (the chosen static volumes; else the CSIStorageCapacity that admitted each
    claim to provision), through the ``shape`` (default: an empty node scores 100,
    a full one 0), averaged over the classes. Skipped for a pod without claims.

Volumes of in-tree plugins are not translated to CSI for node affinity.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kscheduler.framework import (
    MAX_NODE_SCORE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Handle,
    NodeInfo,
    PluginEntry,
    PodInfo,
    PreBindPreFlightResult,
    PreFilterResult,
    QueueingHint,
    Status,
    signing,
)
from kscheduler.framework.args import ConfigError, Fields
from kscheduler.framework.features import GATES, STORAGE_CAPACITY_SCORING
from kscheduler.framework.interface import ClusterClient, ObjectLister, SharedLister
from kscheduler.framework.quantity import QuantityError, parse_quantity
from kscheduler.framework.selectors import (
    LabelSelector,
    NodeSelectorTerm,
    SelectorError,
    parse_node_selector_term,
)
from kscheduler.framework.shape import (
    MAX_CUSTOM_PRIORITY_SCORE,
    MAX_UTILIZATION,
    UtilizationShapePoint,
    broken_linear,
    parse_shape,
)
from kscheduler.framework.signing import SignFragment
from kscheduler.framework.storage import ANN_BETA_STORAGE_CLASS, owned_by_pod

NAME = "VolumeBinding"
STATE_KEY = NAME

DEFAULT_BIND_TIMEOUT_SECONDS = 600
#: How often PreBind looks at a claim waiting for its provisioner.
POLL_INTERVAL_SECONDS = 1.0

ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
ERR_REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
ERR_REASON_PV_NOT_EXIST = (
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
)
ERR_UNBOUND_IMMEDIATE_CLAIMS = "pod has unbound immediate PersistentVolumeClaims"

ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
FILESYSTEM = "Filesystem"

PVCS = "persistentvolumeclaims"
PVS = "persistentvolumes"
STORAGE_CLASSES = "storageclasses"
CSI_DRIVERS = "csidrivers"
CAPACITIES = "csistoragecapacities"


# ---- args ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class VolumeBindingArgs:
    #: How long PreBind waits for claims to be bound (kube-scheduler's default).
    bind_timeout_seconds: int = DEFAULT_BIND_TIMEOUT_SECONDS
    #: The capacity score's shape (StorageCapacityScoring); empty: no score.
    shape: tuple[UtilizationShapePoint, ...] = ()


#: kube-scheduler's default shape with StorageCapacityScoring: the emptier, the better.
DEFAULT_SHAPE = (UtilizationShapePoint(0, MAX_CUSTOM_PRIORITY_SCORE), UtilizationShapePoint(100, 0))


def parse_args(
    raw: Mapping[str, Any], *, capacity_scoring: bool | None = None
) -> VolumeBindingArgs:
    """VolumeBindingArgs: ``bindTimeoutSeconds`` (>= 0, default 600) and, with the
    StorageCapacityScoring gate (on by default), ``shape`` (default: 0% used scores
    10, 100% used scores 0). Without the gate, setting ``shape`` is an error."""
    if capacity_scoring is None:
        capacity_scoring = GATES.enabled(STORAGE_CAPACITY_SCORING)
    f = Fields(raw)
    timeout = f.optional_integer("bindTimeoutSeconds")
    if timeout is None:
        timeout = DEFAULT_BIND_TIMEOUT_SECONDS
    elif timeout < 0:
        raise f.error(
            "bindTimeoutSeconds", "invalid BindTimeoutSeconds, should not be a negative value"
        )
    shape: tuple[UtilizationShapePoint, ...] = ()
    if capacity_scoring:
        shape = parse_shape(f) if f.raw("shape") is not None else DEFAULT_SHAPE
    elif f.raw("shape") is not None:
        raise f.error(
            "shape",
            "unexpected field `shape`, remove it or turn on the feature gate "
            "StorageCapacityScoring",
        )
    f.done()
    return VolumeBindingArgs(timeout, shape)


# ---- records ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Claim:
    """The fields of a PersistentVolumeClaim binding looks at."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    storage_class: str
    request: int  # storage, in milli-bytes so that fractional quantities compare exactly
    request_set: bool  # whether the claim requests storage at all
    access_modes: tuple[str, ...]
    volume_mode: str
    attributes_class: str
    selector: LabelSelector | None
    selector_error: str
    volume_name: str
    annotations: Mapping[str, str]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def fully_bound(self) -> bool:
        return bool(self.volume_name) and ANN_BIND_COMPLETED in self.annotations

    @property
    def ref(self) -> ClaimRef:
        return ClaimRef(self.namespace, self.name, self.uid)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Claim:
        meta = _dict(raw.get("metadata"))
        spec = _dict(raw.get("spec"))
        annotations = {str(k): str(v) for k, v in _dict(meta.get("annotations")).items()}
        selector = None
        selector_error = ""
        if spec.get("selector") is not None:
            try:
                selector = LabelSelector.parse(_dict(spec.get("selector")), "spec.selector")
            except SelectorError as exc:
                selector_error = str(exc)
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            storage_class=_storage_class(annotations, spec.get("storageClassName")),
            request=_storage(_dict(_dict(spec.get("resources")).get("requests"))),
            request_set="storage" in _dict(_dict(spec.get("resources")).get("requests")),
            access_modes=tuple(str(m) for m in spec.get("accessModes") or ()),
            volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
            attributes_class=str(spec.get("volumeAttributesClassName") or ""),
            selector=selector,
            selector_error=selector_error,
            volume_name=str(spec.get("volumeName") or ""),
            annotations=annotations,
        )


@dataclass(frozen=True, slots=True)
class Volume:
    """The fields of a PersistentVolume binding looks at."""

    name: str
    resource_version: str
    storage_class: str
    capacity: int  # milli-bytes
    access_modes: frozenset[str]
    volume_mode: str
    attributes_class: str
    deleting: bool
    phase: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    claim_ref: ClaimRef | None
    #: Required node affinity terms (ORed); None when the volume has none.
    affinity: tuple[NodeSelectorTerm, ...] | None
    raw: Mapping[str, Any] = field(compare=False, repr=False)

    def bound_to(self, claim: Claim) -> bool:
        """Pre-bound or bound to ``claim`` (the uid must agree when the ref has one)."""
        ref = self.claim_ref
        if ref is None or ref.name != claim.name or ref.namespace != claim.namespace:
            return False
        return not ref.uid or ref.uid == claim.uid

    def fits(self, node_labels: Mapping[str, str]) -> bool:
        """Whether the volume's node affinity admits a node with these labels.

        Only labels are matched, as upstream does: a ``metadata.name`` field
        requirement sees an empty name."""
        if self.affinity is None:
            return True
        return any(t.matches(node_labels, "") for t in self.affinity)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Volume:
        meta = _dict(raw.get("metadata"))
        spec = _dict(raw.get("spec"))
        annotations = {str(k): str(v) for k, v in _dict(meta.get("annotations")).items()}
        ref = spec.get("claimRef")
        claim_ref = None
        if isinstance(ref, dict):
            claim_ref = ClaimRef(
                str(ref.get("namespace", "")), str(ref.get("name", "")), str(ref.get("uid", ""))
            )
        return cls(
            name=str(meta.get("name", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            storage_class=_storage_class(annotations, spec.get("storageClassName")),
            capacity=_storage(_dict(spec.get("capacity"))),
            access_modes=frozenset(str(m) for m in spec.get("accessModes") or ()),
            volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
            attributes_class=str(spec.get("volumeAttributesClassName") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            phase=str(_dict(raw.get("status")).get("phase") or ""),
            labels={str(k): str(v) for k, v in _dict(meta.get("labels")).items()},
            annotations=annotations,
            claim_ref=claim_ref,
            affinity=_volume_affinity(spec),
            raw=raw,
        )


@dataclass(slots=True)
class PodVolumes:
    """What a node needs done for the pod's unbound claims."""

    #: Claims bound to existing volumes: (claim, volume as chosen).
    static: list[tuple[Claim, Volume]] = field(default_factory=list)
    #: Claims to provision on the node.
    dynamic: list[Claim] = field(default_factory=list)
    #: The capacity (bytes) of the CSIStorageCapacity that admitted each claim to
    #: provision, by claim key, when its driver tracks capacity (capacity scoring).
    capacities: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _CycleData:
    bound: list[tuple[Claim, Volume | None]] = field(default_factory=list)
    delayed: list[Claim] = field(default_factory=list)
    #: Candidate volumes per storage class of the delayed claims.
    candidates: dict[str, list[Volume]] = field(default_factory=dict)
    classes: dict[str, Mapping[str, Any] | None] = field(default_factory=dict)
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    all_bound: bool = False

    def clone(self) -> _CycleData:
        return self  # per-node results are shared by the simulations, as upstream


@dataclass(frozen=True, slots=True)
class _Assumed:
    """An in-memory change to an object, valid while the informer shows ``base_rv``."""

    base_rv: str
    claim_ref: ClaimRef | None = None  # PV: assumed bound to this claim
    selected_node: str = ""  # claim: assumed to be provisioned on this node


class BindingError(Exception):
    """Filter or PreBind hit a condition that fails the attempt (an Error status)."""


# ---- the plugin ------------------------------------------------------------------------
class VolumeBinding:
    name = NAME

    def __init__(
        self,
        objects: ObjectLister,
        snapshot: SharedLister,
        client: ClusterClient,
        args: VolumeBindingArgs,
    ) -> None:
        self._objects = objects
        self._snapshot = snapshot
        self._client = client
        self._bind_timeout = float(args.bind_timeout_seconds)
        self._scorer = _capacity_scorer(args.shape) if args.shape else None
        self._assumed_pvs: dict[str, _Assumed] = {}
        self._assumed_pvcs: dict[str, _Assumed] = {}
        self._parsed_pvs: dict[str, Volume] = {}

    @classmethod
    def new(cls, args: Any, handle: Handle) -> VolumeBinding:
        if args is None:
            args = VolumeBindingArgs()
        elif isinstance(args, Mapping):
            args = parse_args(args)
        if not isinstance(args, VolumeBindingArgs):
            raise ConfigError("", f"want args of type VolumeBindingArgs, got {type(args).__name__}")
        for kind in (PVCS, PVS, STORAGE_CLASSES, CSI_DRIVERS, CAPACITIES):
            handle.objects.list(kind)  # start the informers before sync
        return cls(handle.objects, handle.snapshot, handle.client, args)

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The pod's volumes other than ConfigMaps and Secrets (OpportunisticBatching)."""
        return [SignFragment(signing.VOLUMES, signing.volumes(pod))], None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        add_update = ActionType.ADD | ActionType.UPDATE
        return [
            # A missing or changed class (allowedTopologies) may let the pod in.
            ClusterEventWithHint(
                ClusterEvent(EventResource.STORAGE_CLASS, add_update), self._after_class_change
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, add_update),
                self._after_claim_change,
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.PERSISTENT_VOLUME, add_update)),
            # Node labels decide volume node affinity and class topologies.
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_NODE, add_update), self._after_csi_node_change
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_DRIVER, ActionType.UPDATE),
                self._after_csi_driver_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_STORAGE_CAPACITY, add_update),
                self._after_capacity_change,
            ),
        ]

    # ---- PreFilter ---------------------------------------------------------------------
    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Skip (no claims), UnschedulableAndUnresolvable (a claim is missing or unusable,
        or an immediate claim is unbound), Error (a class without a binding mode)."""
        refs = claim_refs(pod)
        if not refs:
            state.write(STATE_KEY, _CycleData(all_bound=True))
            return None, Status.skip()
        claims: list[Claim] = []
        for claim_name, ephemeral in refs:
            raw = self._objects.get(PVCS, pod.namespace, claim_name)
            if raw is None:
                if ephemeral:
                    return None, Status.unresolvable(
                        "waiting for ephemeral volume controller to create the "
                        f'persistentvolumeclaim "{claim_name}"'
                    )
                return None, Status.unresolvable(f'persistentvolumeclaim "{claim_name}" not found')
            status = _usable(raw, pod, claim_name, ephemeral)
            if status is not None:
                return None, status
            claims.append(self._claim(raw))

        data = _CycleData()
        immediate = False
        for claim in claims:
            if claim.fully_bound:
                data.bound.append((claim, None))
                continue
            delay, error = self._delay_binding(claim, data)
            if error:
                return None, Status.as_error(error)
            if delay and not claim.volume_name:
                data.delayed.append(claim)
            else:
                immediate = True  # including claims pre-bound by volumeName
        if immediate:
            # The PV controller binds these; the claim update requeues the pod.
            return None, Status.unresolvable(ERR_UNBOUND_IMMEDIATE_CLAIMS)

        if data.bound:
            data.bound = [(claim, self._volume_named(claim.volume_name)) for claim, _ in data.bound]
        if data.delayed:
            wanted = {c.storage_class for c in data.delayed}
            data.candidates = {sc: [] for sc in wanted}
            for volume in self._all_volumes():
                if volume.storage_class in wanted:
                    data.candidates[volume.storage_class].append(volume)
        state.write(STATE_KEY, data)
        return None, None

    # ---- Filter ------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable with the reasons the node cannot serve the claims;
        Error when a claim or its class is malformed."""
        data = state.get(STATE_KEY)
        if not isinstance(data, _CycleData):
            return Status.as_error(f'reading "{STATE_KEY}" from cycleState: not found')
        try:
            volumes, reasons = self._find_pod_volumes(data, node_info.name, node_info.labels)
        except BindingError as exc:
            return Status.as_error(str(exc))
        if reasons:
            return Status.unresolvable(*reasons)
        data.by_node[node_info.name] = volumes
        return None

    def _find_pod_volumes(
        self, data: _CycleData, node_name: str, labels: Mapping[str, str]
    ) -> tuple[PodVolumes, list[str]]:
        volumes = PodVolumes()
        bound_ok = pv_found = unbound_ok = storage_ok = True
        if data.bound:
            bound_ok, pv_found = _check_bound(data.bound, labels)
        if data.delayed:
            to_match: list[Claim] = []
            to_provision: list[Claim] = []
            for claim in data.delayed:
                selected = claim.annotations.get(ANN_SELECTED_NODE)
                if selected is not None:
                    if selected != node_name:
                        # Already being provisioned for another node.
                        return PodVolumes(), _reasons(bound_ok, False, True, pv_found)
                    to_provision.append(claim)
                else:
                    to_match.append(claim)
            if to_match:
                unbound_ok, volumes.static, unmatched = _find_matching(to_match, data, labels)
                to_provision.extend(unmatched)
            if to_provision:
                unbound_ok, storage_ok, volumes.dynamic = self._check_provisions(
                    to_provision, data, labels, volumes.capacities
                )
        return volumes, _reasons(bound_ok, unbound_ok, storage_ok, pv_found)

    def _check_provisions(
        self,
        claims: Iterable[Claim],
        data: _CycleData,
        labels: Mapping[str, str],
        capacities: dict[str, int],
    ) -> tuple[bool, bool, list[Claim]]:
        """(provisionable, enough storage, claims to provision), stopping at the first
        claim that cannot be provisioned for the node."""
        dynamic = []
        for claim in claims:
            if not claim.storage_class:
                raise BindingError(f'no class for claim "{claim.key}"')
            sc = self._storage_class(claim.storage_class, data)
            if sc is None:
                raise BindingError(f'failed to find storage class "{claim.storage_class}"')
            provisioner = sc.get("provisioner") or ""
            if not provisioner or provisioner == NO_PROVISIONER:
                return False, True, []
            if not _match_topology(sc.get("allowedTopologies"), labels):
                return False, True, []
            enough, capacity = self._enough_capacity(str(provisioner), claim, labels)
            if not enough:
                return True, False, []
            if capacity is not None:
                capacities[claim.key] = capacity
            dynamic.append(claim)
        return True, True, dynamic

    def _enough_capacity(
        self, provisioner: str, claim: Claim, labels: Mapping[str, str]
    ) -> tuple[bool, int | None]:
        """Whether a CSIStorageCapacity of the claim's class, reachable from the node,
        holds the claim's request, and that object's ``capacity`` in bytes (None when
        nothing was checked). Checked only for a CSI driver that asks for it (CSIDriver
        spec.storageCapacity); a claim without a storage request always fits."""
        if not claim.request_set:
            return True, None
        driver = self._objects.get(CSI_DRIVERS, "", provisioner)
        if driver is None or _dict(driver.get("spec")).get("storageCapacity") is not True:
            return True, None
        size = -(-claim.request // 1000)  # whole bytes, rounded up like Quantity.Value()
        for capacity in self._objects.list(CAPACITIES):
            if capacity.get("storageClassName") != claim.storage_class:
                continue
            limit = _capacity_limit(capacity)
            if limit is None or limit < size:
                continue
            if _node_has_access(capacity, labels):
                return True, _quantity(capacity.get("capacity"))
        return False, None

    # ---- PreScore / Score (StorageCapacityScoring) --------------------------------------
    def pre_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        """Skip without the StorageCapacityScoring gate or for a pod without claims."""
        if self._scorer is None:
            return Status.skip()
        data = state.get(STATE_KEY)
        if not isinstance(data, _CycleData) or not data.by_node:
            return Status.skip()  # no claims: every node would score 0
        return None

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        """How little of the storage the claims use on the node: per storage class,
        requested over capacity through the args' shape, averaged over the classes.
        Static bindings count the chosen volumes; otherwise the claims to provision
        count the CSIStorageCapacity that admitted them. 0 without either."""
        if self._scorer is None:
            return 0, None
        data = state.get(STATE_KEY)
        if not isinstance(data, _CycleData):
            return 0, Status.as_error(f'reading "{STATE_KEY}" from cycleState: not found')
        volumes = data.by_node.get(node_info.name)
        if volumes is None:
            return 0, None
        classes: dict[str, list[int]] = {}  # class -> [requested, capacity]
        if volumes.static:
            for claim, volume in volumes.static:
                entry = classes.setdefault(volume.storage_class, [0, 0])
                entry[0] += -(-claim.request // 1000)
                entry[1] += -(-volume.capacity // 1000)
        else:
            for claim in volumes.dynamic:
                capacity = volumes.capacities.get(claim.key)
                if capacity is None:
                    continue
                entry = classes.setdefault(claim.storage_class, [0, 0])
                # the class's capacity on the node, not a sum: two claims of one
                # class share it
                entry[1] = capacity
                entry[0] += -(-claim.request // 1000)
        return self._scorer(classes), None

    # ---- Reserve / Unreserve -----------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        """Assume the node's bindings in the in-memory cache; Error without PreFilter state."""
        data = state.get(STATE_KEY)
        if not isinstance(data, _CycleData):
            return Status.as_error(f'reading "{STATE_KEY}" from cycleState: not found')
        volumes = data.by_node.get(node_name)
        if volumes is None or self._all_claims_bound(pod):
            data.all_bound = True
            return None
        data.all_bound = False
        for claim, volume in volumes.static:
            if volume.claim_ref != claim.ref or not _bound_by_controller_ok(volume, claim):
                self._assumed_pvs[volume.name] = _Assumed(volume.resource_version, claim.ref)
        for claim in volumes.dynamic:
            self._assumed_pvcs[claim.key] = _Assumed(
                claim.resource_version, selected_node=node_name
            )
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        data = state.get(STATE_KEY)
        if not isinstance(data, _CycleData):
            return
        volumes = data.by_node.get(node_name)
        if volumes is None:
            return
        for _, volume in volumes.static:
            self._assumed_pvs.pop(volume.name, None)
        for claim in volumes.dynamic:
            self._assumed_pvcs.pop(claim.key, None)

    # ---- PreBind -----------------------------------------------------------------------
    def pre_bind_pre_flight(
        self, state: CycleState, pod: PodInfo, node_name: str
    ) -> tuple[PreBindPreFlightResult | None, Status | None]:
        """Skip when every claim is bound already; Success when PreBind has bindings to
        write (the pod's nominatedNodeName is then set first); Error without PreFilter
        state or without volumes for the node. Its PreBind may run in parallel."""
        result = PreBindPreFlightResult(allow_parallel=True)
        data = state.get(STATE_KEY)
        if not isinstance(data, _CycleData):
            return result, Status.as_error(f'reading "{STATE_KEY}" from cycleState: not found')
        if data.all_bound:
            return result, Status.skip()
        if node_name not in data.by_node:
            return result, Status.as_error(f'no pod volumes found for node "{node_name}"')
        return result, None

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        """Write the bindings and wait for the claims to be bound; Error on API failure,
        failed provisioning or timeout (the pod is retried)."""
        data = state.get(STATE_KEY)
        if not isinstance(data, _CycleData):
            return Status.as_error(f'reading "{STATE_KEY}" from cycleState: not found')
        if data.all_bound:
            return None
        volumes = data.by_node.get(node_name)
        if volumes is None:
            return Status.as_error(f'no pod volumes found for node "{node_name}"')
        try:
            static, provisioned = await self._bind_api_update(volumes, node_name)
        except Exception as exc:  # the API client's errors, whatever their type
            return Status.as_error(str(exc) or type(exc).__name__)
        try:
            async with asyncio.timeout(self._bind_timeout):
                # The PV controller and the provisioners report through the objects:
                # poll the informer view, as upstream polls its caches.
                while True:
                    if self._bindings_done(static, provisioned, node_name):
                        break
                    await asyncio.sleep(POLL_INTERVAL_SECONDS)
        except TimeoutError:
            return Status.as_error("binding volumes: timed out waiting for the condition")
        except BindingError as exc:
            return Status.as_error(f"binding volumes: {exc}")
        return None

    async def _bind_api_update(
        self, volumes: PodVolumes, node_name: str
    ) -> tuple[list[tuple[Claim, str, str]], list[tuple[Claim, str]]]:
        """Make the API writes: every static volume's claimRef, then every claim to
        provision's selected node. Returns (claim, volume, version written) for the
        static bindings and (claim, version written) for the claims to provision."""
        static = []
        for claim, volume in volumes.static:
            pv = _bind_volume_to_claim(volume, claim)
            resp = await self._client.request("PUT", f"/api/v1/{PVS}/{volume.name}", pv)
            static.append((claim, volume.name, _resource_version(resp)))
        provisioned = []
        for claim in volumes.dynamic:
            raw = self._objects.get(PVCS, claim.namespace, claim.name)
            if raw is None:
                raise BindingError(f'persistentvolumeclaim "{claim.name}" not found')
            body = copy.deepcopy(dict(raw))
            meta = body.setdefault("metadata", {})
            # the version seen in Filter: a claim changed since fails with a conflict
            meta["resourceVersion"] = claim.resource_version
            annotations = meta.get("annotations")
            meta["annotations"] = {**(annotations or {}), ANN_SELECTED_NODE: node_name}
            resp = await self._client.request("PUT", _claim_path(claim), body)
            provisioned.append((claim, _resource_version(resp)))
        return static, provisioned

    def _bindings_done(
        self,
        static: list[tuple[Claim, str, str]],
        provisioned: list[tuple[Claim, str]],
        node_name: str,
    ) -> bool:
        """Whether every claim is fully bound; BindingError when the PV controller
        dropped a volume's claimRef, a volume does not fit the node, or a provisioner
        gave up (it removes the selected-node annotation)."""
        for claim, volume_name, rv in static:
            raw_pv = self._objects.get(PVS, "", volume_name)
            if raw_pv is None:
                raise BindingError(
                    f'failed to check binding: persistentvolume "{volume_name}" not found'
                )
            raw_claim = self._objects.get(PVCS, claim.namespace, claim.name)
            if raw_claim is None:
                raise BindingError(
                    f'failed to check binding: persistentvolumeclaim "{claim.key}" not found'
                )
            volume = Volume.parse(raw_pv)
            if _rv_older(volume.resource_version, rv):
                return False  # the informer has not seen our write yet
            if not volume.fits(self._node_labels(node_name)):
                raise BindingError(
                    f'pv "{volume.name}" node affinity doesn\'t match node "{node_name}": '
                    "no matching NodeSelectorTerms"
                )
            if volume.claim_ref is None or not volume.claim_ref.uid:
                raise BindingError(f'ClaimRef got reset for pv "{volume.name}"')
            if not Claim.parse(raw_claim).fully_bound:
                return False
        return self._provisioned(provisioned, node_name)

    def _provisioned(self, written: list[tuple[Claim, str]], node_name: str) -> bool:
        """Whether every claim given to a provisioner is bound; BindingError when the
        provisioner gave up (it removes the selected-node annotation) or the volume it
        made does not fit the node."""
        for claim, rv in written:
            raw = self._objects.get(PVCS, claim.namespace, claim.name)
            if raw is None:
                raise BindingError(
                    f'failed to check provisioning pvc: persistentvolumeclaim "{claim.name}" '
                    "not found"
                )
            meta = _dict(raw.get("metadata"))
            if _rv_older(str(meta.get("resourceVersion", "")), rv):
                return False  # the informer has not seen our write yet
            annotations = meta.get("annotations")
            if not isinstance(annotations, dict):
                raise BindingError(f'selectedNode annotation reset for PVC "{claim.name}"')
            if annotations.get(ANN_SELECTED_NODE) != node_name:
                raise BindingError(f'provisioning failed for PVC "{claim.name}"')
            current = Claim.parse(raw)
            if current.volume_name:
                volume = self._volume_named(current.volume_name)
                if volume is None:
                    return False  # not seen yet
                if not volume.fits(self._node_labels(node_name)):
                    raise BindingError(
                        f'pv "{volume.name}" node affinity doesn\'t match node "{node_name}": '
                        "no matching NodeSelectorTerms"
                    )
            if not current.fully_bound:
                return False
        return True

    # ---- lookups through the assume cache ----------------------------------------------
    def _claim(self, raw: Mapping[str, Any]) -> Claim:
        claim = Claim.parse(raw)
        assumed = self._assumed_pvcs.get(claim.key)
        if assumed is None:
            return claim
        if assumed.base_rv != claim.resource_version:
            del self._assumed_pvcs[claim.key]  # the informer caught up (or moved on)
            return claim
        annotations = dict(claim.annotations)
        annotations[ANN_SELECTED_NODE] = assumed.selected_node
        return dataclasses.replace(claim, annotations=annotations)

    def _volume(self, raw: Mapping[str, Any]) -> Volume:
        meta = _dict(raw.get("metadata"))
        name = str(meta.get("name", ""))
        volume = self._parsed_pvs.get(name)
        if volume is None or volume.resource_version != str(meta.get("resourceVersion", "")):
            volume = Volume.parse(raw)
            self._parsed_pvs[name] = volume
        assumed = self._assumed_pvs.get(name)
        if assumed is None:
            return volume
        if assumed.base_rv != volume.resource_version:
            del self._assumed_pvs[name]
            return volume
        return dataclasses.replace(volume, claim_ref=assumed.claim_ref)

    def _volume_named(self, name: str) -> Volume | None:
        raw = self._objects.get(PVS, "", name)
        return self._volume(raw) if raw is not None else None

    def _all_volumes(self) -> list[Volume]:
        raws = self._objects.list(PVS)
        names = {str(_dict(r.get("metadata")).get("name", "")) for r in raws}
        for cache in (self._parsed_pvs, self._assumed_pvs):
            for gone in [n for n in cache if n not in names]:
                del cache[gone]
        volumes = [self._volume(r) for r in raws]
        volumes.sort(key=lambda v: v.name)
        return volumes

    def _storage_class(self, name: str, data: _CycleData) -> Mapping[str, Any] | None:
        if name not in data.classes:
            data.classes[name] = self._objects.get(STORAGE_CLASSES, "", name)
        return data.classes[name]

    def _delay_binding(self, claim: Claim, data: _CycleData) -> tuple[bool, str]:
        """Whether the claim's class waits for the first consumer (a missing class
        means immediate binding); an error text when the class has no binding mode."""
        if not claim.storage_class:
            return False, ""
        sc = self._storage_class(claim.storage_class, data)
        if sc is None:
            return False, ""
        mode = sc.get("volumeBindingMode")
        if not mode:
            return False, f'VolumeBindingMode not set for StorageClass "{claim.storage_class}"'
        return mode == WAIT_FOR_FIRST_CONSUMER, ""

    def _all_claims_bound(self, pod: PodInfo) -> bool:
        for claim_name, _ in claim_refs(pod):
            raw = self._objects.get(PVCS, pod.namespace, claim_name)
            if raw is None or not self._claim(raw).fully_bound:
                return False
        return True

    def _node_labels(self, node_name: str) -> Mapping[str, str]:
        node = self._snapshot.get(node_name)
        if node is None or node.node is None:
            raise BindingError(f'failed to get node "{node_name}": node "{node_name}" not found')
        return node.labels

    # ---- queueing hints --------------------------------------------------------------
    def _after_class_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        if old is None:
            return QueueingHint.QUEUE
        if _dict(old).get("allowedTopologies") != _dict(new).get("allowedTopologies"):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP  # the binding mode cannot change

    def _after_claim_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        meta = _dict(_dict(new).get("metadata"))
        if meta.get("namespace", "") != pod.namespace:
            return QueueingHint.SKIP
        if any(meta.get("name") == name for name, _ in claim_refs(pod)):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _after_csi_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        if old is None:
            return QueueingHint.QUEUE
        before = _dict(_dict(_dict(old).get("metadata")).get("annotations"))
        after = _dict(_dict(_dict(new).get("metadata")).get("annotations"))
        if before.get(ANN_MIGRATED_PLUGINS) != after.get(ANN_MIGRATED_PLUGINS):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _after_csi_driver_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        name = _dict(_dict(new).get("metadata")).get("name")
        was = _dict(_dict(old).get("spec")).get("storageCapacity") is True
        now = _dict(_dict(new).get("spec")).get("storageCapacity") is True
        for vol in pod.spec.get("volumes") or ():
            csi = _dict(vol).get("csi") if isinstance(vol, dict) else None
            if isinstance(csi, dict) and csi.get("driver") == name and was and not now:
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _after_capacity_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        if old is None:
            return QueueingHint.QUEUE
        before, after = _capacity_limit(_dict(old)), _capacity_limit(_dict(new))
        if after is not None and (before is None or after > before):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP


# ---- matching --------------------------------------------------------------------------
def _check_bound(
    bound: list[tuple[Claim, Volume | None]], labels: Mapping[str, str]
) -> tuple[bool, bool]:
    """(node affinity satisfied, volumes found), stopping at the first problem."""
    for _, volume in bound:
        if volume is None:
            return True, False
        if not volume.fits(labels):
            return False, True
    return True, True


def _find_matching(
    claims: list[Claim], data: _CycleData, labels: Mapping[str, str]
) -> tuple[bool, list[tuple[Claim, Volume]], list[Claim]]:
    """(all matched, bindings, claims without a volume), smallest requests first."""
    chosen: set[str] = set()
    bindings = []
    unmatched = []
    for claim in sorted(claims, key=lambda c: c.request):
        if claim.selector_error:
            raise BindingError(
                f"error creating internal label selector for claim: {claim.key}: "
                f"{claim.selector_error}"
            )
        volume = find_matching_volume(
            claim, data.candidates.get(claim.storage_class, ()), labels, chosen
        )
        if volume is None:
            unmatched.append(claim)
            continue
        chosen.add(volume.name)
        bindings.append((claim, volume))
    return not unmatched, bindings, unmatched


def find_matching_volume(
    claim: Claim,
    volumes: Iterable[Volume],
    labels: Mapping[str, str],
    excluded: set[str] | frozenset[str] = frozenset(),
) -> Volume | None:
    """The volume pre-bound to the claim, else the smallest available one that fits.

    A volume pre-bound to the claim whose node affinity rejects the node means no
    match at all."""
    best: Volume | None = None
    for v in volumes:
        if v.name in excluded:
            continue
        if v.claim_ref is not None and not v.bound_to(claim):
            continue
        if v.capacity < claim.request:
            continue
        if v.volume_mode != claim.volume_mode or v.attributes_class != claim.attributes_class:
            continue
        if v.deleting:
            continue
        fits = v.fits(labels)
        if v.bound_to(claim):
            return v if fits else None
        if v.phase != "Available":
            continue
        if claim.selector is not None and not claim.selector.matches(v.labels):
            continue
        if v.storage_class != claim.storage_class or not fits:
            continue
        if not v.access_modes.issuperset(claim.access_modes):
            continue
        if best is None or v.capacity < best.capacity:
            best = v
    return best


def _match_topology(terms: Any, labels: Mapping[str, str]) -> bool:
    """StorageClass allowedTopologies: no terms admit every node; a term needs every
    expression's key on the node with one of its values; empty terms admit none."""
    if not terms:
        return True
    for term in terms:
        exprs = _dict(term).get("matchLabelExpressions") or ()
        if not exprs:
            continue
        if all(_topology_expr_matches(e, labels) for e in exprs):
            return True
    return False


def _topology_expr_matches(expr: Any, labels: Mapping[str, str]) -> bool:
    expr = _dict(expr)
    values = expr.get("values") or ()
    if not values:
        return False  # an In requirement without values is invalid: the term fails
    value = labels.get(str(expr.get("key", "")))
    return value is not None and value in values


def _reasons(bound_ok: bool, unbound_ok: bool, storage_ok: bool, pv_found: bool) -> list[str]:
    out = []
    if not bound_ok:
        out.append(ERR_REASON_NODE_CONFLICT)
    if not unbound_ok:
        out.append(ERR_REASON_BIND_CONFLICT)
    if not storage_ok:
        out.append(ERR_REASON_NOT_ENOUGH_SPACE)
    if not pv_found:
        out.append(ERR_REASON_PV_NOT_EXIST)
    return out


# ---- helpers ---------------------------------------------------------------------------
def claim_refs(pod: PodInfo) -> list[tuple[str, bool]]:
    """(claim name, is generic ephemeral) for each volume backed by a claim."""
    out = []
    for vol in pod.spec.get("volumes") or ():
        if not isinstance(vol, dict):
            continue
        claim = vol.get("persistentVolumeClaim")
        if isinstance(claim, dict):
            out.append((str(claim.get("claimName") or ""), False))
        elif isinstance(vol.get("ephemeral"), dict):
            out.append((f"{pod.name}-{vol.get('name', '')}", True))
    return out


def _usable(
    raw: Mapping[str, Any], pod: PodInfo, claim_name: str, ephemeral: bool
) -> Status | None:
    meta = _dict(raw.get("metadata"))
    if _dict(raw.get("status")).get("phase") == "Lost":
        volume_name = _dict(raw.get("spec")).get("volumeName") or ""
        return Status.unresolvable(
            f'persistentvolumeclaim "{claim_name}" bound to non-existent persistentvolume '
            f'"{volume_name}"'
        )
    if meta.get("deletionTimestamp"):
        return Status.unresolvable(f'persistentvolumeclaim "{claim_name}" is being deleted')
    if ephemeral and not owned_by_pod(meta, pod):
        return Status.unresolvable(
            f"PVC {meta.get('namespace', '')}/{meta.get('name', '')} was not created for pod "
            f"{pod.namespace}/{pod.name} (pod is not owner)"
        )
    return None


def _bound_by_controller_ok(volume: Volume, claim: Claim) -> bool:
    """False when binding would still have to add the bound-by-controller annotation."""
    return volume.bound_to(claim) or ANN_BOUND_BY_CONTROLLER in volume.annotations


def _volume_affinity(spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...] | None:
    required = _dict(spec.get("nodeAffinity")).get("required")
    if not isinstance(required, dict):
        return None
    terms = []
    for i, raw in enumerate(required.get("nodeSelectorTerms") or ()):
        try:
            terms.append(parse_node_selector_term(raw, f"nodeSelectorTerms[{i}]"))
        except SelectorError:
            continue  # an invalid term matches no node; the others still may
    return tuple(terms)


def _storage_class(annotations: Mapping[str, str], name: Any) -> str:
    if ANN_BETA_STORAGE_CLASS in annotations:
        return annotations[ANN_BETA_STORAGE_CLASS]
    return str(name or "")


def _storage(resources: Mapping[str, Any]) -> int:
    q = resources.get("storage")
    if q is None:
        return 0
    try:
        return parse_quantity(q, milli=True)
    except QuantityError:
        return 0


def _capacity_limit(capacity: Mapping[str, Any]) -> int | None:
    q = capacity.get("maximumVolumeSize")
    if q is None:
        q = capacity.get("capacity")
    if q is None:
        return None
    try:
        return parse_quantity(q)
    except QuantityError:
        return None


def _capacity_scorer(
    shape: Sequence[UtilizationShapePoint],
) -> Callable[[Mapping[str, list[int]]], int]:
    """Per storage class, requested over capacity (percent) through the shape (scores
    scaled to 0..100); the node's score is the classes' mean, rounded."""
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    raw = broken_linear([(p.utilization, p.score * scale) for p in shape])

    def per_class(requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return raw(MAX_UTILIZATION)
        return raw(requested * MAX_UTILIZATION // capacity)

    def scorer(classes: Mapping[str, list[int]]) -> int:
        if not classes:
            return 0
        total = sum(per_class(req, cap) for req, cap in classes.values())
        return math.floor(total / len(classes) + 0.5)

    return scorer


def _quantity(value: Any) -> int:
    if value is None:
        return 0
    try:
        return parse_quantity(value)
    except QuantityError:
        return 0


def _node_has_access(capacity: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A capacity without a node topology is reachable from no node; a topology that
    does not parse matches none either."""
    topology = capacity.get("nodeTopology")
    if not isinstance(topology, dict):
        return False
    try:
        return LabelSelector.parse(topology, "nodeTopology").matches(labels)
    except SelectorError:
        return False


def _rv_older(current: str, written: str) -> bool:
    if not written:
        return False
    try:
        return int(current) < int(written)
    except ValueError:
        return current != written


def _bind_volume_to_claim(volume: Volume, claim: Claim) -> dict[str, Any]:
    """The volume as PreBind writes it: the claim's full reference in spec.claimRef,
    and bound-by-controller when the volume was not already bound to this claim."""
    body = copy.deepcopy(dict(volume.raw))
    meta = body.setdefault("metadata", {})
    meta["resourceVersion"] = volume.resource_version
    ref = volume.claim_ref
    if ref is None or (ref.namespace, ref.name, ref.uid) != (
        claim.namespace,
        claim.name,
        claim.uid,
    ):
        body.setdefault("spec", {})["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "namespace": claim.namespace,
            "name": claim.name,
            "uid": claim.uid,
            "apiVersion": "v1",
            "resourceVersion": claim.resource_version,
        }
    if not volume.bound_to(claim) and ANN_BOUND_BY_CONTROLLER not in volume.annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), ANN_BOUND_BY_CONTROLLER: "yes"}
    return body


def _resource_version(resp: Any) -> str:
    return str(_dict(_dict(resp).get("metadata")).get("resourceVersion", ""))


def _claim_path(claim: Claim) -> str:
    return f"/api/v1/namespaces/{claim.namespace}/persistentvolumeclaims/{claim.name}"


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


ENTRY = PluginEntry(NAME, VolumeBinding, VolumeBinding.new, parse_args)
