from __future__ import annotations

from typing import Any

import pytest

from kscheduler.framework import Code, CycleState
from kscheduler.framework.args import ConfigError
from kscheduler.plugins.balanced_allocation import (
    ENTRY,
    BalancedAllocationArgs,
    NodeResourcesBalancedAllocation,
    ResourceSpec,
    balanced_score,
    change_score,
    parse_args,
)

from ..builders import NodeBuilder, PodBuilder, node, pod

BA = NodeResourcesBalancedAllocation(BalancedAllocationArgs())


def _score(pl: NodeResourcesBalancedAllocation, p: PodBuilder, n: NodeBuilder) -> int:
    state = CycleState()
    built = p.build()
    ni = n.build()
    assert pl.pre_score(state, built, [ni]) is None
    s, st = pl.score(state, built, ni)
    assert st is None
    assert pl.score(CycleState(), built, ni) == (s, None)
    return s


@pytest.mark.parametrize(
    "p",
    [
        pod("p"),
        pod("p").container(),
        # only the configured resources (cpu, memory) count
        pod("p").req(ephemeral_storage="1Gi"),
    ],
)
def test_pre_score_skips_pods_requesting_none_of_the_resources(p: PodBuilder) -> None:
    st = BA.pre_score(CycleState(), p.build(), [])
    assert st is not None and st.code == Code.SKIP


def test_score_without_pre_score_for_best_effort_is_zero() -> None:
    assert BA.score(CycleState(), pod("p").build(), node("n").alloc(cpu="1").build()) == (0, None)


@pytest.mark.parametrize(
    ("p", "n", "expected"),
    [
        # with the pod .5 and .5 -> 100; without .25 and .25 -> 100: 50 + (50 + 0) / 2
        (
            pod("p").req(cpu="1", memory="2Gi"),
            node("n")
            .alloc(cpu="4", memory="8Gi")
            .with_pods(pod("e").req(cpu="1", memory="2Gi").build()),
            75,
        ),
        # .75 and .25 -> std .25 -> 75; the empty node 100: 50 + 25 / 2 -> 62
        (pod("p").req(cpu="3", memory="2Gi"), node("n").alloc(cpu="4", memory="8Gi"), 62),
        # cpu capped at 1, memory .125 -> std .4375 -> 56; 50 + 6 / 2 -> 53
        (pod("p").req(cpu="8", memory="1Gi"), node("n").alloc(cpu="4", memory="8Gi"), 53),
        # real requests: a pod without requests adds nothing (cpu .25, memory 0 -> std
        # .125 -> 87; without 100): 50 + 37 / 2 -> 68
        (
            pod("p").req(cpu="1"),
            node("n").alloc(cpu="4", memory="8Gi").with_pods(pod("e").container().build()),
            68,
        ),
        # memory has no allocatable: one fraction left, std 0 with and without: 75
        (pod("p").req(cpu="3", memory="1Gi"), node("n").alloc(cpu="4"), 75),
        # a pod that evens the node out scores above 75: without .5/.0 -> 75, with .5/.5
        (
            pod("p").req(memory="4Gi"),
            node("n").alloc(cpu="4", memory="8Gi").with_pods(pod("e").req(cpu="2").build()),
            87,
        ),
    ],
)
def test_score(p: PodBuilder, n: NodeBuilder, expected: int) -> None:
    assert _score(BA, p, n) == expected


def test_score_three_resources() -> None:
    pl = NodeResourcesBalancedAllocation(
        parse_args(
            {"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": "ephemeral-storage"}]}
        )
    )
    n = node("n").alloc(cpu="4", memory="8Gi", ephemeral_storage="100Gi")
    # fractions .5, .25, .75: mean .5, variance (0 + .0625 + .0625) / 3, std .2041 -> 79;
    # the empty node 100: 50 + 29 / 2 -> 64
    assert _score(pl, pod("p").req(cpu="2", memory="2Gi", ephemeral_storage="75Gi"), n) == 64


def test_score_extended_resource_only_when_requested() -> None:
    gpu = "example.com/gpu"
    pl = NodeResourcesBalancedAllocation(
        parse_args({"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": gpu}]})
    )
    n = node("n").alloc(cpu="4", memory="8Gi", **{gpu: "4"})
    # gpu not requested: cpu .5, memory .5 -> 100, as the empty node: 75
    assert _score(pl, pod("p").req(cpu="2", memory="4Gi"), n) == 75
    # gpu 4/4 = 1: fractions .5, .5, 1 -> std .2357 -> 76; 50 + 26 / 2 -> 63
    assert _score(pl, pod("p").req(cpu="2", memory="4Gi", **{gpu: "4"}), n) == 63


def test_change_score_divides_toward_zero() -> None:
    assert change_score(100, 100) == 75
    # two resources never balance below 50 (std at most .5)
    assert change_score(100, 50) == 100
    assert change_score(50, 100) == 50
    # 50 + 61 - 100 = 11 -> 5; 50 + 51 - 100 = 1 -> 0; 50 + 49 - 100 = -1: Go's -1 / 2
    # is 0, not -1; 50 + 47 - 100 = -3 -> -1
    assert change_score(61, 100) == 55
    assert change_score(51, 100) == 50
    assert change_score(49, 100) == 50
    assert change_score(47, 100) == 49


def test_balanced_score_formula() -> None:
    assert balanced_score([], []) == 100
    assert balanced_score([1, 3], [4, 4]) == 75
    assert balanced_score([5, 0], [0, 10]) == 100


def test_parse_args() -> None:
    assert parse_args({}) == BalancedAllocationArgs()
    assert parse_args({"resources": []}).resources == (
        ResourceSpec("cpu", 1),
        ResourceSpec("memory", 1),
    )
    args = parse_args({"resources": [{"name": "cpu", "weight": 1}, {"name": "example.com/x"}]})
    assert args.resources == (ResourceSpec("cpu", 1), ResourceSpec("example.com/x", 1))


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"resources": [{"name": "cpu", "weight": 2}]}, "resources[0].weight"),
        ({"resources": [{"name": "cpu"}, {"name": "cpu"}]}, "resources[1].name"),
        ({"resources": [{"name": "cpu", "extra": 1}]}, "resources[0].extra"),
        ({"other": 1}, "other"),
    ],
)
def test_parse_args_errors(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as ei:
        parse_args(raw)
    assert ei.value.path == path


def test_entry() -> None:
    assert ENTRY.name == "NodeResourcesBalancedAllocation"
    assert ENTRY.parse_args is parse_args
    assert ENTRY.extension_points == {"preScore", "score"}
