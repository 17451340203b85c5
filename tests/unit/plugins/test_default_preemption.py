from __future__ import annotations

import random
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pytest

from kscheduler.algorithm import Algorithm
from kscheduler.cache import Cache, Snapshot
from kscheduler.extender import ExtenderError
from kscheduler.framework import Code, CycleState, PodInfo, PostFilterResult, Status
from kscheduler.framework.args import ConfigError
from kscheduler.framework.interface import NodeToStatus, Victims
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.runtime import Framework, WaitingPodEntry
from kscheduler.plugins import (
    default_binder,
    default_preemption,
    dynamic_resources,
    inter_pod_affinity,
    node_resources_fit,
    priority_sort,
    taint_toleration,
)
from kscheduler.plugins.default_preemption import (
    MSG_NEVER,
    MSG_NO_VICTIMS,
    MSG_NOT_HELPFUL,
    MSG_TERMINATING,
    Candidate,
    DefaultPreemption,
    DefaultPreemptionArgs,
    parse_args,
    pick_one_node,
    sort_by_importance,
    split_by_pdb_violation,
)

from ..builders import NodeBuilder, PodBuilder, node, pod
from ..fakes import FakeClient, FakeObjects, FakeRecorder, framework

SCHEDULER = "test-scheduler"
PLUGINS = [
    "TaintToleration",
    "NodeResourcesFit",
    "InterPodAffinity",
]
ENTRIES = [
    priority_sort.ENTRY,
    taint_toleration.ENTRY,
    node_resources_fit.ENTRY,
    inter_pod_affinity.ENTRY,
    dynamic_resources.ENTRY,
    default_preemption.ENTRY,
    default_binder.ENTRY,
]


class RecordingClient(FakeClient):
    def __init__(self, missing: Sequence[str] = ()) -> None:
        super().__init__()
        self.deletions: list[tuple[str, str, str]] = []
        self.missing = set(missing)

    async def delete_pod(self, pod: PodInfo, *, reason: str, message: str) -> None:
        if pod.key in self.missing:
            raise NotFound(pod.key)
        self.deletions.append((pod.key, reason, message))
        await super().delete_pod(pod, reason=reason, message=message)


class NotFound(Exception):
    not_found = True


class Nominator:
    def __init__(self, nominated: Mapping[str, list[PodInfo]]) -> None:
        self.nominated = nominated

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        return list(self.nominated.get(node_name, []))

    def nodes_with_nominated_pods(self) -> Collection[str]:
        return [n for n, pods in self.nominated.items() if pods]


class Env:
    def __init__(
        self,
        nodes: Sequence[NodeBuilder],
        *,
        pdbs: Sequence[dict[str, Any]] = (),
        nominated: Mapping[str, list[PodInfo]] | None = None,
        args: Mapping[str, Any] | None = None,
        post_filter: Sequence[str] = ("DefaultPreemption",),
        missing: Sequence[str] = (),
    ) -> None:
        self.cache = Cache()
        for nb in nodes:
            ni = nb.build()
            assert ni.node is not None
            self.cache.add_node(ni.node)
            for p in ni.pods.values():
                self.cache.add_pod(p)
        self.client = RecordingClient(missing)
        plugin_args = {"DefaultPreemption": parse_args(args or {})}
        fwk, snap, _, rec = framework(
            ENTRIES,
            {
                "queueSort": ["PrioritySort"],
                "preFilter": [*PLUGINS[1:], "DynamicResources"],
                "filter": PLUGINS,
                "postFilter": list(post_filter),
                "bind": ["DefaultBinder"],
            },
            cache=self.cache,
            client=self.client,
            objects=FakeObjects({"poddisruptionbudgets": list(pdbs)}),
            args=plugin_args,
            name=SCHEDULER,
        )
        if nominated:
            fwk.set_nominator(Nominator(nominated))
        self.fwk: Framework = fwk
        self.snap: Snapshot = snap
        self.recorder: FakeRecorder = rec
        plugin = fwk.plugins["DefaultPreemption"]
        assert isinstance(plugin, DefaultPreemption)
        self.plugin = plugin
        plugin.rng = random.Random(1)

    async def preempt(
        self, p: PodInfo, *, run_all: bool = False, wait: bool = True
    ) -> tuple[PostFilterResult | None, Status | None]:
        state = CycleState()
        self.snap.update()
        feasible, diagnosis = Algorithm().find_nodes_that_fit(self.fwk, state, p, self.snap)
        assert not feasible, "the preemptor must not fit anywhere"
        if run_all:
            out = await self.fwk.run_post_filter(state, p, diagnosis.node_to_status)
        else:
            out = await self.plugin.post_filter(state, p, diagnosis.node_to_status)
        if wait:
            await self.plugin.wait_idle()  # the evictions run in the background
        return out


def _success(st: Status | None) -> bool:
    """A preemption that found its node succeeds with upstream's message."""
    return (
        st is not None
        and st.code == Code.SUCCESS
        and st.message.startswith("preemption: found a potential placement for pod on node ")
    )


def low(name: str, cpu: str, prio: int, **labels: str) -> PodBuilder:
    return pod(name).req(cpu=cpu).priority(prio).labels(**labels)


def started(p: PodBuilder, when: str) -> PodInfo:
    info = p.build()
    info.start_time = when
    return info


def preemptor(cpu: str, prio: int = 100) -> PodInfo:
    info = pod("high").req(cpu=cpu).priority(prio).build()
    info.scheduler_name = SCHEDULER
    return info


def n4(name: str, *pods: PodInfo) -> NodeBuilder:
    return node(name).alloc(cpu="4", memory="8Gi", pods=110).with_pods(*pods)


def pdb(name: str, disruptions_allowed: int, disrupted: Sequence[str] = (), **labels: str) -> Any:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": labels}},
        "status": {
            "disruptionsAllowed": disruptions_allowed,
            "disruptedPods": {n: "2024-01-01T00:00:00Z" for n in disrupted},
        },
    }


# ---- args ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({}, DefaultPreemptionArgs(10, 100)),
        ({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 5}, (0, 5)),
        ({"minCandidateNodesPercentage": 100, "minCandidateNodesAbsolute": 0}, (100, 0)),
        ({"minCandidateNodesPercentage": 101}, "not in valid range [0, 100]"),
        ({"minCandidateNodesPercentage": -1}, "not in valid range [0, 100]"),
        ({"minCandidateNodesAbsolute": -1}, "not in valid range [0, inf)"),
        (
            {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
            "cannot be zero at the same time as minCandidateNodesAbsolute",
        ),
        ({"minCandidateNodesPercentage": "10"}, "expected integer"),
        ({"minCandidateNodesAbsolute": 2**31}, "must be at most"),
        ({"other": 1}, "unknown field"),
    ],
)
def test_parse_args(raw: dict[str, Any], expected: Any) -> None:
    if isinstance(expected, str):
        with pytest.raises(ConfigError, match=re.escape(expected)):
            parse_args(raw)
        return
    got = parse_args(raw)
    if isinstance(expected, tuple):
        expected = DefaultPreemptionArgs(*expected)
    assert got == expected


@pytest.mark.parametrize(
    ("pct", "absolute", "nodes", "expected"),
    [
        (10, 100, 50, 50),  # small clusters: every node
        (10, 100, 5000, 500),
        (10, 100, 500, 100),
        (0, 3, 50, 3),
        (50, 0, 7, 3),
        (100, 0, 7, 7),
    ],
)
def test_num_candidates(pct: int, absolute: int, nodes: int, expected: int) -> None:
    env = Env([], args={"minCandidateNodesPercentage": pct, "minCandidateNodesAbsolute": absolute})
    assert env.plugin.calculate_num_candidates(nodes) == expected


# ---- ordering and PDBs ---------------------------------------------------------------------


def test_importance_order_priority_then_start_time_missing_start_counts_as_now() -> None:
    a = started(low("a", "1", 5), "2024-01-01T00:00:10Z")
    b = started(low("b", "1", 5), "2024-01-01T00:00:05Z")
    c = low("c", "1", 5).build()  # not started
    d = started(low("d", "1", 9), "2024-01-01T00:00:20Z")
    pods = [a, c, b, d]
    sort_by_importance(pods)
    assert [p.name for p in pods] == ["d", "b", "a", "c"]


def test_importance_order_of_unstarted_equal_pods_follows_go_insertion_sort() -> None:
    # Go compares with time.Now() for each missing start: the earlier argument always
    # looks older, so its insertion sort reverses a run of such pods.
    pods = [low(n, "1", 1).build() for n in ("p1", "p2", "p3")]
    sort_by_importance(pods)
    assert [p.name for p in pods] == ["p3", "p2", "p1"]


def test_pdb_split_uses_up_budgets_in_order() -> None:
    pods = [low(f"w{i}", "1", 1, app="web").build() for i in range(3)]
    pods.append(low("other", "1", 1, app="db").build())
    pods.append(low("nolabels", "1", 1).build())
    budgets = default_preemption._parse_pdbs([pdb("web", 1, app="web")])
    violating, ok = split_by_pdb_violation(pods, budgets)
    assert [p.name for p in violating] == ["w1", "w2"]
    assert [p.name for p in ok] == ["w0", "other", "nolabels"]


def test_pdb_already_disrupted_pods_do_not_count_and_empty_selector_matches_nothing() -> None:
    pods = [low("w0", "1", 1, app="web").build(), low("w1", "1", 1, app="web").build()]
    budgets = default_preemption._parse_pdbs(
        [
            pdb("web", 0, disrupted=["w0"], app="web"),
            {"metadata": {"name": "all", "namespace": "default"}, "spec": {"selector": {}}},
            {"metadata": {"name": "nil", "namespace": "default"}, "spec": {}},
            pdb("elsewhere", 0, app="web") | {"metadata": {"name": "x", "namespace": "ns2"}},
        ]
    )
    violating, ok = split_by_pdb_violation(pods, budgets)
    assert [p.name for p in violating] == ["w1"]
    assert [p.name for p in ok] == ["w0"]


# ---- node choice ---------------------------------------------------------------------------


def _cand(name: str, prios: Sequence[int], pdb_violations: int = 0, start: str = "") -> Candidate:
    victims = []
    for i, prio in enumerate(prios):
        v = low(f"{name}-{i}", "1", prio).build()
        v.start_time = start or "2024-01-01T00:00:00Z"
        victims.append(v)
    sort_by_importance(victims)
    return Candidate(name, victims, pdb_violations)


MIN_INT32 = -(2**31)


@pytest.mark.parametrize(
    ("candidates", "winner"),
    [
        pytest.param(
            [_cand("a", [1], pdb_violations=1), _cand("b", [50, 50])], "b", id="fewest-pdb"
        ),
        pytest.param([_cand("a", [10, 1]), _cand("b", [5, 5, 5])], "b", id="lowest-highest"),
        pytest.param([_cand("a", [5, 4]), _cand("b", [5, 1])], "b", id="lowest-sum"),
        # without the +MaxInt32+1 offset two pods at -10 would sum lower than one
        pytest.param([_cand("a", [-10, -10]), _cand("b", [-10])], "b", id="sum-offset"),
        # the sums tie (a pod at MinInt32 adds 0): fewer victims wins
        pytest.param([_cand("a", [7, MIN_INT32]), _cand("b", [7])], "b", id="fewest-victims"),
        pytest.param(
            [
                _cand("a", [3], start="2024-01-01T00:00:00Z"),
                _cand("b", [3], start="2024-06-01T00:00:00Z"),
                _cand("c", [3], start="2024-03-01T00:00:00Z"),
            ],
            "b",
            id="latest-start",
        ),
        pytest.param([_cand("a", [3]), _cand("b", [3])], "a", id="first"),
    ],
)
def test_pick_one_node(candidates: list[Candidate], winner: str) -> None:
    assert pick_one_node(candidates).node_name == winner


def test_pick_one_node_latest_start_looks_at_highest_priority_victims_only() -> None:
    a = _cand("a", [5, 1], start="2024-06-01T00:00:00Z")
    a.victims[1].start_time = "2020-01-01T00:00:00Z"  # low priority, ignored
    b = _cand("b", [5, 1], start="2024-03-01T00:00:00Z")
    assert pick_one_node([b, a]).node_name == "a"


def test_pick_one_node_unstarted_victims_count_as_now() -> None:
    a = _cand("a", [3], start="2024-06-01T00:00:00Z")
    b = _cand("b", [3])
    b.victims[0].start_time = ""
    assert pick_one_node([a, b]).node_name == "b"


# ---- victim selection ----------------------------------------------------------------------


async def test_removes_all_then_reprieves_most_important_first() -> None:
    env = Env(
        [
            n4(
                "n1",
                low("p1", "1", 1).build(),
                low("p2", "2", 2).build(),
                low("p3", "1", 3).build(),
            )
        ]
    )
    res, st = await env.preempt(preemptor("2"))
    assert st is not None and st.code == Code.SUCCESS
    assert (
        st.message
        == "preemption: found a potential placement for pod on node n1, preempting 1 victims"
    )
    assert _node(res) == "n1"
    # p3 comes back (3 free), p2 does not fit back (1 free), p1 does (2 free)
    assert [k for k, _, _ in env.client.deletions] == ["default/p2"]


async def test_pdb_violating_victims_are_reprieved_first() -> None:
    pods = [low("important", "1", 5, app="a").build(), low("guarded", "1", 1, app="g").build()]
    node_ = node("n1").alloc(cpu="2", pods=110).with_pods(*pods)
    env = Env([node_], pdbs=[pdb("guard", 0, app="g")])
    res, st = await env.preempt(preemptor("1"))
    assert (_node(res), _success(st)) == ("n1", True)
    assert [k for k, _, _ in env.client.deletions] == ["default/important"]

    # without the PDB, the more important pod is kept and the guarded one goes
    env = Env([node("n1").alloc(cpu="2", pods=110).with_pods(*pods)])
    await env.preempt(preemptor("1"))
    assert [k for k, _, _ in env.client.deletions] == ["default/guarded"]


async def test_prefers_node_without_pdb_violation() -> None:
    env = Env(
        [
            node("guarded").alloc(cpu="1", pods=110).with_pods(low("g", "1", 1, app="g").build()),
            node("free").alloc(cpu="1", pods=110).with_pods(low("f", "1", 50).build()),
        ],
        pdbs=[pdb("guard", 0, app="g")],
    )
    res, _ = await env.preempt(preemptor("1"))
    assert _node(res) == "free"


async def test_prefers_node_with_lower_priority_victims() -> None:
    env = Env(
        [
            node("a").alloc(cpu="1", pods=110).with_pods(low("a1", "1", 20).build()),
            node("b").alloc(cpu="1", pods=110).with_pods(low("b1", "1", 10).build()),
        ]
    )
    res, _ = await env.preempt(preemptor("1"))
    assert _node(res) == "b"
    assert env.client.deletions == [
        (
            "default/b1",
            "PreemptionByScheduler",
            f"{SCHEDULER}: preempting to accommodate a higher priority pod",
        )
    ]


async def test_pre_filter_state_follows_removed_victims() -> None:
    # the preemptor's anti-affinity rejects the node only because of a low-priority pod
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "x"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    raw = pod("high").req(cpu="1").priority(100).raw()
    raw["spec"]["affinity"] = anti
    high = parse_pod(raw)
    env = Env(
        [
            node("n1")
            .alloc(cpu="4", pods=110)
            .labels(**{"kubernetes.io/hostname": "n1"})
            .with_pods(low("x", "1", 1, app="x").build(), low("y", "1", 1, app="y").build())
        ]
    )
    res, st = await env.preempt(high)
    assert (_node(res), _success(st)) == ("n1", True)
    assert [k for k, _, _ in env.client.deletions] == ["default/x"]


# ---- eligibility ---------------------------------------------------------------------------


async def test_never_policy_is_not_eligible() -> None:
    env = Env([n4("n1", low("p", "4", 1).build())])
    p = preemptor("1")
    p.preemption_policy = "Never"
    res, st = await env.preempt(p)
    assert res is None
    assert st is not None and st.code == Code.UNSCHEDULABLE
    assert st.message == "preemption: " + MSG_NEVER
    assert env.client.deletions == []


def _terminating(p: PodInfo) -> PodInfo:
    p.deleting = True
    p.raw.setdefault("status", {})["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    return p


async def test_terminating_victim_on_nominated_node_is_not_eligible() -> None:
    env = Env([n4("n1", _terminating(low("old", "4", 1).build()))])
    p = preemptor("1")
    p.nominated_node_name = "n1"
    res, st = await env.preempt(p)
    assert res is None
    assert st is not None and st.message == "preemption: " + MSG_TERMINATING


async def test_terminating_for_another_reason_does_not_block() -> None:
    victim = low("old", "4", 1).build()
    victim.deleting = True  # deleted, but not by a preemption
    env = Env([n4("n1", victim)])
    p = preemptor("1")
    p.nominated_node_name = "n1"
    res, st = await env.preempt(p)
    assert (_node(res), _success(st)) == ("n1", True)
    assert env.client.deletions == []  # already terminating: no second delete


async def test_unresolvable_nominated_node_makes_the_pod_eligible_again() -> None:
    env = Env(
        [
            node("n1")
            .alloc(cpu="4", pods=110)
            .taint("gone")
            .with_pods(_terminating(low("old", "4", 1).build())),
            n4("n2", low("p", "4", 1).build()),
        ]
    )
    p = preemptor("1")
    p.nominated_node_name = "n1"
    res, st = await env.preempt(p)
    assert (_node(res), _success(st)) == ("n2", True)


# ---- failures and messages -----------------------------------------------------------------


async def test_unresolvable_nodes_are_not_candidates() -> None:
    env = Env(
        [
            node("tainted").alloc(cpu="4", pods=110).taint("k").with_pods(low("a", "4", 1).build()),
            n4("n2", low("b", "4", 1).build()),
        ]
    )
    res, _ = await env.preempt(preemptor("1"))
    assert _node(res) == "n2"
    assert [k for k, _, _ in env.client.deletions] == ["default/b"]


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        pytest.param(
            [node("t").alloc(cpu="4", pods=110).taint("k").with_pods(low("a", "4", 1).build())],
            f"0/1 nodes are available: 1 {MSG_NOT_HELPFUL}.",
            id="only-unresolvable",
        ),
        pytest.param(
            [n4("n1", low("peer", "4", 100).build())],
            f"0/1 nodes are available: 1 {MSG_NO_VICTIMS}.",
            id="no-lower-priority-pods",
        ),
        pytest.param(
            [n4("n1", low("big", "3", 200).build(), low("small", "1", 1).build())],
            "0/1 nodes are available: 1 Insufficient cpu.",
            id="does-not-fit-even-with-victims-gone",
        ),
        pytest.param(
            [
                node("t").alloc(cpu="4", pods=110).taint("k").with_pods(low("a", "4", 1).build()),
                n4("n1", low("peer", "4", 100).build()),
                n4("n2", low("big", "3", 200).build(), low("small", "1", 1).build()),
            ],
            "0/3 nodes are available: 1 Insufficient cpu, 1 No preemption victims found for "
            f"incoming pod, 1 {MSG_NOT_HELPFUL}.",
            id="mixed",
        ),
    ],
)
async def test_no_candidate_messages(nodes: list[NodeBuilder], message: str) -> None:
    env = Env(nodes)
    res, st = await env.preempt(preemptor("2"))
    # an empty nomination: a stale nominatedNodeName is cleared
    assert _node(res) == ""
    assert st is not None and st.code == Code.UNSCHEDULABLE
    assert st.message == "preemption: " + message
    assert env.client.deletions == []


async def test_full_post_filter_message_with_dynamic_resources_first() -> None:
    env = Env(
        [
            node("t").alloc(cpu="4", pods=110).taint("k"),
            n4("n1", low("peer", "4", 100).build()),
        ],
        post_filter=("DynamicResources", "DefaultPreemption"),
    )
    _, st = await env.preempt(preemptor("1"), run_all=True)
    assert st is not None
    assert st.message == (
        f"preemption: 0/2 nodes are available: 1 {MSG_NO_VICTIMS}, 1 {MSG_NOT_HELPFUL}."
    )


# ---- candidates and offset -----------------------------------------------------------------


class FixedRng(random.Random):
    def __init__(self, value: int) -> None:
        super().__init__(0)
        self.value = value
        self.calls: list[int] = []

    def randrange(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append(args[0])
        return self.value


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
async def test_dry_run_starts_at_the_random_offset_and_stops_at_enough_candidates(
    offset: int,
) -> None:
    names = ["n0", "n1", "n2", "n3"]
    env = Env(
        [n4(n, low(f"{n}-p", "4", 1).build()) for n in names],
        args={"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 1},
    )
    rng = FixedRng(offset)
    env.plugin.rng = rng
    res, st = await env.preempt(preemptor("1"))
    assert st is not None and st.code == Code.SUCCESS
    assert rng.calls == [4]
    # node order is the snapshot's; all four tie, the first dry-run one is chosen
    order = [ni.name for ni in env.snap.node_infos()]
    assert _node(res) == order[offset]


async def test_enough_candidates_needs_one_without_pdb_violation() -> None:
    names = ["n0", "n1", "n2"]
    env = Env(
        [
            node(n).alloc(cpu="1", pods=110).with_pods(low(f"{n}-p", "1", 1, app=n).build())
            for n in names
        ],
        pdbs=[pdb("g0", 0, app="n0"), pdb("g1", 0, app="n1")],
        args={"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 1},
    )
    env.plugin.rng = FixedRng(0)
    res, _ = await env.preempt(preemptor("1"))
    # the dry run goes on past the violating n0 and n1 until n2
    assert _node(res) == "n2"


# ---- preparation ---------------------------------------------------------------------------


async def test_victims_deleted_events_recorded_and_lower_nominations_cleared() -> None:
    lower = pod("lower").req(cpu="1").priority(5).nominated("n1").build()
    memory_only = pod("mem-only").req(cpu="1").priority(5).build()  # nominated in memory only
    higher = pod("peer").req(cpu="1").priority(500).nominated("n1").build()
    env = Env(
        [n4("n1", low("v1", "2", 1).build(), low("v2", "2", 2).build())],
        nominated={"n1": [lower, memory_only, higher]},
    )
    p = preemptor("3")  # with the higher-priority nominated pod, the node is full
    res, st = await env.preempt(p)
    assert (_node(res), _success(st)) == ("n1", True)
    assert sorted(k for k, _, _ in env.client.deletions) == ["default/v1", "default/v2"]
    assert sorted(env.recorder.events) == [
        (f"default/{v}", "Normal", "Preempted", f"Preempted by pod {p.uid} on node n1")
        for v in ("v1", "v2")
    ]
    assert env.client.requests == [
        (
            "PATCH",
            "/api/v1/namespaces/default/pods/lower/status",
            {"status": {"nominatedNodeName": None}},
        )
    ]


async def test_waiting_victim_is_rejected_not_deleted() -> None:
    waiting = low("waiting", "4", 1).build()
    env = Env([n4("n1", waiting)])
    entry = WaitingPodEntry(waiting.with_node("n1"), {"SomePermit": 60.0})
    env.fwk.waiting_pods[waiting.uid] = entry
    res, st = await env.preempt(preemptor("1"))
    assert (_node(res), _success(st)) == ("n1", True)
    assert env.client.deletions == []
    verdict = await entry.wait()
    assert verdict is not None
    assert (verdict.code, verdict.plugin, verdict.message) == (
        Code.UNSCHEDULABLE,
        "DefaultPreemption",
        "preempted",
    )
    assert [e[2] for e in env.recorder.events] == ["Preempted"]


async def test_victim_already_gone_gets_no_event() -> None:
    env = Env([n4("n1", low("gone", "4", 1).build())], missing=["default/gone"])
    res, st = await env.preempt(preemptor("1"))
    assert (_node(res), _success(st)) == ("n1", True)
    assert env.recorder.events == []


def _node(res: PostFilterResult | None) -> str | None:
    """The nominated node of a PostFilter result (None when there is no result)."""
    return res.nominated_node_name if res is not None else None


def two_candidates() -> Env:
    """n1's victim is the cheaper one (lower priority): n1 wins without extenders."""
    return Env(
        [
            node("n1").alloc(cpu="2", pods=110).with_pods(low("a", "2", 1).build()),
            node("n2").alloc(cpu="2", pods=110).with_pods(low("b", "2", 5).build()),
        ]
    )


async def test_preempt_extenders_narrow_candidates_and_choose_victims() -> None:
    seen: list[dict[str, list[str]]] = []

    async def only_n2(p: PodInfo, victims: Mapping[str, Victims]) -> dict[str, Victims]:
        seen.append({n: [v.name for v in vs.pods] for n, vs in victims.items()})
        return {"n2": Victims(list(victims["n2"].pods), 0)}

    env = two_candidates()
    res, st = await env.preempt(preemptor("2"))
    assert (_node(res), _success(st)) == ("n1", True)

    env = two_candidates()
    env.fwk.set_preemption_extenders(only_n2)
    res, st = await env.preempt(preemptor("2"))
    assert (_node(res), _success(st)) == ("n2", True)
    assert seen == [{"n1": ["a"], "n2": ["b"]}]
    assert [k for k, _, _ in env.client.deletions] == ["default/b"]


async def test_preempt_extender_errors_and_empty_answers() -> None:
    async def failing(p: PodInfo, victims: Mapping[str, Victims]) -> dict[str, Victims]:
        raise ExtenderError("extender http://x/preempt: 500")

    env = two_candidates()
    env.fwk.set_preemption_extenders(failing)
    res, st = await env.preempt(preemptor("2"))
    assert res is None and st is not None and st.code == Code.ERROR
    assert "500" in st.message
    assert env.client.deletions == []

    async def none(p: PodInfo, victims: Mapping[str, Victims]) -> dict[str, Victims]:
        return {}

    env = two_candidates()
    env.fwk.set_preemption_extenders(none)
    res, st = await env.preempt(preemptor("2"))
    assert res is None and st is not None and st.code == Code.UNSCHEDULABLE
    assert env.client.deletions == []


async def test_evictions_run_in_the_background_while_the_preemptor_waits() -> None:
    env = Env([n4("n1", low("p1", "4", 1).build())])
    activated: list[str] = []
    released: list[str] = []
    env.fwk.set_activator(activated.extend, released.extend)
    p = preemptor("2")
    assert env.plugin.pre_enqueue(p) is None
    res, st = await env.preempt(p, wait=False)
    assert (_node(res), _success(st)) == ("n1", True)
    assert env.client.deletions == []  # not yet: PostFilter did not wait for them
    gate = env.plugin.pre_enqueue(p)
    assert gate is not None and gate.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert gate.message == "waiting for the preemption for this pod to be finished"
    await env.plugin.wait_idle()
    assert [k for k, _, _ in env.client.deletions] == ["default/p1"]
    assert env.plugin.pre_enqueue(p) is None
    # done: the victims' deletion events bring the preemptor back, as upstream
    assert (activated, released) == ([], [p.uid])


async def test_a_failed_eviction_retries_the_preemptor_at_once() -> None:
    env = Env([n4("n1", low("p1", "4", 1).build())])
    activated: list[str] = []
    released: list[str] = []
    env.fwk.set_activator(activated.extend, released.extend)

    async def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("apiserver unavailable")

    env.client.delete_pod = refuse  # type: ignore[method-assign]
    p = preemptor("2")
    res, st = await env.preempt(p)
    assert (_node(res), _success(st)) == ("n1", True)  # the nomination stands
    assert (activated, released) == ([p.uid], [])


# ---- dry runs kept across cycles -------------------------------------------------------------


def dry_run(env: Env, p: PodInfo) -> tuple[list[tuple[str, list[str], int]], dict[str, str]]:
    """find_candidates after this cycle's filters, as names."""
    state = CycleState()
    env.snap.update()
    feasible, diagnosis = Algorithm().find_nodes_that_fit(env.fwk, state, p, env.snap)
    assert not feasible
    env.plugin.rng = random.Random(3)
    candidates, failed, errors = env.plugin.find_candidates(state, p, diagnosis.node_to_status)
    assert not errors
    return (
        [(c.node_name, [v.name for v in c.victims], c.num_pdb_violations) for c in candidates],
        {n: st.message for n, st in failed.items()},
    )


async def test_dry_runs_are_kept_until_the_node_or_its_nominated_pods_change() -> None:
    names = [f"n{i}" for i in range(6)]
    nominated: dict[str, list[PodInfo]] = {}
    env = Env(
        [n4(n, low(f"{n}-a", "2", 1).build(), low(f"{n}-b", "2", 5).build()) for n in names],
        nominated=nominated,
        args={"minCandidateNodesPercentage": 100, "minCandidateNodesAbsolute": 6},
    )
    env.fwk.set_nominator(Nominator(nominated))  # empty for now
    runs: list[str] = []
    original = env.plugin.select_victims_on_node

    def counted(state: Any, p: Any, ni: Any, pdbs: Any) -> Any:
        runs.append(ni.name)
        return original(state, p, ni, pdbs)

    env.plugin.select_victims_on_node = counted  # type: ignore[method-assign]

    def preemptor_(uid: str) -> PodInfo:
        p = preemptor("3")
        p.uid = uid
        return p

    def both_ways(uid: str) -> tuple[Any, list[str]]:
        """The dry run with the memo, checked against one without it."""
        runs.clear()
        kept = dry_run(env, preemptor_(uid))
        memo_runs = list(runs)
        env.fwk.node_memo = False
        assert dry_run(env, preemptor_(uid)) == kept
        env.fwk.node_memo = True
        return kept, memo_runs

    first, ran = both_ways("a")
    assert sorted(ran) == names
    assert sorted(first[0]) == [(n, [f"{n}-b", f"{n}-a"], 0) for n in names]
    again, ran = both_ways("b")
    assert ran == [] and again == first
    # a pod as important as the preemptor nominated to n2: n2 can no longer be made to fit
    nominated["n2"] = [pod("nominee").uid("nominee").req(cpu="3").priority(100).build()]
    changed, ran = both_ways("c")
    assert ran == ["n2"] and "n2" in changed[1]
    # a node changed
    env.cache.remove_pod(env.snap.get("n4").pods[next(iter(env.snap.get("n4").pods))].uid)  # type: ignore[union-attr]
    _, ran = both_ways("d")
    assert ran == ["n4"]
    # a lower-priority preemptor is a kind of its own (other pods may be evicted)
    runs.clear()
    dry_run(env, preemptor("3", prio=6))
    assert len(runs) >= 5


def test_potential_nodes_are_the_unschedulable_ones_in_the_diagnosis_order() -> None:
    env = Env([n4(f"n{i}") for i in range(6)])
    env.snap.update()
    verdicts = NodeToStatus(
        {
            "n4": Status.unschedulable("Insufficient cpu"),
            "n1": Status.unresolvable("node(s) didn't match Pod's node affinity/selector"),
            "gone": Status.unschedulable("Insufficient cpu"),  # not in the snapshot
            "n0": Status.unschedulable("Too many pods"),
            "n5": Status(Code.PENDING, ["waiting"]),
        }
    )
    assert [ni.name for ni in env.plugin.potential_nodes(verdicts)] == ["n4", "n0"]
