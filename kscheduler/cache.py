"""The scheduler cache: nodes with the pods placed on them, including assumed pods.

Pod state machine (one entry per pod UID the cache knows)::

                 assume()                 add_pod() (informer sees it bound)
    Initial ----------------> Assumed ---------------------------------------> Added
                                |   \\ finish_binding(): bind call returned       |  update_pod()
                     forget()   |    \\ (still Assumed until the informer        |  remove_pod()
                                v     \\  confirms; the bind may yet fail)       v
                              (gone)   `-- expire(): binding finished but never  Deleted
                                           confirmed within the TTL -> (gone)

* ``assume`` accounts the pod on its node at once, so the next cycle sees it.
* ``add_pod`` for an assumed pod confirms it (moving it to the node the
  server reports if that differs); for an unknown pod it adds it.
* ``forget`` undoes an assume after a failed Reserve/Permit/bind.
* ``remove_pod`` removes an added (or assumed) pod.

There is no copy per cycle: the scheduling cycle runs on the event loop without
awaiting between taking the snapshot and assuming the pod, so the cache cannot
change under it. :class:`Snapshot` only re-derives the ordered node list and the
affinity lists when the node set or those pods changed.

The cache also logs the name of every node whose Node object or pods change
(:meth:`Cache.changes_since`), so that plugins can keep per-node results across
cycles and recompute only the changed nodes. The log is dropped once it holds
``change_log_limit`` entries; a reader that had not caught up then starts over.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kscheduler.framework.interface import ImageState, NodeChanges
from kscheduler.framework.types import NodeInfo, NodeRecord, PodInfo, pod_pvc_names

ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")

#: Entries the change log holds before it is dropped (128 KiB of references). Its
#: readers read it every cycle they run in, a handful of changes each; one that
#: sat out more than this many changes recomputes from the node list once.
CHANGE_LOG_LIMIT = 16_384
#: Nodes noted for the snapshot's affinity lists before it is told to rebuild them
#: instead (a cache no snapshot reads, as a standby replica's, holds no more).
AFFINITY_TOUCHED_LIMIT = 4_096


def zone_key(labels: dict[str, str]) -> str:
    region = next((labels[k] for k in REGION_LABELS if k in labels), "")
    zone = next((labels[k] for k in ZONE_LABELS if k in labels), "")
    return f"{region}:\x00:{zone}" if region or zone else ""


@dataclass(slots=True)
class _PodState:
    pod: PodInfo
    assumed: bool
    binding_finished: bool = False
    deadline: float | None = None


class Cache:
    """Aggregates per node; assumed pods; see the module docstring for the state machine."""

    def __init__(
        self,
        *,
        assumed_ttl: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        change_log_limit: int = CHANGE_LOG_LIMIT,
    ) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, _PodState] = {}
        #: Expire assumed pods this long after their bind finished without the
        #: informer confirming them; 0 keeps them until confirmed or forgotten.
        self.assumed_ttl = assumed_ttl
        self._clock = clock
        self._zones: dict[str, list[str]] = {}
        self._node_list_dirty = True
        self._affinity_dirty = True
        #: Nodes where a pod with affinity came or went since the snapshot last looked
        #: (the snapshot then updates its affinity lists for those nodes alone).
        self._affinity_touched: list[str] = []
        self.generation = 0
        #: Names of the nodes whose Node object or pods changed, oldest first; entry i
        #: is change number ``_changes_base + i`` (a cursor counts changes).
        self._changes: list[str] = []
        self._changes_base = 0
        self.change_log_limit = change_log_limit
        #: image name -> [size, names of the nodes holding it]. As in kube-scheduler,
        #: the size is the one reported by the first node seen with the image, kept
        #: while any node holds it.
        self._images: dict[str, tuple[int, set[str]]] = {}

    # ---- nodes ---------------------------------------------------------------------------
    def add_node(self, node: NodeRecord) -> NodeInfo:
        ni = self.nodes.get(node.name)
        if ni is None:
            ni = self.nodes[node.name] = NodeInfo(node.name, node)
            self._zone_add(node)
            self._images_add(node)
        else:
            old = ni.node
            if old is None:
                self._zone_add(node)
                self._images_add(node)
            else:
                if zone_key(old.labels) != zone_key(node.labels):
                    self._zone_remove(old)
                    self._zone_add(node)
                if old.images != node.images:
                    self._images_remove(old)
                    self._images_add(node)
            ni.node = node
            ni.generation += 1
        self.generation += 1
        self._changed(node.name)
        return ni

    update_node = add_node

    def remove_node(self, name: str) -> None:
        ni = self.nodes.get(name)
        if ni is None:
            return
        if ni.node is not None:
            self._zone_remove(ni.node)
            self._images_remove(ni.node)
        # node-less from now on, also for whoever still holds the NodeInfo (a plugin's
        # memo of scores by node lets such entries go)
        ni.node = None
        ni.generation += 1
        if not ni.pods:
            del self.nodes[name]
        # else pods still there (their deletes may come later): a node-less entry stays
        self.generation += 1
        self._changed(name)

    def _images_add(self, node: NodeRecord) -> None:
        images = self._images
        for name, size in node.images.items():
            held = images.get(name)
            if held is None:
                images[name] = (size, {node.name})
            else:
                held[1].add(node.name)

    def _images_remove(self, node: NodeRecord) -> None:
        images = self._images
        for name in node.images:
            held = images.get(name)
            if held is not None:
                held[1].discard(node.name)
                if not held[1]:
                    del images[name]

    def image_state(self, name: str) -> ImageState | None:
        """The size kube-scheduler would use for image ``name`` and how many nodes hold it."""
        held = self._images.get(name)
        return ImageState(held[0], len(held[1])) if held is not None else None

    def _zone_add(self, node: NodeRecord) -> None:
        self._zones.setdefault(zone_key(node.labels), []).append(node.name)
        self._node_list_dirty = True

    def _zone_remove(self, node: NodeRecord) -> None:
        z = zone_key(node.labels)
        names = self._zones.get(z)
        if names and node.name in names:
            names.remove(node.name)
            if not names:
                del self._zones[z]
        self._node_list_dirty = True

    # ---- pods ------------------------------------------------------------------------------
    def _node_for(self, name: str) -> NodeInfo:
        ni = self.nodes.get(name)
        if ni is None:
            ni = self.nodes[name] = NodeInfo(name)
        return ni

    def _place(self, pod: PodInfo) -> None:
        self._node_for(pod.node_name).add_pod(pod)
        if pod.has_affinity():
            self._affinity_changed(pod.node_name)
        self.generation += 1
        self._changed(pod.node_name)

    def _affinity_changed(self, node_name: str) -> None:
        """A pod with affinity came to or left ``node_name``."""
        if self._affinity_dirty:
            return  # the snapshot rebuilds its lists anyway
        touched = self._affinity_touched
        touched.append(node_name)
        if len(touched) > AFFINITY_TOUCHED_LIMIT:
            self._affinity_dirty = True
            touched.clear()

    def _unplace(self, pod: PodInfo) -> None:
        ni = self.nodes.get(pod.node_name)
        if ni is None:
            return
        ni.remove_pod(pod.uid)
        if pod.has_affinity():
            self._affinity_changed(pod.node_name)
        if ni.node is None and not ni.pods:
            del self.nodes[pod.node_name]
        self.generation += 1
        self._changed(pod.node_name)

    def is_assumed(self, uid: str) -> bool:
        st = self._pods.get(uid)
        return st is not None and st.assumed

    def assume(self, pod: PodInfo) -> None:
        """Account ``pod`` (already carrying its chosen node_name) on that node."""
        if pod.uid in self._pods:
            raise ValueError(f"pod {pod.key} is already in the cache, cannot be assumed")
        self._pods[pod.uid] = _PodState(pod, assumed=True)
        self._place(pod)

    def finish_binding(self, uid: str) -> None:
        st = self._pods.get(uid)
        if st is not None and st.assumed:
            st.binding_finished = True
            if self.assumed_ttl > 0:
                st.deadline = self._clock() + self.assumed_ttl

    def forget(self, uid: str) -> None:
        st = self._pods.get(uid)
        if st is None or not st.assumed:
            return
        self._unplace(st.pod)
        del self._pods[uid]

    def add_pod(self, pod: PodInfo) -> None:
        """The informer saw an assigned pod (new, or confirming an assumed one)."""
        st = self._pods.get(pod.uid)
        if st is not None:
            # assumed (confirm) or a duplicate add after a relist (replace)
            self._unplace(st.pod)
        self._pods[pod.uid] = _PodState(pod, assumed=False)
        self._place(pod)

    def update_pod(self, pod: PodInfo) -> None:
        self.add_pod(pod)

    def remove_pod(self, uid: str) -> PodInfo | None:
        st = self._pods.pop(uid, None)
        if st is None:
            return None
        self._unplace(st.pod)
        return st.pod

    def get_pod(self, uid: str) -> PodInfo | None:
        st = self._pods.get(uid)
        return st.pod if st is not None else None

    def expire_assumed(self) -> list[PodInfo]:
        """Drop assumed pods whose binding finished longer than the TTL ago."""
        if self.assumed_ttl <= 0:
            return []
        now = self._clock()
        gone = [
            s.pod
            for s in self._pods.values()
            if s.assumed and s.binding_finished and s.deadline is not None and s.deadline < now
        ]
        for p in gone:
            self.forget(p.uid)
        return gone

    def pod_count(self) -> int:
        return len(self._pods)

    def assumed_pods(self) -> list[PodInfo]:
        return [s.pod for s in self._pods.values() if s.assumed]

    # ---- change log ----------------------------------------------------------------------
    def _changed(self, name: str) -> None:
        changes = self._changes
        if len(changes) >= self.change_log_limit:
            # Drop the log: readers at its end keep their place, the others start over.
            self._changes_base += len(changes)
            changes.clear()
        changes.append(name)

    def change_cursor(self) -> int:
        """The number of changes logged so far: a cursor for :meth:`changes_since`."""
        return self._changes_base + len(self._changes)

    def changes_since(self, cursor: int | None) -> NodeChanges:
        """Nodes whose Node object or pods changed since ``cursor``, in order of first change.

        The names are None when ``cursor`` is None or no longer (or never) covered by
        the log: the reader must start over from the full node list.
        """
        base = self._changes_base
        end = base + len(self._changes)
        if cursor is None or not base <= cursor <= end:
            return NodeChanges(None, end)
        return NodeChanges(dict.fromkeys(self._changes[cursor - base :]).keys(), end)

    # ---- snapshot ------------------------------------------------------------------------
    def ordered_node_names(self) -> list[str]:
        """Node names interleaved across zones, as kube-scheduler's node tree lists them."""
        zones = list(self._zones.values())
        out: list[str] = []
        i = 0
        while True:
            added = False
            for names in zones:
                if i < len(names):
                    out.append(names[i])
                    added = True
            if not added:
                return out
            i += 1


class Snapshot:
    """The cycle's view of the cache (SharedLister for plugins)."""

    def __init__(self, cache: Cache) -> None:
        self._cache = cache
        self._list: list[NodeInfo] = []
        self._with_affinity: list[NodeInfo] = []
        self._with_anti: list[NodeInfo] = []
        self._pvcs: set[str] | None = None
        self._gen = -1
        self._list_gen = -1
        #: node name -> place in _list, built on first use after _list changes
        self._positions: dict[str, int] | None = None

    def update(self) -> None:
        c = self._cache
        if c.generation == self._gen:
            return
        if c._node_list_dirty:
            c._node_list_dirty = False
            nodes = c.nodes
            self._list = [nodes[n] for n in c.ordered_node_names()]
            self._positions = None
            c._affinity_dirty = True
        touched = c._affinity_touched
        if c._affinity_dirty:
            c._affinity_dirty = False
            self._with_affinity = [n for n in self._list if n.pods_with_affinity]
            self._with_anti = [n for n in self._list if n.pods_with_required_anti_affinity]
        elif touched:
            self._update_affinity_lists(touched)
        touched.clear()
        self._pvcs = None
        self._gen = c.generation

    def _update_affinity_lists(self, touched: Iterable[str]) -> None:
        """Bring the two lists of nodes with affinity pods up to date for the
        ``touched`` nodes alone, keeping node list order as a full rebuild would."""
        positions = self.node_positions()
        for name in dict.fromkeys(touched):
            at = positions.get(name)
            if at is None:
                continue  # a node-less entry: not in the node list
            ni = self._list[at]
            self._with_affinity = _with_member(
                self._with_affinity, positions, ni, bool(ni.pods_with_affinity)
            )
            self._with_anti = _with_member(
                self._with_anti, positions, ni, bool(ni.pods_with_required_anti_affinity)
            )

    def node_infos(self) -> Sequence[NodeInfo]:
        return self._list

    def node_positions(self) -> Mapping[str, int]:
        if self._positions is None:
            self._positions = {ni.name: i for i, ni in enumerate(self._list)}
        return self._positions

    def get(self, name: str) -> NodeInfo | None:
        ni = self._cache.nodes.get(name)
        return ni if ni is not None and ni.node is not None else None

    def have_pods_with_affinity(self) -> Sequence[NodeInfo]:
        return self._with_affinity

    def have_pods_with_required_anti_affinity(self) -> Sequence[NodeInfo]:
        return self._with_anti

    def is_pvc_used_by_pods(self, key: str) -> bool:
        if self._pvcs is None:
            self._pvcs = set()
            for ni in self._list:
                self._pvcs.update(ni.pvc_refs)
        return key in self._pvcs

    def num_nodes(self) -> int:
        return len(self._list)

    def image_state(self, name: str) -> ImageState | None:
        return self._cache.image_state(name)

    def changes_since(self, cursor: int | None) -> NodeChanges | None:
        """The cache's change log (see :meth:`Cache.changes_since`); None when the cache
        changed after the last :meth:`update`, as the node list may then be stale."""
        c = self._cache
        if c.generation != self._gen:
            return None
        return c.changes_since(cursor)


def _with_member(
    nodes: list[NodeInfo], positions: Mapping[str, int], ni: NodeInfo, member: bool
) -> list[NodeInfo]:
    """``nodes`` (a part of the node list, in its order) with ``ni`` in it or not; a new
    list when that changes it, as the last cycle's readers may still hold the old one."""
    i = bisect_left(nodes, positions[ni.name], key=lambda n: positions[n.name])
    if (i < len(nodes) and nodes[i] is ni) == member:
        return nodes
    out = list(nodes)
    if member:
        out.insert(i, ni)
    else:
        del out[i]
    return out


__all__ = ["Cache", "Snapshot", "pod_pvc_names", "zone_key"]
