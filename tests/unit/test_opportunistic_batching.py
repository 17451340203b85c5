"""OpportunisticBatching: pod signatures (SignPod with upstream's refusal rules) and the
reuse of the previous cycle's sorted nodes."""

from __future__ import annotations

import random
from typing import Any

from kscheduler.algorithm import Algorithm
from kscheduler.cache import Cache, Snapshot
from kscheduler.config import load_config
from kscheduler.framework import CycleState
from kscheduler.framework.features import (
    GATES,
    KNOWN,
    OPPORTUNISTIC_BATCHING,
    gates_from,
    parse_feature_gates,
)
from kscheduler.framework.runtime import Framework
from kscheduler.framework.signing import MAX_BATCH_AGE
from kscheduler.framework.types import PodInfo
from kscheduler.plugins import (
    default_binder,
    node_affinity,
    node_resources_fit,
    pod_topology_spread,
    priority_sort,
    taint_toleration,
)
from tests.unit.builders import PodBuilder, node, pod
from tests.unit.fakes import framework

ENTRIES = [
    priority_sort.ENTRY,
    default_binder.ENTRY,
    node_resources_fit.ENTRY,
    node_affinity.ENTRY,
    taint_toleration.ENTRY,
    pod_topology_spread.ENTRY,
]
SIGNING = ["NodeResourcesFit", "NodeAffinity", "TaintToleration", "PodTopologySpread"]
POINTS = {
    "queueSort": ["PrioritySort"],
    "preFilter": ["NodeResourcesFit", "NodeAffinity", "PodTopologySpread"],
    "filter": SIGNING,
    "preScore": ["NodeAffinity", "TaintToleration", "PodTopologySpread"],
    "score": ["NodeResourcesFit", "NodeAffinity", "TaintToleration"],
    "bind": ["DefaultBinder"],
}


def _profile(
    cache: Cache, *, defaulting: str = "List", clock: list[float] | None = None
) -> Framework:
    args: dict[str, Any] = {
        "PodTopologySpread": pod_topology_spread.parse_args({"defaultingType": defaulting})
    }
    fwk, _, _, _ = framework(ENTRIES, POINTS, cache=cache, args=args)
    fwk.batch.rng = random.Random(1)
    if clock is not None:
        fwk.batch.clock = lambda: clock[0]
    return fwk


def test_gate_is_known_and_on() -> None:
    assert KNOWN[OPPORTUNISTIC_BATCHING].default is True
    assert GATES.opportunistic_batching is True
    assert (
        gates_from(parse_feature_gates("OpportunisticBatching=false")).enabled(
            OPPORTUNISTIC_BATCHING
        )
        is False
    )


def test_default_profile_signs_nothing() -> None:
    from kscheduler.app import profile_specs
    from kscheduler.plugins import full_registry

    cfg = load_config("", registry=full_registry())
    spec = profile_specs(cfg)[0]
    # every plugin of the default profile signs, but PodTopologySpread refuses every pod
    # of a profile with default constraints (the system defaults), as upstream
    registry = full_registry()
    from tests.unit.fakes import FakeClient, FakeObjects, FakeRecorder

    prof = Framework(
        spec,
        registry,
        snapshot=Snapshot(Cache()),
        objects=FakeObjects(),
        client=FakeClient(),
        recorder=FakeRecorder(),
    )
    assert not prof.unsignable_plugins
    assert prof.sign_pod(pod("p").req(cpu="1").build()) is None
    # known once for the profile: the cycle neither signs nor keeps results
    assert prof.refusing_plugins == ["PodTopologySpread"]
    assert not prof.batching_possible


def test_signatures() -> None:
    fwk = _profile(Cache())
    assert fwk.signatures_enabled and fwk.batching_possible
    a = fwk.sign_pod(pod("a").req(cpu="1").build())
    b = fwk.sign_pod(pod("b").req(cpu="1").build())
    assert a is not None and a == b
    assert fwk.sign_pod(pod("c").req(cpu="2").build()) != a
    tolerating = pod("d").req(cpu="1").raw()
    tolerating["spec"]["tolerations"] = [{"key": "k", "operator": "Exists"}]
    assert fwk.sign_pod(_parse(tolerating)) not in (None, a)
    spread = pod("e").req(cpu="1").raw()
    spread["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    ]
    assert fwk.sign_pod(_parse(spread)) is None
    # the system default constraints make every pod unsignable
    assert _profile(Cache(), defaulting="System").sign_pod(pod("f").build()) is None


def _parse(raw: dict[str, Any]) -> PodInfo:
    from kscheduler.framework.parse import parse_pod

    return parse_pod(raw)


def _cluster() -> Cache:
    cache = Cache()
    # one pod per node: pods=1; free cpu decides the order (LeastAllocated)
    for name, cpu in (("n0", "8"), ("n1", "6"), ("n2", "4"), ("n3", "2")):
        cache.add_node(node(name).alloc(cpu=cpu, memory="8Gi", pods=1).record())
    return cache


def _place(alg: Algorithm, fwk: Framework, cache: Cache, p: PodBuilder, cycle: int) -> str:
    snap = fwk.snapshot
    assert isinstance(snap, Snapshot)
    snap.update()
    result = alg.schedule_pod(fwk, CycleState(), p.build(), snap, cycle=cycle)
    cache.assume(p.on(result.suggested_host).build())
    return result.suggested_host


def test_hint_follows_the_sorted_nodes() -> None:
    cache = _cluster()
    clock = [100.0]
    fwk = _profile(cache, clock=clock)
    alg = Algorithm(rng=random.Random(1))
    placed = [_place(alg, fwk, cache, pod(f"p{i}").req(cpu="1"), i + 1) for i in range(4)]
    assert placed == ["n0", "n1", "n2", "n3"]
    # the first pod scored every node; the next three took the kept hints
    assert fwk.batch.stats.hints == 3
    assert fwk.batch.stats.hints_used == 3


def test_no_hint_after_a_gap_another_signature_or_too_late() -> None:
    for case in ("gap", "signature", "late", "nominated"):
        cache = _cluster()
        clock = [100.0]
        fwk = _profile(cache, clock=clock)
        alg = Algorithm(rng=random.Random(1))
        assert _place(alg, fwk, cache, pod("p0").req(cpu="1"), 1) == "n0"
        second = pod("p1").req(cpu="1")
        cycle = 2
        if case == "gap":
            cycle = 3
        elif case == "signature":
            second = pod("p1").req(cpu="1", memory="1Gi")
        elif case == "late":
            clock[0] += MAX_BATCH_AGE + 0.1
        else:
            second = second.nominated("n2")
        host = _place(alg, fwk, cache, second, cycle)
        assert fwk.batch.stats.hints == 0, case
        assert host == ("n2" if case == "nominated" else "n1"), case


def test_last_node_still_feasible_is_rescored() -> None:
    cache = Cache()
    # n0 takes two pods: after the first it still fits and competes again
    cache.add_node(node("n0").alloc(cpu="8", memory="8Gi", pods=2).record())
    cache.add_node(node("n1").alloc(cpu="3", memory="8Gi", pods=2).record())
    fwk = _profile(cache, clock=[0.0])
    alg = Algorithm(rng=random.Random(1))
    assert _place(alg, fwk, cache, pod("p0").req(cpu="1"), 1) == "n0"
    # n0 after one pod: 6/8 free beats n1's 2/3: the rescored n0 is the hint
    assert _place(alg, fwk, cache, pod("p1").req(cpu="1"), 2) == "n0"
    assert fwk.batch.stats.hints == 1


def test_gate_off_keeps_nothing() -> None:
    cache = _cluster()
    fwk = _profile(cache, clock=[0.0])
    alg = Algorithm(rng=random.Random(1))
    GATES.opportunistic_batching = False
    try:
        _place(alg, fwk, cache, pod("p0").req(cpu="1"), 1)
        _place(alg, fwk, cache, pod("p1").req(cpu="1"), 2)
    finally:
        GATES.opportunistic_batching = True
    assert fwk.batch.stats.hints == 0 and not fwk.batch.sorted
