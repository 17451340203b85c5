from __future__ import annotations

from typing import Any

import pytest

from kscheduler.framework import ActionType, Code, CycleState, EventResource, QueueingHint
from kscheduler.framework.args import ConfigError
from kscheduler.plugins.node_resources_fit import (
    ENTRY,
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    REQUESTED_TO_CAPACITY_RATIO,
    NodeResourcesFit,
    NodeResourcesFitArgs,
    ResourceSpec,
    ScoringStrategy,
    UtilizationShapePoint,
    broken_linear,
    parse_args,
)

from ..builders import NodeBuilder, PodBuilder, node, pod

FIT = NodeResourcesFit(NodeResourcesFitArgs())
GPU = "example.com/gpu"


def _filter(pl: NodeResourcesFit, p: PodBuilder, n: NodeBuilder) -> Any:
    state = CycleState()
    built = p.build()
    assert pl.pre_filter(state, built, []) == (None, None)
    return pl.filter(state, built, n.build())


def _busy(cpu: str, memory: str) -> NodeBuilder:
    """A 4-CPU / 8Gi / 110-pod node already running a pod requesting cpu and memory."""
    return (
        node("n")
        .alloc(cpu="4", memory="8Gi", pods=110)
        .with_pods(pod("existing").req(cpu=cpu, memory=memory).build())
    )


# ---- Filter ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "n", "code", "reasons"),
    [
        (pod("p").req(cpu="1", memory="1Gi"), _busy("3", "4Gi"), None, []),
        (pod("p").req(cpu="1500m"), _busy("3", "4Gi"), Code.UNSCHEDULABLE, ["Insufficient cpu"]),
        (
            pod("p").req(cpu="2", memory="6Gi"),
            _busy("3", "4Gi"),
            Code.UNSCHEDULABLE,
            ["Insufficient cpu", "Insufficient memory"],
        ),
        # more than the node's whole allocatable: preemption cannot help
        (
            pod("p").req(cpu="5", memory="1Gi"),
            _busy("0", "0"),
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            ["Insufficient cpu"],
        ),
        (
            pod("p").req(cpu="2", memory="9Gi"),
            _busy("3", "0"),
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            ["Insufficient cpu", "Insufficient memory"],
        ),
        (
            pod("p").req(ephemeral_storage="2Gi"),
            node("n").alloc(cpu="4", memory="8Gi", pods=110, ephemeral_storage="1Gi"),
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            ["Insufficient ephemeral-storage"],
        ),
        (
            pod("p").req(cpu="1"),
            node("n").alloc(cpu="4", pods=1).with_pods(pod("e").build()),
            Code.UNSCHEDULABLE,
            ["Too many pods"],
        ),
        # a best-effort pod only needs a pod slot
        (pod("p"), _busy("4", "8Gi"), None, []),
        (
            pod("p"),
            node("n").alloc(cpu="4", pods=1).with_pods(pod("e").build()),
            Code.UNSCHEDULABLE,
            ["Too many pods"],
        ),
        (
            pod("p").req(**{"cpu": "1", GPU: "1"}),
            node("n").alloc(cpu="4", memory="8Gi", pods=110),
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            [f"Insufficient {GPU}"],
        ),
        (
            pod("p").req(**{GPU: "1"}),
            node("n")
            .alloc(cpu="4", pods=110, **{GPU: "2"})
            .with_pods(pod("e").req(**{GPU: "2"}).build()),
            Code.UNSCHEDULABLE,
            [f"Insufficient {GPU}"],
        ),
        # all reasons, in order: pods, cpu, memory, ephemeral-storage, scalars by name
        (
            pod("p").req(
                cpu="1",
                memory="1Gi",
                ephemeral_storage="1Gi",
                **{"b.com/x": "1", "a.com/y": "1", "hugepages-2Mi": "2Mi"},
            ),
            node("n").alloc(pods=0),
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            [
                "Too many pods",
                "Insufficient cpu",
                "Insufficient memory",
                "Insufficient ephemeral-storage",
                "Insufficient a.com/y",
                "Insufficient b.com/x",
                "Insufficient hugepages-2Mi",
            ],
        ),
        # zero-valued scalar requests are not checked
        (pod("p").req(**{GPU: "0"}), node("n").alloc(pods=1), None, []),
    ],
)
def test_filter(p: PodBuilder, n: NodeBuilder, code: Code | None, reasons: list[str]) -> None:
    st = _filter(FIT, p, n)
    if code is None:
        assert st is None
        return
    assert st is not None
    assert st.code == code
    assert st.reasons == reasons


@pytest.mark.parametrize(
    ("args", "ignored"),
    [
        ({"ignoredResources": [GPU]}, True),
        ({"ignoredResourceGroups": ["example.com"]}, True),
        ({"ignoredResourceGroups": ["example"]}, False),
        ({"ignoredResources": ["other.com/gpu"]}, False),
    ],
)
def test_filter_ignored_extended_resources(args: dict[str, Any], ignored: bool) -> None:
    pl = NodeResourcesFit(parse_args(args))
    st = _filter(pl, pod("p").req(**{GPU: "1"}), node("n").alloc(pods=10))
    assert (st is None) is ignored


def test_filter_ignored_groups_do_not_apply_to_native_resources() -> None:
    pl = NodeResourcesFit(parse_args({"ignoredResourceGroups": ["hugepages-2Mi"]}))
    st = _filter(pl, pod("p").req(**{"hugepages-2Mi": "2Mi"}), node("n").alloc(pods=10))
    assert st is not None and st.reasons == ["Insufficient hugepages-2Mi"]


def test_filter_counts_init_containers_and_overhead() -> None:
    n = node("n").alloc(cpu="2", memory="8Gi", pods=10)
    assert _filter(FIT, pod("p").req(cpu="1").init(cpu="2"), n) is None
    st = _filter(FIT, pod("p").req(cpu="1").init(cpu="2").overhead(cpu="100m"), n)
    assert st is not None and st.reasons == ["Insufficient cpu"]
    st = _filter(FIT, pod("p").req(cpu="1").sidecar(cpu="1").init(cpu="500m"), n)
    assert st is None  # max(1 + 1, 1 + 0.5) = 2
    st = _filter(FIT, pod("p").req(cpu="1").sidecar(cpu="1").init(cpu="1500m"), n)
    assert st is not None  # max(2, 1 + 1.5) = 2.5


def test_filter_without_pre_filter_is_error() -> None:
    st = FIT.filter(CycleState(), pod("p").build(), node("n").build())
    assert st is not None and st.code == Code.ERROR


# ---- Score -----------------------------------------------------------------------------------


def _score(pl: NodeResourcesFit, p: PodBuilder, n: NodeBuilder) -> int:
    state = CycleState()
    built = p.build()
    ni = n.build()
    assert pl.pre_score(state, built, [ni]) is None
    s, st = pl.score(state, built, ni)
    assert st is None
    # Score works without PreScore too.
    assert pl.score(CycleState(), built, ni) == (s, None)
    return s


def _strategy(kind: str, *resources: tuple[str, int], shape: Any = None) -> NodeResourcesFit:
    raw: dict[str, Any] = {"type": kind}
    if resources:
        raw["resources"] = [{"name": n, "weight": w} for n, w in resources]
    if shape is not None:
        raw["requestedToCapacityRatio"] = {
            "shape": [{"utilization": u, "score": s} for u, s in shape]
        }
    return NodeResourcesFit(parse_args({"scoringStrategy": raw}))


def _node_10g(cpu_used: str = "3", mem_used: str = "5Gi") -> NodeBuilder:
    """4000m / 10Gi, with a pod requesting cpu_used / mem_used."""
    return (
        node("n")
        .alloc(cpu="4", memory="10Gi", pods=110)
        .with_pods(pod("e").req(cpu=cpu_used, memory=mem_used).build())
    )


def test_least_allocated() -> None:
    # cpu: (4000 - 4000) * 100 / 4000 = 0; memory: (10Gi - 6Gi) * 100 / 10Gi = 40
    assert _score(FIT, pod("p").req(cpu="1", memory="1Gi"), _node_10g()) == (0 + 40) // 2
    weighted = _strategy(LEAST_ALLOCATED, ("cpu", 1), ("memory", 3))
    assert _score(weighted, pod("p").req(cpu="1", memory="1Gi"), _node_10g()) == 30
    # integer division at every step: cpu (4000 - 1300) * 100 // 4000 = 67; memory 40 -> 53
    assert _score(FIT, pod("p").req(cpu="300m", memory="1Gi"), _node_10g("1")) == 53


def test_least_allocated_over_capacity_is_zero() -> None:
    assert _score(FIT, pod("p").req(cpu="2", memory="6Gi"), _node_10g()) == 0


def test_least_allocated_uses_non_zero_requests() -> None:
    # a container without requests counts as 100m / 200Mi, on the node and for the pod
    n = node("n").alloc(cpu="1", memory="1000Mi", pods=10)
    # cpu (1000 - 100) * 100 // 1000 = 90; memory (1000 - 200) * 100 // 1000 = 80
    assert _score(FIT, pod("p").container(), n) == 85
    # a pod without containers counts as nothing
    assert _score(FIT, pod("p"), n) == 100
    busy = n.with_pods(pod("e").container().build())
    # cpu 200m used: 80; memory 400Mi used: 60
    assert _score(FIT, pod("p").container(), busy) == 70
    # only the missing resource gets the default: memory 200Mi + 800Mi is all of it -> 0
    assert _score(FIT, pod("p").req(cpu="100m", memory="800Mi"), busy) == (80 + 0) // 2


def test_most_allocated() -> None:
    most = _strategy(MOST_ALLOCATED)
    # cpu 4000/4000 -> 100; memory 6Gi/10Gi -> 60
    assert _score(most, pod("p").req(cpu="1", memory="1Gi"), _node_10g()) == 80
    # requests above capacity are clamped to it
    assert _score(most, pod("p").req(cpu="2", memory="6Gi"), _node_10g()) == 100


def test_requested_to_capacity_ratio() -> None:
    up = _strategy(REQUESTED_TO_CAPACITY_RATIO, shape=[(0, 0), (100, 10)])
    # cpu utilization 100 -> 100; memory 60 -> 60
    assert _score(up, pod("p").req(cpu="1", memory="1Gi"), _node_10g()) == 80
    down = _strategy(REQUESTED_TO_CAPACITY_RATIO, shape=[(0, 10), (100, 0)])
    # cpu scores 0 and is left out of the weights; memory 100 - 60 = 40
    assert _score(down, pod("p").req(cpu="1", memory="1Gi"), _node_10g()) == 40


def test_requested_to_capacity_ratio_rounds_half_away_from_zero() -> None:
    up = _strategy(REQUESTED_TO_CAPACITY_RATIO, shape=[(0, 0), (100, 10)])
    empty = node("n").alloc(cpu="1", memory="10Gi", pods=10)
    # cpu 310 * 100 // 1000 = 31; memory 50 -> (31 + 50) / 2 = 40.5 -> 41
    assert _score(up, pod("p").req(cpu="310m", memory="5Gi"), empty) == 41


def test_broken_linear_truncates_toward_zero() -> None:
    f = broken_linear([(0, 100), (30, 30), (100, 0)])
    assert f(0) == 100
    assert f(10) == 77  # 100 + (-70 * 10) / 30 = 100 - 23.3 -> 77
    assert f(30) == 30
    assert f(65) == 15
    assert f(100) == 0
    assert f(150) == 0
    g = broken_linear([(20, 50), (80, 100)])
    assert g(0) == 50
    assert g(50) == 75
    assert g(90) == 100


def test_score_skips_extended_resources_the_pod_does_not_request() -> None:
    pl = _strategy(LEAST_ALLOCATED, ("cpu", 1), (GPU, 1))
    n = node("n").alloc(cpu="4", pods=10, **{GPU: "4"})
    # gpu left out: cpu (4000 - 1000) * 100 // 4000 = 75
    assert _score(pl, pod("p").req(cpu="1"), n) == 75
    # gpu requested: (4 - 3) * 100 // 4 = 25 -> (75 + 25) // 2 = 50
    assert _score(pl, pod("p").req(cpu="1", **{GPU: "3"}), n) == 50
    # a node without the resource leaves it out
    assert _score(pl, pod("p").req(cpu="1", **{GPU: "3"}), node("n").alloc(cpu="4")) == 75


def test_score_ephemeral_storage_uses_real_requests() -> None:
    pl = _strategy(LEAST_ALLOCATED, ("ephemeral-storage", 1))
    n = node("n").alloc(ephemeral_storage="10Gi", pods=10).with_pods(pod("e").build())
    assert _score(pl, pod("p").req(ephemeral_storage="2Gi"), n) == 80
    assert _score(pl, pod("p"), n) == 100


# ---- args ------------------------------------------------------------------------------------


def test_parse_args_defaults() -> None:
    args = parse_args({})
    assert args == NodeResourcesFitArgs()
    assert args.scoring_strategy == ScoringStrategy(
        LEAST_ALLOCATED, (ResourceSpec("cpu", 1), ResourceSpec("memory", 1)), None
    )


def test_parse_args_full() -> None:
    args = parse_args(
        {
            "ignoredResources": ["example.com/foo"],
            "ignoredResourceGroups": ["example.org"],
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "resources": [{"name": "cpu", "weight": 0}, {"name": GPU, "weight": 5}],
                "requestedToCapacityRatio": {
                    "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
                },
            },
        }
    )
    assert args.ignored_resources == {"example.com/foo"}
    assert args.ignored_resource_groups == {"example.org"}
    assert args.scoring_strategy.resources == (ResourceSpec("cpu", 1), ResourceSpec(GPU, 5))
    assert args.scoring_strategy.shape == (
        UtilizationShapePoint(0, 0),
        UtilizationShapePoint(100, 10),
    )


def test_parse_args_empty_resources_default() -> None:
    args = parse_args({"scoringStrategy": {"type": "MostAllocated", "resources": []}})
    assert args.scoring_strategy.resources == (ResourceSpec("cpu", 1), ResourceSpec("memory", 1))


RTCR = "RequestedToCapacityRatio"


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"bogus": 1}, "bogus"),
        ({"ignoredResources": ["bad name"]}, "ignoredResources[0]"),
        ({"ignoredResources": "x"}, "ignoredResources"),
        ({"ignoredResourceGroups": ["example.com/x"]}, "ignoredResourceGroups[0]"),
        ({"scoringStrategy": {}}, "scoringStrategy.type"),
        ({"scoringStrategy": {"type": "Balanced"}}, "scoringStrategy.type"),
        ({"scoringStrategy": {"type": "LeastAllocated", "x": 1}}, "scoringStrategy.x"),
        (
            {
                "scoringStrategy": {
                    "type": "LeastAllocated",
                    "resources": [{"name": "cpu", "weight": 101}],
                }
            },
            "scoringStrategy.resources[0].weight",
        ),
        (
            {
                "scoringStrategy": {
                    "type": "LeastAllocated",
                    "resources": [{"name": "cpu", "weight": -1}],
                }
            },
            "scoringStrategy.resources[0].weight",
        ),
        (
            {"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "w": 1}]}},
            "scoringStrategy.resources[0].w",
        ),
        ({"scoringStrategy": {"type": RTCR}}, "scoringStrategy.requestedToCapacityRatio"),
        (
            {
                "scoringStrategy": {
                    "type": "MostAllocated",
                    "requestedToCapacityRatio": {"shape": []},
                }
            },
            "scoringStrategy.requestedToCapacityRatio",
        ),
        (
            {"scoringStrategy": {"type": RTCR, "requestedToCapacityRatio": {"shape": []}}},
            "scoringStrategy.requestedToCapacityRatio.shape",
        ),
        (
            {
                "scoringStrategy": {
                    "type": RTCR,
                    "requestedToCapacityRatio": {
                        "shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]
                    },
                }
            },
            "scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
        ),
        (
            {
                "scoringStrategy": {
                    "type": RTCR,
                    "requestedToCapacityRatio": {"shape": [{"utilization": 101, "score": 1}]},
                }
            },
            "scoringStrategy.requestedToCapacityRatio.shape[0].utilization",
        ),
        (
            {
                "scoringStrategy": {
                    "type": RTCR,
                    "requestedToCapacityRatio": {"shape": [{"utilization": 10, "score": 11}]},
                }
            },
            "scoringStrategy.requestedToCapacityRatio.shape[0].score",
        ),
    ],
)
def test_parse_args_errors(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as ei:
        parse_args(raw)
    assert ei.value.path == path


# ---- events ----------------------------------------------------------------------------------


def test_events() -> None:
    pod_reg, node_reg, class_reg = FIT.events_to_register()
    assert pod_reg.event.resource is EventResource.POD
    assert pod_reg.event.action == ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN
    assert node_reg.event.resource is EventResource.NODE
    assert node_reg.event.action == ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE
    assert class_reg.event.resource is EventResource.DEVICE_CLASS
    assert class_reg.event.action == ActionType.ADD | ActionType.UPDATE


def test_node_hint() -> None:
    hint = FIT.events_to_register()[1].hint
    assert hint is not None
    p = pod("p").req(cpu="2").build()
    small = node("n").alloc(cpu="1", memory="1Gi", pods=10).record()
    big = node("n").alloc(cpu="4", memory="1Gi", pods=10).record()
    bigger = node("n").alloc(cpu="8", memory="1Gi", pods=10).record()
    more_mem = node("n").alloc(cpu="4", memory="2Gi", pods=10).record()
    more_pods = node("n").alloc(cpu="4", memory="1Gi", pods=20).record()
    assert hint(p, None, big) is QueueingHint.QUEUE
    assert hint(p, None, small) is QueueingHint.SKIP
    assert hint(p, small, big) is QueueingHint.QUEUE
    assert hint(p, big, bigger) is QueueingHint.QUEUE
    assert hint(p, big, small) is QueueingHint.SKIP
    assert hint(p, big, more_mem) is QueueingHint.SKIP  # the pod asks for no memory
    assert hint(p, big, more_pods) is QueueingHint.QUEUE


def test_pod_hint() -> None:
    hint = FIT.events_to_register()[0].hint
    assert hint is not None
    target = pod("p").req(cpu="2").build()
    assigned = pod("e").req(cpu="2", memory="1Gi").on("n").build()
    assert hint(target, assigned, None) is QueueingHint.QUEUE
    assert hint(target, pod("e").req(cpu="2").nominated("n").build(), None) is QueueingHint.QUEUE
    assert hint(target, pod("e").req(cpu="2").build(), None) is QueueingHint.SKIP
    # scale-down of an assigned pod, in a resource the target asks for or not
    assert hint(target, assigned, pod("e").req(cpu="1", memory="1Gi").on("n").build()) is (
        QueueingHint.QUEUE
    )
    assert hint(target, assigned, pod("e").req(cpu="2", memory="512Mi").on("n").build()) is (
        QueueingHint.SKIP
    )
    unassigned = pod("e").req(cpu="2").build()
    assert hint(target, unassigned, pod("e").req(cpu="1").build()) is QueueingHint.SKIP
    # the target itself scaled down
    assert hint(target, target, pod("p").req(cpu="1").build()) is QueueingHint.QUEUE


def test_entry() -> None:
    assert ENTRY.name == "NodeResourcesFit"
    assert ENTRY.parse_args is parse_args
    assert ENTRY.extension_points == {"preFilter", "filter", "preScore", "score"}
