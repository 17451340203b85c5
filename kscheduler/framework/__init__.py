"""The scheduling framework: the public API for plugins, in-tree and out-of-tree.

A plugin is a class with a ``name`` and one method per extension point it
implements (see :mod:`kscheduler.framework.interface`), registered with a
:class:`~kscheduler.framework.registry.PluginEntry`.
"""

from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.interface import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Handle,
    NodeScore,
    NodeToStatus,
    PostFilterResult,
    PreBindPreFlightResult,
    PreFilterResult,
    QueueingHint,
)
from kscheduler.framework.interface import (
    Resource as EventResource,
)
from kscheduler.framework.registry import PluginEntry, Registry
from kscheduler.framework.status import Code, Status, is_success
from kscheduler.framework.types import (
    NodeInfo,
    NodeRecord,
    PodInfo,
    QueuedPodInfo,
    Resource,
    Taint,
    Toleration,
)

__all__ = [
    "MAX_NODE_SCORE",
    "MIN_NODE_SCORE",
    "ActionType",
    "ClusterEvent",
    "ClusterEventWithHint",
    "Code",
    "CycleState",
    "EventResource",
    "Handle",
    "NodeInfo",
    "NodeRecord",
    "NodeScore",
    "NodeToStatus",
    "PluginEntry",
    "PodInfo",
    "PostFilterResult",
    "PreBindPreFlightResult",
    "PreFilterResult",
    "QueuedPodInfo",
    "QueueingHint",
    "Registry",
    "Resource",
    "Status",
    "Taint",
    "Toleration",
    "is_success",
]
