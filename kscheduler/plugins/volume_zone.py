"""VolumeZone: a pod's bound volumes must be reachable from the node's zone/region.

PreFilter collects the zone and region labels of the PersistentVolumes bound to
the pod's claims (``topology.kubernetes.io/{zone,region}`` and the deprecated
``failure-domain.beta.kubernetes.io/{zone,region}``; a value may list several zones
joined by ``__``). Unbound claims of a WaitForFirstConsumer class are left to
VolumeBinding. No labels at all -> Skip.

Filter: a node without any of those labels passes (single-zone clusters often have
none). Otherwise every PV label must be on the node with a listed value (a beta
label on the PV may be matched by the GA label on the node), else
UnschedulableAndUnresolvable "node(s) had no available volume zone".

Only the labels are read: the PV's nodeAffinity is VolumeBinding's business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kscheduler.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Handle,
    NodeInfo,
    PluginEntry,
    PodInfo,
    PreFilterResult,
    QueueingHint,
    Status,
    signing,
)
from kscheduler.framework.interface import ObjectLister
from kscheduler.framework.signing import SignFragment
from kscheduler.framework.storage import claim_names, claim_storage_class

NAME = "VolumeZone"
STATE_KEY = "PreFilter" + NAME

ERR_REASON_CONFLICT = "node(s) had no available volume zone"

LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
LABEL_BETA_REGION = "failure-domain.beta.kubernetes.io/region"
#: In the order upstream checks them.
TOPOLOGY_LABELS = (LABEL_BETA_ZONE, LABEL_BETA_REGION, LABEL_ZONE, LABEL_REGION)
_GA_LABEL = {LABEL_BETA_ZONE: LABEL_ZONE, LABEL_BETA_REGION: LABEL_REGION}
#: Separates the zones of a volume replicated across several of them.
MULTI_ZONE_DELIMITER = "__"

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


@dataclass(frozen=True, slots=True)
class PVTopology:
    pv_name: str
    key: str
    values: frozenset[str]


class _State:
    __slots__ = ("topologies",)

    def __init__(self, topologies: list[PVTopology]) -> None:
        self.topologies = topologies

    def clone(self) -> _State:
        return self


class VolumeZone:
    name = NAME

    def __init__(self, objects: ObjectLister) -> None:
        self._objects = objects

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The pod's volumes other than ConfigMaps and Secrets (OpportunisticBatching)."""
        return [SignFragment(signing.VOLUMES, signing.volumes(pod))], None

    @classmethod
    def new(cls, args: Any, handle: Handle) -> VolumeZone:
        for kind in ("persistentvolumeclaims", "persistentvolumes", "storageclasses"):
            handle.objects.list(kind)  # start the informers before sync
        return cls(handle.objects)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            # A WaitForFirstConsumer class lets a pending claim through (binding mode is
            # immutable, so updates do not matter).
            ClusterEventWithHint(
                ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD),
                self._after_storage_class_added,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD | ActionType.UPDATE
                ),
                self._after_claim_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE),
                self._after_volume_change,
            ),
        ]

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Skip (no zone-labelled volumes), UnschedulableAndUnresolvable (a claim,
        volume or class is missing or incomplete) or Success."""
        topologies, status = self._pod_topologies(pod)
        if status is not None:
            return None, status
        if not topologies:
            return None, Status.skip()
        state.write(STATE_KEY, _State(topologies))
        return None, None

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable when a volume's zone or region is not the node's."""
        if not pod.spec.get("volumes"):
            return None
        st = state.get(STATE_KEY)
        if isinstance(st, _State):
            topologies = st.topologies
        else:
            topologies, status = self._pod_topologies(pod)
            if status is not None:
                return status
        labels = node_info.labels
        if not any(key in labels for key in TOPOLOGY_LABELS):
            return None
        for topo in topologies:
            value = labels.get(topo.key)
            if value is None:
                value = labels.get(_GA_LABEL.get(topo.key, topo.key))
            if value is None or value not in topo.values:
                return Status.unresolvable(ERR_REASON_CONFLICT)
        return None

    def _pod_topologies(self, pod: PodInfo) -> tuple[list[PVTopology], Status | None]:
        out: list[PVTopology] = []
        for claim_name in claim_names(pod.spec):
            if not claim_name:
                return [], Status.unresolvable("PersistentVolumeClaim had no name")
            pvc = self._objects.get("persistentvolumeclaims", pod.namespace, claim_name)
            if pvc is None:
                return [], Status.unresolvable(f'persistentvolumeclaim "{claim_name}" not found')
            pv_name = _dict(pvc.get("spec")).get("volumeName") or ""
            if not pv_name:
                class_name = claim_storage_class(pvc)
                if not class_name:
                    return [], Status.unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name"
                    )
                sc = self._objects.get("storageclasses", "", class_name)
                if sc is None:
                    return [], Status.unresolvable(
                        f'storageclass.storage.k8s.io "{class_name}" not found'
                    )
                mode = sc.get("volumeBindingMode")
                if not mode:
                    return [], Status.unresolvable(
                        f'VolumeBindingMode not set for StorageClass "{class_name}"'
                    )
                if mode == WAIT_FOR_FIRST_CONSUMER:
                    continue  # VolumeBinding picks a volume for the chosen node
                return [], Status.unresolvable("PersistentVolume had no name")
            pv = self._objects.get("persistentvolumes", "", pv_name)
            if pv is None:
                return [], Status.unresolvable(f'persistentvolume "{pv_name}" not found')
            out.extend(pv_topologies(pv))
        return out, None

    # ---- queueing hints --------------------------------------------------------------
    def _after_claim_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        meta = _dict(_dict(new).get("metadata"))
        if meta.get("namespace", "") == pod.namespace and meta.get("name") in claim_names(pod.spec):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _after_storage_class_added(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        if _dict(new).get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER:
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _after_volume_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        if old is None:
            return QueueingHint.QUEUE
        if pv_topologies(_dict(old)) != pv_topologies(_dict(new)):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP


def pv_topologies(pv: Mapping[str, Any]) -> list[PVTopology]:
    """The zone/region constraints a PV's labels put on nodes; unparsable values are ignored."""
    meta = _dict(pv.get("metadata"))
    labels = _dict(meta.get("labels"))
    name = str(meta.get("name", ""))
    out = []
    for key in TOPOLOGY_LABELS:
        value = labels.get(key)
        if not isinstance(value, str):
            continue
        zones = label_zones_to_set(value)
        if zones is not None:
            out.append(PVTopology(name, key, zones))
    return out


def label_zones_to_set(value: str) -> frozenset[str] | None:
    """``"a__b"`` -> {"a", "b"}; None when an entry is empty."""
    zones = set()
    for part in value.split(MULTI_ZONE_DELIMITER):
        zone = part.strip()
        if not zone:
            return None
        zones.add(zone)
    return frozenset(zones)


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


ENTRY = PluginEntry(NAME, VolumeZone, VolumeZone.new)
