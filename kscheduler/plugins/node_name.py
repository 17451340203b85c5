"""NodeName: a pod that names a node in spec.nodeName fits only that node."""

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
    PluginEntry,
    PodInfo,
    Status,
    signing,
)
from kscheduler.framework.signing import SignFragment

NAME = "NodeName"
ERR_REASON = "node(s) didn't match the requested node name"


class NodeName:
    name = NAME

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeName:
        return cls()

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """spec.nodeName (OpportunisticBatching)."""
        return [SignFragment(signing.NODE_NAME, pod.node_name)], None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD))]

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable when the pod asks for another node."""
        wanted = pod.spec.get("nodeName")
        if wanted and wanted != node_info.name:
            return Status.unresolvable(ERR_REASON)
        return None

    def filter_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """NodeLocalFilter: the node the pod names, if any."""
        wanted: str = pod.spec.get("nodeName") or ""
        return wanted

    def filter_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> dict[int, Status]:
        """filter() for many nodes at once: nothing to check without spec.nodeName."""
        wanted = pod.spec.get("nodeName")
        if not wanted:
            return {}
        return {
            i: Status.unresolvable(ERR_REASON) for i, ni in enumerate(nodes) if ni.name != wanted
        }


ENTRY = PluginEntry(NAME, NodeName, NodeName.new)
