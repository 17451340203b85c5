"""InterPodAffinity: required and preferred pod (anti-)affinity, in both directions.

PreFilter counts, per topology domain (topologyKey -> value -> pods):

* existing pods whose required anti-affinity terms match the incoming pod;
* existing pods matching all of the incoming pod's required affinity terms;
* existing pods matching each of its required anti-affinity terms.

Filter then looks the node's labels up in those counts. A pod whose affinity finds
no match anywhere may still go where all its topology keys exist, as long as it
matches its own terms (the first pod of a group with affinity to itself).

PreFilter keeps these counts per node across cycles when it can (see
_tracked_counts), counting again only the nodes changed since the last cycle.

PreScore sums term weights per topology domain: the incoming pod's preferred terms
over existing pods, and existing pods' preferred terms (and required affinity
terms, weighted by hardPodAffinityWeight) over the incoming pod; it too works from
counts kept across cycles when it can (see _tracked_scores). Score adds the
domains a node is in; NormalizeScore scales to (s - min) * 100 / (max - min).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kscheduler.framework import (
    MAX_NODE_SCORE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
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
from kscheduler.framework.aggregate import Contribution, NodeAggregate, NodeAggregates
from kscheduler.framework.args import Fields
from kscheduler.framework.helpers import filter_rejections
from kscheduler.framework.selectors import LabelSelector
from kscheduler.framework.signing import SignFragment
from kscheduler.framework.types import AffinityTerm

NAME = "InterPodAffinity"

ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = (
    "node(s) didn't satisfy existing pods anti-affinity rules"
)
ERR_REASON_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"

PRE_FILTER_KEY = "PreFilter" + NAME
PRE_SCORE_KEY = "PreScore" + NAME

MIN_HARD_POD_AFFINITY_WEIGHT = 0
MAX_HARD_POD_AFFINITY_WEIGHT = 100


@dataclass(frozen=True, slots=True)
class InterPodAffinityArgs:
    #: Score weight of an existing pod's required affinity term the incoming pod matches.
    hard_pod_affinity_weight: int = 1
    #: Skip existing pods' preferred terms when the incoming pod has no preferred terms.
    ignore_preferred_terms_of_existing_pods: bool = False


def parse_args(raw: Mapping[str, Any]) -> InterPodAffinityArgs:
    """InterPodAffinityArgs; raises ConfigError with a path relative to the args."""
    f = Fields(raw)
    weight = f.integer("hardPodAffinityWeight", 1)
    if not MIN_HARD_POD_AFFINITY_WEIGHT <= weight <= MAX_HARD_POD_AFFINITY_WEIGHT:
        raise f.error(
            "hardPodAffinityWeight",
            f"not in valid range [{MIN_HARD_POD_AFFINITY_WEIGHT}, "
            f"{MAX_HARD_POD_AFFINITY_WEIGHT}], got {weight}",
        )
    ignore = f.boolean("ignorePreferredTermsOfExistingPods", False)
    f.done()
    return InterPodAffinityArgs(weight, ignore)


# ------------------------------------------------------------------------- terms


@dataclass(frozen=True, slots=True)
class ResolvedTerm:
    """An incoming pod's term with its namespaceSelector turned into namespace names."""

    selector: LabelSelector
    namespaces: frozenset[str]
    #: An empty namespaceSelector: every namespace.
    all_namespaces: bool
    topology_key: str
    weight: int

    def matches(self, pod: PodInfo) -> bool:
        return (self.all_namespaces or pod.namespace in self.namespaces) and self.selector.matches(
            pod.labels
        )


def _existing_term_matches(term: AffinityTerm, pod: PodInfo, ns_labels: Mapping[str, str]) -> bool:
    """An existing pod's term against the incoming pod (namespace labels as given)."""
    return term.matches_pod_namespace(pod.namespace, ns_labels) and term.selector.matches(
        pod.labels
    )


def _matches_all(terms: Sequence[ResolvedTerm], pod: PodInfo) -> bool:
    """True iff there are terms and ``pod`` matches every one."""
    if not terms:
        return False
    return all(t.matches(pod) for t in terms)


class _Namespaces:
    """Namespace lookups for one cycle, listed lazily."""

    __slots__ = ("_all", "_handle")

    def __init__(self, handle: Handle) -> None:
        self._handle = handle
        self._all: list[tuple[str, dict[str, str]]] | None = None

    def labels_of(self, name: str) -> dict[str, str]:
        """The namespace's labels; empty if it is unknown."""
        ns = self._handle.objects.get("namespaces", "", name)
        return _labels(ns)

    def matching(self, selector: LabelSelector) -> set[str]:
        if self._all is None:
            self._all = []
            for ns in self._handle.objects.list("namespaces"):
                meta = ns.get("metadata")
                if isinstance(meta, dict) and isinstance(meta.get("name"), str):
                    self._all.append((meta["name"], _labels(ns)))
        return {name for name, labels in self._all if selector.matches(labels)}


def _labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    meta = obj.get("metadata") if obj is not None else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return dict(labels) if isinstance(labels, dict) else {}


def _resolve(terms: Iterable[AffinityTerm], namespaces: _Namespaces) -> tuple[ResolvedTerm, ...]:
    out = []
    for t in terms:
        names = t.namespaces
        everywhere = False
        sel = t.namespace_selector
        if sel is not None:
            if sel.is_empty():
                everywhere = True
            else:
                names = names | namespaces.matching(sel)
        out.append(ResolvedTerm(t.selector, frozenset(names), everywhere, t.topology_key, t.weight))
    return tuple(out)


#: Pods per topology domain: topology key -> value -> count (no zero counts, no empty keys).
Counts = dict[str, dict[str, int]]

#: PreFilter's counts: existing pods' anti-affinity, the pod's affinity, its anti-affinity.
_Counts = tuple[Counts, Counts, Counts]


def _count_value(share: Contribution[str, str], key: str, labels: Mapping[str, str]) -> None:
    """Count one pod in the node's domain for topology ``key`` (if it has the label)."""
    value = labels.get(key)
    if value is not None:
        per_value = share.get(key)
        if per_value is None:
            per_value = share[key] = {}
        per_value[value] = per_value.get(value, 0) + 1


def _copy(counts: Counts) -> Counts:
    return {key: dict(per_value) for key, per_value in counts.items()}


def _existing_contribution(ni: NodeInfo, node: NodeRecord) -> Contribution[AffinityTerm, str]:
    """A node's existing pods' required anti-affinity: term -> value of the term's
    topology key -> pods."""
    share: Contribution[AffinityTerm, str] = {}
    if not ni.pods_with_required_anti_affinity:
        return share
    labels = node.labels
    for other in ni.pods_with_required_anti_affinity.values():
        for t in other.required_anti_affinity:
            value = labels.get(t.topology_key)
            if value is not None:
                per_value = share.get(t)
                if per_value is None:
                    per_value = share[t] = {}
                per_value[value] = per_value.get(value, 0) + 1
    return share


#: The kinds of an existing pod's terms PreScore scores: required affinity (by
#: hardPodAffinityWeight), preferred affinity, preferred anti-affinity.
_REQUIRED, _PREFERRED, _PREFERRED_ANTI = "required", "preferred", "preferred-anti"


def _scoring_contribution(
    ni: NodeInfo, node: NodeRecord
) -> Contribution[tuple[str, AffinityTerm], str]:
    """A node's existing pods' scoring terms: (kind, term) -> value of the term's
    topology key -> pods."""
    share: Contribution[tuple[str, AffinityTerm], str] = {}
    labels = node.labels
    if not labels or not ni.pods_with_affinity:
        return share

    def count(kind: str, terms: Iterable[AffinityTerm]) -> None:
        for t in terms:
            value = labels.get(t.topology_key)
            if value is not None:
                per_value = share.get((kind, t))
                if per_value is None:
                    per_value = share[(kind, t)] = {}
                per_value[value] = per_value.get(value, 0) + 1

    for other in ni.pods_with_affinity.values():
        count(_REQUIRED, other.required_affinity)
        count(_PREFERRED, other.preferred_affinity)
        count(_PREFERRED_ANTI, other.preferred_anti_affinity)
    return share


def _add(counts: Counts, key: str, value: str, delta: int) -> None:
    per_value = counts.get(key)
    if per_value is None:
        per_value = counts[key] = {}
    n = per_value.get(value, 0) + delta
    if n:
        per_value[value] = n
    else:
        per_value.pop(value, None)
        if not per_value:
            del counts[key]


def _count(counts: Counts, key: str, value: str) -> int:
    per_value = counts.get(key)
    return per_value.get(value, 0) if per_value is not None else 0


# ------------------------------------------------------------------------ states


class FilterState:
    """PreFilter's counts per topology domain. Cloned for preemption.

    The counts may be the plugin's own totals, kept across cycles (``shared``): they
    are copied before the first change (AddPod/RemovePod), and hold only for the
    cycle that made them.
    """

    __slots__ = (
        "_shared",
        "affinity",
        "affinity_counts",
        "anti_affinity",
        "anti_affinity_counts",
        "existing_anti_affinity_counts",
        "namespace_labels",
        "self_match",
    )

    def __init__(
        self,
        affinity: tuple[ResolvedTerm, ...],
        anti_affinity: tuple[ResolvedTerm, ...],
        namespace_labels: dict[str, str],
        existing_anti_affinity_counts: Counts,
        affinity_counts: Counts,
        anti_affinity_counts: Counts,
        self_match: bool,
        shared: bool = False,
    ) -> None:
        self.affinity = affinity
        self.anti_affinity = anti_affinity
        #: Labels of the incoming pod's namespace.
        self.namespace_labels = namespace_labels
        #: Existing pods whose required anti-affinity terms match the incoming pod.
        self.existing_anti_affinity_counts = existing_anti_affinity_counts
        #: Existing pods matching all the incoming pod's required affinity terms.
        self.affinity_counts = affinity_counts
        #: Existing pods matching the incoming pod's required anti-affinity terms.
        self.anti_affinity_counts = anti_affinity_counts
        #: The incoming pod matches all its own required affinity terms.
        self.self_match = self_match
        self._shared = shared

    def clone(self) -> FilterState:
        return FilterState(
            self.affinity,
            self.anti_affinity,
            self.namespace_labels,
            _copy(self.existing_anti_affinity_counts),
            _copy(self.affinity_counts),
            _copy(self.anti_affinity_counts),
            self.self_match,
        )

    def update_with_pod(
        self, incoming: PodInfo, other: PodInfo, node: NodeRecord, delta: int
    ) -> None:
        if self._shared:
            self.existing_anti_affinity_counts = _copy(self.existing_anti_affinity_counts)
            self.affinity_counts = _copy(self.affinity_counts)
            self.anti_affinity_counts = _copy(self.anti_affinity_counts)
            self._shared = False
        labels = node.labels
        for t in other.required_anti_affinity:
            value = labels.get(t.topology_key)
            if value is not None and _existing_term_matches(t, incoming, self.namespace_labels):
                _add(self.existing_anti_affinity_counts, t.topology_key, value, delta)
        if _matches_all(self.affinity, other):
            for rt in self.affinity:
                value = labels.get(rt.topology_key)
                if value is not None:
                    _add(self.affinity_counts, rt.topology_key, value, delta)
        for rt in self.anti_affinity:
            value = labels.get(rt.topology_key)
            if value is not None and rt.matches(other):
                _add(self.anti_affinity_counts, rt.topology_key, value, delta)


class ScoreState:
    """PreScore's weights per topology domain (read-only, shared by clones)."""

    __slots__ = ("topology_score",)

    def __init__(self, topology_score: dict[str, dict[str, int]]) -> None:
        #: topology key -> value -> summed weight.
        self.topology_score = topology_score


def _as_node(obj: Any) -> NodeRecord | None:
    if isinstance(obj, NodeRecord):
        return obj
    if isinstance(obj, NodeInfo):
        return obj.node
    return None


def _pod_matches_all_raw(terms: Sequence[AffinityTerm], pod: PodInfo) -> bool:
    """Unresolved terms against a pod, as the queueing hints match them (no namespace labels)."""
    if not terms:
        return False
    return all(_existing_term_matches(t, pod, {}) for t in terms)


# ------------------------------------------------------------------------ plugin


class InterPodAffinity:
    name = NAME
    #: Kinds read through handle.objects (namespace labels for namespaceSelector).
    required_kinds = ("namespaces",)

    def __init__(self, args: InterPodAffinityArgs, handle: Handle) -> None:
        self.args = args
        self._handle = handle
        #: Existing pods' required anti-affinity per term, kept across cycles.
        self._existing: NodeAggregate[AffinityTerm, str] = NodeAggregate()
        #: Pods matching an incoming pod's resolved terms, kept across cycles by terms.
        self._matching: NodeAggregates[str, str] = NodeAggregates()
        #: Existing pods' scoring terms, kept across cycles.
        self._scoring: NodeAggregate[tuple[str, AffinityTerm], str] = NodeAggregate()
        #: Pods matching an incoming pod's preferred terms (by position), kept by terms.
        self._preferred: NodeAggregates[int, str] = NodeAggregates()

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """Pods with pod affinity or anti-affinity cannot be signed; the others sign
        their labels (another pod's terms may select them), unless existing pods'
        preferred terms are ignored (OpportunisticBatching)."""
        if signing.has_pod_affinity(pod):
            return [], Status.unschedulable("pods with InterPodAffinity are not signable")
        if self.args.ignore_preferred_terms_of_existing_pods:
            return [], None
        return [SignFragment(signing.LABELS, dict(pod.labels))], None

    @classmethod
    def new(cls, args: Any, handle: Handle) -> InterPodAffinity:
        if args is None:
            args = InterPodAffinityArgs()
        if not isinstance(args, InterPodAffinityArgs):
            raise TypeError(f"want args of type InterPodAffinityArgs, got {type(args).__name__}")
        return cls(args, handle)

    # -- events ------------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.POD,
                    ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE,
                ),
                self.is_schedulable_after_pod_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE,
                    ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT,
                ),
                self.is_schedulable_after_node_change,
            ),
        ]

    def is_schedulable_after_pod_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        if (old is not None and not isinstance(old, PodInfo)) or (
            new is not None and not isinstance(new, PodInfo)
        ):
            return QueueingHint.QUEUE
        if (new is not None and not new.node_name) or (old is not None and not old.node_name):
            return QueueingHint.SKIP
        terms = pod.required_affinity
        anti = pod.required_anti_affinity
        if old is not None and new is not None:
            if not _pod_matches_all_raw(terms, old) and _pod_matches_all_raw(terms, new):
                return QueueingHint.QUEUE
            if _pod_matches_all_raw(anti, old) and not _pod_matches_all_raw(anti, new):
                return QueueingHint.QUEUE
            return QueueingHint.SKIP
        if new is not None:
            return QueueingHint.QUEUE if _pod_matches_all_raw(terms, new) else QueueingHint.SKIP
        if old is not None and _pod_matches_all_raw(anti, old):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def is_schedulable_after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        node = _as_node(new)
        if node is None:
            return QueueingHint.QUEUE
        for t in pod.required_affinity:
            if t.topology_key in node.labels:
                return QueueingHint.QUEUE
        for t in pod.required_anti_affinity:
            if t.topology_key in node.labels:
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    # -- PreFilter / Filter ------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Skip when neither the pod nor any existing pod has required (anti-)affinity."""
        namespaces = _Namespaces(self._handle)
        affinity = _resolve(pod.required_affinity, namespaces)
        anti = _resolve(pod.required_anti_affinity, namespaces)
        ns_labels = namespaces.labels_of(pod.namespace)
        counts = self._tracked_counts(pod, nodes, affinity, anti, ns_labels)
        shared = counts is not None
        if counts is None:
            counts = self._scanned_counts(pod, nodes, affinity, anti, ns_labels)
        existing, affinity_counts, anti_counts = counts
        if not existing and not affinity and not anti:
            return None, Status.skip()
        state.write(
            PRE_FILTER_KEY,
            FilterState(
                affinity,
                anti,
                ns_labels,
                existing,
                affinity_counts,
                anti_counts,
                _matches_all(affinity, pod),
                shared,
            ),
        )
        return None, None

    def _scanned_counts(
        self,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        affinity: tuple[ResolvedTerm, ...],
        anti: tuple[ResolvedTerm, ...],
        ns_labels: dict[str, str],
    ) -> _Counts:
        """PreFilter's counts (existing pods' anti-affinity, the pod's affinity, its
        anti-affinity) from every pod of every node."""
        existing: Counts = {}
        for ni in self._handle.snapshot.have_pods_with_required_anti_affinity():
            node = ni.node
            if node is None:
                continue
            labels = node.labels
            for other in ni.pods_with_required_anti_affinity.values():
                for t in other.required_anti_affinity:
                    value = labels.get(t.topology_key)
                    if value is not None and _existing_term_matches(t, pod, ns_labels):
                        _add(existing, t.topology_key, value, 1)

        affinity_counts: Counts = {}
        anti_counts: Counts = {}
        if affinity or anti:
            for ni in nodes:
                node = ni.node
                if node is None:
                    continue
                labels = node.labels
                for other in ni.pods.values():
                    if affinity and _matches_all(affinity, other):
                        for rt in affinity:
                            value = labels.get(rt.topology_key)
                            if value is not None:
                                _add(affinity_counts, rt.topology_key, value, 1)
                    for rt in anti:
                        value = labels.get(rt.topology_key)
                        if value is not None and rt.matches(other):
                            _add(anti_counts, rt.topology_key, value, 1)
        return existing, affinity_counts, anti_counts

    def _tracked_counts(
        self,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        affinity: tuple[ResolvedTerm, ...],
        anti: tuple[ResolvedTerm, ...],
        ns_labels: dict[str, str],
    ) -> _Counts | None:
        """_scanned_counts from per-node counts kept across cycles (the plugin's own
        totals, to be copied before any change: see FilterState); None when
        ``nodes`` is not the snapshot's node list or the snapshot cannot say which
        nodes changed (see NodeAggregate.refresh).

        Existing pods' anti-affinity is counted per distinct term, independently of
        the incoming pod, so each term is matched against it once per cycle (with the
        namespace labels of this cycle). The incoming pod's own terms are counted in
        an aggregate keyed by the resolved terms: their namespaceSelectors resolved
        with this cycle's namespace labels are part of the key, so a namespace label
        change leads to a new aggregate rather than stale counts.
        """
        snapshot = self._handle.snapshot
        if not self._existing.refresh(snapshot, nodes, _existing_contribution):
            return None
        existing: Counts = {}
        merged: set[str] = set()  # keys whose counts are this cycle's own sums
        for term, per_value in self._existing.totals.items():
            if not _existing_term_matches(term, pod, ns_labels):
                continue
            key = term.topology_key
            counts = existing.get(key)
            if counts is None:
                existing[key] = per_value
                continue
            if key not in merged:
                counts = existing[key] = dict(counts)
                merged.add(key)
            for value, n in per_value.items():
                counts[value] = counts.get(value, 0) + n

        affinity_counts: Counts = {}
        if affinity:

            def affinity_contribution(ni: NodeInfo, node: NodeRecord) -> Contribution[str, str]:
                labels = node.labels
                share: Contribution[str, str] = {}
                for other in ni.pods.values():
                    if _matches_all(affinity, other):
                        for rt in affinity:
                            _count_value(share, rt.topology_key, labels)
                return share

            agg = self._matching.get(("affinity", affinity))
            if not agg.refresh(snapshot, nodes, affinity_contribution):
                return None
            affinity_counts = agg.totals

        anti_counts: Counts = {}
        if anti:

            def anti_contribution(ni: NodeInfo, node: NodeRecord) -> Contribution[str, str]:
                labels = node.labels
                share: Contribution[str, str] = {}
                for other in ni.pods.values():
                    for rt in anti:
                        if rt.matches(other):
                            _count_value(share, rt.topology_key, labels)
                return share

            agg = self._matching.get(("anti", anti))
            if not agg.refresh(snapshot, nodes, anti_contribution):
                return None
            anti_counts = agg.totals

        return existing, affinity_counts, anti_counts

    def pre_filter_extensions(self) -> InterPodAffinity:
        return self

    def add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node_info: NodeInfo
    ) -> Status | None:
        s = state.get(PRE_FILTER_KEY)
        if not isinstance(s, FilterState):
            return Status.as_error(f"reading {PRE_FILTER_KEY!r} from cycle state: not found")
        if node_info.node is not None:
            s.update_with_pod(pod, pod_to_add, node_info.node, 1)
        return None

    def remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status | None:
        s = state.get(PRE_FILTER_KEY)
        if not isinstance(s, FilterState):
            return Status.as_error(f"reading {PRE_FILTER_KEY!r} from cycle state: not found")
        if node_info.node is not None:
            s.update_with_pod(pod, pod_to_remove, node_info.node, -1)
        return None

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """Affinity unmet: UnschedulableAndUnresolvable; either anti-affinity: Unschedulable."""
        s = state.get(PRE_FILTER_KEY)
        if not isinstance(s, FilterState):
            return Status.as_error(f"reading {PRE_FILTER_KEY!r} from cycle state: not found")
        labels = node_info.labels
        if not _satisfies_affinity(s, labels):
            return Status.unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH)
        if s.anti_affinity_counts:
            for rt in s.anti_affinity:
                value = labels.get(rt.topology_key)
                if value is not None and _count(s.anti_affinity_counts, rt.topology_key, value) > 0:
                    return Status.unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)
        for key, per_value in s.existing_anti_affinity_counts.items():
            value = labels.get(key)
            if value is not None and per_value.get(value, 0) > 0:
                return Status.unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)
        return None

    def filter_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> dict[int, Status]:
        """filter over ``nodes`` with each term's counts looked up once."""
        s = state.get(PRE_FILTER_KEY)
        if not isinstance(s, FilterState):
            return filter_rejections(self.filter, state, pod, nodes, range(len(nodes)))
        empty: dict[str, int] = {}
        affinity = [
            (rt.topology_key, s.affinity_counts.get(rt.topology_key, empty)) for rt in s.affinity
        ]
        # with no match anywhere, the first pod of a group may still go where the keys exist
        first = not s.affinity_counts and s.self_match
        checks = [
            (rt.topology_key, per_value, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)
            for rt in s.anti_affinity
            if (per_value := s.anti_affinity_counts.get(rt.topology_key))
        ]
        checks += [
            (key, per_value, ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)
            for key, per_value in s.existing_anti_affinity_counts.items()
        ]
        out: dict[int, Status] = {}
        if not affinity and not checks:
            return out
        unschedulable, unresolvable = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        for j, ni in enumerate(nodes):
            labels = ni.labels
            if affinity:
                keys_exist = pods_exist = True
                for key, per_value in affinity:
                    value = labels.get(key)
                    if value is None:
                        keys_exist = False
                        break
                    if per_value.get(value, 0) <= 0:
                        pods_exist = False
                if not keys_exist or not (pods_exist or first):
                    out[j] = Status(unresolvable, [ERR_REASON_AFFINITY_RULES_NOT_MATCH])
                    continue
            for key, per_value, reason in checks:
                value = labels.get(key)
                if value is not None and per_value.get(value, 0) > 0:
                    out[j] = Status(unschedulable, [reason])
                    break
        return out

    # -- PreScore / Score --------------------------------------------------------

    def pre_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        """Skip when no term of either side matched anything."""
        has_preferred = bool(pod.preferred_affinity or pod.preferred_anti_affinity)
        if not has_preferred and (
            self.args.ignore_preferred_terms_of_existing_pods
            or not self._handle.snapshot.have_pods_with_affinity()
        ):
            return Status.skip()  # nothing to score from either side
        namespaces = _Namespaces(self._handle)
        preferred = _resolve(pod.preferred_affinity, namespaces)
        preferred_anti = _resolve(pod.preferred_anti_affinity, namespaces)
        ns_labels = namespaces.labels_of(pod.namespace)
        scores = self._tracked_scores(pod, preferred, preferred_anti, ns_labels)
        if scores is None:
            scores = self._scanned_scores(pod, preferred, preferred_anti, ns_labels)
        if not scores:
            return Status.skip()
        state.write(PRE_SCORE_KEY, ScoreState(scores))
        return None

    def _scanned_scores(
        self,
        pod: PodInfo,
        preferred: tuple[ResolvedTerm, ...],
        preferred_anti: tuple[ResolvedTerm, ...],
        ns_labels: dict[str, str],
    ) -> Counts:
        """PreScore's score per topology domain from every pod of every node (all of
        them when the pod has preferred terms, else those with affinity)."""
        has_preferred = bool(preferred or preferred_anti)
        snapshot = self._handle.snapshot
        all_nodes = snapshot.node_infos() if has_preferred else snapshot.have_pods_with_affinity()
        hard_weight = self.args.hard_pod_affinity_weight
        scores: Counts = {}

        def add(key: str, labels: Mapping[str, str], weight: int) -> None:
            value = labels.get(key)
            if value is None:
                return
            per_key = scores.get(key)
            if per_key is None:
                per_key = scores[key] = {}
            per_key[value] = per_key.get(value, 0) + weight

        for ni in all_nodes:
            node = ni.node
            if node is None or not node.labels:
                continue
            labels = node.labels
            others = ni.pods if has_preferred else ni.pods_with_affinity
            for other in others.values():
                for rt in preferred:
                    if rt.matches(other):
                        add(rt.topology_key, labels, rt.weight)
                for rt in preferred_anti:
                    if rt.matches(other):
                        add(rt.topology_key, labels, -rt.weight)
                if hard_weight > 0:
                    for t in other.required_affinity:
                        if _existing_term_matches(t, pod, ns_labels):
                            add(t.topology_key, labels, hard_weight)
                for t in other.preferred_affinity:
                    if _existing_term_matches(t, pod, ns_labels):
                        add(t.topology_key, labels, t.weight)
                for t in other.preferred_anti_affinity:
                    if _existing_term_matches(t, pod, ns_labels):
                        add(t.topology_key, labels, -t.weight)
        return scores

    def _tracked_scores(
        self,
        pod: PodInfo,
        preferred: tuple[ResolvedTerm, ...],
        preferred_anti: tuple[ResolvedTerm, ...],
        ns_labels: dict[str, str],
    ) -> Counts | None:
        """_scanned_scores from pods per term and topology value kept across cycles;
        None when the snapshot cannot say which nodes changed."""
        snapshot = self._handle.snapshot
        nodes = snapshot.node_infos()
        if not self._scoring.refresh(snapshot, nodes, _scoring_contribution):
            return None
        scores: Counts = {}

        def add(key: str, per_value: Mapping[str, int], weight: int) -> None:
            per_key = scores.get(key)
            if per_key is None:
                per_key = scores[key] = {}
            for value, n in per_value.items():
                per_key[value] = per_key.get(value, 0) + n * weight

        terms = (*preferred, *preferred_anti)
        if terms:

            def contribution(ni: NodeInfo, node: NodeRecord) -> Contribution[int, str]:
                share: Contribution[int, str] = {}
                labels = node.labels
                if not labels:
                    return share
                for i, rt in enumerate(terms):
                    value = labels.get(rt.topology_key)
                    if value is None:
                        continue
                    n = sum(1 for other in ni.pods.values() if rt.matches(other))
                    if n:
                        share[i] = {value: n}
                return share

            agg = self._preferred.get((preferred, preferred_anti))
            if not agg.refresh(snapshot, nodes, contribution):
                return None
            for i, per_value in agg.totals.items():
                rt = terms[i]
                add(rt.topology_key, per_value, rt.weight if i < len(preferred) else -rt.weight)

        hard_weight = self.args.hard_pod_affinity_weight
        for (kind, t), per_value in self._scoring.totals.items():
            if kind == _REQUIRED:
                if hard_weight <= 0 or not _existing_term_matches(t, pod, ns_labels):
                    continue
                add(t.topology_key, per_value, hard_weight)
            elif _existing_term_matches(t, pod, ns_labels):
                add(t.topology_key, per_value, t.weight if kind == _PREFERRED else -t.weight)
        return scores

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        s = state.get(PRE_SCORE_KEY)
        if not isinstance(s, ScoreState):
            return 0, Status.as_error(f"reading {PRE_SCORE_KEY!r} from cycle state: not found")
        labels = node_info.labels
        total = 0
        for key, per_value in s.topology_score.items():
            value = labels.get(key)
            if value is not None:
                total += per_value.get(value, 0)
        return total, None

    def normalize_score(
        self, state: CycleState, pod: PodInfo, scores: list[NodeScore]
    ) -> Status | None:
        """(s - min) * 100 / (max - min), truncated; all equal -> 0."""
        s = state.get(PRE_SCORE_KEY)
        if not isinstance(s, ScoreState):
            return Status.as_error(f"reading {PRE_SCORE_KEY!r} from cycle state: not found")
        if not s.topology_score or not scores:
            return None
        lowest = min(ns.score for ns in scores)
        spread = max(ns.score for ns in scores) - lowest
        for ns in scores:
            ns.score = int(MAX_NODE_SCORE * ((ns.score - lowest) / spread)) if spread > 0 else 0
        return None


def _satisfies_affinity(s: FilterState, labels: Mapping[str, str]) -> bool:
    pods_exist = True
    for rt in s.affinity:
        value = labels.get(rt.topology_key)
        if value is None:
            return False  # every topology key must exist on the node
        if _count(s.affinity_counts, rt.topology_key, value) <= 0:
            pods_exist = False
    if pods_exist:
        return True
    # The first pod of a group with affinity to itself: nothing matches anywhere yet.
    return not s.affinity_counts and s.self_match


ENTRY = PluginEntry(NAME, InterPodAffinity, InterPodAffinity.new, parse_args)
