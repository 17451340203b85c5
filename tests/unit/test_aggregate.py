"""NodeAggregate: per-node contributions summed, brought up to date from the change log."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from kscheduler.cache import Cache, Snapshot
from kscheduler.framework.aggregate import Contribution, NodeAggregate, NodeAggregates
from kscheduler.framework.types import NodeInfo, NodeRecord
from tests.unit.builders import node, pod

Share = Contribution[str, str]


def share(ni: NodeInfo, node_record: NodeRecord) -> Share:
    """Pods per app label, the node's zone, and zero counts that must be ignored."""
    apps: dict[str, int] = {"none": 0}
    for p in ni.pods.values():
        app = p.labels.get("app", "")
        apps[app] = apps.get(app, 0) + 1
    out: Share = {"apps": apps, "zero": {"z": 0}}
    zone = node_record.labels.get("zone")
    if zone is not None:
        out["zones"] = {zone: 1}
    return out


def expected(nodes: Sequence[NodeInfo]) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for ni in nodes:
        assert ni.node is not None
        for group, counts in share(ni, ni.node).items():
            for key, n in counts.items():
                if n:
                    per = totals.setdefault(group, {})
                    per[key] = per.get(key, 0) + n
    return totals


class Cluster:
    """A cache changed at random: nodes come, change zone and go; pods come and go."""

    def __init__(self, seed: int, limit: int) -> None:
        self.rng = random.Random(seed)
        self.cache = Cache(change_log_limit=limit)
        self.snapshot = Snapshot(self.cache)
        self.uids: list[str] = []
        self.serial = 0

    def step(self) -> None:
        rng, c = self.rng, self.cache
        name = f"n{rng.randrange(6)}"
        action = rng.randrange(5)
        if action == 0:
            b = node(name)
            if rng.random() < 0.8:
                b = b.labels(zone=rng.choice("abc"))
            c.add_node(b.record())
        elif action == 1:
            c.remove_node(name)
        elif action in (2, 3):
            self.serial += 1
            p = pod(f"p{self.serial}").labels(app=rng.choice("xy")).on(name).build()
            c.add_pod(p)
            self.uids.append(p.uid)
        elif self.uids:
            c.remove_pod(self.uids.pop(rng.randrange(len(self.uids))))


@pytest.mark.parametrize(("seed", "limit"), [(1, 1_000_000), (2, 5), (3, 1)])
def test_random_changes_keep_totals_equal_to_a_fresh_sum(seed: int, limit: int) -> None:
    cluster = Cluster(seed, limit)
    agg: NodeAggregate[str, str] = NodeAggregate()
    for _ in range(400):
        for _ in range(cluster.rng.randrange(4)):
            cluster.step()
        cluster.snapshot.update()
        nodes = cluster.snapshot.node_infos()
        assert agg.refresh(cluster.snapshot, nodes, share)
        assert agg.totals == expected(nodes)
        assert set(agg.per_node) == {ni.name for ni in nodes}


def test_refresh_declines_when_it_cannot_know_what_changed() -> None:
    cache = Cache()
    snapshot = Snapshot(cache)
    cache.add_node(node("n1").labels(zone="a").record())
    snapshot.update()
    agg: NodeAggregate[str, str] = NodeAggregate()
    assert not agg.refresh(snapshot, list(snapshot.node_infos()), share)  # not its list
    assert agg.totals == {}
    assert agg.refresh(snapshot, snapshot.node_infos(), share)
    before = agg.totals

    cache.add_pod(pod("p").labels(app="x").on("n1").build())
    assert not agg.refresh(snapshot, snapshot.node_infos(), share)  # snapshot not updated
    assert agg.totals == before

    class NoLog:
        """A lister without changes_since."""

        def __init__(self, nodes: Sequence[NodeInfo]) -> None:
            self.nodes = nodes

        def node_infos(self) -> Sequence[NodeInfo]:
            return self.nodes

    plain = NoLog(snapshot.node_infos())
    assert not agg.refresh(plain, plain.node_infos(), share)  # type: ignore[arg-type]
    snapshot.update()
    assert agg.refresh(snapshot, snapshot.node_infos(), share)
    assert agg.totals == expected(snapshot.node_infos())


def test_another_lister_starts_over() -> None:
    one, two = Cache(), Cache()
    for c, zone in ((one, "a"), (two, "b")):
        c.add_node(node("n1").labels(zone=zone).record())
    s1, s2 = Snapshot(one), Snapshot(two)
    s1.update()
    s2.update()
    agg: NodeAggregate[str, str] = NodeAggregate()
    assert agg.refresh(s1, s1.node_infos(), share)
    assert agg.refresh(s2, s2.node_infos(), share)
    assert agg.totals == expected(s2.node_infos())


def failing(ni: NodeInfo, node_record: NodeRecord) -> Share:
    if ni.name == "n2":
        raise RuntimeError("boom")
    return share(ni, node_record)


def test_a_failing_contribution_leaves_the_next_refresh_right() -> None:
    one, two = Cache(), Cache()
    for c, zone in ((one, "a"), (two, "b")):
        for name in ("n1", "n2", "n3"):
            c.add_node(node(name).labels(zone=zone).record())
    s1, s2 = Snapshot(one), Snapshot(two)
    s1.update()
    s2.update()
    agg: NodeAggregate[str, str] = NodeAggregate()
    assert agg.refresh(s1, s1.node_infos(), share)
    for name in ("n1", "n2", "n3"):
        one.add_pod(pod(f"p-{name}").labels(app="x").on(name).build())
    s1.update()
    with pytest.raises(RuntimeError):  # while applying s1's changes
        agg.refresh(s1, s1.node_infos(), failing)
    assert agg.refresh(s1, s1.node_infos(), share)
    assert agg.totals == expected(s1.node_infos())
    with pytest.raises(RuntimeError):  # while starting over from s2
        agg.refresh(s2, s2.node_infos(), failing)
    assert agg.refresh(s1, s1.node_infos(), share)
    assert agg.totals == expected(s1.node_infos())


def test_aggregates_forget_the_least_recently_used() -> None:
    aggs: NodeAggregates[str, str] = NodeAggregates(limit=3)
    a = aggs.get("a")
    aggs.get("b")
    aggs.get("c")
    assert aggs.get("a") is a  # now the most recently used
    aggs.get("d")
    assert len(aggs) == 3
    assert "b" not in aggs and "a" in aggs and "c" in aggs and "d" in aggs
    assert aggs.get("b") is not None and "c" not in aggs
