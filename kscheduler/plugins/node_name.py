"""NodeName: a pod that names a node in spec.nodeName fits only that node."""

from __future__ import annotations

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
)

NAME = "NodeName"
ERR_REASON = "node(s) didn't match the requested node name"


class NodeName:
    name = NAME

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeName:
        return cls()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD))]

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable when the pod asks for another node."""
        wanted = pod.spec.get("nodeName")
        if wanted and wanted != node_info.name:
            return Status.unresolvable(ERR_REASON)
        return None


ENTRY = PluginEntry(NAME, NodeName, NodeName.new)
