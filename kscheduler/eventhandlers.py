"""Informer events -> cache and queue, and the cluster events that wake pods."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import structlog

from kscheduler.cache import Cache
from kscheduler.framework.interface import ActionType, ClusterEvent
from kscheduler.framework.interface import Resource as R
from kscheduler.framework.parse import VOLATILE_METADATA, equal_except, parse_node
from kscheduler.framework.types import NodeRecord, ParseError, PodInfo
from kscheduler.queue import SchedulingQueue

log = structlog.get_logger("kscheduler.events")

EVENT_NODE_ADD = ClusterEvent(R.NODE, ActionType.ADD, "NodeAdd")
EVENT_NODE_DELETE = ClusterEvent(R.NODE, ActionType.DELETE, "NodeDelete")
EVENT_ASSIGNED_POD_ADD = ClusterEvent(R.POD, ActionType.ADD, "AssignedPodAdd")
EVENT_ASSIGNED_POD_UPDATE = ClusterEvent(R.POD, ActionType.UPDATE, "AssignedPodUpdate")
EVENT_ASSIGNED_POD_DELETE = ClusterEvent(R.POD, ActionType.DELETE, "AssignedPodDelete")


def node_update_action(old: NodeRecord, new: NodeRecord) -> ActionType:
    """Which aspects of a node changed, as kube-scheduler classifies node updates."""
    action = ActionType(0)
    if old.allocatable != new.allocatable:
        action |= ActionType.UPDATE_NODE_ALLOCATABLE
    if old.labels != new.labels:
        action |= ActionType.UPDATE_NODE_LABEL
    if old.taints != new.taints or old.unschedulable != new.unschedulable:
        action |= ActionType.UPDATE_NODE_TAINT
    old_status = old.raw.get("status") or {}
    new_status = new.raw.get("status") or {}
    if _conditions(old_status) != _conditions(new_status):
        action |= ActionType.UPDATE_NODE_CONDITION
    old_meta = old.raw.get("metadata") or {}
    new_meta = new.raw.get("metadata") or {}
    if old_meta.get("annotations") != new_meta.get("annotations"):
        action |= ActionType.UPDATE_NODE_ANNOTATION
    if old.images != new.images:
        action |= ActionType.UPDATE_OTHER
    if old_status.get("declaredFeatures") != new_status.get("declaredFeatures"):
        action |= ActionType.UPDATE_NODE_DECLARED_FEATURE
    return action


def node_unchanged(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether ``new`` (a later version of the Node ``old``) changes nothing the
    scheduler reads: everything but metadata.resourceVersion, metadata.managedFields
    and the conditions' details is equal, and the conditions' types and statuses are
    the same in the same order. A kubelet's status heartbeat, which moves only
    ``lastHeartbeatTime``, is such a version."""
    if old.keys() != new.keys():
        return False
    for top, value in new.items():
        before = old[top]
        if top == "metadata":
            if not isinstance(value, dict) or not isinstance(before, dict):
                return False
            if not equal_except(before, value, VOLATILE_METADATA):
                return False
        elif top == "status":
            if not isinstance(value, dict) or not isinstance(before, dict):
                return False
            if not equal_except(before, value, ("conditions",)):
                return False
            if _condition_list(before) != _condition_list(value):
                return False
        elif before != value:
            return False
    return True


def _condition_list(status: dict[str, Any]) -> list[tuple[Any, Any]] | None:
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return None if conditions is None else [(conditions, None)]
    return [
        (c.get("type"), c.get("status")) if isinstance(c, dict) else (c, None) for c in conditions
    ]


def _conditions(status: dict[str, Any]) -> dict[str, str]:
    return {
        c.get("type", ""): c.get("status", "")
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    }


def pod_update_action(old: PodInfo, new: PodInfo) -> ActionType:
    action = ActionType(0)
    if old.labels != new.labels:
        action |= ActionType.UPDATE_POD_LABEL
    if new.requests.milli_cpu < old.requests.milli_cpu or new.requests.memory < old.requests.memory:
        action |= ActionType.UPDATE_POD_SCALE_DOWN
    if old.tolerations != new.tolerations:
        action |= ActionType.UPDATE_POD_TOLERATION
    if old.scheduling_gates and not new.scheduling_gates:
        action |= ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED
    return action or ActionType.UPDATE_OTHER


class EventHandlers:
    """Callbacks for the pod and node informers."""

    def __init__(
        self,
        *,
        cache: Cache,
        queue: SchedulingQueue,
        scheduler_names: Collection[str],
        on_pod_deleted: Callable[[PodInfo], None] | None = None,
    ) -> None:
        self.cache = cache
        self.queue = queue
        self.names = frozenset(scheduler_names)
        self._on_pod_deleted = on_pod_deleted
        self.bad_nodes: dict[str, str] = {}

    def _ours(self, pod: PodInfo) -> bool:
        return pod.scheduler_name in self.names

    # ---- pods ----------------------------------------------------------------------------------
    def pod_added(self, pod: PodInfo) -> None:
        if pod.node_name:
            self.cache.add_pod(pod)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, pod)
        elif self._ours(pod):
            self.queue.add(pod)

    def pod_updated(self, old: PodInfo, new: PodInfo) -> None:
        if new.node_name:
            if not old.node_name:
                # bound (by us or someone else): it leaves the queue
                self.queue.delete(new.uid)
                self.cache.add_pod(new)
                self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, new)
                return
            self.cache.update_pod(new)
            ev = ClusterEvent(R.POD, pod_update_action(old, new), "AssignedPodUpdate")
            self.queue.move_all_to_active_or_backoff(ev, old, new)
        elif self._ours(new):
            if old.resource_version == new.resource_version and old.raw is new.raw:
                return
            if self.cache.is_assumed(new.uid):
                # in its binding cycle (e.g. our own nominatedNodeName write): the
                # cache already places it, a nomination would count it twice
                return
            self.queue.update(new)
        elif self._ours(old):
            self.queue.delete(new.uid)  # its schedulerName changed away from us

    def pod_deleted(self, pod: PodInfo) -> None:
        if pod.node_name:
            removed = self.cache.remove_pod(pod.uid)
            if removed is None:
                return
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None)
        else:
            self.queue.delete(pod.uid)
            # an assumed pod deleted before the informer saw it bound
            if self.cache.is_assumed(pod.uid):
                self.cache.forget(pod.uid)
                self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None)
        if self._on_pod_deleted is not None:
            self._on_pod_deleted(pod)

    # ---- nodes ---------------------------------------------------------------------------------
    def node_added(self, node: NodeRecord | None) -> None:
        if node is None:
            return
        self.cache.add_node(node)
        self.queue.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node)

    def node_updated(self, old: NodeRecord | None, new: NodeRecord | None) -> None:
        if new is None:
            self._remove_node(old)  # no longer parseable: stop placing pods there
            return
        if old is None:
            self.node_added(new)
            return
        if old is new:
            return  # refreshed in place by reparse_node: nothing read changed
        self.cache.update_node(new)
        action = node_update_action(old, new)
        if action:
            self.queue.move_all_to_active_or_backoff(
                ClusterEvent(R.NODE, action, "NodeUpdate"), old, new
            )

    def node_deleted(self, node: NodeRecord | None) -> None:
        if node is None:
            return
        self.bad_nodes.pop(node.name, None)
        self._remove_node(node)

    def _remove_node(self, node: NodeRecord | None) -> None:
        if node is None:
            return
        self.cache.remove_node(node.name)
        self.queue.move_all_to_active_or_backoff(EVENT_NODE_DELETE, node, None)

    def parse_node_or_none(self, raw: dict[str, Any]) -> NodeRecord | None:
        """Informer transform: a node we cannot parse is logged once and left out."""
        try:
            rec = parse_node(raw)
        except ParseError as exc:
            name = str((raw.get("metadata") or {}).get("name", "?"))
            if self.bad_nodes.get(name) != str(exc):
                self.bad_nodes[name] = str(exc)
                log.warning("ignoring node that cannot be parsed", node=name, error=str(exc))
            return None
        self.bad_nodes.pop(rec.name, None)
        return rec

    def reparse_node(self, old: NodeRecord | None, raw: dict[str, Any]) -> NodeRecord | None:
        """The informer's transform of a new version of a stored node.

        A version that changes nothing the scheduler reads (:func:`node_unchanged`,
        e.g. a status heartbeat) is not parsed again: the stored record takes the new
        object in place and is returned itself, so that :meth:`node_updated` sees the
        same record as old and new and leaves the cache's generation (and every memo
        of the node) alone. kube-scheduler's cache counts such an update as a new
        generation of the node; the decisions are the same."""
        meta = raw.get("metadata")
        if old is not None and isinstance(meta, dict) and node_unchanged(old.raw, raw):
            meta.pop("managedFields", None)
            old.raw = raw
            old.resource_version = str(meta.get("resourceVersion", ""))
            return old
        return self.parse_node_or_none(raw)
