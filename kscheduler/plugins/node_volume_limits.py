"""NodeVolumeLimits: CSI attach limits from the node's CSINode object.

A node's CSINode lists, per CSI driver, ``allocatable.count``: how many unique
volumes of that driver the node can attach. Filter counts per driver

* the volumes of the pods already on the node (a volume used by several pods counts
  once),
* VolumeAttachments to the node whose volume no pod there uses (volumes still
  detaching after their pod went away),
* the new pod's volumes not already counted above,

and rejects the node with Unschedulable "node(s) exceed max volume count" when
attached + new exceeds the limit. Drivers without a count, and nodes without a
CSINode, are unlimited.

A volume is ``<driver>/<volumeHandle>``: a claim bound to a CSI PV uses the PV's
driver and handle; an unbound claim (or one whose PV is missing) counts as a volume
of its StorageClass's provisioner with a handle unique to the claim; a generic
ephemeral volume is its claim ``<pod>-<volume>``, which must be owned by the pod.
In-tree volumes (AWS EBS, GCE PD, Azure Disk, Cinder, Portworx), inline or as PVs,
count as volumes of the CSI driver they migrate to once the node has a CSINode
(Portworx also needs the node's migrated-plugins annotation). The handle of a
translated in-tree volume only has to be the same for every pod that uses it, so
it is derived from the source's identifying fields rather than reproduced exactly.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
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
from kscheduler.framework.features import GATES
from kscheduler.framework.interface import ObjectLister
from kscheduler.framework.signing import SignFragment
from kscheduler.framework.storage import claim_storage_class, owned_by_pod

NAME = "NodeVolumeLimits"
STATE_KEY = "PreFilter" + NAME

ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"

MIGRATED_PLUGINS_ANNOTATION = "storage.alpha.kubernetes.io/migrated-plugins"

Source = Mapping[str, Any]


def _aws_ebs_handle(src: Source, pv_labels: Mapping[str, str]) -> str | None:
    volume_id = str(src.get("volumeID") or "")
    if not volume_id.startswith("aws://"):
        return volume_id
    # aws://<zone>/<vol-id>: the id is the path
    path = volume_id[len("aws://") :].split("/", 1)
    vol = path[1].strip("/") if len(path) == 2 else ""
    return vol if vol.startswith("vol-") and "/" not in vol else None


def _gce_pd_handle(src: Source, pv_labels: Mapping[str, str]) -> str | None:
    zone = pv_labels.get("topology.kubernetes.io/zone") or pv_labels.get(
        "failure-domain.beta.kubernetes.io/zone", "UNSPECIFIED"
    )
    return f"projects/UNSPECIFIED/zones/{zone}/disks/{src.get('pdName', '')}"


def _field(name: str) -> Callable[[Source, Mapping[str, str]], str | None]:
    def handle(src: Source, pv_labels: Mapping[str, str]) -> str | None:
        return str(src.get(name) or "")

    return handle


@dataclass(frozen=True, slots=True)
class InTreePlugin:
    """An in-tree volume plugin that kube-scheduler counts as its CSI replacement."""

    source: str  # the volume source field
    plugin: str  # the in-tree plugin (and provisioner) name
    driver: str  # the CSI driver it migrated to
    #: Whether the node's CSINode must list the plugin as migrated.
    needs_annotation: bool
    handle: Callable[[Source, Mapping[str, str]], str | None]


IN_TREE_PLUGINS = (
    InTreePlugin(
        "awsElasticBlockStore", "kubernetes.io/aws-ebs", "ebs.csi.aws.com", False, _aws_ebs_handle
    ),
    InTreePlugin(
        "gcePersistentDisk", "kubernetes.io/gce-pd", "pd.csi.storage.gke.io", False, _gce_pd_handle
    ),
    InTreePlugin(
        "azureDisk", "kubernetes.io/azure-disk", "disk.csi.azure.com", False, _field("diskURI")
    ),
    InTreePlugin(
        "cinder", "kubernetes.io/cinder", "cinder.csi.openstack.org", False, _field("volumeID")
    ),
    InTreePlugin(
        "portworxVolume",
        "kubernetes.io/portworx-volume",
        "pxd.portworx.com",
        True,
        _field("volumeID"),
    ),
)
_BY_PLUGIN = {p.plugin: p for p in IN_TREE_PLUGINS}
#: Migratable in-tree sources the plugin never counts (their migration is not
#: considered on); they still make PreFilter run Filter, as upstream.
_OTHER_MIGRATABLE_SOURCES = ("azureFile", "vsphereVolume")
_OTHER_MIGRATABLE_PLUGINS = frozenset({"kubernetes.io/azure-file", "kubernetes.io/vsphere-volume"})


class _State:
    """VolumeAttachments per node, listed once per cycle when first needed."""

    __slots__ = ("attachments",)

    def __init__(self) -> None:
        self.attachments: dict[str, list[dict[str, Any]]] | None = None

    def clone(self) -> _State:
        return self


class NodeVolumeLimits:
    name = NAME

    def __init__(self, objects: ObjectLister, *, volume_limit_scaling: bool = True) -> None:
        self._objects = objects
        #: VolumeLimitScaling (beta, on in 1.37): a CSIDriver with
        #: preventPodSchedulingIfMissing keeps pods off nodes without that driver.
        self._volume_limit_scaling = volume_limit_scaling
        #: Unbound claims get handles no real volume has.
        self._handle_prefix = secrets.token_hex(16)

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The pod's volumes other than ConfigMaps and Secrets (OpportunisticBatching)."""
        return [SignFragment(signing.VOLUMES, signing.volumes(pod))], None

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeVolumeLimits:
        for kind in ("persistentvolumeclaims", "persistentvolumes", "storageclasses", "csinodes"):
            handle.objects.list(kind)  # start the informers before sync
        _list_optional(handle.objects, "volumeattachments")
        _list_optional(handle.objects, "csidrivers")
        return cls(handle.objects, volume_limit_scaling=GATES.volume_limit_scaling)

    def _driver_installed(self, driver: str, csi_node: Mapping[str, Any] | None) -> bool:
        """Whether the node has ``driver``; a driver without a CSIDriver object, or one
        that does not set preventPodSchedulingIfMissing, counts as installed."""
        try:
            obj = self._objects.get("csidrivers", "", driver)
        except (KeyError, LookupError, ValueError):
            return True  # CSIDriver not served: nothing opts in
        if obj is None or _dict(obj.get("spec")).get("preventPodSchedulingIfMissing") is not True:
            return True
        if csi_node is None:
            return False
        return any(
            isinstance(d, dict) and d.get("name") == driver
            for d in _dict(csi_node.get("spec")).get("drivers") or ()
        )

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.CSI_NODE, ActionType.ADD)),
            ClusterEventWithHint(
                ClusterEvent(EventResource.CSI_NODE, ActionType.UPDATE), self._after_csi_node_update
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.DELETE), self._after_pod_deleted
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD),
                self._after_claim_added,
            ),
        ]

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Skip unless the pod has a claim, a generic ephemeral or a migratable in-tree volume."""
        if any(_may_attach(v) for v in _volumes(pod.spec)):
            state.write(STATE_KEY, _State())
            return None, None
        return None, Status.skip()

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """Unschedulable over the limit; UnschedulableAndUnresolvable when a claim of the
        pod does not exist; Error for an ephemeral claim not owned by its pod."""
        if not _volumes(pod.spec):
            return None
        csi_node = self._objects.get("csinodes", "", node_info.name)
        new: dict[str, str] = {}
        status = self._attachable(pod, csi_node, True, new)
        if status is not None:
            return status
        if not new:
            return None
        if self._volume_limit_scaling:
            for driver in sorted(set(new.values())):
                if not self._driver_installed(driver, csi_node):
                    return Status.unschedulable(f"{driver} CSI driver is not installed on the node")
        limits = volume_limits(csi_node)
        if not limits:
            return None
        attached: dict[str, str] = {}
        for existing in node_info.pods.values():
            status = self._attachable(existing, csi_node, False, attached)
            if status is not None:
                return status
        used: Counter[str] = Counter()
        for volume, driver in attached.items():
            new.pop(volume, None)  # shared with a pod already there: attached once
            used[driver] += 1
        for volume, driver in self._node_attachments(state, node_info.name).items():
            if volume not in attached:
                used[driver] += 1
        for driver, count in Counter(new.values()).items():
            limit = limits.get(driver)
            if limit is not None and used[driver] + count > limit:
                return Status.unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED)
        return None

    # ---- counting ----------------------------------------------------------------------
    def _attachable(
        self,
        pod: PodInfo,
        csi_node: Mapping[str, Any] | None,
        new_pod: bool,
        result: dict[str, str],
    ) -> Status | None:
        """Add the pod's attachable volumes to ``result`` (``driver/handle`` -> driver)."""
        for vol in _volumes(pod.spec):
            claim = vol.get("persistentVolumeClaim")
            ephemeral = isinstance(vol.get("ephemeral"), dict)
            if isinstance(claim, dict):
                claim_name = str(claim.get("claimName") or "")
            elif ephemeral:
                claim_name = f"{pod.name}-{vol.get('name', '')}"
            else:
                status = self._inline(vol, csi_node, result)
                if status is not None:
                    return status
                continue
            if not claim_name:
                return Status.as_error("PersistentVolumeClaim had no name")
            pvc = self._objects.get("persistentvolumeclaims", pod.namespace, claim_name)
            if pvc is None:
                if new_pod:
                    # This pod can never run without it: no node will do.
                    return Status.unresolvable(
                        f"looking up PVC {pod.namespace}/{claim_name}: "
                        f'persistentvolumeclaim "{claim_name}" not found'
                    )
                continue  # no telling what it is: not counted
            if ephemeral and not owned_by_pod(_dict(pvc.get("metadata")), pod):
                return Status.as_error(
                    f"PVC {pod.namespace}/{claim_name} was not created for pod "
                    f"{pod.namespace}/{pod.name} (pod is not owner)"
                )
            driver, handle = self._claim_volume(pvc, csi_node)
            if driver and handle:
                result[f"{driver}/{handle}"] = driver
        return None

    def _inline(
        self, vol: Mapping[str, Any], csi_node: Mapping[str, Any] | None, result: dict[str, str]
    ) -> Status | None:
        for p in IN_TREE_PLUGINS:
            src = vol.get(p.source)
            if not isinstance(src, dict):
                continue
            if not _migration_on(csi_node, p):
                return None
            handle = p.handle(src, {})
            if handle is None:
                return Status.as_error(
                    f"converting volume({vol.get('name', '')}) from inline to csi: "
                    f"invalid {p.source} volume"
                )
            result[f"{p.driver}/{handle}"] = p.driver
            return None
        return None

    def _claim_volume(
        self, pvc: Mapping[str, Any], csi_node: Mapping[str, Any] | None
    ) -> tuple[str, str]:
        pv_name = _dict(pvc.get("spec")).get("volumeName") or ""
        pv = self._objects.get("persistentvolumes", "", pv_name) if pv_name else None
        if pv is None:
            return self._class_volume(pvc, csi_node)
        spec = _dict(pv.get("spec"))
        csi = spec.get("csi")
        if isinstance(csi, dict):
            return str(csi.get("driver") or ""), str(csi.get("volumeHandle") or "")
        for p in IN_TREE_PLUGINS:
            src = spec.get(p.source)
            if not isinstance(src, dict):
                continue
            if not _migration_on(csi_node, p):
                return "", ""
            labels = _dict(_dict(pv.get("metadata")).get("labels"))
            handle = p.handle(src, labels)
            return (p.driver, handle) if handle else ("", "")
        return "", ""

    def _class_volume(
        self, pvc: Mapping[str, Any], csi_node: Mapping[str, Any] | None
    ) -> tuple[str, str]:
        """A claim not (yet) bound: a volume its class's provisioner would create.

        No class, or a missing one, means immediate binding: the claim should be bound
        by now, so it is not counted."""
        class_name = claim_storage_class(pvc)
        if not class_name:
            return "", ""
        sc = self._objects.get("storageclasses", "", class_name)
        if sc is None:
            return "", ""
        meta = _dict(pvc.get("metadata"))
        handle = f"{self._handle_prefix}-{meta.get('namespace', '')}/{meta.get('name', '')}"
        provisioner = str(sc.get("provisioner") or "")
        p = _BY_PLUGIN.get(provisioner)
        if p is not None:
            return (p.driver, handle) if _migration_on(csi_node, p) else ("", "")
        if provisioner in _OTHER_MIGRATABLE_PLUGINS:
            return "", ""
        return provisioner, handle

    def _node_attachments(self, state: CycleState, node_name: str) -> dict[str, str]:
        """CSI volumes VolumeAttachments put on the node: ``driver/handle`` -> driver."""
        st = state.get(STATE_KEY)
        if not isinstance(st, _State):
            st = _State()
            state.write(STATE_KEY, st)
        if st.attachments is None:
            by_node: dict[str, list[dict[str, Any]]] = {}
            for va in _list_optional(self._objects, "volumeattachments"):
                node = _dict(va.get("spec")).get("nodeName")
                if isinstance(node, str):
                    by_node.setdefault(node, []).append(va)
            st.attachments = by_node
        out: dict[str, str] = {}
        for va in st.attachments.get(node_name, ()):
            spec = _dict(va.get("spec"))
            attacher = spec.get("attacher") or ""
            pv_name = _dict(spec.get("source")).get("persistentVolumeName")
            if not attacher or not isinstance(pv_name, str):
                continue
            pv = self._objects.get("persistentvolumes", "", pv_name)
            csi = _dict(pv.get("spec")).get("csi") if pv is not None else None
            if not isinstance(csi, dict):
                continue
            out[f"{attacher}/{csi.get('volumeHandle', '')}"] = str(attacher)
        return out

    # ---- queueing hints --------------------------------------------------------------
    def _after_csi_node_update(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        before = _driver_counts(_dict(old))
        for driver, count in _driver_counts(_dict(new)).items():
            if count > before.get(driver, 0):
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _after_pod_deleted(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        if isinstance(old, PodInfo):
            spec, placed = old.spec, bool(old.node_name or old.nominated_node_name)
        else:
            spec = _dict(_dict(old).get("spec"))
            status = _dict(_dict(old).get("status"))
            placed = bool(spec.get("nodeName") or status.get("nominatedNodeName"))
        volumes = _volumes(spec)
        if not volumes or not placed:
            return QueueingHint.SKIP
        if any(_may_attach(v) for v in volumes):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _after_claim_added(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        meta = _dict(_dict(new).get("metadata"))
        if meta.get("namespace", "") != pod.namespace:
            return QueueingHint.SKIP
        for vol in _volumes(pod.spec):
            claim = vol.get("persistentVolumeClaim")
            if isinstance(claim, dict):
                name = claim.get("claimName")
            elif isinstance(vol.get("ephemeral"), dict):
                name = f"{pod.name}-{vol.get('name', '')}"
            else:
                continue
            if name == meta.get("name"):
                return QueueingHint.QUEUE
        return QueueingHint.SKIP


def volume_limits(csi_node: Mapping[str, Any] | None) -> dict[str, int]:
    """Driver name -> allocatable count, for the drivers of the CSINode that set one."""
    if csi_node is None:
        return {}
    out = {}
    for d in _dict(csi_node.get("spec")).get("drivers") or ():
        if not isinstance(d, dict):
            continue
        count = _dict(d.get("allocatable")).get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            out[str(d.get("name", ""))] = count
    return out


def _driver_counts(csi_node: Mapping[str, Any]) -> dict[str, int]:
    out = {}
    for d in _dict(csi_node.get("spec")).get("drivers") or ():
        if isinstance(d, dict):
            count = _dict(d.get("allocatable")).get("count")
            out[str(d.get("name", ""))] = count if isinstance(count, int) else 0
    return out


def _migration_on(csi_node: Mapping[str, Any] | None, plugin: InTreePlugin) -> bool:
    if csi_node is None:
        return False
    if not plugin.needs_annotation:
        return True
    annotations = _dict(_dict(csi_node.get("metadata")).get("annotations"))
    migrated = str(annotations.get(MIGRATED_PLUGINS_ANNOTATION) or "")
    return plugin.plugin in migrated.split(",")


def _may_attach(vol: Mapping[str, Any]) -> bool:
    if isinstance(vol.get("persistentVolumeClaim"), dict) or isinstance(vol.get("ephemeral"), dict):
        return True
    sources = [p.source for p in IN_TREE_PLUGINS] + list(_OTHER_MIGRATABLE_SOURCES)
    return any(isinstance(vol.get(s), dict) for s in sources)


def _list_optional(objects: ObjectLister, kind: str) -> list[dict[str, Any]]:
    """A kind the object lister may not serve yet reads as empty."""
    try:
        return objects.list(kind)
    except (KeyError, LookupError, ValueError):
        return []


def _volumes(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    vols = spec.get("volumes")
    if not isinstance(vols, list):
        return []
    return [v for v in vols if isinstance(v, dict)]


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


ENTRY = PluginEntry(NAME, NodeVolumeLimits, NodeVolumeLimits.new)
