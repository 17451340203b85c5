"""NodeAffinity: spec.nodeSelector and required node affinity filter, preferred terms score.

The plugin's ``addedAffinity`` arg applies to every pod of the profile: its required
part filters ("scheduler-enforced"), its preferred terms add to the score.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
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
    PreFilterResult,
    QueueingHint,
    Status,
    signing,
)
from kscheduler.framework.args import ConfigError, Fields
from kscheduler.framework.helpers import default_normalize_ints, default_normalize_score
from kscheduler.framework.selectors import (
    NodeSelector,
    PreferredTerm,
    SelectorError,
    parse_preferred_terms,
)
from kscheduler.framework.signing import SignFragment

NAME = "NodeAffinity"
PRE_SCORE_KEY = "PreScore" + NAME
ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True, slots=True)
class NodeAffinityArgs:
    #: Required selector every pod of the profile must also match; None: none.
    added_required: NodeSelector | None = None
    #: Preferred terms scored for every pod of the profile.
    added_preferred: tuple[PreferredTerm, ...] = ()


def _selector_error(base: str, exc: SelectorError) -> ConfigError:
    """Split a selector message of the form "<path>: <reason>" into a ConfigError."""
    text = str(exc)
    path, sep, reason = text.partition(": ")
    if sep and path.startswith(base):
        return ConfigError(path, reason)
    return ConfigError(base, text)


def parse_args(raw: Mapping[str, Any]) -> NodeAffinityArgs:
    """NodeAffinityArgs: ``addedAffinity`` (a v1 NodeAffinity) is optional."""
    f = Fields(raw)
    added = f.optional_obj("addedAffinity")
    f.done()
    if added is None:
        return NodeAffinityArgs()
    req_raw = added.raw(_REQUIRED)
    pref_raw = added.raw(_PREFERRED)
    added.done()
    required = None
    preferred: tuple[PreferredTerm, ...] = ()
    if req_raw is not None:
        base = added.child(_REQUIRED)
        if not isinstance(req_raw, Mapping):
            raise ConfigError(base, "expected object")
        try:
            required = NodeSelector.parse(req_raw, base)
        except SelectorError as exc:
            raise _selector_error(base, exc) from None
    if pref_raw is not None:
        base = added.child(_PREFERRED)
        if not isinstance(pref_raw, list):
            raise ConfigError(base, "expected list")
        try:
            preferred = parse_preferred_terms(pref_raw, base)
        except SelectorError as exc:
            raise _selector_error(base, exc) from None
        preferred = tuple(p for p in preferred if p.weight != 0)
    return NodeAffinityArgs(required, preferred)


def _matches_required(pod: PodInfo, labels: Mapping[str, str], name: str) -> bool:
    """spec.nodeSelector (every pair present) AND the required node affinity terms (ORed)."""
    for k, v in pod.node_selector.items():
        if labels.get(k) != v:
            return False
    req = pod.required_node_affinity
    return req is None or req.matches(labels, name)


def _preferred_score(terms: Sequence[PreferredTerm], labels: Mapping[str, str], name: str) -> int:
    return sum(t.weight for t in terms if t.term.matches(labels, name))


class NodeAffinity:
    name = NAME

    def __init__(self, args: NodeAffinityArgs) -> None:
        self._added_required = args.added_required
        self._added_preferred = args.added_preferred

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """The pod's node affinity and node selector (OpportunisticBatching)."""
        return [
            SignFragment(signing.NODE_AFFINITY, signing.node_affinity(pod)),
            SignFragment(signing.NODE_SELECTOR, signing.node_selector(pod)),
        ], None

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeAffinity:
        return cls(args if isinstance(args, NodeAffinityArgs) else NodeAffinityArgs())

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                self._after_node_change,
            )
        ]

    def _after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when a node starts matching (or is added matching) the pod's required affinity."""
        if not isinstance(new, NodeRecord) or not (old is None or isinstance(old, NodeRecord)):
            return QueueingHint.QUEUE
        added = self._added_required
        if added is not None and not added.matches(new.labels, new.name):
            return QueueingHint.SKIP
        if not _matches_required(pod, new.labels, new.name):
            return QueueingHint.SKIP
        if old is None:
            return QueueingHint.QUEUE
        if _matches_required(pod, old.labels, old.name):
            return QueueingHint.SKIP
        return QueueingHint.QUEUE

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Skip when there is nothing to check; a PreFilterResult when matchFields on
        metadata.name name the only candidate nodes; UnschedulableAndUnresolvable when
        every term's node names conflict."""
        required = pod.required_node_affinity
        if required is None and self._added_required is None and not pod.node_selector:
            return None, Status.skip()
        if required is None or not required.terms:
            return None, None
        names = required.node_names()
        if names is None:
            return None, None
        if not names:
            return None, Status.unresolvable(ERR_REASON_CONFLICT)
        return PreFilterResult(names), None

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable when the node fails the added or the pod's affinity."""
        node = node_info.node
        if node is None:
            return Status.as_error("node not found")
        added = self._added_required
        if added is not None and not added.matches(node.labels, node.name):
            return Status.unresolvable(ERR_REASON_ENFORCED)
        if not _matches_required(pod, node.labels, node.name):
            return Status.unresolvable(ERR_REASON_POD)
        return None

    def filter_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """NodeLocalFilter: the pod's node selector and required node affinity."""
        return (tuple(sorted(pod.node_selector.items())), pod.required_node_affinity)

    def score_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """NodeLocalScore: the pod's preferred terms PreScore kept."""
        terms: tuple[PreferredTerm, ...] | None = state.get(PRE_SCORE_KEY)
        return terms

    def pre_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        """Skip when neither the pod nor the args have preferred terms."""
        if not pod.preferred_node_affinity and not self._added_preferred:
            return Status.skip()
        state.write(PRE_SCORE_KEY, tuple(t for t in pod.preferred_node_affinity if t.weight))
        return None

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        """The sum of the weights of the matching preferred terms (before normalising)."""
        node = node_info.node
        if node is None:
            return 0, Status.as_error("node not found", NAME)
        terms = state.get(PRE_SCORE_KEY)
        if terms is None:
            terms = pod.preferred_node_affinity
        count = _preferred_score(self._added_preferred, node.labels, node.name)
        count += _preferred_score(terms, node.labels, node.name)
        return count, None

    def normalize_score(
        self, state: CycleState, pod: PodInfo, scores: list[NodeScore]
    ) -> Status | None:
        default_normalize_score(scores, reverse=False)
        return None

    def normalize_scores(
        self, state: CycleState, pod: PodInfo, scores: list[int]
    ) -> tuple[list[int], Status | None]:
        """normalize_score() over plain ints."""
        return default_normalize_ints(scores, reverse=False), None


ENTRY = PluginEntry(NAME, NodeAffinity, NodeAffinity.new, parse_args)
