"""NodePorts: a pod's hostPorts must be free on the node.

Ports of regular containers and of restartable init containers (sidecars) count;
a port conflicts on (protocol, port) when either side binds 0.0.0.0 or both bind
the same IP.
"""

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
    PreFilterResult,
    QueueingHint,
    Status,
    signing,
)
from kscheduler.framework.signing import SignFragment
from kscheduler.framework.types import HostPort

NAME = "NodePorts"
PRE_FILTER_KEY = "PreFilter" + NAME
ERR_REASON = "node(s) didn't have free ports for the requested pod ports"


def _conflict(wanted: Sequence[HostPort], used: Sequence[HostPort]) -> bool:
    """Whether any of ``wanted`` clashes with any of ``used``."""
    for w in wanted:
        for u in used:
            if w.protocol != u.protocol or w.port != u.port:
                continue
            if w.ip == "0.0.0.0" or u.ip == "0.0.0.0" or w.ip == u.ip:
                return True
    return False


class NodePorts:
    name = NAME

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodePorts:
        return cls()

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The pod's host ports (OpportunisticBatching)."""
        return [SignFragment(signing.HOST_PORTS, signing.host_ports(pod))], None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            # Container ports are immutable: only deletions free ports.
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.DELETE), self._after_pod_deleted
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
        ]

    @staticmethod
    def _after_pod_deleted(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue only when a pod that held (or was nominated to hold) a wanted port goes away."""
        if not isinstance(old, PodInfo):
            return QueueingHint.QUEUE
        if not old.node_name and not old.nominated_node_name:
            return QueueingHint.SKIP
        if not old.host_ports:
            return QueueingHint.SKIP
        if _conflict(pod.host_ports, old.host_ports):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Skip for pods without host ports; otherwise Success."""
        if not pod.host_ports:
            return None, Status.skip()
        state.write(PRE_FILTER_KEY, pod.host_ports)
        return None, None

    def filter_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """NodeLocalFilter: the host ports the pod wants."""
        wanted = state.get(PRE_FILTER_KEY)
        return None if wanted is None else tuple(wanted)

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """Unschedulable when a wanted host port is taken (preemption may free it)."""
        wanted = state.get(PRE_FILTER_KEY)
        if wanted is None:
            return Status.as_error(f'reading "{PRE_FILTER_KEY}" from cycleState: not found', NAME)
        if node_info.ports_conflict(wanted):
            return Status.unschedulable(ERR_REASON)
        return None


ENTRY = PluginEntry(NAME, NodePorts, NodePorts.new)
