"""In-place pod resize (InPlacePodVerticalScaling, InPlacePodLevelResourcesVerticalScaling):
what a pod counts while its resources change, per resource the largest of spec,
allocated and actuated resources; an Infeasible resize leaves the spec out; the
pod-level variant; and which plugins see the spec alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kscheduler.framework import Code, CycleState
from kscheduler.framework import features as ft
from kscheduler.framework.parse import counted_resources, parse_pod, pod_resize_infeasible
from kscheduler.framework.types import DEFAULT_MEMORY_REQUEST as MEM0
from kscheduler.framework.types import DEFAULT_MILLI_CPU_REQUEST as CPU0
from kscheduler.framework.types import PodInfo
from kscheduler.plugins.balanced_allocation import (
    NodeResourcesBalancedAllocation as BalancedAllocation,
)
from kscheduler.plugins.balanced_allocation import parse_args as ba_args
from kscheduler.plugins.node_resources_fit import PRE_FILTER_KEY, NodeResourcesFit, parse_args

from .builders import PodBuilder, node, pod

Gi = 1024**3
Mi = 1024**2

INFEASIBLE = {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
DEFERRED = {"type": "PodResizePending", "status": "True", "reason": "Deferred"}


def cs(
    name: str, allocated: dict[str, str] | None = None, actual: dict[str, str] | None = None
) -> dict[str, Any]:
    """A container status with allocatedResources / resources.requests (None: absent)."""
    out: dict[str, Any] = {"name": name}
    if allocated is not None:
        out["allocatedResources"] = allocated
    if actual is not None:
        out["resources"] = {"requests": actual}
    return out


def raw(p: PodBuilder, **status: Any) -> dict[str, Any]:
    r = p.raw()
    r["status"].update(status)
    return r


def counted(p: PodBuilder, **status: Any) -> tuple[int, int, int, int] | None:
    """(cpu, memory, non-zero cpu, non-zero memory) the pod counts on a node."""
    r = raw(p, **status)
    got = counted_resources(r["spec"], r["status"])
    if got is None:
        return None
    total, nz_cpu, nz_mem = got
    return total.milli_cpu, total.memory, nz_cpu, nz_mem


@pytest.fixture
def pod_level_status_off() -> Iterator[None]:
    ft.configure(ft.gates_from({ft.IN_PLACE_POD_LEVEL_RESOURCES_VERTICAL_SCALING: False}))
    try:
        yield
    finally:
        ft.configure(ft.FeatureGates())


# ---- containers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "status", "expected"),
    [
        # no status, or statuses without resources: the spec (fast path, None)
        (pod("p").req(cpu="1"), {}, None),
        (pod("p").req(cpu="1"), {"containerStatuses": [cs("c0")]}, None),
        (pod("p").req(cpu="1"), {"conditions": [DEFERRED]}, None),
        # statuses equal to the spec
        (
            pod("p").req(cpu="1", memory="1Gi"),
            {"containerStatuses": [cs("c0", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1"})]},
            (1000, Gi, 1000, Gi),
        ),
        # resize up, not yet allocated: the spec is the largest
        (
            pod("p").req(cpu="2", memory="1Gi"),
            {"containerStatuses": [cs("c0", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1"})]},
            (2000, Gi, 2000, Gi),
        ),
        # resize down, allocated but not actuated: the running size is the largest
        (
            pod("p").req(cpu="500m", memory="1Gi"),
            {
                "containerStatuses": [
                    cs("c0", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "2Gi"})
                ]
            },
            (1000, 2 * Gi, 1000, 2 * Gi),
        ),
        # resize down, neither allocated nor actuated
        (
            pod("p").req(cpu="500m"),
            {"containerStatuses": [cs("c0", {"cpu": "1"}, {"cpu": "1"})]},
            (1000, 0, 1000, MEM0),
        ),
        # no actuated resources: the allocated ones stand in
        (
            pod("p").req(cpu="500m"),
            {"containerStatuses": [cs("c0", {"cpu": "2"})]},
            (2000, 0, 2000, MEM0),
        ),
        # per resource: cpu from the status, memory from the spec
        (
            pod("p").req(cpu="500m", memory="2Gi"),
            {"containerStatuses": [cs("c0", {"cpu": "1", "memory": "1Gi"})]},
            (1000, 2 * Gi, 1000, 2 * Gi),
        ),
        # a container without a status counts its spec
        (
            pod("p").req(cpu="500m").req(cpu="300m"),
            {"containerStatuses": [cs("c0", {"cpu": "1"})]},
            (1300, 0, 1300, 2 * MEM0),
        ),
        # a status naming no container of the pod changes nothing (the spec: None)
        (pod("p").req(cpu="500m"), {"containerStatuses": [cs("gone", {"cpu": "4"})]}, None),
        # kubelet's statuses equal to the spec (no resize under way): the spec
        (
            pod("p").req(cpu="1", memory="1Gi").sidecar(cpu="200m"),
            {
                "containerStatuses": [
                    cs("c0", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})
                ],
                "initContainerStatuses": [cs("i0", {"cpu": "200m"}, {"cpu": "200m"})],
            },
            None,
        ),
        # Infeasible: the spec is left out, the allocation counts
        (
            pod("p").req(cpu="4", memory="1Gi"),
            {
                "conditions": [INFEASIBLE],
                "containerStatuses": [cs("c0", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1"})],
            },
            (1000, Gi, 1000, Gi),
        ),
        # Infeasible, one container without a status: it counts nothing but the
        # non-zero defaults; the other's allocation mentions no memory
        (
            pod("p").req(cpu="4").req(cpu="2"),
            {"conditions": [INFEASIBLE], "containerStatuses": [cs("c0", {"cpu": "1"})]},
            (1000, 0, 1000 + CPU0, 2 * MEM0),
        ),
        # Infeasible without any status: nothing but the defaults
        (pod("p").req(cpu="4"), {"conditions": [INFEASIBLE]}, (0, 0, CPU0, MEM0)),
        # only the first PodResizePending condition decides
        (
            pod("p").req(cpu="4"),
            {
                "conditions": [DEFERRED, INFEASIBLE],
                "containerStatuses": [cs("c0", {"cpu": "1"})],
            },
            (4000, 0, 4000, MEM0),
        ),
        # a container whose spec has no cpu request but whose allocation has one:
        # the real value in the non-zero totals
        (
            pod("p").container(),
            {"containerStatuses": [cs("c0", {"cpu": "250m"})]},
            (250, 0, 250, MEM0),
        ),
        # overhead on top of the largest
        (
            pod("p").req(cpu="500m").overhead(cpu="100m"),
            {"containerStatuses": [cs("c0", {"cpu": "1"})]},
            (1100, 0, 1100, MEM0),
        ),
    ],
)
def test_containers(
    p: PodBuilder, status: dict[str, Any], expected: tuple[int, int, int, int] | None
) -> None:
    assert counted(p, **status) == expected


# ---- sidecars and init containers -------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "status", "expected"),
    [
        # sidecar i0 (1, allocated 2), init i1 (3), container (1): spec max(1+1, 3+1) = 4;
        # with the sidecar's allocation: max(1+2, 3+2) = 5
        (
            pod("p").sidecar(cpu="1").init(cpu="3").req(cpu="1"),
            {"initContainerStatuses": [cs("i0", {"cpu": "2"})], "containerStatuses": []},
            (5000, 0, 5000, 2 * MEM0),
        ),
        # sidecar after the init container: it is not running while i0 runs;
        # max(1 + 2, 3) = 3
        (
            pod("p").init(cpu="3").sidecar(cpu="1").req(cpu="1"),
            {"initContainerStatuses": [cs("i1", {"cpu": "2"})]},
            (3000, 0, 3000, MEM0 + MEM0),
        ),
        # an ordinary init container's allocation larger than everything
        (
            pod("p").init(cpu="1").req(cpu="1"),
            {"initContainerStatuses": [cs("i0", {"cpu": "3"}, {"cpu": "3"})]},
            (3000, 0, 3000, MEM0),
        ),
        # a sidecar shrinking in place: the running size counts
        (
            pod("p").sidecar(cpu="500m").req(cpu="1"),
            {"initContainerStatuses": [cs("i0", {"cpu": "500m"}, {"cpu": "2"})]},
            (3000, 0, 3000, 2 * MEM0),
        ),
        # Infeasible: the init container without a status counts nothing
        (
            pod("p").init(cpu="8").req(cpu="4"),
            {"conditions": [INFEASIBLE], "containerStatuses": [cs("c0", {"cpu": "1"})]},
            (1000, 0, 1000, MEM0),
        ),
    ],
)
def test_sidecars_and_init_containers(
    p: PodBuilder, status: dict[str, Any], expected: tuple[int, int, int, int]
) -> None:
    assert counted(p, **status) == expected


# ---- pod level -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "status", "expected"),
    [
        # pod-level resize up in progress: the spec
        (
            pod("p").req(cpu="1").pod_requests(cpu="3", memory="1Gi"),
            {
                "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
                "allocatedResources": {"cpu": "2", "memory": "1Gi"},
            },
            (3000, Gi, 3000, Gi),
        ),
        # pod-level resize down: the running size
        (
            pod("p").req(cpu="1").pod_requests(cpu="2", memory="1Gi"),
            {
                "resources": {"requests": {"cpu": "4", "memory": "1Gi"}},
                "allocatedResources": {"cpu": "2", "memory": "1Gi"},
            },
            (4000, Gi, 4000, Gi),
        ),
        # Infeasible: the pod-level spec is left out
        (
            pod("p").req(cpu="1").pod_requests(cpu="8", memory="1Gi"),
            {
                "conditions": [INFEASIBLE],
                "resources": {"requests": {"cpu": "2", "memory": "512Mi"}},
                "allocatedResources": {"cpu": "2", "memory": "512Mi"},
            },
            (2000, 512 * Mi, 2000, 512 * Mi),
        ),
        # status.resources given but empty: the pod level stays the spec; the
        # container statuses still count
        (
            pod("p").req(cpu="1").pod_requests(memory="1Gi"),
            {"resources": {}, "containerStatuses": [cs("c0", {"cpu": "2"})]},
            (2000, Gi, 2000, Gi),
        ),
        # no pod-level spec: both pod status maps replace the containers' statuses
        # as the aggregate (here larger than the containers' sum)
        (
            pod("p").req(cpu="1").req(cpu="1"),
            {
                "resources": {"requests": {"cpu": "3"}},
                "allocatedResources": {"cpu": "3"},
                "containerStatuses": [cs("c0", {"cpu": "1"}), cs("c1", {"cpu": "1"})],
            },
            (3000, 0, 3000, 2 * MEM0),
        ),
        # only one of the two pod status maps: the containers' statuses count
        (
            pod("p").req(cpu="1").req(cpu="1"),
            {
                "allocatedResources": {"cpu": "3"},
                "containerStatuses": [cs("c0", {"cpu": "1500m"})],
            },
            (2500, 0, 2500, 2 * MEM0),
        ),
        # the non-zero rule with pod-level requests: the status mentions cpu, so the
        # real cpu counts; memory from the pod level
        (
            pod("p").container().pod_requests(memory="1Gi"),
            {"containerStatuses": [cs("c0", {"cpu": "300m"})]},
            (300, Gi, 300, Gi),
        ),
        # nothing mentions cpu: 100m per container on top of the statuses' zero
        (
            pod("p").container().container().pod_requests(memory="1Gi"),
            {"containerStatuses": [cs("c0", {"memory": "1Gi"})]},
            (0, Gi, 2 * CPU0, Gi),
        ),
    ],
)
def test_pod_level(
    p: PodBuilder, status: dict[str, Any], expected: tuple[int, int, int, int]
) -> None:
    assert counted(p, **status) == expected


@pytest.mark.usefixtures("pod_level_status_off")
def test_pod_level_status_ignored_with_its_gate_off() -> None:
    p = pod("p").req(cpu="1").pod_requests(cpu="2")
    status = {
        "resources": {"requests": {"cpu": "4"}},
        "allocatedResources": {"cpu": "4"},
        "containerStatuses": [cs("c0", {"cpu": "1"})],
    }
    assert counted(p, **status) == (2000, 0, 2000, MEM0)
    # the containers' statuses still count (InPlacePodVerticalScaling is locked on)
    q = pod("q").req(cpu="1").req(cpu="1")
    assert counted(q, **status) == (2000, 0, 2000, 2 * MEM0)


def test_resize_infeasible() -> None:
    assert pod_resize_infeasible({"conditions": [INFEASIBLE]})
    assert not pod_resize_infeasible({"conditions": [DEFERRED, INFEASIBLE]})
    assert not pod_resize_infeasible({"conditions": [{"type": "Ready", "reason": "Infeasible"}]})
    assert not pod_resize_infeasible({})


def test_bad_status_is_a_parse_error() -> None:
    r = raw(pod("p").req(cpu="1"), containerStatuses=[cs("c0", {"cpu": "lots"})])
    info = parse_pod(r)
    assert (
        info.parse_error is not None
        and "status.containerStatuses[c0].allocatedResources.cpu" in info.parse_error
    )


# ---- what the plugins and the node totals see -------------------------------------------------


def resizing(name: str, spec_cpu: str, running_cpu: str) -> PodInfo:
    """An assigned pod whose spec asks ``spec_cpu`` while ``running_cpu`` runs."""
    r = raw(
        pod(name).req(cpu=spec_cpu, memory="1Gi").on("n"),
        containerStatuses=[
            cs("c0", {"cpu": running_cpu, "memory": "1Gi"}, {"cpu": running_cpu, "memory": "1Gi"})
        ],
    )
    info = parse_pod(r)
    assert info.parse_error is None
    return info


def test_pod_info_keeps_spec_for_the_filter() -> None:
    p = resizing("a", "500m", "2")
    assert p.requests.milli_cpu == 2000 and p.non_zero_cpu == 2000
    assert p.fit_requests.milli_cpu == 500
    # the Fit score's incoming-pod values stay the spec's
    assert p.score_cpu == 500
    # without a resize both are one object
    q = pod("q").req(cpu="1").build()
    assert q.spec_requests is None and q.fit_requests is q.requests
    # assume keeps both
    c = p.with_node("m")
    assert c.requests.milli_cpu == 2000 and c.fit_requests.milli_cpu == 500


def test_node_totals_count_the_running_size_and_preemption_removes_it() -> None:
    fit = NodeResourcesFit(parse_args({}))
    victim = resizing("v", "500m", "3")
    ni = node("n").alloc(cpu="4", memory="10Gi", pods=110).with_pods(victim).build()
    assert ni.requested.milli_cpu == 3000 and ni.non_zero_cpu == 3000
    incoming = pod("p").req(cpu="2").build()
    state = CycleState()
    fit.pre_filter(state, incoming, [ni])
    st = fit.filter(state, incoming, ni)
    # spec 500m + 2 would fit; the 3 running cpus leave 1
    assert st is not None and st.code == Code.UNSCHEDULABLE
    assert st.reasons == ["Insufficient cpu"]
    ni.remove_pod(victim.uid)
    assert ni.requested.milli_cpu == 0 and ni.non_zero_cpu == 0
    assert fit.filter(state, incoming, ni) is None


def test_fit_filter_uses_the_incoming_pods_spec() -> None:
    """kube-scheduler's PreFilter computes the incoming pod's request without the
    status: a (contrived) pending pod with an Infeasible condition still needs its spec."""
    fit = NodeResourcesFit(parse_args({}))
    r = raw(pod("p").req(cpu="3"), conditions=[INFEASIBLE])
    p = parse_pod(r)
    assert p.requests.milli_cpu == 0 and p.fit_requests.milli_cpu == 3000
    ni = node("n").alloc(cpu="2", memory="10Gi", pods=110).build()
    state = CycleState()
    fit.pre_filter(state, p, [ni])
    assert state.get(PRE_FILTER_KEY).milli_cpu == 3000
    st = fit.filter(state, p, ni)
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_balanced_allocation_counts_the_resize() -> None:
    """BalancedAllocation scores the incoming pod with its status (upstream passes
    UseStatusResources to its request), unlike NodeResourcesFit."""
    ba = BalancedAllocation.new(ba_args({}), None)  # type: ignore[arg-type]
    ni = node("n").alloc(cpu="4", memory="4Gi", pods=10).build()
    spec_only = pod("p").req(cpu="500m", memory="2Gi").build()
    r = raw(
        pod("p").req(cpu="500m", memory="2Gi"),
        containerStatuses=[cs("c0", {"cpu": "2", "memory": "2Gi"})],
    )
    p = parse_pod(r)

    def score(x: PodInfo) -> int:
        state = CycleState()
        assert ba.pre_score(state, x, [ni]) is None
        s, st = ba.score(state, x, ni)
        assert st is None
        return s

    # 2 cpu / 2Gi of 4 / 4Gi keeps the empty node balanced (75); 500m / 2Gi would not
    assert score(p) == 75
    assert score(spec_only) < 75


def test_sign_pod_uses_the_spec() -> None:
    fit = NodeResourcesFit(parse_args({}))
    a = resizing("a", "500m", "2")
    b = pod("b").req(cpu="500m", memory="1Gi").on("n").build()
    assert fit.sign_pod(a)[0][0].value == fit.sign_pod(b)[0][0].value
