"""NodeDeclaredFeatures: a pod that needs a node-level feature goes only to nodes that
declare it in ``status.declaredFeatures`` (KEP-5328, on by default from 1.36, GA in 1.37).

PreFilter works out the pod's requirements from its spec, with the rules of
kube-scheduler 1.37's feature registry (k8s.io/component-helpers
nodedeclaredfeatures); a pod that needs none skips the plugin, so Filter runs
only for the rare pod that does. Of the registered features, three are inferred
from a pod:

- RestartAllContainersOnContainerExits: a container or init container has a
  restartPolicyRules entry whose action is RestartAllContainers;
- UserNamespacesHostNetworkSupport: hostNetwork true with hostUsers false;
- VolumeBindMountOptions: a volume mount of a container, init container or
  ephemeral container sets bindMountOptions.

A node's declared list is read as upstream reads it: a walk over the sorted
list against the sorted registry, names it does not know skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
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
    PreFilterResult,
    QueueingHint,
    Status,
    signing,
)
from kscheduler.framework.signing import SignFragment

NAME = "NodeDeclaredFeatures"
PRE_FILTER_KEY = "PreFilter" + NAME
ERR_REASON_UNSATISFIED = "node(s) didn't match Pod's required features"

RESTART_ALL_CONTAINERS = "RestartAllContainersOnContainerExits"
USER_NAMESPACES_HOST_NETWORK = "UserNamespacesHostNetworkSupport"
VOLUME_BIND_MOUNT_OPTIONS = "VolumeBindMountOptions"

#: The features kube-scheduler 1.37 knows, sorted by name as its registry is.
REGISTERED: tuple[str, ...] = tuple(
    sorted(
        (
            RESTART_ALL_CONTAINERS,
            "InPlacePodLevelResourcesVerticalScaling",
            "ExtendWebSocketsToKubelet",
            "InPlacePodVerticalScalingInitContainers",
            "InPlacePodVerticalScalingMemoryBackedVolumes",
            USER_NAMESPACES_HOST_NETWORK,
            "DRANodeAllocatableResources",
            VOLUME_BIND_MOUNT_OPTIONS,
            "DRAOptionalNodeOperations",
        )
    )
)


def _containers(spec: Mapping[str, Any], *keys: str) -> Iterable[Mapping[str, Any]]:
    for key in keys:
        items = spec.get(key)
        if isinstance(items, list):
            for c in items:
                if isinstance(c, dict):
                    yield c


def required_features(spec: Mapping[str, Any]) -> frozenset[str]:
    """The registered features the pod needs a node to declare."""
    out: set[str] = set()
    for c in _containers(spec, "containers", "initContainers"):
        rules = c.get("restartPolicyRules")
        if isinstance(rules, list) and any(
            isinstance(r, dict) and r.get("action") == "RestartAllContainers" for r in rules
        ):
            out.add(RESTART_ALL_CONTAINERS)
            break
    if spec.get("hostNetwork") is True and spec.get("hostUsers") is False:
        out.add(USER_NAMESPACES_HOST_NETWORK)
    for c in _containers(spec, "containers", "initContainers", "ephemeralContainers"):
        mounts = c.get("volumeMounts")
        if isinstance(mounts, list) and any(
            isinstance(m, dict) and m.get("bindMountOptions") for m in mounts
        ):
            out.add(VOLUME_BIND_MOUNT_OPTIONS)
            break
    return frozenset(out)


@lru_cache(maxsize=4096)
def node_features(declared: tuple[str, ...]) -> frozenset[str]:
    """The registered features in a node's declared list (expected sorted): one walk
    over both lists, as upstream maps it, so names out of order may be missed."""
    out: set[str] = set()
    i = j = 0
    while i < len(declared) and j < len(REGISTERED):
        if declared[i] == REGISTERED[j]:
            out.add(REGISTERED[j])
            i += 1
            j += 1
        elif declared[i] < REGISTERED[j]:
            i += 1
        else:
            j += 1
    return frozenset(out)


def declared_of(node: NodeRecord) -> tuple[str, ...]:
    """The node's ``status.declaredFeatures`` as a tuple of strings."""
    status = node.raw.get("status")
    if not isinstance(status, dict):
        return ()
    items = status.get("declaredFeatures")
    if not isinstance(items, list):
        return ()
    return tuple(x for x in items if isinstance(x, str))


class NodeDeclaredFeatures:
    name = NAME

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeDeclaredFeatures:
        return cls()

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The features the pod requires (OpportunisticBatching)."""
        spec = pod.raw.get("spec")
        features = sorted(required_features(spec if isinstance(spec, dict) else {}))
        return [SignFragment(signing.FEATURES, features)], None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE
                ),
                self._after_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE),
                self._after_pod_update,
            ),
        ]

    @staticmethod
    def _after_node_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue on a new node, or when a node's declared list changed."""
        if not isinstance(new, NodeRecord) or not (old is None or isinstance(old, NodeRecord)):
            return QueueingHint.QUEUE
        if old is not None and declared_of(old) == declared_of(new):
            return QueueingHint.SKIP
        return QueueingHint.QUEUE

    @staticmethod
    def _after_pod_update(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when the rejected pod's own requirements changed."""
        if not isinstance(new, PodInfo) or not isinstance(old, PodInfo):
            return QueueingHint.QUEUE
        if new.uid != pod.uid:
            return QueueingHint.SKIP
        if required_features(old.spec) == required_features(new.spec):
            return QueueingHint.SKIP
        return QueueingHint.QUEUE

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Skip when the pod needs no declared feature; otherwise Success, with its
        requirements recorded for Filter."""
        reqs = required_features(pod.spec)
        if not reqs:
            return None, Status.skip()
        state.write(PRE_FILTER_KEY, reqs)
        return None, None

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable when the node does not declare every feature
        the pod needs."""
        reqs = state.get(PRE_FILTER_KEY)
        if reqs is None:
            return Status.as_error(
                f'error reading "{PRE_FILTER_KEY}" from cycle-state: not found', NAME
            )
        node = node_info.node
        if node is None:
            return Status.as_error("node not found")
        if reqs <= node_features(declared_of(node)):
            return None
        return Status.unresolvable(ERR_REASON_UNSATISFIED)


ENTRY = PluginEntry(NAME, NodeDeclaredFeatures, NodeDeclaredFeatures.new)
