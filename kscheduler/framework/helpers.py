"""Small helpers shared by plugins."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.interface import MAX_NODE_SCORE, NodeScore
from kscheduler.framework.status import Status
from kscheduler.framework.types import NodeInfo, PodInfo

T = TypeVar("T")


def rotation_slice(items: Sequence[T], start: int, lo: int, hi: int) -> Sequence[T]:
    """Positions ``lo`` to ``hi`` (``hi`` at most ``len(items)``) of ``items`` taken in
    rotation from ``start``: ``[*items[start:], *items[:start]][lo:hi]`` without
    copying the whole list."""
    n = len(items)
    a, b = start + lo, start + hi
    if b <= n:
        return items[a:b]
    if a >= n:
        return items[a - n : b - n]
    return [*items[a:], *items[: b - n]]


def filter_rejections(
    filter: Callable[[CycleState, PodInfo, NodeInfo], Status | None],
    state: CycleState,
    pod: PodInfo,
    nodes: Sequence[NodeInfo],
    positions: Iterable[int],
) -> dict[int, Status]:
    """``filter`` on ``nodes[i]`` for each i of ``positions``: the rejections by
    position. The slow path of a batch filter (``filter_nodes``), for the nodes its
    fast check could not pass."""
    out: dict[int, Status] = {}
    for i in positions:
        st = filter(state, pod, nodes[i])
        if st is not None:
            out[i] = st
    return out


def default_normalize_score(
    scores: list[NodeScore], *, reverse: bool, max_score: int = MAX_NODE_SCORE
) -> None:
    """Scale scores to [0, max_score] by the highest score; ``reverse`` flips them.

    All-zero scores stay zero, or become ``max_score`` when reversed.
    """
    highest = 0
    for s in scores:
        if s.score > highest:
            highest = s.score
    if highest == 0:
        if reverse:
            for s in scores:
                s.score = max_score
        return
    for s in scores:
        v = max_score * s.score // highest
        s.score = max_score - v if reverse else v


def default_normalize_ints(
    scores: list[int], *, reverse: bool, max_score: int = MAX_NODE_SCORE
) -> list[int]:
    """default_normalize_score over plain ints, as a new list."""
    highest = max(scores, default=0)
    if highest <= 0:  # all zero: as default_normalize_score
        return [max_score] * len(scores) if reverse else list(scores)
    if reverse:
        return [max_score - max_score * s // highest for s in scores]
    return [max_score * s // highest for s in scores]


class NodeScoreMemo:
    """A score plugin's scores by node, for one pod request at a time.

    An entry holds the node's generation when it was scored: a pod placed or
    removed, or the Node object replaced, bumps the generation and the entry no
    longer applies. Keyed by the NodeInfo object itself (a clone, as preemption
    makes, is a key of its own), so the plugin must give a score that depends only
    on the node's state and the ``key`` of :meth:`table` (the pod's request).
    Successive cycles of alike pods visit nodes whose state has not changed since
    the last visit (one node changes per placement): their scores come from here.
    """

    __slots__ = ("_tables",)

    #: tables kept at once (one per pod request seen lately)
    MAX_TABLES = 8

    def __init__(self) -> None:
        self._tables: dict[object, dict[NodeInfo, tuple[int, int]]] = {}

    def table(self, key: object, nodes: int) -> dict[NodeInfo, tuple[int, int]]:
        """NodeInfo -> (generation, score) for pods with request ``key``.

        ``nodes`` is the number of nodes in the cluster. Once the table holds more
        entries than that by a margin (an eighth, at least 16), the entries of nodes
        removed from the cluster (their NodeInfo has no Node object any more) go;
        if that does not bring it back to ``nodes`` entries (clones), all go. A
        cluster whose nodes are replaced keeps no score, nor NodeInfo, of the nodes
        it no longer has beyond that margin."""
        tables = self._tables
        t = tables.get(key)
        if t is None:
            if len(tables) >= self.MAX_TABLES:
                tables.clear()
            t = tables[key] = {}
        elif len(t) > nodes + max(16, nodes // 8):
            for gone in [ni for ni in t if ni.node is None]:
                del t[gone]
            if len(t) > nodes:
                t.clear()
        return t
