from __future__ import annotations

from typing import Any

import pytest

from kscheduler.eventhandlers import node_update_action
from kscheduler.framework import ActionType, Code, CycleState, EventResource, QueueingHint
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.types import PodInfo
from kscheduler.plugins.node_declared_features import (
    ENTRY,
    ERR_REASON_UNSATISFIED,
    PRE_FILTER_KEY,
    REGISTERED,
    RESTART_ALL_CONTAINERS,
    USER_NAMESPACES_HOST_NETWORK,
    VOLUME_BIND_MOUNT_OPTIONS,
    NodeDeclaredFeatures,
    node_features,
    required_features,
)

from ..builders import NodeBuilder, node, pod

PL = NodeDeclaredFeatures()
RESTART_ALL = [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [1]}}]


def spec_with(**fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    spec.update(fields)
    return spec


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (spec_with(), set()),
        (
            spec_with(containers=[{"name": "c", "restartPolicyRules": RESTART_ALL}]),
            {RESTART_ALL_CONTAINERS},
        ),
        (
            spec_with(initContainers=[{"name": "i", "restartPolicyRules": RESTART_ALL}]),
            {RESTART_ALL_CONTAINERS},
        ),
        # another action needs nothing from the node
        (
            spec_with(containers=[{"name": "c", "restartPolicyRules": [{"action": "Restart"}]}]),
            set(),
        ),
        (spec_with(hostNetwork=True, hostUsers=False), {USER_NAMESPACES_HOST_NETWORK}),
        (spec_with(hostNetwork=True), set()),
        (spec_with(hostNetwork=True, hostUsers=True), set()),
        (spec_with(hostUsers=False), set()),
        (
            spec_with(
                containers=[
                    {"name": "c", "volumeMounts": [{"name": "v", "bindMountOptions": ["x"]}]}
                ]
            ),
            {VOLUME_BIND_MOUNT_OPTIONS},
        ),
        (
            spec_with(
                ephemeralContainers=[
                    {"name": "e", "volumeMounts": [{"name": "v", "bindMountOptions": ["x"]}]}
                ]
            ),
            {VOLUME_BIND_MOUNT_OPTIONS},
        ),
        (
            spec_with(containers=[{"name": "c", "volumeMounts": [{"name": "v"}]}]),
            set(),
        ),
        (
            spec_with(
                hostNetwork=True,
                hostUsers=False,
                containers=[{"name": "c", "restartPolicyRules": RESTART_ALL}],
            ),
            {RESTART_ALL_CONTAINERS, USER_NAMESPACES_HOST_NETWORK},
        ),
    ],
)
def test_required_features(spec: dict[str, Any], expected: set[str]) -> None:
    assert required_features(spec) == expected


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        ((), set()),
        ((RESTART_ALL_CONTAINERS,), {RESTART_ALL_CONTAINERS}),
        # unknown names are skipped
        (("AAA", RESTART_ALL_CONTAINERS, "Zzz"), {RESTART_ALL_CONTAINERS}),
        (tuple(REGISTERED), set(REGISTERED)),
        # read as a sorted list: a name out of order after a later one is missed
        ((VOLUME_BIND_MOUNT_OPTIONS, RESTART_ALL_CONTAINERS), {VOLUME_BIND_MOUNT_OPTIONS}),
    ],
)
def test_node_features(declared: tuple[str, ...], expected: set[str]) -> None:
    assert node_features(declared) == expected


def restart_all_pod() -> PodInfo:
    """A pod whose container restarts all containers on exit code 1."""
    raw = pod("p").req(cpu="1").raw()
    raw["spec"]["containers"][0]["restartPolicyRules"] = RESTART_ALL
    return parse_pod(raw)


def test_pre_filter_skips_a_pod_without_requirements() -> None:
    state = CycleState()
    res, st = PL.pre_filter(state, pod("p").req(cpu="1").build(), [])
    assert res is None and st is not None and st.code == Code.SKIP
    assert state.get(PRE_FILTER_KEY) is None


@pytest.mark.parametrize(
    ("n", "fits"),
    [
        (node("n"), False),
        (node("n").declared_features("Other"), False),
        (node("n").declared_features(RESTART_ALL_CONTAINERS), True),
        (node("n").declared_features(RESTART_ALL_CONTAINERS, VOLUME_BIND_MOUNT_OPTIONS), True),
    ],
)
def test_filter(n: NodeBuilder, fits: bool) -> None:
    p = restart_all_pod()
    state = CycleState()
    res, st = PL.pre_filter(state, p, [])
    assert res is None and st is None
    got = PL.filter(state, p, n.build())
    if fits:
        assert got is None
    else:
        assert got is not None
        assert got.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert got.reasons == [ERR_REASON_UNSATISFIED]


def test_filter_without_pre_filter_is_error() -> None:
    st = PL.filter(CycleState(), restart_all_pod(), node("n").build())
    assert st is not None and st.code == Code.ERROR


def test_events() -> None:
    events = {(e.event.resource, e.event.action) for e in PL.events_to_register()}
    assert (
        EventResource.NODE,
        ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE,
    ) in events


@pytest.mark.parametrize(
    ("old", "new", "hint"),
    [
        (None, node("n"), QueueingHint.QUEUE),
        (node("n"), node("n").declared_features(RESTART_ALL_CONTAINERS), QueueingHint.QUEUE),
        (node("n").declared_features("A"), node("n").declared_features("A"), QueueingHint.SKIP),
        (node("n"), node("n").label("x", "y"), QueueingHint.SKIP),
    ],
)
def test_node_hint(old: NodeBuilder | None, new: NodeBuilder, hint: QueueingHint) -> None:
    p = restart_all_pod()
    got = PL._after_node_change(p, old.record() if old else None, new.record())
    assert got is hint


def test_pod_hint() -> None:
    p = restart_all_pod()
    plain = pod("p").req(cpu="1").build()
    assert PL._after_pod_update(p, p, p) is QueueingHint.SKIP
    assert PL._after_pod_update(p, p, plain) is QueueingHint.QUEUE
    other = pod("q").req(cpu="1").build()
    assert PL._after_pod_update(p, other, other) is QueueingHint.SKIP


def test_node_update_action_reports_declared_features() -> None:
    old = node("n").record()
    new = node("n").declared_features(RESTART_ALL_CONTAINERS).record()
    assert node_update_action(old, new) & ActionType.UPDATE_NODE_DECLARED_FEATURE
    assert not node_update_action(old, old) & ActionType.UPDATE_NODE_DECLARED_FEATURE


def test_entry() -> None:
    assert ENTRY.name == "NodeDeclaredFeatures"
    assert ENTRY.extension_points == {"preFilter", "filter"}
