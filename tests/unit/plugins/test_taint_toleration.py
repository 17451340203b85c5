from __future__ import annotations

import pytest

from kscheduler.framework import (
    ActionType,
    Code,
    CycleState,
    EventResource,
    NodeScore,
    QueueingHint,
)
from kscheduler.plugins.taint_toleration import ENTRY, TaintToleration

from ..builders import NodeBuilder, PodBuilder, node, pod

TT = TaintToleration()
UNTOLERATED = "node(s) had untolerated taint(s)"


@pytest.mark.parametrize(
    ("n", "p", "rejected"),
    [
        (node("n"), pod("p"), False),
        (node("n").taint("k", "v", "NoSchedule"), pod("p"), True),
        (node("n").taint("k", "v", "NoExecute"), pod("p"), True),
        (node("n").taint("k", "v", "PreferNoSchedule"), pod("p"), False),
        (node("n").taint("k", "v"), pod("p").toleration("k", "v", "NoSchedule"), False),
        (node("n").taint("k", "v"), pod("p").toleration("k", "other", "NoSchedule"), True),
        (node("n").taint("k", "v"), pod("p").toleration("k", operator="Exists"), False),
        (node("n").taint("k", "v"), pod("p").toleration(operator="Exists"), False),
        (node("n").taint("k", "v"), pod("p").toleration("k", "v", "NoExecute"), True),
        (node("n").taint("k", "v"), pod("p").toleration("k", "v"), False),
        # Only the first untolerated taint matters, but any one rejects.
        (
            node("n").taint("a", "1").taint("b", "2", "NoExecute"),
            pod("p").toleration("a", "1", "NoSchedule"),
            True,
        ),
    ],
)
def test_filter(n: NodeBuilder, p: PodBuilder, rejected: bool) -> None:
    st = TT.filter(CycleState(), p.build(), n.build())
    if not rejected:
        assert st is None
        return
    assert st is not None
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == [UNTOLERATED]


def _scores(p: PodBuilder, *nodes: NodeBuilder) -> list[int]:
    state = CycleState()
    infos = [n.build() for n in nodes]
    built = p.build()
    assert TT.pre_score(state, built, infos) is None
    scores = []
    for ni in infos:
        s, st = TT.score(state, built, ni)
        assert st is None
        scores.append(NodeScore(ni.name, s))
    raw = [s.score for s in scores]
    assert TT.normalize_score(state, built, scores) is None
    return raw + [s.score for s in scores]


def test_score_counts_prefer_no_schedule_and_reverses() -> None:
    n1 = node("n1").taint("a", "1", "PreferNoSchedule").taint("b", "2", "PreferNoSchedule")
    n2 = node("n2").taint("a", "1", "PreferNoSchedule").taint("c", "", "NoSchedule")
    n3 = node("n3")
    # raw counts 2, 1, 0 -> reversed 100 - 100*s/2
    assert _scores(pod("p"), n1, n2, n3) == [2, 1, 0, 0, 50, 100]


def test_score_only_prefer_no_schedule_tolerations_count() -> None:
    n1 = node("n1").taint("a", "1", "PreferNoSchedule").taint("b", "2", "PreferNoSchedule")
    n2 = node("n2").taint("a", "1", "PreferNoSchedule")
    p = (
        pod("p")
        .toleration("a", "1", "PreferNoSchedule")
        # effect NoSchedule does not tolerate a PreferNoSchedule taint
        .toleration("b", "2", "NoSchedule")
    )
    assert _scores(p, n1, n2) == [1, 0, 0, 100]
    # an empty effect tolerates every effect
    assert _scores(pod("p").toleration("b", operator="Exists"), n1, n2) == [1, 1, 0, 0]


def test_score_all_zero_is_max() -> None:
    assert _scores(pod("p"), node("n1"), node("n2")) == [0, 0, 100, 100]


def test_score_without_pre_score_is_error() -> None:
    _, st = TT.score(CycleState(), pod("p").build(), node("n").build())
    assert st is not None and st.code == Code.ERROR


def test_node_hint() -> None:
    node_reg, _ = TT.events_to_register()
    assert node_reg.event.resource is EventResource.NODE
    assert node_reg.event.action == ActionType.ADD | ActionType.UPDATE_NODE_TAINT
    hint = node_reg.hint
    assert hint is not None
    p = pod("p").toleration("ok", operator="Exists").build()
    tainted = node("n").taint("k", "v").record()
    clean = node("n").record()
    tolerated = node("n").taint("ok", "x").record()
    prefer = node("n").taint("k", "v", "PreferNoSchedule").record()
    assert hint(p, None, clean) is QueueingHint.QUEUE
    assert hint(p, None, tolerated) is QueueingHint.QUEUE
    assert hint(p, None, tainted) is QueueingHint.SKIP
    assert hint(p, tainted, clean) is QueueingHint.QUEUE
    assert hint(p, tainted, prefer) is QueueingHint.QUEUE
    assert hint(p, clean, tolerated) is QueueingHint.SKIP
    assert hint(p, clean, tainted) is QueueingHint.SKIP


def test_pod_hint() -> None:
    _, pod_reg = TT.events_to_register()
    assert pod_reg.event.resource is EventResource.POD
    assert pod_reg.event.action == ActionType.UPDATE_POD_TOLERATION
    hint = pod_reg.hint
    assert hint is not None
    target = pod("p").build()
    assert hint(target, target, pod("p").toleration("k", operator="Exists").build()) is (
        QueueingHint.QUEUE
    )
    other = pod("q").build()
    assert hint(target, other, other) is QueueingHint.SKIP


def test_entry() -> None:
    assert ENTRY.name == "TaintToleration"
    assert ENTRY.extension_points == {"filter", "preScore", "score"}
