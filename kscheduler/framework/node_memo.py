"""Filter verdicts and raw scores kept per node across cycles.

Most of a cycle's work is per node: each Filter plugin on each node visited, each
Score plugin on each feasible node. For many plugins that work reads nothing but
the pod and the node's own NodeInfo (its Node object and its pods): a node whose
NodeInfo did not change since the last cycle gets the same verdict and the same
raw score for a pod that the plugin sees as the same. Such a plugin says so by
implementing :class:`NodeLocalFilter` or :class:`NodeLocalScore`: after PreFilter
(or PreScore) it gives a *key*, everything besides the NodeInfo that its verdict
(or raw score) reads, or None when this cycle's verdicts read more.

When every Filter plugin a cycle runs gives a key, the framework keeps the
verdicts of the nodes it filtered under the tuple of those keys, and the next
cycle with the same tuple filters only the nodes the snapshot reports as changed
since (:meth:`SharedLister.changes_since`) or not seen yet. Raw scores are kept
the same way: the Score plugins that do not normalise are summed per node
(weighted) under the tuple of their keys, each node's sum kept with their raw
scores, so that an unchanged node costs one lookup for all of them; a plugin
that normalises keeps its raw scores under its own key, and normalising,
weighting and summing still happen every cycle over that cycle's feasible
nodes. The outcome is the one of running every plugin on every node.

A key must capture the pod's part and any state outside the node that the
plugin reads (the cluster-wide image counts of ImageLocality, say); the plugin's
configuration need not be in it, as the memos belong to one framework.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from itertools import repeat
from operator import attrgetter, is_
from typing import Generic, Protocol, TypeVar, cast, runtime_checkable

from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.helpers import rotation_slice
from kscheduler.framework.interface import NodeChanges, SharedLister
from kscheduler.framework.types import NodeInfo, PodInfo

V = TypeVar("V")

#: Keys kept per framework and kind (each memo holds an entry per node seen).
MEMO_LIMIT = 16

_name = attrgetter("name")


@runtime_checkable
class NodeLocalFilter(Protocol):
    """Optional for a FilterPlugin: its verdicts may be kept across cycles."""

    def filter_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """After PreFilter: what besides a node's NodeInfo this cycle's filter() reads,
        so that equal keys give equal verdicts on an unchanged node; None when the
        verdict reads more (other nodes, other objects) this cycle."""


@runtime_checkable
class NodeLocalScore(Protocol):
    """Optional for a ScorePlugin: its raw scores may be kept across cycles."""

    def score_key(self, state: CycleState, pod: PodInfo) -> Hashable | None:
        """After PreScore: what besides a node's NodeInfo this cycle's score() reads
        (before normalising); None when the score reads more this cycle."""


def nominated_pods_added(pod: PodInfo, nominated: Sequence[PodInfo]) -> tuple[PodInfo, ...]:
    """The nominated pods a node's filters count for ``pod``: those of equal or
    higher priority, the pod itself left out."""
    return tuple(p for p in nominated if p.priority >= pod.priority and p.uid != pod.uid)


def same_pods(kept: Sequence[PodInfo], added: Sequence[PodInfo]) -> bool:
    """Whether a value kept with ``kept`` pods added still holds: the same pod
    objects, in the same order (a pod updated is a new object)."""
    return len(kept) == len(added) and all(map(is_, kept, added))


class NodeMemo(Generic[V]):
    """Values by node name, valid for the lister's view at ``cursor``.

    Beside the dict, a *column*: the values in the order of the lister's
    node_infos() (``missing`` where none is kept), for listers that tell each node's
    place (:meth:`SharedLister.node_positions`). A cycle visits the nodes in that
    order from a rotating start, so its nodes' values are a slice of the column
    instead of a lookup by name per node."""

    __slots__ = ("_column", "_cursor", "_layout", "_lister", "missing", "values")

    def __init__(self, missing: object = None) -> None:
        self._lister: SharedLister | None = None
        self._cursor: int | None = None
        self.values: dict[str, V] = {}
        #: what :meth:`kept` gives for a node without a value
        self.missing = missing
        #: the values in the order of ``_layout`` (the lister's node list object)
        self._column: list[V | object] | None = None
        self._layout: Sequence[NodeInfo] | None = None

    def refresh(self, lister: SharedLister) -> bool:
        """Drop the values of the nodes changed since the last refresh; False (values
        unusable) when the lister cannot tell what changed."""
        changes_since: Callable[[int | None], NodeChanges | None] | None = getattr(
            lister, "changes_since", None
        )
        if changes_since is None:
            return False
        changes = changes_since(self._cursor if lister is self._lister else None)
        if changes is None:
            return False
        if changes.names is None:
            self.values.clear()
            self._column = None
        elif changes.names:
            pop = self.values.pop
            for name in changes.names:
                pop(name, None)
            column = self._column
            if column is not None:
                if self._layout is lister.node_infos():
                    places = _positions(lister)
                    assert places is not None  # a column is built only with them
                    for name in changes.names:
                        at = places.get(name)
                        if at is not None:
                            column[at] = self.missing
                else:
                    self._column = None  # the node list changed: built anew when asked
        self._lister = lister
        self._cursor = changes.cursor
        return True

    def kept(self, nodes: Sequence[NodeInfo], first: int | None) -> list[V | object]:
        """The values kept for ``nodes`` (``missing`` where none), after :meth:`refresh`.

        ``first``: the place of ``nodes[0]`` in the lister's node list when ``nodes``
        are consecutive there, in rotation (:func:`consecutive_place`; the caller
        took them so); None to look each node up by name."""
        column = self._column_at(nodes, first)
        if column is None:
            return list(map(self.values.get, map(_name, nodes), repeat(self.missing)))
        return list(rotation_slice(column, cast(int, first), 0, len(nodes)))

    def keep(self, nodes: Sequence[NodeInfo], first: int | None, i: int, value: V) -> None:
        """Keep ``value`` for ``nodes[i]``; ``first`` as given to :meth:`kept`."""
        name = nodes[i].name
        self.values[name] = value
        column = self._column
        if column is None:
            return
        if first is not None and self._column_at(nodes, first) is not None:
            column[(first + i) % len(column)] = value
        elif self._lister is not None and self._layout is self._lister.node_infos():
            places = _positions(self._lister)
            at = places.get(name) if places is not None else None
            if at is not None:
                column[at] = value

    def _column_at(self, nodes: Sequence[NodeInfo], first: int | None) -> list[V | object] | None:
        """The column, built if need be, when ``first`` places ``nodes`` in the
        lister's current node list (their ends checked); else None."""
        lister = self._lister
        if first is None or lister is None or not nodes:
            return None
        every = lister.node_infos()
        n = len(every)
        if not (
            len(nodes) <= n
            and 0 <= first < n
            and nodes[0] is every[first]
            and nodes[-1] is every[(first + len(nodes) - 1) % n]
        ):
            return None
        if self._column is None or self._layout is not every:
            get, missing = self.values.get, self.missing
            self._column = [get(ni.name, missing) for ni in every]
            self._layout = every
        return self._column


def consecutive_place(lister: SharedLister, nodes: Sequence[NodeInfo]) -> int | None:
    """The place of ``nodes[0]`` in the lister's node list when ``nodes`` are
    consecutive there (in rotation from that place); None otherwise, or when the
    lister does not tell places (:meth:`SharedLister.node_positions`)."""
    places = _positions(lister)
    if places is None or not nodes:
        return None
    first = places.get(nodes[0].name)
    if first is None:
        return None
    every = lister.node_infos()
    if len(nodes) > len(every) or not all(
        map(is_, nodes, rotation_slice(every, first, 0, len(nodes)))
    ):
        return None
    return first


def _positions(lister: SharedLister) -> Mapping[str, int] | None:
    positions: Callable[[], Mapping[str, int]] | None = getattr(lister, "node_positions", None)
    return positions() if positions is not None else None


class NodeMemos(Generic[V]):
    """NodeMemos by key; beyond ``limit`` the least recently used is forgotten."""

    __slots__ = ("_by_key", "limit", "missing")

    def __init__(self, limit: int = MEMO_LIMIT, *, missing: object = None) -> None:
        self.limit = limit
        #: what NodeMemo.kept gives for a node without a value
        self.missing = missing
        self._by_key: OrderedDict[Hashable, NodeMemo[V]] = OrderedDict()

    def get(self, key: Hashable, lister: SharedLister) -> dict[str, V] | None:
        """The values kept under ``key``, brought up to date with ``lister``; None when
        the lister cannot tell what changed (nothing may be kept then)."""
        memo = self.memo(key, lister)
        return memo.values if memo is not None else None

    def memo(self, key: Hashable, lister: SharedLister) -> NodeMemo[V] | None:
        """:meth:`get`'s memo itself (for :meth:`NodeMemo.kept` and :meth:`NodeMemo.keep`)."""
        memo = self._by_key.get(key)
        if memo is None:
            memo = self._by_key[key] = NodeMemo(self.missing)
            if len(self._by_key) > self.limit:
                self._by_key.popitem(last=False)
        else:
            self._by_key.move_to_end(key)
        return memo if memo.refresh(lister) else None

    def clear(self) -> None:
        self._by_key.clear()

    def __len__(self) -> int:
        return len(self._by_key)
