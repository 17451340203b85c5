"""SchedulingGates: pods with spec.schedulingGates stay out of activeQ until all are removed."""

from __future__ import annotations

from typing import Any

from kscheduler.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    Handle,
    PluginEntry,
    PodInfo,
    QueueingHint,
    Status,
)

NAME = "SchedulingGates"


class SchedulingGates:
    name = NAME

    @classmethod
    def new(cls, args: Any, handle: Handle) -> SchedulingGates:
        return cls()

    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        """UnschedulableAndUnresolvable while any gate remains; the queue keeps the pod gated."""
        if not pod.scheduling_gates:
            return None
        # Formatted the way Go prints a []string: "[a b]".
        names = " ".join(pod.scheduling_gates)
        return Status.unresolvable(f"waiting for scheduling gates: [{names}]")

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED),
                self._after_gates_eliminated,
            )
        ]

    @staticmethod
    def _after_gates_eliminated(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Only the gated pod's own update can ungate it."""
        if isinstance(new, PodInfo) and new.uid != pod.uid:
            return QueueingHint.SKIP
        return QueueingHint.QUEUE


ENTRY = PluginEntry(NAME, SchedulingGates, SchedulingGates.new)
