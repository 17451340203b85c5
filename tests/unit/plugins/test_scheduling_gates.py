from __future__ import annotations

import pytest

from kscheduler.framework import ActionType, Code, EventResource, QueueingHint
from kscheduler.plugins.scheduling_gates import ENTRY, SchedulingGates

from ..builders import pod

SG = SchedulingGates()


def test_no_gates_passes() -> None:
    assert SG.pre_enqueue(pod("p").build()) is None


@pytest.mark.parametrize(
    ("gates", "message"),
    [
        (("a",), "waiting for scheduling gates: [a]"),
        (("a", "b"), "waiting for scheduling gates: [a b]"),
        (("example.com/x", "y"), "waiting for scheduling gates: [example.com/x y]"),
    ],
)
def test_gated(gates: tuple[str, ...], message: str) -> None:
    st = SG.pre_enqueue(pod("p").gates(*gates).build())
    assert st is not None
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == message


def test_events_and_hint() -> None:
    (reg,) = SG.events_to_register()
    assert reg.event.resource is EventResource.POD
    assert reg.event.action == ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED
    assert reg.hint is not None
    target = pod("p").gates("a").build()
    ungated = pod("p").build()
    other = pod("q").build()
    assert reg.hint(target, target, ungated) is QueueingHint.QUEUE
    assert reg.hint(target, other, other) is QueueingHint.SKIP


def test_entry() -> None:
    assert ENTRY.name == "SchedulingGates"
    assert "preEnqueue" in ENTRY.extension_points
