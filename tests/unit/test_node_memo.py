"""The node memo: verdicts and raw scores kept across cycles give the decisions of
running every plugin on every node, through cluster changes of every kind."""

from __future__ import annotations

import random
from typing import Any

import pytest

from bench.cycle import FakeClient, FakeObjects, FakeRecorder, default_spec
from kscheduler.algorithm import Algorithm, FitError, ScheduleError, ScheduleResult
from kscheduler.cache import Cache, Snapshot
from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.node_memo import NodeMemos, consecutive_place
from kscheduler.framework.runtime import Framework
from kscheduler.framework.types import PodInfo
from kscheduler.plugins import in_tree_registry
from tests.unit.builders import expr, node, pod

IMAGE = "registry.k8s.io/app:1"


def new_framework(cache: Cache) -> tuple[Framework, Snapshot]:
    snapshot = Snapshot(cache)
    fwk = Framework(
        default_spec(),
        in_tree_registry(),
        snapshot=snapshot,
        objects=FakeObjects(),
        client=FakeClient(),
        recorder=FakeRecorder(),
    )
    return fwk, snapshot


def random_node(rng: random.Random, i: int) -> Any:
    b = node(f"n{i:03d}").alloc(
        cpu=str(rng.choice([1, 2, 4, 8])), memory=f"{rng.choice([2, 4, 16])}Gi", pods=8
    )
    b = b.label("zone", rng.choice(["a", "b", "c"]))
    if rng.random() < 0.2:
        b = b.taint("soft", "x", "PreferNoSchedule")
    if rng.random() < 0.1:
        b = b.taint("hard", "x", "NoSchedule")
    if rng.random() < 0.05:
        b = b.unschedulable()
    if rng.random() < 0.3:
        b = b.image(IMAGE, rng.choice([30, 300, 900]) * 1024 * 1024)
    return b


def pod_shapes(rng: random.Random) -> list[Any]:
    """A few kinds of pods, each repeated: what the memo keeps results for."""
    shapes = []
    for k in range(6):
        p = pod(f"shape{k}").container(image=IMAGE if k % 2 else "registry.k8s.io/pause:3.10")
        p = p.req(cpu=f"{rng.choice([100, 500, 1500])}m", memory=f"{rng.choice([64, 512])}Mi")
        if k == 2:
            p = p.toleration("hard", "x", "NoSchedule")
        if k == 3:
            p = p.node_selector(zone="b")
        if k == 4:
            p = p.preferred(10, expr("zone", "In", "a"))
        if k == 5:
            p = p.host_port(8080)
        shapes.append(p)
    return shapes


def change_cluster(rng: random.Random, cache: Cache, nodes: dict[str, Any], step: int) -> None:
    """One change of the kinds a memo must notice: a Node replaced (taints, labels,
    images, schedulability), a node added or removed, a pod removed."""
    names = sorted(nodes)
    kind = rng.randrange(5)
    name = rng.choice(names)
    if kind == 0:
        nodes[name] = nodes[name].taint(
            f"t{step}", "x", rng.choice(["NoSchedule", "PreferNoSchedule"])
        )
        cache.update_node(nodes[name].record())
    elif kind == 1:
        nodes[name] = nodes[name].label("zone", rng.choice(["a", "b", "c"]))
        cache.update_node(nodes[name].record())
    elif kind == 2:
        nodes[name] = nodes[name].image(IMAGE, 500 * 1024 * 1024)
        cache.update_node(nodes[name].record())
    elif kind == 3:
        nodes[f"n{900 + step:03d}"] = b = random_node(rng, 900 + step)
        cache.add_node(b.record())
    else:
        placed = cache.assumed_pods()
        if placed:
            cache.forget(rng.choice(placed).uid)


class Nominations:
    """Pods nominated to nodes (the scheduling queue's part), changed at random."""

    def __init__(self) -> None:
        self.by_node: dict[str, list[PodInfo]] = {}

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        return list(self.by_node.get(node_name, ()))

    def nodes_with_nominated_pods(self) -> set[str]:
        return {n for n, pods in self.by_node.items() if pods}

    def change(self, rng: random.Random, shapes: list[Any], names: list[str], step: int) -> None:
        name = rng.choice(names)
        if self.by_node.get(name) and rng.random() < 0.5:
            self.by_node[name].pop(rng.randrange(len(self.by_node[name])))
            return
        shape = shapes[rng.randrange(len(shapes))]
        nominee = shape.uid(f"nominee-{step}").priority(rng.choice([-5, 0, 10])).build()
        self.by_node.setdefault(name, []).append(nominee)


def schedule_all(seed: int, memo: bool, *, nominate: bool = False) -> list[tuple[str, Any]]:
    """Every decision of a run: the host and the result's detail, or why nothing fits.
    ``nominate``: pods are nominated to nodes (and forgotten) as the run goes."""
    rng = random.Random(seed)
    cache = Cache()
    nodes = {}
    for i in range(60):
        b = random_node(rng, i)
        nodes[f"n{i:03d}"] = b
        cache.add_node(b.record())
    fwk, snapshot = new_framework(cache)
    fwk.node_memo = memo
    algorithm = Algorithm(percentage_of_nodes_to_score=30, rng=random.Random(seed))
    shapes = pod_shapes(rng)
    nominations = Nominations()
    if nominate:
        fwk.set_nominator(nominations)
    out: list[tuple[str, Any]] = []
    for step in range(500):
        if rng.random() < 0.15:
            change_cluster(rng, cache, nodes, step)
        if nominate and rng.random() < 0.3:
            nominations.change(rng, shapes, sorted(nodes), step)
        shape = shapes[rng.randrange(len(shapes))] if rng.random() < 0.5 else shapes[0]
        p: PodInfo = shape.uid(f"uid-{step}").build()
        state = CycleState()
        snapshot.update()
        try:
            r: ScheduleResult = algorithm.schedule_pod(fwk, state, p, snapshot, cycle=step)
        except FitError as fe:
            statuses = fe.diagnosis.node_to_status.statuses
            out.append(("", sorted((n, s.plugin, tuple(s.reasons)) for n, s in statuses.items())))
            continue
        detail = (r.evaluated_nodes, r.feasible_nodes, r.scores, r.totals, r.host_scores())
        if r.scores is not None and r.index >= 0:
            assert r.host_scores() == {k: v[r.index] for k, v in r.scores.items()}
        out.append((r.suggested_host, detail))
        cache.assume(p.with_node(r.suggested_host))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_decisions_with_the_memo_are_those_without_it(seed: int) -> None:
    with_memo = schedule_all(seed, memo=True)
    without = schedule_all(seed, memo=False)
    assert with_memo == without
    # the runs place pods and also turn some away, so both paths are compared
    assert any(host for host, _ in with_memo)
    assert any(not host for host, _ in with_memo)


@pytest.mark.parametrize("seed", [5, 6])
def test_with_nominated_pods_the_memo_decides_as_without_it(seed: int) -> None:
    """Verdicts with nominated pods added are kept per node and the pods added; the
    nominations change as the run goes."""
    with_memo = schedule_all(seed, memo=True, nominate=True)
    without = schedule_all(seed, memo=False, nominate=True)
    assert with_memo == without
    assert with_memo != schedule_all(seed, memo=True)  # the nominations count


def test_verdicts_with_nominated_pods_are_kept_until_the_pods_or_the_node_change() -> None:
    cache = Cache()
    for i in range(4):
        cache.add_node(node(f"n{i}").alloc(cpu="1", memory="8Gi", pods=10).record())
    fwk, snapshot = new_framework(cache)
    nominations = Nominations()
    fwk.set_nominator(nominations)
    big = pod("big").uid("nominee").priority(10).req(cpu="800m").build()
    nominations.by_node = {f"n{i}": [big] for i in range(3)}
    added: list[str] = []
    original = fwk._filter_with_pods_added

    def counted(state: Any, pod_: Any, ni: Any, pods: Any) -> Any:
        added.append(ni.name)
        return original(state, pod_, ni, pods)

    fwk._filter_with_pods_added = counted  # type: ignore[method-assign]
    algorithm = Algorithm(rng=random.Random(1))

    def cycle(uid: str) -> str:
        snapshot.update()
        p = pod("p").uid(uid).req(cpu="500m").build()
        return algorithm.schedule_pod(fwk, CycleState(), p, snapshot).suggested_host

    assert cycle("a") == "n3"  # the nominee takes 800m of each other node's 1000m
    assert sorted(added) == ["n0", "n1", "n2"]
    added.clear()
    assert cycle("b") == "n3"
    assert added == []  # kept
    nominations.by_node["n1"] = [pod("small").uid("s").priority(10).req(cpu="100m").build()]
    cache.update_node(node("n2").alloc(cpu="1", memory="8Gi", pods=10).label("a", "b").record())
    assert cycle("c") in {"n1", "n3"}
    assert sorted(added) == ["n1", "n2"]


def test_the_memo_spares_plugin_calls_for_unchanged_nodes() -> None:
    """The same pod twice on an unchanged cluster: the second cycle runs no Filter
    on a node and no Score; one node changed: only that node is filtered again."""
    cache = Cache()
    for i in range(20):
        cache.add_node(node(f"n{i}").alloc(cpu="4", memory="8Gi", pods=10).record())
    fwk, snapshot = new_framework(cache)
    calls: list[str] = []
    for p in fwk.filter_plugins:
        original = p.filter

        def counted(state: Any, pod_: Any, ni: Any, _f: Any = original) -> Any:
            calls.append(ni.name)
            return _f(state, pod_, ni)

        p.filter = counted  # type: ignore[method-assign]
        if hasattr(p, "filter_nodes"):
            p.filter_nodes = lambda s, q, ns, _f=counted: {  # type: ignore[attr-defined]
                i: st for i, ni in enumerate(ns) if (st := _f(s, q, ni)) is not None
            }
    fwk.refresh_plans()
    algorithm = Algorithm(rng=random.Random(1))

    def cycle(uid: str) -> str:
        snapshot.update()
        p = pod("p").uid(uid).req(cpu="100m").build()
        return algorithm.schedule_pod(fwk, CycleState(), p, snapshot).suggested_host

    cycle("a")
    assert len(set(calls)) == 20
    calls.clear()
    cycle("b")
    assert calls == []
    cache.update_node(node("n7").alloc(cpu="4", memory="8Gi", pods=10).label("x", "y").record())
    cycle("c")
    assert set(calls) == {"n7"}


def test_a_lister_without_a_change_log_keeps_nothing() -> None:
    class Plain:
        pass

    memos: NodeMemos[int] = NodeMemos()
    assert memos.get("k", Plain()) is None  # type: ignore[arg-type]


def test_memos_forget_the_least_recently_used_key() -> None:
    cache = Cache()
    snapshot = Snapshot(cache)
    snapshot.update()
    memos: NodeMemos[int] = NodeMemos(limit=2)
    a = memos.get("a", snapshot)
    assert a is not None
    a["n1"] = 5
    assert memos.get("b", snapshot) is not None
    assert memos.get("a", snapshot) == {"n1": 5}
    assert memos.get("c", snapshot) is not None  # forgets "b", the least recent
    assert len(memos) == 2
    assert memos.get("a", snapshot) == {"n1": 5}
    cache.add_node(node("n1").record())
    snapshot.update()
    assert memos.get("a", snapshot) == {}  # n1 changed


@pytest.mark.parametrize("memo", [True, False])
def test_a_failing_kept_plugin_fails_the_cycle_as_without_the_memo(memo: bool) -> None:
    cache = Cache()
    for i in range(5):
        cache.add_node(node(f"n{i}").alloc(cpu="4", memory="8Gi", pods=10).record())
    fwk, snapshot = new_framework(cache)
    fwk.node_memo = memo

    def broken(*args: Any) -> Any:
        raise RuntimeError("broken scorer")

    plugin = fwk.plugins["NodeResourcesBalancedAllocation"]
    plugin.score = broken  # type: ignore[attr-defined]
    plugin.score_nodes = broken  # type: ignore[attr-defined]
    fwk.refresh_plans()
    snapshot.update()
    p = pod("p").uid("u").req(cpu="100m").build()
    with pytest.raises(ScheduleError) as err:
        Algorithm(rng=random.Random(1)).schedule_pod(fwk, CycleState(), p, snapshot)
    assert err.value.status.plugin == "NodeResourcesBalancedAllocation"
    assert "broken scorer" in err.value.status.message


def test_kept_values_are_a_slice_of_the_column_and_agree_with_the_dict() -> None:
    """Consecutive nodes (in rotation) read the column, others the dict; both give
    the same values through keeps, node changes and a node added."""
    cache = Cache()
    for i in range(6):
        cache.add_node(node(f"n{i}").alloc(cpu="4", pods=10).record())
    snapshot = Snapshot(cache)
    snapshot.update()
    memos: NodeMemos[int] = NodeMemos(missing="none")
    memo = memos.memo("k", snapshot)
    assert memo is not None
    every = list(snapshot.node_infos())
    names = [ni.name for ni in every]
    wrap = [every[4], every[5], every[0]]  # consecutive in rotation
    first = consecutive_place(snapshot, wrap)
    assert first == 4
    assert memo.kept(wrap, first) == ["none"] * 3
    for i, v in enumerate((40, 50, 0)):
        memo.keep(wrap, first, i, v)
    assert memo.values == {names[4]: 40, names[5]: 50, names[0]: 0}
    scattered = [every[5], every[1], every[4]]  # not consecutive: looked up by name
    assert consecutive_place(snapshot, scattered) is None
    assert consecutive_place(snapshot, [every[1], every[3]]) is None
    assert memo.kept(scattered, None) == [50, "none", 40]
    assert memo.kept(scattered, 5) == [50, "none", 40]  # a wrong place is not trusted
    memo.keep(scattered, None, 1, 10)
    # a value kept by name is in the column, and one kept through the column by name
    assert memo.kept(every, 0) == [0, 10, "none", "none", 40, 50]
    assert memo.values[names[1]] == 10
    cache.update_node(node(names[5]).alloc(cpu="8", pods=10).record())  # changed
    snapshot.update()
    memo = memos.memo("k", snapshot)
    assert memo is not None
    assert memo.kept(wrap, 4) == [40, "none", 0]
    assert names[5] not in memo.values
    cache.add_node(node("n9").alloc(cpu="4", pods=10).record())  # the node list changes
    snapshot.update()
    memo = memos.memo("k", snapshot)
    assert memo is not None
    every = list(snapshot.node_infos())
    assert consecutive_place(snapshot, every) == 0
    values = memo.kept(every, 0)
    assert values == [memo.values.get(ni.name, "none") for ni in every]
    assert values.count("none") == len(every) - 3  # n0, n1 and n4 still hold values


def test_kept_rejections_share_one_status_per_verdict() -> None:
    """A pod that fits no node, twice: each diagnosis holds one Status object per
    distinct verdict (the memo keeps one), and the second, read from the memo,
    sums up as the first."""
    from kscheduler.scheduler import fit_detail

    cache = Cache()
    for i in range(30):
        cpu = "4" if i % 3 else "2"
        cache.add_node(node(f"n{i:02d}").alloc(cpu=cpu, memory="8Gi", pods=10).record())
    fwk, snapshot = new_framework(cache)
    algorithm = Algorithm(rng=random.Random(1))
    found = []
    for uid in ("a", "b"):
        snapshot.update()
        p = pod("big").uid(uid).req(cpu="9").build()
        with pytest.raises(FitError) as err:
            algorithm.schedule_pod(fwk, CycleState(), p, snapshot)
        found.append(err.value)
    first, second = found
    for fe in found:
        assert len(fe.diagnosis.node_to_status.statuses) == 30
        assert len({id(s) for s in fe.diagnosis.node_to_status.statuses.values()}) == 1
    assert str(second) == str(first) == "0/30 nodes are available: 30 Insufficient cpu."
    assert fit_detail(second) == fit_detail(first)
    assert fit_detail(second)["rejections"] == [
        {
            "plugin": "NodeResourcesFit",
            "code": "UnschedulableAndUnresolvable",  # 9 CPUs exceed every node's allocatable
            "reasons": ["Insufficient cpu"],
            "nodes": 30,
        }
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_whole_chunks_rejected_at_once_give_the_node_by_node_diagnosis(seed: int) -> None:
    """find_nodes_that_fit records a chunk where no node fits in one pass; with a
    FilterRecord (explain) it goes node by node: both give the same verdicts."""
    from kscheduler.algorithm import FilterRecord

    rng = random.Random(seed)
    cache = Cache()
    for i in range(150):
        cache.add_node(random_node(rng, i).record())
    fwk, snapshot = new_framework(cache)
    shapes = pod_shapes(rng)
    compared = 0
    for step in range(60):
        shape = shapes[rng.randrange(len(shapes))]
        p = shape.uid(f"u{step}").req(cpu=rng.choice(["100m", "3", "9"])).build()
        outcomes = []
        for record in (None, FilterRecord()):
            snapshot.update()
            state = CycleState()
            feasible, diag = Algorithm(
                percentage_of_nodes_to_score=30, rng=random.Random(seed)
            ).find_nodes_that_fit(fwk, state, p, snapshot, record=record)
            statuses = sorted(
                (n, s.plugin, s.code, tuple(s.reasons))
                for n, s in diag.node_to_status.statuses.items()
            )
            outcomes.append(
                (
                    [ni.name for ni in feasible],
                    statuses,
                    diag.unschedulable_plugins,
                    diag.pending_plugins,
                )
            )
        assert outcomes[0] == outcomes[1]
        compared += not outcomes[0][0]
    assert compared > 0  # some pods fit nowhere: every chunk was rejected whole
