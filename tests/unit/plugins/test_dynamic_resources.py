from __future__ import annotations

from kscheduler.algorithm import Algorithm
from kscheduler.cache import Cache, Snapshot
from kscheduler.framework import Code, CycleState, NodeToStatus, PodInfo, Status
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.runtime import Framework
from kscheduler.plugins import (
    default_binder,
    default_preemption,
    dynamic_resources,
    node_resources_fit,
    priority_sort,
)
from kscheduler.plugins.dynamic_resources import (
    ENTRY,
    MSG_STATE_NOT_FOUND,
    DynamicResources,
)

from ..builders import node, pod
from ..fakes import FakeObjects, framework

PL = DynamicResources(None)


def with_claims() -> PodInfo:
    raw = pod("claims").req(cpu="1").raw()
    raw["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "my-gpu"}]
    info = parse_pod(raw)
    assert info.parse_error is None
    return info


def test_extension_points() -> None:
    assert ENTRY.extension_points == frozenset(
        {
            "preEnqueue",
            "preFilter",
            "filter",
            "postFilter",
            "preScore",
            "score",
            "reserve",
            "preBind",
        }
    )
    assert ENTRY.parse_args is None


async def test_pod_without_claims_skips_then_has_nothing_to_deallocate() -> None:
    state = CycleState()
    assert PL.pre_filter(state, pod("p").req(cpu="1").build(), []) == (
        None,
        Status.skip(),
    )
    res, st = await PL.post_filter(state, pod("p").build(), NodeToStatus())
    assert res is None
    assert st is not None
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE, [])


async def test_post_filter_without_its_pre_filter_is_an_error() -> None:
    res, st = await PL.post_filter(CycleState(), pod("p").build(), NodeToStatus())
    assert res is None
    assert st is not None
    assert (st.code, st.message) == (Code.ERROR, MSG_STATE_NOT_FOUND)
    assert MSG_STATE_NOT_FOUND == "not found"


async def test_pod_whose_claim_is_missing_is_rejected_with_upstreams_message() -> None:
    pl = DynamicResources(_Handle(FakeObjects()))
    state = CycleState()
    res, st = pl.pre_filter(state, with_claims(), [])
    assert res is None
    assert st is not None
    assert (st.code, st.message) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        'resourceclaim.resource.k8s.io "my-gpu" not found',
    )
    pre = pl.pre_enqueue(with_claims())
    assert pre is not None and pre.message == st.message


class _Handle:
    def __init__(self, objects: FakeObjects) -> None:
        self.objects = objects


def _framework(cache: Cache, objects: FakeObjects | None = None) -> tuple[Framework, Snapshot]:
    fwk, snap, _, _ = framework(
        [
            priority_sort.ENTRY,
            node_resources_fit.ENTRY,
            dynamic_resources.ENTRY,
            default_preemption.ENTRY,
            default_binder.ENTRY,
        ],
        {
            "queueSort": ["PrioritySort"],
            "preFilter": ["NodeResourcesFit", "DynamicResources"],
            "filter": ["NodeResourcesFit"],
            "postFilter": ["DynamicResources", "DefaultPreemption"],
            "bind": ["DefaultBinder"],
        },
        cache=cache,
        objects=objects,
    )
    return fwk, snap


async def test_in_a_profile_its_message_comes_before_preemption() -> None:
    cache = Cache()
    ni = node("n1").alloc(cpu="1", pods=110).build()
    assert ni.node is not None
    cache.add_node(ni.node)
    fwk, snap = _framework(cache)
    snap.update()
    state = CycleState()
    p = pod("p").req(cpu="2").build()
    feasible, diagnosis = Algorithm().find_nodes_that_fit(fwk, state, p, snap)
    assert feasible == []
    _, st = await fwk.run_post_filter(state, p, diagnosis.node_to_status)
    assert st is not None
    assert st.message == (
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )

    # a pod whose claim does not exist never reaches Filter
    state = CycleState()
    feasible, diagnosis = Algorithm().find_nodes_that_fit(fwk, state, with_claims(), snap)
    assert feasible == []
    assert diagnosis.pre_filter_msg == 'resourceclaim.resource.k8s.io "my-gpu" not found'
    assert diagnosis.unschedulable_plugins == {"DynamicResources"}
