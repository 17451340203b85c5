"""NodeUnschedulable: nodes with spec.unschedulable take only pods that tolerate
the node.kubernetes.io/unschedulable:NoSchedule taint."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from kscheduler.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Handle,
    NodeInfo,
    NodeRecord,
    PluginEntry,
    PodInfo,
    QueueingHint,
    Status,
    Taint,
    signing,
)
from kscheduler.framework.helpers import filter_rejections
from kscheduler.framework.signing import SignFragment
from kscheduler.framework.types import tolerates_taint

NAME = "NodeUnschedulable"
ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
ERR_REASON_UNKNOWN_CONDITION = "node(s) had unknown conditions"

#: The taint a pod must tolerate to land on an unschedulable node.
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


class NodeUnschedulable:
    name = NAME

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeUnschedulable:
        return cls()

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The pod's tolerations (OpportunisticBatching)."""
        return [SignFragment(signing.TOLERATIONS, signing.tolerations(pod))], None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                self._after_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATION),
                self._after_pod_toleration_change,
            ),
        ]

    @staticmethod
    def _after_node_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when a node is added schedulable or flips from unschedulable to schedulable."""
        if not isinstance(new, NodeRecord) or not (old is None or isinstance(old, NodeRecord)):
            return QueueingHint.QUEUE
        if new.unschedulable:
            return QueueingHint.SKIP
        if old is None or old.unschedulable:
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    @staticmethod
    def _after_pod_toleration_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when the rejected pod itself now tolerates the unschedulable taint."""
        if not isinstance(new, PodInfo):
            return QueueingHint.QUEUE
        if new.uid == pod.uid and tolerates_taint(new.tolerations, UNSCHEDULABLE_TAINT):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable on an unschedulable node the pod does not tolerate."""
        node = node_info.node
        if node is None:
            return Status.as_error("node not found")
        if not node.unschedulable:
            return None
        if tolerates_taint(pod.tolerations, UNSCHEDULABLE_TAINT):
            return None
        return Status.unresolvable(ERR_REASON_UNSCHEDULABLE)

    def filter_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """NodeLocalFilter: whether the pod tolerates the unschedulable taint."""
        return tolerates_taint(pod.tolerations, UNSCHEDULABLE_TAINT)

    def filter_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> dict[int, Status]:
        """filter() for many nodes at once: only unschedulable nodes need a look."""
        look = [i for i, ni in enumerate(nodes) if ni.node is None or ni.node.unschedulable]
        return filter_rejections(self.filter, state, pod, nodes, look)


ENTRY = PluginEntry(NAME, NodeUnschedulable, NodeUnschedulable.new)
