"""VolumeRestrictions: volumes a pod may not share with pods already placed.

Two rules, both checked in Filter:

* Same disk, conflicting mounts -> Unschedulable "node(s) had no available disk".
  A GCE PD with the same ``pdName`` conflicts unless both mounts are read-only; an
  AWS EBS volume with the same ``volumeID`` always conflicts; an iSCSI volume with
  the same IQN conflicts unless both are read-only; a Ceph RBD image conflicts when
  the monitor lists overlap, pool and image are equal and not both are read-only.
* ReadWriteOncePod: when one of the pod's claims has that access mode and a
  scheduled pod already uses the claim, every node is rejected with Unschedulable
  (not ...AndUnresolvable: evicting that pod would help). PreFilter counts those
  uses once; AddPod/RemovePod keep the count right for nominated pods and the
  preemption dry run.

PreFilter returns Skip when the pod has neither a restricted disk nor a claim in
ReadWriteOncePod use, and UnschedulableAndUnresolvable when a claim is missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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
from kscheduler.framework.interface import ObjectLister, SharedLister
from kscheduler.framework.signing import SignFragment
from kscheduler.framework.storage import claim_names

NAME = "VolumeRestrictions"
STATE_KEY = "PreFilter" + NAME

ERR_REASON_DISK_CONFLICT = "node(s) had no available disk"
ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
    "already in-use by another pod"
)

READ_WRITE_ONCE_POD = "ReadWriteOncePod"
#: Volume sources whose disks cannot be mounted read-write by two pods of one node.
RESTRICTED_SOURCES = ("gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi")
#: The API server defaults an RBD volume's pool to this.
DEFAULT_RBD_POOL = "rbd"


class _State:
    """ReadWriteOncePod claims of the pod and how many scheduled pods use them."""

    __slots__ = ("conflicts", "rwop_claims")

    def __init__(self, rwop_claims: frozenset[str], conflicts: int) -> None:
        self.rwop_claims = rwop_claims
        self.conflicts = conflicts

    def clone(self) -> _State:
        return _State(self.rwop_claims, self.conflicts)

    def uses_of(self, pod: PodInfo) -> int:
        # Claim names only, as upstream: the claim set is small and per namespace.
        return sum(1 for claim in claim_names(pod.spec) if claim in self.rwop_claims)


class VolumeRestrictions:
    name = NAME

    def __init__(self, objects: ObjectLister, snapshot: SharedLister) -> None:
        self._objects = objects
        self._snapshot = snapshot

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The pod's volumes other than ConfigMaps and Secrets (OpportunisticBatching)."""
        return [SignFragment(signing.VOLUMES, signing.volumes(pod))], None

    @classmethod
    def new(cls, args: Any, handle: Handle) -> VolumeRestrictions:
        handle.objects.list("persistentvolumeclaims")  # start the informer before sync
        return cls(handle.objects, handle.snapshot)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            # Deleting the pod holding the disk or the claim frees it (spec.volumes is
            # immutable, so pod updates never help).
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.DELETE), self._after_pod_deleted
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
            # The claim must exist for its access modes to be read.
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD),
                self._after_claim_added,
            ),
        ]

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Skip, UnschedulableAndUnresolvable (a claim does not exist) or Success."""
        volumes = _volumes(pod.spec)
        needs_disk_check = any(_is_restricted(v) for v in volumes)
        rwop: set[str] = set()
        for claim in claim_names(pod.spec):
            pvc = self._objects.get("persistentvolumeclaims", pod.namespace, claim)
            if pvc is None:
                return None, Status.unresolvable(f'persistentvolumeclaim "{claim}" not found')
            if READ_WRITE_ONCE_POD in (_dict(pvc.get("spec")).get("accessModes") or ()):
                rwop.add(claim)
        conflicts = sum(
            1 for claim in rwop if self._snapshot.is_pvc_used_by_pods(f"{pod.namespace}/{claim}")
        )
        if not needs_disk_check and conflicts == 0:
            return None, Status.skip()
        state.write(STATE_KEY, _State(frozenset(rwop), conflicts))
        return None, None

    def pre_filter_extensions(self) -> VolumeRestrictions:
        return self

    def add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node_info: NodeInfo
    ) -> Status | None:
        st = state.get(STATE_KEY)
        if not isinstance(st, _State):
            return Status.as_error(f'cannot read "{STATE_KEY}" from cycleState')
        st.conflicts += st.uses_of(pod_to_add)
        return None

    def remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status | None:
        st = state.get(STATE_KEY)
        if not isinstance(st, _State):
            return Status.as_error(f'cannot read "{STATE_KEY}" from cycleState')
        st.conflicts -= st.uses_of(pod_to_remove)
        return None

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """Unschedulable for a disk conflict or a ReadWriteOncePod claim in use; Error
        when PreFilter did not run."""
        if not _fits_disks(pod.spec, (p.spec for p in node_info.pods.values())):
            return Status.unschedulable(ERR_REASON_DISK_CONFLICT)
        st = state.get(STATE_KEY)
        if not isinstance(st, _State):
            return Status.as_error(f'cannot read "{STATE_KEY}" from cycleState')
        if st.conflicts > 0:
            return Status.unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT)
        return None

    # ---- queueing hints --------------------------------------------------------------
    def _after_pod_deleted(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        deleted = _raw(old)
        meta = _dict(deleted.get("metadata"))
        if meta.get("namespace", "") != pod.namespace:
            return QueueingHint.SKIP
        deleted_spec = _dict(deleted.get("spec"))
        if not _fits_disks(pod.spec, (deleted_spec,)):
            return QueueingHint.QUEUE
        # The deleted pod may have held a ReadWriteOncePod claim of this pod; the access
        # mode is not looked up, a shared claim name is enough.
        if set(claim_names(pod.spec)) & set(claim_names(deleted_spec)):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _after_claim_added(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        meta = _dict(_raw(new).get("metadata"))
        if meta.get("namespace", "") != pod.namespace:
            return QueueingHint.SKIP
        if meta.get("name") in claim_names(pod.spec):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP


def _fits_disks(spec: Mapping[str, Any], existing_specs: Iterable[Mapping[str, Any]]) -> bool:
    restricted = [v for v in _volumes(spec) if _is_restricted(v)]
    if not restricted:
        return True
    for other in existing_specs:
        other_volumes = _volumes(other)
        for v in restricted:
            if any(_conflict(v, ev) for ev in other_volumes):
                return False
    return True


def _conflict(vol: Mapping[str, Any], existing: Mapping[str, Any]) -> bool:
    a, b = _source(vol, "gcePersistentDisk"), _source(existing, "gcePersistentDisk")
    if a is not None and b is not None and _same(a, b, "pdName") and not (_ro(a) and _ro(b)):
        return True
    a, b = _source(vol, "awsElasticBlockStore"), _source(existing, "awsElasticBlockStore")
    if a is not None and b is not None and _same(a, b, "volumeID"):
        return True
    a, b = _source(vol, "iscsi"), _source(existing, "iscsi")
    if a is not None and b is not None and _same(a, b, "iqn") and not (_ro(a) and _ro(b)):
        return True
    a, b = _source(vol, "rbd"), _source(existing, "rbd")
    return a is not None and b is not None and _same_rbd_image(a, b) and not (_ro(a) and _ro(b))


def _same_rbd_image(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """One image: a monitor in common, the same pool and the same image name."""
    return (
        bool(set(a.get("monitors") or ()) & set(b.get("monitors") or ()))
        and a.get("pool", DEFAULT_RBD_POOL) == b.get("pool", DEFAULT_RBD_POOL)
        and _same(a, b, "image")
    )


def _same(a: Mapping[str, Any], b: Mapping[str, Any], key: str) -> bool:
    return bool(a.get(key, "") == b.get(key, ""))


def _is_restricted(vol: Mapping[str, Any]) -> bool:
    return any(_source(vol, key) is not None for key in RESTRICTED_SOURCES)


def _source(vol: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    src = vol.get(key)
    return src if isinstance(src, dict) else None


def _ro(src: Mapping[str, Any]) -> bool:
    return bool(src.get("readOnly"))


def _volumes(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    vols = spec.get("volumes")
    if not isinstance(vols, list):
        return []
    return [v for v in vols if isinstance(v, dict)]


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _raw(obj: Any) -> dict[str, Any]:
    """An event object as a raw dict (pods arrive as PodInfo, other kinds as dicts)."""
    if isinstance(obj, PodInfo):
        return obj.raw
    return _dict(obj)


ENTRY = PluginEntry(NAME, VolumeRestrictions, VolumeRestrictions.new)
