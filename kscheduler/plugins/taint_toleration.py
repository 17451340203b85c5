"""TaintToleration: NoSchedule/NoExecute taints filter, PreferNoSchedule taints score.

Filter rejects a node whose first NoSchedule or NoExecute taint (in node order)
the pod does not tolerate. Score counts the PreferNoSchedule taints the pod does
not tolerate; normalisation reverses it so the fewest such taints scores 100.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
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
    NodeScore,
    PluginEntry,
    PodInfo,
    QueueingHint,
    Status,
    Taint,
    Toleration,
    signing,
)
from kscheduler.framework.helpers import (
    default_normalize_ints,
    default_normalize_score,
    filter_rejections,
)
from kscheduler.framework.signing import SignFragment
from kscheduler.framework.types import tolerates_taint

NAME = "TaintToleration"
PRE_SCORE_KEY = "PreScore" + NAME
#: The reason does not name the taint: taint keys and values may be sensitive.
ERR_REASON_UNTOLERATED = "node(s) had untolerated taint(s)"

_DO_NOT_SCHEDULE = frozenset({"NoSchedule", "NoExecute"})
_PREFER_NO_SCHEDULE = "PreferNoSchedule"


def find_untolerated_taint(
    taints: Iterable[Taint], tolerations: Sequence[Toleration]
) -> Taint | None:
    """The first NoSchedule/NoExecute taint none of ``tolerations`` tolerates, or None."""
    for taint in taints:
        if taint.effect in _DO_NOT_SCHEDULE and not tolerates_taint(tolerations, taint):
            return taint
    return None


class TaintToleration:
    name = NAME

    @classmethod
    def new(cls, args: Any, handle: Handle) -> TaintToleration:
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
        """Queue when the node goes from having an untolerated taint to having none."""
        if not isinstance(new, NodeRecord) or not (old is None or isinstance(old, NodeRecord)):
            return QueueingHint.QUEUE
        was_untolerated = (
            old is None or find_untolerated_taint(old.taints, pod.tolerations) is not None
        )
        is_untolerated = find_untolerated_taint(new.taints, pod.tolerations) is not None
        if was_untolerated and not is_untolerated:
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    @staticmethod
    def _after_pod_toleration_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """A toleration added to the rejected pod itself may let it in."""
        if isinstance(new, PodInfo) and new.uid != pod.uid:
            return QueueingHint.SKIP
        return QueueingHint.QUEUE

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable when a NoSchedule/NoExecute taint is not tolerated."""
        node = node_info.node
        if node is None:
            return Status.as_error("node not found")
        if find_untolerated_taint(node.taints, pod.tolerations) is None:
            return None
        return Status.unresolvable(ERR_REASON_UNTOLERATED)

    def filter_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """NodeLocalFilter: the pod's tolerations."""
        return tuple(pod.tolerations)

    def score_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """NodeLocalScore: the tolerations PreScore kept."""
        prefer: tuple[Toleration, ...] | None = state.get(PRE_SCORE_KEY)
        return prefer

    def filter_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> dict[int, Status]:
        """filter() for many nodes at once: untainted nodes pass without a look."""
        look = [i for i, ni in enumerate(nodes) if ni.node is None or ni.node.taints]
        return filter_rejections(self.filter, state, pod, nodes, look)

    def pre_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        """Success: keeps the tolerations that can tolerate PreferNoSchedule taints."""
        prefer = tuple(t for t in pod.tolerations if t.effect in ("", _PREFER_NO_SCHEDULE))
        state.write(PRE_SCORE_KEY, prefer)
        return None

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        """The number of PreferNoSchedule taints the pod does not tolerate (before normalising)."""
        tolerations = state.get(PRE_SCORE_KEY)
        if tolerations is None:
            return 0, Status.as_error(
                f'failed to read "{PRE_SCORE_KEY}" from cycleState: not found', NAME
            )
        node = node_info.node
        if node is None:
            return 0, Status.as_error("node not found", NAME)
        count = 0
        for taint in node.taints:
            if taint.effect == _PREFER_NO_SCHEDULE and not tolerates_taint(tolerations, taint):
                count += 1
        return count, None

    def score_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[list[int], Status | None]:
        """score() for many nodes at once: a node without taints counts 0."""
        if state.get(PRE_SCORE_KEY) is None:
            return [], Status.as_error(
                f'failed to read "{PRE_SCORE_KEY}" from cycleState: not found', NAME
            )
        out = [0] * len(nodes)
        score = self.score
        for i, ni in enumerate(nodes):
            node = ni.node
            if node is None or node.taints:
                s, st = score(state, pod, ni)
                if st is not None:
                    return out, st
                out[i] = s
        return out, None

    def normalize_score(
        self, state: CycleState, pod: PodInfo, scores: list[NodeScore]
    ) -> Status | None:
        default_normalize_score(scores, reverse=True)
        return None

    def normalize_scores(
        self, state: CycleState, pod: PodInfo, scores: list[int]
    ) -> tuple[list[int], Status | None]:
        """normalize_score() over plain ints."""
        return default_normalize_ints(scores, reverse=True), None


ENTRY = PluginEntry(NAME, TaintToleration, TaintToleration.new)
