"""Per-node contributions summed over all nodes, kept up to date across cycles.

A PreFilter that sums something over every pod of every node (matching pods per
topology domain, say) can instead keep each node's share and the totals in a
:class:`NodeAggregate`, and recompute only the shares of the nodes the snapshot
reports as changed since the last cycle (:meth:`SharedLister.changes_since`):
O(changed nodes) per cycle rather than O(pods).

A share must depend only on the node (its labels and pods) and on the key the
plugin files the aggregate under: anything else it reads must be part of that key.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from kscheduler.framework.interface import NodeChanges, SharedLister
from kscheduler.framework.types import NodeInfo, NodeRecord

G = TypeVar("G", bound=Hashable)
K = TypeVar("K", bound=Hashable)

#: One node's share: group -> key -> count. Zero counts are ignored.
Contribution = dict[G, dict[K, int]]

#: Aggregates a plugin keeps by default (each holds a share per node).
AGGREGATE_LIMIT = 256


class NodeAggregate(Generic[G, K]):
    """Each node's contribution and their sums, ``totals`` (no zero counts, no empty groups)."""

    __slots__ = ("_cursor", "_lister", "per_node", "totals")

    def __init__(self) -> None:
        self._lister: SharedLister | None = None
        self._cursor: int | None = None
        self.per_node: dict[str, Contribution[G, K]] = {}
        self.totals: dict[G, dict[K, int]] = {}

    def refresh(
        self,
        lister: SharedLister,
        nodes: Sequence[NodeInfo],
        contribution: Callable[[NodeInfo, NodeRecord], Contribution[G, K]],
    ) -> bool:
        """Bring ``totals`` up to date with ``nodes``, which must be ``lister.node_infos()``.

        ``contribution`` gives the share of a node with a Node object. Returns False,
        leaving the aggregate as it was, when ``nodes`` is another list or the lister
        cannot tell what changed: the caller must then compute from ``nodes`` itself.
        """
        changes_since: Callable[[int | None], NodeChanges | None] | None = getattr(
            lister, "changes_since", None
        )
        if changes_since is None or nodes is not lister.node_infos():
            return False
        changes = changes_since(self._cursor if lister is self._lister else None)
        if changes is None:
            return False
        # Until this refresh completes the aggregate is invalid: if ``contribution``
        # raises, the next refresh starts over.
        self._lister = None
        if changes.names is None:
            self.per_node.clear()
            self.totals.clear()
            for ni in nodes:
                if ni.node is not None:
                    self._add(ni.name, contribution(ni, ni.node))
        else:
            for name in changes.names:
                self._remove(name)
                current = lister.get(name)
                if current is not None and current.node is not None:
                    self._add(name, contribution(current, current.node))
        self._lister = lister
        self._cursor = changes.cursor
        return True

    def _add(self, name: str, share: Contribution[G, K]) -> None:
        if not share:
            return
        self.per_node[name] = share
        totals = self.totals
        for group, counts in share.items():
            t = totals.get(group)
            for key, n in counts.items():
                if n:
                    if t is None:
                        t = totals[group] = {}
                    t[key] = t.get(key, 0) + n

    def _remove(self, name: str) -> None:
        share = self.per_node.pop(name, None)
        if not share:
            return
        totals = self.totals
        for group, counts in share.items():
            t = totals.get(group)
            if t is None:
                continue  # only zero counts
            for key, n in counts.items():
                if n:
                    left = t[key] - n
                    if left:
                        t[key] = left
                    else:
                        del t[key]
            if not t:
                del totals[group]


class NodeAggregates(Generic[G, K]):
    """NodeAggregates by key; beyond ``limit`` the least recently used is forgotten."""

    __slots__ = ("_by_key", "limit")

    def __init__(self, limit: int = AGGREGATE_LIMIT) -> None:
        self.limit = limit
        self._by_key: OrderedDict[Hashable, NodeAggregate[G, K]] = OrderedDict()

    def get(self, key: Hashable) -> NodeAggregate[G, K]:
        """The aggregate for ``key``, a new (empty) one if it has none."""
        agg = self._by_key.get(key)
        if agg is not None:
            self._by_key.move_to_end(key)
            return agg
        agg = self._by_key[key] = NodeAggregate()
        if len(self._by_key) > self.limit:
            self._by_key.popitem(last=False)
        return agg

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._by_key
