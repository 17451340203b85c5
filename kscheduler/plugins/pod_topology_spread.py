"""PodTopologySpread: spread matching pods evenly over topology domains.

Constraints come from ``spec.topologySpreadConstraints`` or, for a pod that has
none, from the plugin's default constraints with a selector derived from the
Services, ReplicationControllers, ReplicaSets and StatefulSets selecting the pod.

* PreFilter counts, per DoNotSchedule constraint, the matching pods of every
  domain (nodes must carry all topology keys and pass the constraint's node
  inclusion policies) and keeps the two smallest domains (the "critical paths").
  Filter is then a few dict lookups per node:
  ``count(domain) + selfMatch - globalMin > maxSkew`` rejects the node.
  Where the counts cannot depend on the incoming pod beyond its namespace and
  constraints, each node's counts are kept across cycles and only the nodes
  changed since the last cycle are counted again (see _tracked_domain_counts).
* PreScore does the same for ScheduleAnyway constraints, limited to the domains
  of the filtered nodes; Score sums ``count * ln(domains + 2) + (maxSkew - 1)``;
  NormalizeScore maps the lowest sum to 100.
"""

from __future__ import annotations

import math
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
)
from kscheduler.framework.aggregate import Contribution, NodeAggregates
from kscheduler.framework.args import INT32_MAX, INT32_MIN, ConfigError, Fields
from kscheduler.framework.helpers import filter_rejections
from kscheduler.framework.selectors import LabelSelector, Requirement, SelectorError
from kscheduler.framework.signing import SignFragment
from kscheduler.framework.types import tolerates_taint

NAME = "PodTopologySpread"

ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
SYSTEM_DEFAULTING = "System"
LIST_DEFAULTING = "List"
HONOR = "Honor"
IGNORE = "Ignore"

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ZONE = "topology.kubernetes.io/zone"

PRE_FILTER_KEY = "PreFilter" + NAME
PRE_SCORE_KEY = "PreScore" + NAME
_EXT_KEY = NAME

#: Initial match number of an empty critical path.
_NO_MATCH = INT32_MAX

#: Groups of a node's tracked counts, per constraint index: its matching pods, and
#: 1 for its domain (so that domains without matching pods are counted too).
_PODS = "pods"
_NODES = "nodes"


# --------------------------------------------------------------------------- args


@dataclass(frozen=True, slots=True)
class DefaultConstraint:
    """One entry of ``defaultConstraints``; its selector is derived per pod."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE


#: Used with defaultingType System: hostname maxSkew 3, zone maxSkew 5, both ScheduleAnyway.
SYSTEM_DEFAULT_CONSTRAINTS = (
    DefaultConstraint(3, LABEL_HOSTNAME, SCHEDULE_ANYWAY),
    DefaultConstraint(5, LABEL_ZONE, SCHEDULE_ANYWAY),
)


@dataclass(frozen=True, slots=True)
class PodTopologySpreadArgs:
    #: Constraints for pods without their own (defaultingType List only).
    default_constraints: tuple[DefaultConstraint, ...] = ()
    #: System: the built-in SYSTEM_DEFAULT_CONSTRAINTS; List: ``default_constraints``.
    defaulting_type: str = SYSTEM_DEFAULTING


_LABEL_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
_DNS_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")


def _label_name_problem(key: str) -> str | None:
    """Why ``key`` is not a qualified label name ([prefix/]name), or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "prefix part must be non-empty"
    if prefix and (
        len(prefix) > 253
        or not set(prefix) <= _DNS_CHARS
        or any(not p or not (p[0].isalnum() and p[-1].isalnum()) for p in prefix.split("."))
    ):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not set(name) <= _LABEL_NAME_CHARS or not (name[0].isalnum() and name[-1].isalnum()):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


def _parse_default_constraint(f: Fields) -> DefaultConstraint:
    max_skew = f.integer("maxSkew", 0, minimum=INT32_MIN, maximum=INT32_MAX)
    if max_skew <= 0:
        raise f.error("maxSkew", f"not in valid range (0, inf), got {max_skew}")
    key = f.string("topologyKey")
    if not key:
        raise f.error("topologyKey", "can not be empty")
    problem = _label_name_problem(key)
    if problem:
        raise f.error("topologyKey", f"invalid label name {key!r}: {problem}")
    when = f.string("whenUnsatisfiable")
    if not when:
        raise f.error("whenUnsatisfiable", "can not be empty")
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise f.error(
            "whenUnsatisfiable",
            f'unsupported value "{when}": must be one of "{DO_NOT_SCHEDULE}", "{SCHEDULE_ANYWAY}"',
        )
    if f.raw("labelSelector") is not None:
        raise f.error(
            "labelSelector", "constraint must not define a selector, as they deduced for each pod"
        )
    min_domains = f.integer("minDomains", 1, minimum=INT32_MIN, maximum=INT32_MAX)
    affinity_policy = f.string("nodeAffinityPolicy", HONOR, choices=(HONOR, IGNORE))
    taints_policy = f.string("nodeTaintsPolicy", IGNORE, choices=(HONOR, IGNORE))
    # matchLabelKeys is accepted but has no effect: the derived selector replaces it.
    f.strings("matchLabelKeys")
    f.done()
    return DefaultConstraint(max_skew, key, when, min_domains, affinity_policy, taints_policy)


def parse_args(raw: Mapping[str, Any]) -> PodTopologySpreadArgs:
    """PodTopologySpreadArgs; raises ConfigError with a path relative to the args."""
    f = Fields(raw)
    constraints: list[DefaultConstraint] = []
    seen: dict[tuple[str, str], int] = {}
    for i, cf in enumerate(f.objects("defaultConstraints")):
        c = _parse_default_constraint(cf)
        if (c.topology_key, c.when_unsatisfiable) in seen:
            raise ConfigError(
                f"defaultConstraints[{i}]",
                f"Duplicate value: {{{c.topology_key}, {c.when_unsatisfiable}}}",
            )
        seen[(c.topology_key, c.when_unsatisfiable)] = i
        constraints.append(c)
    defaulting = f.string(
        "defaultingType", SYSTEM_DEFAULTING, choices=(SYSTEM_DEFAULTING, LIST_DEFAULTING)
    )
    if defaulting == SYSTEM_DEFAULTING and constraints:
        raise f.error(
            "defaultingType", 'Invalid value: "System": when .defaultConstraints are not empty'
        )
    f.done()
    return PodTopologySpreadArgs(tuple(constraints), defaulting)


# ---------------------------------------------------------------------- constraints


@dataclass(frozen=True, slots=True)
class Constraint:
    """A parsed constraint. ``selector`` None matches no pod (a nil labelSelector)."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    min_domains: int
    honor_node_affinity: bool
    honor_node_taints: bool

    def matches(self, labels: Mapping[str, str]) -> bool:
        return self.selector is not None and self.selector.matches(labels)

    @property
    def counts_pods(self) -> bool:
        """An empty selector counts no existing pod (while it still matches the pod itself)."""
        return self.selector is not None and not self.selector.is_empty()


class _BadConstraints(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _OwnConstraints:
    """The pod's own constraints, cached in PodInfo.ext per pod version."""

    present: bool
    hard: tuple[Constraint, ...]
    soft: tuple[Constraint, ...]
    error: str = ""


def _merge_match_label_keys(
    selector: LabelSelector | None, keys: Iterable[str], labels: Mapping[str, str]
) -> LabelSelector | None:
    extra = tuple((k, labels[k]) for k in dict.fromkeys(keys) if k in labels)
    if not extra or selector is None:
        return selector
    return LabelSelector(selector.match_labels + extra, selector.requirements)


def _parse_own(pod: PodInfo) -> _OwnConstraints:
    raw = pod.spec.get("topologySpreadConstraints")
    if not raw:
        return _OwnConstraints(False, (), ())
    hard: list[Constraint] = []
    soft: list[Constraint] = []
    try:
        if not isinstance(raw, list):
            raise _BadConstraints("spec.topologySpreadConstraints: expected a list")
        for i, item in enumerate(raw):
            where = f"spec.topologySpreadConstraints[{i}]"
            if not isinstance(item, dict):
                raise _BadConstraints(f"{where}: expected an object")
            when = item.get("whenUnsatisfiable")
            if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
                continue
            max_skew = item.get("maxSkew", 0)
            min_domains = item.get("minDomains")
            if min_domains is None:
                min_domains = 1
            key = item.get("topologyKey", "")
            if not isinstance(max_skew, int) or not isinstance(min_domains, int):
                raise _BadConstraints(f"{where}: maxSkew and minDomains must be integers")
            if not isinstance(key, str):
                raise _BadConstraints(f"{where}.topologyKey: expected a string")
            ls = item.get("labelSelector")
            selector = LabelSelector.parse(ls, f"{where}.labelSelector") if ls is not None else None
            keys = item.get("matchLabelKeys") or []
            if not isinstance(keys, list):
                raise _BadConstraints(f"{where}.matchLabelKeys: expected a list")
            selector = _merge_match_label_keys(selector, (str(k) for k in keys), pod.labels)
            c = Constraint(
                max_skew,
                key,
                selector,
                min_domains,
                (item.get("nodeAffinityPolicy") or HONOR) == HONOR,
                (item.get("nodeTaintsPolicy") or IGNORE) == HONOR,
            )
            (hard if when == DO_NOT_SCHEDULE else soft).append(c)
    except (_BadConstraints, SelectorError) as exc:
        return _OwnConstraints(True, (), (), str(exc))
    return _OwnConstraints(True, tuple(hard), tuple(soft))


def _own_constraints(pod: PodInfo) -> _OwnConstraints:
    own = pod.ext.get(_EXT_KEY)
    if not isinstance(own, _OwnConstraints):
        own = _parse_own(pod)
        pod.ext[_EXT_KEY] = own
    return own


def _owner_controller(pod: PodInfo) -> Mapping[str, Any] | None:
    meta = pod.raw.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def _spec_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = obj.get("spec") if obj is not None else None
    return spec if isinstance(spec, dict) else {}


def default_selector(pod: PodInfo, handle: Handle) -> LabelSelector:
    """Selector of the Services, RC, RS and StatefulSet selecting the pod (possibly empty)."""
    objects = handle.objects
    label_set: dict[str, str] = {}
    for svc in objects.list("services", pod.namespace):
        sel = _spec_of(svc).get("selector")
        if not isinstance(sel, dict):
            continue  # a Service without a selector selects nothing
        if all(pod.labels.get(k) == v for k, v in sel.items()):
            label_set.update({str(k): str(v) for k, v in sel.items()})
    extra: LabelSelector | None = None
    owner = _owner_controller(pod)
    if owner is not None:
        api_version, kind, name = owner.get("apiVersion"), owner.get("kind"), owner.get("name")
        if api_version == "v1" and kind == "ReplicationController":
            rc = objects.get("replicationcontrollers", pod.namespace, str(name))
            if rc is not None:
                sel = _spec_of(rc).get("selector")
                if isinstance(sel, dict):
                    label_set.update({str(k): str(v) for k, v in sel.items()})
        elif api_version == "apps/v1" and kind in ("ReplicaSet", "StatefulSet"):
            kind_name = "replicasets" if kind == "ReplicaSet" else "statefulsets"
            obj = objects.get(kind_name, pod.namespace, str(name))
            raw_sel = _spec_of(obj).get("selector") if obj is not None else None
            if isinstance(raw_sel, dict):
                try:
                    extra = LabelSelector.parse(raw_sel)
                except SelectorError:
                    extra = None
    match_labels = tuple(sorted(label_set.items()))
    reqs: tuple[Requirement, ...] = ()
    if extra is not None:
        match_labels += extra.match_labels
        reqs = extra.requirements
    return LabelSelector(match_labels, reqs)


# ----------------------------------------------------------------- node inclusion


def _node_affinity_matches(pod: PodInfo, node: NodeRecord) -> bool:
    labels = node.labels
    for k, v in pod.node_selector.items():
        if labels.get(k) != v:
            return False
    req = pod.required_node_affinity
    return req is None or req.matches(labels, node.name)


def _has_untolerated_hard_taint(pod: PodInfo, node: NodeRecord) -> bool:
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates_taint(
            pod.tolerations, taint
        ):
            return True
    return False


def _has_all_keys(labels: Mapping[str, str], constraints: Sequence[Constraint]) -> bool:
    return all(c.topology_key in labels for c in constraints)


def _count_matching(pods: Iterable[PodInfo], selector: LabelSelector, namespace: str) -> int:
    """Pods of ``namespace``, not terminating, that ``selector`` matches."""
    n = 0
    if not selector.requirements and len(selector.match_labels) == 1:
        # the common case (app=x) without the general matcher's overhead
        ((key, value),) = selector.match_labels
        for p in pods:
            if p.namespace == namespace and not p.deleting and p.labels.get(key) == value:
                n += 1
        return n
    matches = selector.matches
    for p in pods:
        if p.namespace == namespace and not p.deleting and matches(p.labels):
            n += 1
    return n


def _domain_counts(
    pod: PodInfo, constraints: Sequence[Constraint], nodes: Sequence[NodeInfo]
) -> list[dict[str, int]]:
    """Per constraint: domain -> matching pods, over the nodes that count for it."""
    counts: list[dict[str, int]] = [{} for _ in constraints]
    counter = _NodeCounter(pod, constraints)
    for ni in nodes:
        node = ni.node
        if node is None:
            continue
        labels = node.labels
        if not _has_all_keys(labels, constraints):
            continue
        for i, n in enumerate(counter.counts(ni, node)):
            if n is None:
                continue
            value = labels[constraints[i].topology_key]
            counts[i][value] = counts[i].get(value, 0) + n
    return counts


def _selector_groups(constraints: Sequence[Constraint]) -> list[int]:
    """Index of the first constraint with an equal selector (counts are shared)."""
    groups: list[int] = []
    for i, c in enumerate(constraints):
        g = i
        for j in range(i):
            if constraints[j].selector == c.selector:
                g = groups[j]
                break
        groups.append(g)
    return groups


class _NodeCounter:
    """Counts the matching pods of one node per constraint, honouring inclusion policies."""

    __slots__ = ("constraints", "groups", "namespace", "pod")

    def __init__(self, pod: PodInfo, constraints: Sequence[Constraint]) -> None:
        self.pod = pod
        self.namespace = pod.namespace
        self.constraints = constraints
        self.groups = _selector_groups(constraints)

    def counts(
        self, ni: NodeInfo, node: NodeRecord, wanted: Sequence[bool] | None = None
    ) -> list[int | None]:
        """Per constraint: the count, or None when the node does not count for it."""
        out: list[int | None] = []
        affinity_ok: bool | None = None
        taints_ok: bool | None = None
        cache: dict[int, int] = {}
        for i, c in enumerate(self.constraints):
            if wanted is not None and not wanted[i]:
                out.append(None)
                continue
            if c.honor_node_affinity:
                if affinity_ok is None:
                    affinity_ok = _node_affinity_matches(self.pod, node)
                if not affinity_ok:
                    out.append(None)
                    continue
            if c.honor_node_taints:
                if taints_ok is None:
                    taints_ok = not _has_untolerated_hard_taint(self.pod, node)
                if not taints_ok:
                    out.append(None)
                    continue
            if c.selector is None or not c.counts_pods:
                out.append(0)
                continue
            g = self.groups[i]
            n = cache.get(g)
            if n is None:
                n = cache[g] = _count_matching(ni.pods.values(), c.selector, self.namespace)
            out.append(n)
        return out


# ------------------------------------------------------------------------ states


def _critical_paths(per_domain: Mapping[str, int]) -> list[Any]:
    """The two domains with the fewest matching pods, [value0, num0, value1, num1].

    Ties go to the smaller value, so that the paths depend on the counts alone and
    not on the order in which the domains were counted.
    """
    paths: list[Any] = ["", _NO_MATCH, "", _NO_MATCH]
    if not per_domain:
        return paths
    # Two passes at C speed rather than one comparing (count, value) keys in Python:
    # the domains at the smallest count, then (if only one) those at the next.
    least = min(per_domain.values())
    at_least = [value for value, num in per_domain.items() if num == least]
    if len(at_least) >= 2:
        first = min(at_least)
        at_least.remove(first)
        paths[0], paths[2] = first, min(at_least)
        paths[1] = paths[3] = least
        return paths
    paths[0], paths[1] = at_least[0], least
    rest = [num for num in per_domain.values() if num != least]
    if rest:
        second = min(rest)
        paths[2] = min(value for value, num in per_domain.items() if num == second)
        paths[3] = second
    return paths


def _update_paths(paths: list[Any], value: str, num: int) -> None:
    """Keep the two smallest domains: [value0, num0, value1, num1], num0 <= num1."""
    if value == paths[0]:
        paths[1] = num
    elif value == paths[2]:
        paths[3] = num
    else:
        if num < paths[1]:
            paths[2], paths[3] = paths[0], paths[1]
            paths[0], paths[1] = value, num
        elif num < paths[3]:
            paths[2], paths[3] = value, num
        return
    if paths[1] > paths[3]:
        paths[0], paths[1], paths[2], paths[3] = paths[2], paths[3], paths[0], paths[1]


class FilterState:
    """PreFilter's counts for DoNotSchedule constraints. Cloned for preemption."""

    __slots__ = ("constraints", "counts", "paths", "self_match")

    def __init__(
        self,
        constraints: tuple[Constraint, ...],
        counts: list[dict[str, int]],
        paths: list[list[Any]],
        self_match: tuple[int, ...],
    ) -> None:
        self.constraints = constraints
        #: Per constraint: domain value -> matching pods.
        self.counts = counts
        #: Per constraint: the two domains with the fewest matches (critical paths).
        self.paths = paths
        #: Per constraint: 1 if the incoming pod matches its own selector.
        self.self_match = self_match

    def min_match(self, i: int) -> int:
        if len(self.counts[i]) < self.constraints[i].min_domains:
            return 0
        n: int = self.paths[i][1]
        return n

    def clone(self) -> FilterState:
        return FilterState(
            self.constraints,
            [dict(c) for c in self.counts],
            [list(p) for p in self.paths],
            self.self_match,
        )


class ScoreState:
    """PreScore's counts for ScheduleAnyway constraints (read-only, shared by clones)."""

    __slots__ = ("constraints", "counts", "ignored", "namespace", "weights")

    def __init__(self, constraints: tuple[Constraint, ...], namespace: str) -> None:
        self.constraints = constraints
        self.namespace = namespace
        #: Filtered nodes lacking a topology key: scored 0.
        self.ignored: set[str] = set()
        #: Per constraint: domain value -> matching pods (not filled for hostname).
        self.counts: list[dict[str, int]] = [{} for _ in constraints]
        #: Per constraint: ln(number of domains among the filtered nodes + 2).
        self.weights: list[float] = [0.0] * len(constraints)


def _go_round(x: float) -> int:
    """Round half away from zero."""
    r = math.floor(abs(x))
    if abs(x) - r >= 0.5:
        r += 1
    return int(r) if x >= 0 else -int(r)


def _as_node(obj: Any) -> NodeRecord | None:
    if isinstance(obj, NodeRecord):
        return obj
    if isinstance(obj, NodeInfo):
        return obj.node
    return None


def _raw_spec_field(raw: Mapping[str, Any], name: str) -> Any:
    spec = raw.get("spec")
    return spec.get(name) if isinstance(spec, dict) else None


# ------------------------------------------------------------------------ plugin


class PodTopologySpread:
    name = NAME
    #: Kinds read through handle.objects to derive default selectors.
    required_kinds = ("services", "replicationcontrollers", "replicasets", "statefulsets")

    def __init__(self, args: PodTopologySpreadArgs, handle: Handle) -> None:
        self._handle = handle
        self.system_defaulted = args.defaulting_type == SYSTEM_DEFAULTING
        self.default_constraints: tuple[DefaultConstraint, ...] = (
            SYSTEM_DEFAULT_CONSTRAINTS if self.system_defaulted else args.default_constraints
        )
        #: PreFilter's per-node counts kept across cycles, by namespace and constraints.
        self._aggregates: NodeAggregates[tuple[int, str], str] = NodeAggregates()

    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """Pods with constraints cannot be signed, nor any pod while the profile has
        default constraints (the system defaults too) (OpportunisticBatching)."""
        spec = pod.raw.get("spec")
        if isinstance(spec, dict) and spec.get("topologySpreadConstraints"):
            return [], Status.unschedulable("pods with topology constraints are not signable")
        if self.default_constraints:
            return [], Status.unschedulable(
                "pods with default topology constraints are not signable"
            )
        return [], None

    def refuses_every_pod(self) -> bool:
        """With default constraints (the system defaults too) no pod is signable."""
        return bool(self.default_constraints)

    @classmethod
    def new(cls, args: Any, handle: Handle) -> PodTopologySpread:
        if args is None:
            args = PodTopologySpreadArgs()
        if not isinstance(args, PodTopologySpreadArgs):
            raise TypeError(f"want args of type PodTopologySpreadArgs, got {type(args).__name__}")
        return cls(args, handle)

    # -- constraints --------------------------------------------------------------

    def _defaults(self, pod: PodInfo, action: str) -> tuple[Constraint, ...]:
        templates = [d for d in self.default_constraints if d.when_unsatisfiable == action]
        if not templates:
            return ()
        selector = default_selector(pod, self._handle)
        if selector.is_empty():
            return ()
        return tuple(
            Constraint(
                d.max_skew,
                d.topology_key,
                selector,
                d.min_domains,
                d.node_affinity_policy == HONOR,
                d.node_taints_policy == HONOR,
            )
            for d in templates
        )

    def constraints(self, pod: PodInfo, action: str) -> tuple[Constraint, ...]:
        """The pod's constraints for ``action``, or the default ones if it has none.

        Raises _BadConstraints when the pod's constraints cannot be parsed.
        """
        own = _own_constraints(pod)
        if own.error:
            raise _BadConstraints(own.error)
        if own.present:
            return own.hard if action == DO_NOT_SCHEDULE else own.soft
        return self._defaults(pod, action)

    # -- events ------------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        pod_actions = (
            ActionType.ADD
            | ActionType.UPDATE_POD_LABEL
            | ActionType.UPDATE_POD_TOLERATION
            | ActionType.DELETE
        )
        node_actions = (
            ActionType.ADD
            | ActionType.DELETE
            | ActionType.UPDATE_NODE_LABEL
            | ActionType.UPDATE_NODE_TAINT
        )
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, pod_actions), self.is_schedulable_after_pod_change
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, node_actions),
                self.is_schedulable_after_node_change,
            ),
        ]

    def is_schedulable_after_pod_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        if (old is not None and not isinstance(old, PodInfo)) or (
            new is not None and not isinstance(new, PodInfo)
        ):
            return QueueingHint.QUEUE

        def involved(other: PodInfo) -> bool:
            return other.uid == pod.uid or (
                bool(other.node_name) and other.namespace == pod.namespace
            )

        if (new is not None and not involved(new)) or (old is not None and not involved(old)):
            return QueueingHint.SKIP
        try:
            constraints = self.constraints(pod, DO_NOT_SCHEDULE)
        except _BadConstraints:
            return QueueingHint.QUEUE
        if old is not None and new is not None:
            if (
                pod.uid == new.uid
                and (
                    old.tolerations != new.tolerations
                    or _raw_spec_field(old.raw, "tolerations")
                    != _raw_spec_field(new.raw, "tolerations")
                )
                and any(c.honor_node_taints for c in constraints)
            ):
                return QueueingHint.QUEUE
            if old.labels == new.labels:
                return QueueingHint.SKIP
            for c in constraints:
                if c.matches(old.labels) != c.matches(new.labels):
                    return QueueingHint.QUEUE
            return QueueingHint.SKIP
        changed = new if new is not None else old
        if changed is not None and any(c.matches(changed.labels) for c in constraints):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def is_schedulable_after_node_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        old_node, new_node = _as_node(old), _as_node(new)
        if (old is not None and old_node is None) or (new is not None and new_node is None):
            return QueueingHint.QUEUE
        try:
            constraints = self.constraints(pod, DO_NOT_SCHEDULE)
        except _BadConstraints:
            return QueueingHint.QUEUE
        old_ok = old_node is not None and _has_all_keys(old_node.labels, constraints)
        new_ok = new_node is not None and _has_all_keys(new_node.labels, constraints)
        if old_node is not None and new_node is not None:
            if old_ok != new_ok:
                return QueueingHint.QUEUE
            if new_ok and (
                any(
                    old_node.labels.get(c.topology_key) != new_node.labels.get(c.topology_key)
                    for c in constraints
                )
                or old_node.taints != new_node.taints
                or _raw_spec_field(old_node.raw, "taints")
                != _raw_spec_field(new_node.raw, "taints")
            ):
                return QueueingHint.QUEUE
            return QueueingHint.SKIP
        if new_node is not None:
            return QueueingHint.QUEUE if new_ok else QueueingHint.SKIP
        return QueueingHint.QUEUE if old_ok else QueueingHint.SKIP

    # -- PreFilter / Filter ------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Skip without DoNotSchedule constraints; Error when they cannot be parsed."""
        try:
            constraints = self.constraints(pod, DO_NOT_SCHEDULE)
        except _BadConstraints as exc:
            return None, Status.as_error(f"get constraints from pod: {exc}")
        if not constraints:
            return None, Status.skip()
        counts = self._tracked_domain_counts(pod, constraints, nodes)
        if counts is None:
            counts = _domain_counts(pod, constraints, nodes)
        paths = [_critical_paths(per_domain) for per_domain in counts]
        self_match = tuple(1 if c.matches(pod.labels) else 0 for c in constraints)
        state.write(PRE_FILTER_KEY, FilterState(constraints, counts, paths, self_match))
        return None, None

    def _tracked_domain_counts(
        self, pod: PodInfo, constraints: tuple[Constraint, ...], nodes: Sequence[NodeInfo]
    ) -> list[dict[str, int]] | None:
        """_domain_counts from per-node counts kept across cycles; None if they cannot
        be used: a node inclusion policy makes the counts depend on the pod, ``nodes``
        is not the snapshot's node list, or the snapshot cannot say which nodes
        changed (see NodeAggregate.refresh)."""
        if any(c.honor_node_taints for c in constraints):
            return None  # on the pod's tolerations
        if (pod.node_selector or pod.required_node_affinity is not None) and any(
            c.honor_node_affinity for c in constraints
        ):
            return None  # on the pod's node selector and affinity
        # Past these checks a node's counts depend on its labels and pods, the pod's
        # namespace and each constraint's topology key and selector: the key. (A
        # default selector comes from Services and controllers: it is in the key.)
        key = (pod.namespace, tuple((c.topology_key, c.selector) for c in constraints))
        counter = _NodeCounter(pod, constraints)

        def contribution(ni: NodeInfo, node: NodeRecord) -> Contribution[tuple[int, str], str]:
            labels = node.labels
            if not _has_all_keys(labels, constraints):
                return {}
            share: Contribution[tuple[int, str], str] = {}
            for i, n in enumerate(counter.counts(ni, node)):
                if n is not None:
                    value = labels[constraints[i].topology_key]
                    share[(i, _PODS)] = {value: n}
                    share[(i, _NODES)] = {value: 1}
            return share

        agg = self._aggregates.get(key)
        if not agg.refresh(self._handle.snapshot, nodes, contribution):
            return None
        counts: list[dict[str, int]] = []
        for i in range(len(constraints)):
            domains = agg.totals.get((i, _NODES), {})
            matching = agg.totals.get((i, _PODS), {})
            # every value with matching pods has nodes: the domains' order, their counts
            per_domain = dict.fromkeys(domains, 0)
            per_domain.update(matching)
            counts.append(per_domain)
        return counts

    def pre_filter_extensions(self) -> PodTopologySpread:
        return self

    def _update_with_pod(
        self, state: CycleState, pod: PodInfo, other: PodInfo, node_info: NodeInfo, delta: int
    ) -> Status | None:
        s = state.get(PRE_FILTER_KEY)
        if not isinstance(s, FilterState):
            return Status.as_error(f"reading {PRE_FILTER_KEY!r} from cycle state: not found")
        node = node_info.node
        if node is None or other.namespace != pod.namespace:
            return None
        labels = node.labels
        if not _has_all_keys(labels, s.constraints):
            return None
        affinity_ok: bool | None = None
        taints_ok: bool | None = None
        for i, c in enumerate(s.constraints):
            if not c.matches(other.labels):
                continue
            if c.honor_node_affinity:
                if affinity_ok is None:
                    affinity_ok = _node_affinity_matches(pod, node)
                if not affinity_ok:
                    continue
            if c.honor_node_taints:
                if taints_ok is None:
                    taints_ok = not _has_untolerated_hard_taint(pod, node)
                if not taints_ok:
                    continue
            value = labels[c.topology_key]
            n = s.counts[i].get(value, 0) + delta
            s.counts[i][value] = n
            _update_paths(s.paths[i], value, n)
        return None

    def add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node_info: NodeInfo
    ) -> Status | None:
        return self._update_with_pod(state, pod, pod_to_add, node_info, 1)

    def remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node_info: NodeInfo
    ) -> Status | None:
        return self._update_with_pod(state, pod, pod_to_remove, node_info, -1)

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable for a missing topology label; Unschedulable for skew."""
        s = state.get(PRE_FILTER_KEY)
        if not isinstance(s, FilterState):
            return Status.as_error(f"reading {PRE_FILTER_KEY!r} from cycle state: not found")
        if not s.constraints:
            return None
        labels = node_info.labels
        for i, c in enumerate(s.constraints):
            value = labels.get(c.topology_key)
            if value is None:
                return Status.unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)
            skew = s.counts[i].get(value, 0) + s.self_match[i] - s.min_match(i)
            if skew > c.max_skew:
                return Status.unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
        return None

    def filter_nodes(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> dict[int, Status]:
        """filter over ``nodes`` with each constraint's bound worked out once: a node
        is rejected when its domain's count exceeds maxSkew - selfMatch + minMatch."""
        s = state.get(PRE_FILTER_KEY)
        if not isinstance(s, FilterState):
            return filter_rejections(self.filter, state, pod, nodes, range(len(nodes)))
        if not s.constraints:
            return {}
        checks = [
            (c.topology_key, s.counts[i], c.max_skew - s.self_match[i] + s.min_match(i))
            for i, c in enumerate(s.constraints)
        ]
        unschedulable, unresolvable = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        out: dict[int, Status] = {}
        for j, ni in enumerate(nodes):
            labels = ni.labels
            for key, counts, bound in checks:
                value = labels.get(key)
                if value is None:
                    out[j] = Status(unresolvable, [ERR_REASON_NODE_LABEL_NOT_MATCH])
                    break
                if counts.get(value, 0) > bound:
                    out[j] = Status(unschedulable, [ERR_REASON_CONSTRAINTS_NOT_MATCH])
                    break
        return out

    # -- PreScore / Score --------------------------------------------------------

    def pre_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        """Skip without ScheduleAnyway constraints (own or default) or without nodes."""
        all_nodes = self._handle.snapshot.node_infos()
        if not all_nodes:
            return Status.skip()
        own = _own_constraints(pod)
        require_all = own.present or not self.system_defaulted
        try:
            constraints = self.constraints(pod, SCHEDULE_ANYWAY)
        except _BadConstraints as exc:
            return Status.as_error(f"calculating preScoreState: {exc}")
        if not constraints:
            return Status.skip()
        s = ScoreState(constraints, pod.namespace)
        sizes = [0] * len(constraints)
        wanted = [c.topology_key != LABEL_HOSTNAME for c in constraints]
        for ni in nodes:
            labels = ni.labels
            if require_all and not _has_all_keys(labels, constraints):
                s.ignored.add(ni.name)
                continue
            for i, c in enumerate(constraints):
                if not wanted[i]:
                    continue
                value = labels.get(c.topology_key, "")
                if value not in s.counts[i]:
                    s.counts[i][value] = 0
                    sizes[i] += 1
        for i, c in enumerate(constraints):
            size = len(nodes) - len(s.ignored) if c.topology_key == LABEL_HOSTNAME else sizes[i]
            s.weights[i] = math.log(size + 2)
        tracked = (
            self._tracked_score_counts(pod, constraints, wanted, require_all, all_nodes)
            if any(wanted)
            else None
        )
        if tracked is not None:
            for i, totals in enumerate(tracked):
                if totals:
                    per_domain = s.counts[i]
                    for value in per_domain:
                        per_domain[value] = totals.get(value, 0)
        elif any(wanted):
            counter = _NodeCounter(pod, constraints)
            for ni in all_nodes:
                node = ni.node
                if node is None:
                    continue
                labels = node.labels
                if require_all and not _has_all_keys(labels, constraints):
                    continue
                for i, n in enumerate(counter.counts(ni, node, wanted)):
                    if n is None:
                        continue
                    per_domain = s.counts[i]
                    value = labels.get(constraints[i].topology_key, "")
                    if value in per_domain:
                        per_domain[value] += n
        state.write(PRE_SCORE_KEY, s)
        return None

    def _tracked_score_counts(
        self,
        pod: PodInfo,
        constraints: tuple[Constraint, ...],
        wanted: list[bool],
        require_all: bool,
        nodes: Sequence[NodeInfo],
    ) -> list[dict[str, int]] | None:
        """Per constraint (empty when not wanted): matching pods per domain value over
        every node PreScore counts, from per-node counts kept across cycles; None if
        they cannot be used (as for _tracked_domain_counts)."""
        if any(c.honor_node_taints for c in constraints):
            return None  # on the pod's tolerations
        if (pod.node_selector or pod.required_node_affinity is not None) and any(
            c.honor_node_affinity for c in constraints
        ):
            return None  # on the pod's node selector and affinity
        key = (
            "score",
            pod.namespace,
            require_all,
            tuple((c.topology_key, c.selector) for c in constraints),
            tuple(wanted),
        )
        counter = _NodeCounter(pod, constraints)

        def contribution(ni: NodeInfo, node: NodeRecord) -> Contribution[tuple[int, str], str]:
            labels = node.labels
            if require_all and not _has_all_keys(labels, constraints):
                return {}
            share: Contribution[tuple[int, str], str] = {}
            for i, n in enumerate(counter.counts(ni, node, wanted)):
                if n:
                    share[(i, _PODS)] = {labels.get(constraints[i].topology_key, ""): n}
            return share

        agg = self._aggregates.get(key)
        if not agg.refresh(self._handle.snapshot, nodes, contribution):
            return None
        return [agg.totals.get((i, _PODS), {}) for i in range(len(constraints))]

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        s = state.get(PRE_SCORE_KEY)
        if not isinstance(s, ScoreState):
            return 0, Status.as_error(f"reading {PRE_SCORE_KEY!r} from cycle state: not found")
        if node_info.name in s.ignored:
            return 0, None
        labels = node_info.labels
        total = 0.0
        for i, c in enumerate(s.constraints):
            value = labels.get(c.topology_key)
            if value is None:
                continue
            if c.topology_key == LABEL_HOSTNAME:
                cnt = (
                    _count_matching(node_info.pods.values(), c.selector, s.namespace)
                    if c.selector is not None and c.counts_pods
                    else 0
                )
            else:
                cnt = s.counts[i].get(value, 0)
            total += cnt * s.weights[i] + (c.max_skew - 1)
        return _go_round(total), None

    def normalize_score(
        self, state: CycleState, pod: PodInfo, scores: list[NodeScore]
    ) -> Status | None:
        """Fewest matching pods -> 100; nodes missing a topology key -> 0."""
        s = state.get(PRE_SCORE_KEY)
        if not isinstance(s, ScoreState):
            return Status.as_error(f"reading {PRE_SCORE_KEY!r} from cycle state: not found")
        lowest: int | None = None
        highest = 0
        for ns in scores:
            if ns.name in s.ignored:
                continue
            if lowest is None or ns.score < lowest:
                lowest = ns.score
            if ns.score > highest:
                highest = ns.score
        for ns in scores:
            if ns.name in s.ignored:
                ns.score = 0
            elif highest == 0:
                ns.score = MAX_NODE_SCORE
            else:
                assert lowest is not None
                ns.score = MAX_NODE_SCORE * (highest + lowest - ns.score) // highest
        return None


ENTRY = PluginEntry(NAME, PodTopologySpread, PodTopologySpread.new, parse_args)
