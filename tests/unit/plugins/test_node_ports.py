from __future__ import annotations

import pytest

from kscheduler.framework import ActionType, Code, CycleState, EventResource, QueueingHint
from kscheduler.framework.parse import parse_pod
from kscheduler.plugins.node_ports import ENTRY, NodePorts

from ..builders import PodBuilder, node, pod

NP = NodePorts()
REASON = "node(s) didn't have free ports for the requested pod ports"


def test_pre_filter_skips_pods_without_host_ports() -> None:
    p = pod("p").container({}, ports=[{"containerPort": 80}]).build()
    _, st = NP.pre_filter(CycleState(), p, [])
    assert st is not None and st.code == Code.SKIP


@pytest.mark.parametrize(
    ("existing", "wanted", "conflict"),
    [
        (pod("e").host_port(80), pod("p").host_port(80), True),
        (pod("e").host_port(80), pod("p").host_port(81), False),
        (pod("e").host_port(80), pod("p").host_port(80, "UDP"), False),
        (pod("e").host_port(80, "UDP"), pod("p").host_port(80, "UDP"), True),
        (pod("e").host_port(80, ip="10.0.0.1"), pod("p").host_port(80, ip="10.0.0.2"), False),
        (pod("e").host_port(80, ip="10.0.0.1"), pod("p").host_port(80, ip="10.0.0.1"), True),
        (pod("e").host_port(80, ip="10.0.0.1"), pod("p").host_port(80), True),
        (pod("e").host_port(80), pod("p").host_port(80, ip="10.0.0.1"), True),
        (pod("e").host_port(80).host_port(443), pod("p").host_port(22).host_port(443), True),
    ],
)
def test_filter(existing: PodBuilder, wanted: PodBuilder, conflict: bool) -> None:
    ni = node("n").with_pods(existing.build()).build()
    p = wanted.build()
    state = CycleState()
    assert NP.pre_filter(state, p, [ni]) == (None, None)
    st = NP.filter(state, p, ni)
    if not conflict:
        assert st is None
        return
    assert st is not None
    assert st.code == Code.UNSCHEDULABLE
    assert st.message == REASON


def test_sidecar_ports_count() -> None:
    raw = pod("e").raw()
    raw["spec"]["initContainers"] = [
        {"name": "s", "restartPolicy": "Always", "ports": [{"containerPort": 9, "hostPort": 9}]},
        {"name": "i", "ports": [{"containerPort": 10, "hostPort": 10}]},
    ]
    existing = parse_pod(raw)
    ni = node("n").with_pods(existing).build()
    state = CycleState()
    p = pod("p").host_port(9).build()
    NP.pre_filter(state, p, [ni])
    assert NP.filter(state, p, ni) is not None
    # a plain init container's port is not held by the running pod
    state = CycleState()
    p = pod("p").host_port(10).build()
    NP.pre_filter(state, p, [ni])
    assert NP.filter(state, p, ni) is None


def test_filter_without_pre_filter_is_error() -> None:
    st = NP.filter(CycleState(), pod("p").host_port(80).build(), node("n").build())
    assert st is not None and st.code == Code.ERROR


def test_events_and_hint() -> None:
    pod_reg, node_reg = NP.events_to_register()
    assert pod_reg.event.resource is EventResource.POD
    assert pod_reg.event.action == ActionType.DELETE
    assert node_reg.event.resource is EventResource.NODE
    assert node_reg.event.action == ActionType.ADD
    assert node_reg.hint is None
    hint = pod_reg.hint
    assert hint is not None
    target = pod("p").host_port(80).build()
    assert hint(target, pod("d").host_port(80).on("n").build(), None) is QueueingHint.QUEUE
    assert hint(target, pod("d").host_port(80).nominated("n").build(), None) is (QueueingHint.QUEUE)
    assert hint(target, pod("d").host_port(80).build(), None) is QueueingHint.SKIP
    assert hint(target, pod("d").host_port(81).on("n").build(), None) is QueueingHint.SKIP
    assert hint(target, pod("d").req(cpu="1").on("n").build(), None) is QueueingHint.SKIP


def test_entry() -> None:
    assert ENTRY.name == "NodePorts"
    assert ENTRY.extension_points == {"preFilter", "filter"}
