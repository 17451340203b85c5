"""The placement algorithm: sampling, rotation, FitError text, tie-breaks."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from kscheduler.algorithm import Algorithm, FitError, num_feasible_nodes_to_find
from kscheduler.cache import Cache
from kscheduler.framework import CycleState, PluginEntry, Status
from kscheduler.framework.interface import PreFilterResult
from kscheduler.framework.types import NodeInfo, PodInfo
from tests.unit.builders import node, pod
from tests.unit.fakes import Sort, framework


class Bind:
    name = "Bind"

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        return None


class RejectBy:
    """Rejects nodes listed in its args with the given reason."""

    name = "RejectBy"

    def __init__(self, rejects: dict[str, Status]) -> None:
        self.rejects = rejects
        self.calls: list[str] = []

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        self.calls.append(node_info.name)
        st = self.rejects.get(node_info.name)
        return Status(st.code, list(st.reasons)) if st else None


class ScoreByName:
    name = "ScoreByName"

    def __init__(self, scores: dict[str, int]) -> None:
        self.scores = scores

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        return self.scores.get(node_info.name, 0), None


class Narrow:
    name = "Narrow"

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Any
    ) -> tuple[PreFilterResult | None, Status | None]:
        return PreFilterResult(set(self.names)), None


def entries(
    filter_plugin: RejectBy | None = None,
    score: ScoreByName | None = None,
    narrow: Narrow | None = None,
) -> tuple[list[PluginEntry], dict[str, list[str]]]:
    es = [
        PluginEntry("Sort", Sort, lambda a, h: Sort()),
        PluginEntry("Bind", Bind, lambda a, h: Bind()),
    ]
    points: dict[str, list[str]] = {"queueSort": ["Sort"], "bind": ["Bind"]}
    if filter_plugin is not None:
        es.append(PluginEntry("RejectBy", RejectBy, lambda a, h: filter_plugin))
        points["filter"] = ["RejectBy"]
    if score is not None:
        es.append(PluginEntry("ScoreByName", ScoreByName, lambda a, h: score))
        points["score"] = ["ScoreByName"]
    if narrow is not None:
        es.append(PluginEntry("Narrow", Narrow, lambda a, h: narrow))
        points["preFilter"] = ["Narrow"]
    return es, points


def cache_with(n: int) -> Cache:
    c = Cache()
    for i in range(n):
        c.add_node(node(f"n{i}").alloc(cpu="4").record())
    return c


@pytest.mark.parametrize(
    ("pct", "nodes", "expected"),
    [
        (0, 10, 10),
        (0, 99, 99),
        (0, 100, 100),
        (0, 1000, 420),
        (0, 5000, 500),
        (0, 6000, 300),
        (0, 200, 100),
        (10, 5000, 500),
        (100, 5000, 5000),
        (1, 1000, 100),
    ],
)
def test_num_feasible_nodes_to_find(pct: int, nodes: int, expected: int) -> None:
    assert num_feasible_nodes_to_find(pct, nodes) == expected


def test_fit_error_message_histogram() -> None:
    rej = RejectBy(
        {
            "n0": Status.unresolvable("node(s) had untolerated taint {k: v}"),
            "n1": Status.unschedulable("Insufficient cpu"),
            "n2": Status.unschedulable("Insufficient cpu", "Insufficient memory"),
        }
    )
    es, pts = entries(rej)
    fwk, snap, _, _ = framework(es, pts, cache=cache_with(3))
    snap.update()
    with pytest.raises(FitError) as ei:
        Algorithm().schedule_pod(fwk, CycleState(), pod("p").build(), snap)
    assert str(ei.value) == (
        "0/3 nodes are available: 1 Insufficient memory, "
        "1 node(s) had untolerated taint {k: v}, 2 Insufficient cpu."
    )
    assert ei.value.diagnosis.unschedulable_plugins == {"RejectBy"}


def test_no_nodes_message() -> None:
    es, pts = entries()
    fwk, snap, _, _ = framework(es, pts)
    snap.update()
    with pytest.raises(FitError) as ei:
        Algorithm().schedule_pod(fwk, CycleState(), pod("p").build(), snap)
    assert str(ei.value) == "0/0 nodes are available: no nodes available to schedule pods."


def test_prefilter_narrowing_marks_other_nodes() -> None:
    rej = RejectBy({"n1": Status.unschedulable("Insufficient cpu")})
    es, pts = entries(rej, narrow=Narrow({"n1"}))
    fwk, snap, _, _ = framework(es, pts, cache=cache_with(3))
    snap.update()
    with pytest.raises(FitError) as ei:
        Algorithm().schedule_pod(fwk, CycleState(), pod("p").build(), snap)
    assert str(ei.value) == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [Narrow]."
    )
    assert rej.calls == ["n1"]


def test_sampling_stops_early_and_rotates_start() -> None:
    rej = RejectBy({})
    es, pts = entries(rej, score=ScoreByName({}))
    fwk, snap, _, _ = framework(es, pts, cache=cache_with(1000), percentage=10)
    snap.update()
    alg = Algorithm()
    r = alg.schedule_pod(fwk, CycleState(), pod("p").build(), snap)
    assert r.feasible_nodes == 100 and r.evaluated_nodes == 100
    assert alg.next_start_node_index == 100
    assert rej.calls[0] == "n0" and rej.calls[-1] == "n99"
    rej.calls.clear()
    alg.schedule_pod(fwk, CycleState(), pod("q").build(), snap)
    assert rej.calls[0] == "n100"
    assert alg.next_start_node_index == 200


def test_next_start_counts_rejected_nodes() -> None:
    rej = RejectBy({f"n{i}": Status.unschedulable("x") for i in range(0, 150, 2)})
    es, pts = entries(rej, score=ScoreByName({}))
    fwk, snap, _, _ = framework(es, pts, cache=cache_with(200), percentage=50)
    snap.update()
    alg = Algorithm()
    r = alg.schedule_pod(fwk, CycleState(), pod("p").build(), snap)
    # 100 feasible needed; the first 150 nodes hold 75, so 25 more from 150..174
    assert r.feasible_nodes == 100
    assert alg.next_start_node_index == 175


def test_highest_score_wins() -> None:
    es, pts = entries(RejectBy({}), score=ScoreByName({"n0": 10, "n1": 90, "n2": 40}))
    fwk, snap, _, _ = framework(es, pts, cache=cache_with(3), weights={"ScoreByName": 1})
    snap.update()
    r = Algorithm().schedule_pod(fwk, CycleState(), pod("p").build(), snap)
    assert r.suggested_host == "n1"
    assert r.totals == {"n0": 10, "n1": 90, "n2": 40}


def test_weights_multiply() -> None:
    es, pts = entries(RejectBy({}), score=ScoreByName({"n0": 10, "n1": 20}))
    fwk, snap, _, _ = framework(es, pts, cache=cache_with(2), weights={"ScoreByName": 3})
    snap.update()
    r = Algorithm().schedule_pod(fwk, CycleState(), pod("p").build(), snap)
    assert r.totals == {"n0": 30, "n1": 60}


def test_ties_broken_uniformly() -> None:
    es, pts = entries(RejectBy({}), score=ScoreByName({"n0": 50, "n1": 50, "n2": 50, "n3": 10}))
    fwk, snap, _, _ = framework(es, pts, cache=cache_with(4))
    snap.update()
    alg = Algorithm(rng=random.Random(7))
    counts = Counter(
        alg.schedule_pod(fwk, CycleState(), pod(f"p{i}").build(), snap).suggested_host
        for i in range(3000)
    )
    assert set(counts) == {"n0", "n1", "n2"}
    for n in ("n0", "n1", "n2"):
        assert 850 < counts[n] < 1150


@pytest.mark.parametrize("ties", [2, 5, 50, 199, 200])
def test_pick_is_uniform_over_the_ties(ties: int) -> None:
    """Few ties (the k-th found by search) and many (drawn until one is hit)."""
    rng = random.Random(ties)
    totals = [10] * 200
    places = rng.sample(range(200), ties)
    for i in places:
        totals[i] = 90
    alg = Algorithm(rng=random.Random(3))
    draws = 300 * ties
    counts = Counter(alg.pick(totals) for _ in range(draws))
    assert set(counts) == set(places)
    for i in places:
        assert 0.75 * 300 < counts[i] < 1.25 * 300


def test_score_out_of_range_is_an_error() -> None:
    from kscheduler.algorithm import ScheduleError

    es, pts = entries(RejectBy({}), score=ScoreByName({"n0": 101}))
    fwk, snap, _, _ = framework(es, pts, cache=cache_with(2))
    snap.update()
    with pytest.raises(ScheduleError) as ei:
        Algorithm().schedule_pod(fwk, CycleState(), pod("p").build(), snap)
    assert "invalid score 101" in ei.value.status.message


def test_plugin_exception_is_wrapped_with_plugin_name() -> None:
    from kscheduler.algorithm import ScheduleError

    class Boom(RejectBy):
        def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
            raise RuntimeError("kaput")

    es, pts = entries(Boom({}))
    fwk, snap, _, _ = framework(es, pts, cache=cache_with(2))
    snap.update()
    with pytest.raises(ScheduleError) as ei:
        Algorithm().schedule_pod(fwk, CycleState(), pod("p").build(), snap)
    assert ei.value.status.plugin == "RejectBy"
    assert "kaput" in ei.value.status.message


class BatchRejectBy(RejectBy):
    """RejectBy with a filter_nodes fast path (and the calls it saw)."""

    name = "BatchRejectBy"

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Any) -> dict[int, Status]:
        out = {}
        for i, ni in enumerate(nodes):
            st = self.filter(state, pod, ni)
            if st is not None:
                out[i] = st
        return out


def node_by_node(
    rejects: list[dict[str, Status]], names: list[str], start: int, to_find: int
) -> tuple[list[str], dict[str, str], int]:
    """What find_nodes_that_fit must give: nodes in rotation order, filters in order,
    the first rejection per node, stop at to_find feasible nodes."""
    feasible: list[str] = []
    statuses: dict[str, str] = {}
    visited = 0
    for name in names[start:] + names[:start]:
        visited += 1
        for plugin, r in zip(("RejectBy", "BatchRejectBy"), rejects, strict=True):
            if name in r:
                statuses[name] = f"{plugin}:{r[name].reasons[0]}"
                break
        else:
            feasible.append(name)
            if len(feasible) >= to_find:
                break
    return feasible, statuses, (start + visited) % len(names)


@pytest.mark.parametrize("seed", range(6))
def test_chunked_filtering_gives_the_node_by_node_outcome(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([7, 150, 400])
    names = [f"n{i}" for i in range(n)]
    rejects = [
        {m: Status.unschedulable(f"r{k}") for m in names if rng.random() < share}
        for k, share in enumerate((rng.random() * 0.9, rng.random() * 0.9))
    ]
    first, second = RejectBy(rejects[0]), BatchRejectBy(rejects[1])
    es = [
        PluginEntry("Sort", Sort, lambda a, h: Sort()),
        PluginEntry("Bind", Bind, lambda a, h: Bind()),
        PluginEntry("RejectBy", RejectBy, lambda a, h: first),
        PluginEntry("BatchRejectBy", BatchRejectBy, lambda a, h: second),
    ]
    pts = {"queueSort": ["Sort"], "bind": ["Bind"], "filter": ["RejectBy", "BatchRejectBy"]}
    pct = rng.choice([5, 30, 100])
    fwk, snap, _, _ = framework(es, pts, cache=cache_with(n), percentage=pct)
    snap.update()
    alg = Algorithm()
    alg.next_start_node_index = rng.randrange(n)
    for _ in range(4):
        start = alg.next_start_node_index
        listed = [ni.name for ni in snap.node_infos()]
        want = node_by_node(rejects, listed, start, num_feasible_nodes_to_find(pct, n))
        feasible, diagnosis = alg.find_nodes_that_fit(fwk, CycleState(), pod("p").build(), snap)
        got_statuses = {
            k: f"{st.plugin}:{st.reasons[0]}" for k, st in diagnosis.node_to_status.statuses.items()
        }
        assert ([ni.name for ni in feasible], got_statuses, alg.next_start_node_index) == want
        # the batch plugin saw only the nodes the first plugin let through
        assert not set(second.calls) & set(rejects[0])
        second.calls.clear()


def test_a_batch_filter_that_raises_is_pinned_on_its_node() -> None:
    from kscheduler.algorithm import ScheduleError

    class Boom(BatchRejectBy):
        def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
            if node_info.name == "n3":
                raise RuntimeError("kaput on n3")
            return None

    boom = Boom({})
    es = [
        PluginEntry("Sort", Sort, lambda a, h: Sort()),
        PluginEntry("Bind", Bind, lambda a, h: Bind()),
        PluginEntry("BatchRejectBy", Boom, lambda a, h: boom),
    ]
    pts = {"queueSort": ["Sort"], "bind": ["Bind"], "filter": ["BatchRejectBy"]}
    fwk, snap, _, _ = framework(es, pts, cache=cache_with(5))
    snap.update()
    with pytest.raises(ScheduleError) as ei:
        Algorithm().find_nodes_that_fit(fwk, CycleState(), pod("p").build(), snap)
    assert ei.value.status.plugin == "BatchRejectBy"
    assert "kaput on n3" in ei.value.status.message
