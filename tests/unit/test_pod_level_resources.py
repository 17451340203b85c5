"""Pod-level resources (spec.resources): the effective request and the two non-zero
rules (a node's totals vs. the incoming pod's score), and what NodeResourcesFit,
BalancedAllocation and preemption's node totals make of them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kscheduler.framework import Code, CycleState
from kscheduler.framework import features as ft
from kscheduler.framework.parse import pod_resources
from kscheduler.framework.types import DEFAULT_MEMORY_REQUEST as MEM0
from kscheduler.framework.types import DEFAULT_MILLI_CPU_REQUEST as CPU0
from kscheduler.plugins.balanced_allocation import (
    NodeResourcesBalancedAllocation as BalancedAllocation,
)
from kscheduler.plugins.balanced_allocation import parse_args as ba_args
from kscheduler.plugins.node_resources_fit import PRE_FILTER_KEY, NodeResourcesFit, parse_args

from .builders import PodBuilder, node, pod

Gi = 1024**3
Mi = 1024**2


@pytest.fixture
def gate_off() -> Iterator[None]:
    ft.configure(ft.gates_from({ft.POD_LEVEL_RESOURCES: False}))
    try:
        yield
    finally:
        ft.configure(ft.FeatureGates())


def _res(p: PodBuilder) -> tuple[int, int, int, int, int, int]:
    """(cpu, memory, node non-zero cpu, node non-zero memory, score cpu, score memory)."""
    total, ncpu, nmem, scpu, smem = pod_resources(p.raw()["spec"])
    return total.milli_cpu, total.memory, ncpu, nmem, scpu, smem


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        # no pod-level requests: both rules are the per-container defaults
        (pod("p").container().container(), (0, 0, 2 * CPU0, 2 * MEM0, 2 * CPU0, 2 * MEM0)),
        # pod-level cpu and memory: the real values in the totals; the score leaves
        # the pod level out (the containers with their defaults)
        (
            pod("p").container().container().pod_requests(cpu="2", memory="1Gi"),
            (2000, Gi, 2000, Gi, 2 * CPU0, 2 * MEM0),
        ),
        # pod-level cpu only, no container mentions memory: defaults for memory in both
        (
            pod("p").container().container().pod_requests(cpu="2"),
            (2000, 0, 2000, 2 * MEM0, 2 * CPU0, 2 * MEM0),
        ),
        # pod-level memory; one container asks for cpu, the other not: the node's
        # totals take the real cpu sum (cpu is mentioned), the score adds 100m for
        # the container without a cpu request
        (
            pod("p").req(cpu="300m").container().pod_requests(memory="1Gi"),
            (300, Gi, 300, Gi, 300 + CPU0, 2 * MEM0),
        ),
        # a cpu request of zero counts as mentioned (and as zero in the score)
        (
            pod("p").req(cpu="0").container().pod_requests(memory="1Gi"),
            (0, Gi, 0, Gi, CPU0, 2 * MEM0),
        ),
        # the overhead mentions cpu: no default for the node's totals
        (
            pod("p").container().pod_requests(memory="1Gi").overhead(cpu="50m"),
            (50, Gi, 50, Gi, CPU0 + 50, MEM0),
        ),
        # init containers mention resources too
        (
            pod("p").init(cpu="1").container().pod_requests(memory="1Gi"),
            (1000, Gi, 1000, Gi, 1000, MEM0),
        ),
        # only hugepages at pod level: pod-level resources are set, cpu/memory unmentioned
        (
            pod("p").req(cpu="1").container().pod_requests(**{"hugepages-2Mi": "4Mi"}),
            (1000, 0, 1000, 2 * MEM0, 1000 + CPU0, 2 * MEM0),
        ),
        # a pod-level request of a resource that is not supported there changes nothing
        (
            pod("p").req(cpu="1").container().pod_requests(ephemeral_storage="1Gi"),
            (1000, 0, 1000 + CPU0, 2 * MEM0, 1000 + CPU0, 2 * MEM0),
        ),
    ],
)
def test_pod_resources(p: PodBuilder, expected: tuple[int, ...]) -> None:
    assert _res(p) == expected


@pytest.mark.usefixtures("gate_off")
def test_gate_off_ignores_pod_level_requests() -> None:
    p = pod("p").req(cpu="300m").container().pod_requests(cpu="2", memory="1Gi")
    assert _res(p) == (300, 0, 300 + CPU0, 2 * MEM0, 300 + CPU0, 2 * MEM0)


FIT = NodeResourcesFit(parse_args({}))


@pytest.mark.parametrize(
    ("p", "code", "reasons"),
    [
        # pod-level cpu 3 replaces the containers' 1 + 1
        (
            pod("p").req(cpu="1").req(cpu="1").pod_requests(cpu="3"),
            Code.UNSCHEDULABLE,
            ["Insufficient cpu"],
        ),
        # pod-level 1 under containers' 3: fits where the sum would not
        (pod("p").req(cpu="2").req(cpu="1").pod_requests(cpu="1"), None, []),
        # more than the node has at all
        (
            pod("p").container().pod_requests(cpu="5", memory="1Gi"),
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            ["Insufficient cpu"],
        ),
        (
            pod("p").container().pod_requests(cpu="1", memory="9Gi"),
            Code.UNSCHEDULABLE,
            ["Insufficient memory"],
        ),
    ],
)
def test_fit_filter_uses_pod_level_requests(
    p: PodBuilder, code: Code | None, reasons: list[str]
) -> None:
    n = node("n").alloc(cpu="4", memory="10Gi", pods=110)
    ni = n.with_pods(pod("e").req(cpu="2", memory="2Gi").build()).build()
    state = CycleState()
    built = p.build()
    FIT.pre_filter(state, built, [ni])
    assert state.get(PRE_FILTER_KEY).milli_cpu == built.requests.milli_cpu
    st = FIT.filter(state, built, ni)
    if code is None:
        assert st is None
        assert FIT.filter_nodes(state, built, [ni]) == {}
    else:
        assert st is not None and st.code == code and st.reasons == reasons
        got = FIT.filter_nodes(state, built, [ni])
        assert list(got) == [0] and got[0].reasons == reasons


def _score(pl: NodeResourcesFit | BalancedAllocation, p: PodBuilder, *existing: PodBuilder) -> int:
    n = node("n").alloc(cpu="1", memory="1000Mi", pods=10)
    ni = n.with_pods(*(e.build() for e in existing)).build()
    built = p.build()
    state = CycleState()
    assert pl.pre_score(state, built, [ni]) is None
    s, st = pl.score(state, built, ni)
    assert st is None
    return s


def test_fit_score_incoming_pod_rule() -> None:
    # incoming: cpu 300m + 100m (container without cpu) = 400m -> 60; memory: the
    # pod level is left out, 2 x 200Mi (no container asks) = 400Mi -> 60
    p = pod("p").req(cpu="300m").container().pod_requests(memory="500Mi")
    assert _score(FIT, p) == (60 + 60) // 2


def test_fit_score_node_totals_rule() -> None:
    # the same pod on the node counts 300m (cpu is mentioned) and 500Mi; the incoming
    # pod asks 100m / 200Mi: cpu 400m used -> 60; memory 700Mi -> 30
    e = pod("e").req(cpu="300m").container().pod_requests(memory="500Mi")
    assert _score(FIT, pod("p").container(), e) == (60 + 30) // 2


def test_fit_score_ignores_pod_level_requests() -> None:
    # kube-scheduler's NodeResourcesFit scores the incoming pod without its pod-level
    # requests: 2 x (100m, 200Mi) rather than 300m / 100Mi: cpu 80, memory 60
    p = pod("p").container().container().pod_requests(cpu="300m", memory="100Mi")
    assert _score(FIT, p) == (80 + 60) // 2


def test_balanced_allocation_uses_pod_level_requests() -> None:
    ba = BalancedAllocation.new(ba_args({}), None)  # type: ignore[arg-type]
    # pod-level 500m / 500Mi: fractions 0.5 / 0.5 -> perfectly balanced, as the empty
    # node: no change, 75
    p = pod("p").req(cpu="100m", memory="400Mi").pod_requests(cpu="500m", memory="500Mi")
    assert _score(ba, p) == 75
    # the containers' own values would be 0.1 / 0.4: the pod unbalances the node
    q = pod("q").req(cpu="100m", memory="400Mi")
    assert _score(ba, q) < 75


def test_node_totals_add_and_remove_pod_level_pods() -> None:
    """Preemption removes victims from a node's totals with the same values it added."""
    n = node("n").alloc(cpu="4", memory="10Gi", pods=110)
    victim = pod("v").req(cpu="300m").container().pod_requests(cpu="2", memory="1Gi").build()
    other = pod("o").req(cpu="1").build()
    ni = n.with_pods(victim, other).build()
    assert (ni.requested.milli_cpu, ni.requested.memory) == (3000, Gi)
    assert (ni.non_zero_cpu, ni.non_zero_memory) == (3000, Gi + MEM0)
    ni.remove_pod(victim.uid)
    assert (ni.requested.milli_cpu, ni.requested.memory) == (1000, 0)
    assert (ni.non_zero_cpu, ni.non_zero_memory) == (1000, MEM0)
    # with the victim gone, a pod asking for 3 cpu fits
    state = CycleState()
    p = pod("p").container().pod_requests(cpu="3").build()
    FIT.pre_filter(state, p, [ni])
    assert FIT.filter(state, p, ni) is None
