from __future__ import annotations

import pytest

from kscheduler.framework import ActionType, Code, CycleState, EventResource, QueueingHint
from kscheduler.plugins.node_unschedulable import ENTRY, NodeUnschedulable

from ..builders import PodBuilder, node, pod

NU = NodeUnschedulable()
KEY = "node.kubernetes.io/unschedulable"


@pytest.mark.parametrize(
    ("unschedulable", "p", "rejected"),
    [
        (False, pod("p"), False),
        (True, pod("p"), True),
        (True, pod("p").toleration(KEY, effect="NoSchedule", operator="Exists"), False),
        (True, pod("p").toleration(KEY, operator="Exists"), False),
        (True, pod("p").toleration(operator="Exists"), False),
        (True, pod("p").toleration(KEY, effect="NoExecute", operator="Exists"), True),
        (True, pod("p").toleration("other", effect="NoSchedule", operator="Exists"), True),
        # Equal with an empty value matches the taint's empty value.
        (True, pod("p").toleration(KEY, effect="NoSchedule"), False),
    ],
)
def test_filter(unschedulable: bool, p: PodBuilder, rejected: bool) -> None:
    ni = node("n1").unschedulable(unschedulable).build()
    st = NU.filter(CycleState(), p.build(), ni)
    if not rejected:
        assert st is None
        return
    assert st is not None
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == "node(s) were unschedulable"


def test_node_hint() -> None:
    node_reg, _ = NU.events_to_register()
    assert node_reg.event.resource is EventResource.NODE
    assert node_reg.event.action == ActionType.ADD | ActionType.UPDATE_NODE_TAINT
    hint = node_reg.hint
    assert hint is not None
    p = pod("p").build()
    sched = node("n").record()
    unsched = node("n").unschedulable().record()
    assert hint(p, None, sched) is QueueingHint.QUEUE
    assert hint(p, None, unsched) is QueueingHint.SKIP
    assert hint(p, unsched, sched) is QueueingHint.QUEUE
    assert hint(p, sched, sched) is QueueingHint.SKIP
    assert hint(p, sched, unsched) is QueueingHint.SKIP


def test_pod_hint() -> None:
    _, pod_reg = NU.events_to_register()
    assert pod_reg.event.resource is EventResource.POD
    assert pod_reg.event.action == ActionType.UPDATE_POD_TOLERATION
    hint = pod_reg.hint
    assert hint is not None
    target = pod("p").build()
    tolerating = pod("p").toleration(KEY, operator="Exists").build()
    unrelated = pod("p").toleration("x", operator="Exists").build()
    other = pod("q").toleration(KEY, operator="Exists").build()
    assert hint(target, target, tolerating) is QueueingHint.QUEUE
    assert hint(target, target, unrelated) is QueueingHint.SKIP
    assert hint(target, other, other) is QueueingHint.SKIP


def test_entry() -> None:
    assert ENTRY.name == "NodeUnschedulable"
    assert ENTRY.extension_points == {"filter"}
