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
    MSG_CLAIMS_UNSUPPORTED,
    MSG_STATE_NOT_FOUND,
    DynamicResources,
)

from ..builders import node, pod
from ..fakes import framework

PL = DynamicResources()


def with_claims() -> PodInfo:
    raw = pod("claims").req(cpu="1").raw()
    raw["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "my-gpu"}]
    info = parse_pod(raw)
    assert info.parse_error is None
    return info


def test_extension_points() -> None:
    assert ENTRY.extension_points == frozenset({"preFilter", "postFilter"})
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


async def test_pod_with_claims_is_rejected_as_unsupported() -> None:
    state = CycleState()
    res, st = PL.pre_filter(state, with_claims(), [])
    assert res is None
    assert st is not None
    assert (st.code, st.message) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, MSG_CLAIMS_UNSUPPORTED)
    assert "does not allocate DRA ResourceClaims" in st.message
    _, post = await PL.post_filter(state, with_claims(), NodeToStatus())
    assert post is not None and post.code == Code.UNSCHEDULABLE


def _framework(cache: Cache) -> tuple[Framework, Snapshot]:
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

    # a pod with claims never reaches Filter, and preemption cannot help it
    state = CycleState()
    feasible, diagnosis = Algorithm().find_nodes_that_fit(fwk, state, with_claims(), snap)
    assert feasible == []
    assert diagnosis.pre_filter_msg == MSG_CLAIMS_UNSUPPORTED
    assert diagnosis.unschedulable_plugins == {"DynamicResources"}
