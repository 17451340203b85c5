"""Preemption side by side with the real kube-scheduler, each run on fresh state.

Victims carry a finalizer so that, once evicted, they stay visible (deletionTimestamp,
DisruptionTarget condition) until the test releases them; then they go at once (no
kubelet, grace period 0) and the preemptor can be bound.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from kscheduler.controlplane.builders import (
    create_namespace,
    create_nodes,
    create_pods,
    delete_namespace,
    make_node,
    make_pod,
    make_priority_class,
    taint,
)
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.controlplane.rest import ApiError, RestClient
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for

REFERENCE = "reference-scheduler"
HOLD = "kscheduler.test/hold"

LOW, MID, HIGH, TOP, NEVER = "kst-low", "kst-mid", "kst-high", "kst-top", "kst-never"

#: A victim bound up front: (name, node, cpu, priority class, labels).
VictimSpec = tuple[str, str, str, str, dict[str, str]]
PRIORITIES = {LOW: 10, MID: 20, HIGH: 1000, TOP: 2000, NEVER: 1000}


@pytest.fixture
async def priority_classes(rest: RestClient) -> None:
    for name, value in PRIORITIES.items():
        policy = "Never" if name == NEVER else None
        try:
            await rest.post(
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                make_priority_class(name, value, preemption_policy=policy),
            )
        except ApiError as exc:
            if exc.status != 409:
                raise


def scheduler(cp: ControlPlane, name: str) -> AbstractAsyncContextManager[Any]:
    if name == REFERENCE:
        return ReferenceScheduler.for_control_plane(cp, scheduler_name=REFERENCE)
    return running_kscheduler(cp)


@asynccontextmanager
async def fresh_namespace(rest: RestClient) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await create_namespace(rest, name, exist_ok=False)
    try:
        yield name
    finally:
        await release_all(rest, name)
        # no namespace controller: objects other than pods would stay behind
        await rest.delete(f"/apis/policy/v1/namespaces/{name}/poddisruptionbudgets")
        await delete_namespace(rest, name)


def pods_path(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


async def list_pods(rest: RestClient, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in await rest.list(pods_path(ns))}


async def release_all(rest: RestClient, ns: str) -> None:
    for name, p in (await list_pods(rest, ns)).items():
        if p["metadata"].get("finalizers"):
            await rest.patch(f"{pods_path(ns)}/{name}", {"metadata": {"finalizers": None}})


def victim(name: str, ns: str, node: str, cpu: str, pc: str, **labels: str) -> dict[str, Any]:
    p = make_pod(name, ns, cpu=cpu, node_name=node, priority_class_name=pc, labels=labels or None)
    p["metadata"]["finalizers"] = [HOLD]
    return p


def condition(p: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (p.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


async def events(rest: RestClient, ns: str, reason: str) -> list[dict[str, Any]]:
    items = (await rest.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events"))["items"]
    return [e for e in items if e.get("reason") == reason]


@dataclass
class Outcome:
    nominated: str = ""
    bound_to: str = ""
    #: evicted victim -> its DisruptionTarget condition (type, status, reason, message)
    evicted: dict[str, tuple[str, str, str, str]] = field(default_factory=dict)
    #: Preempted events: (victim, type, action, note)
    preempted_events: list[tuple[str, str, str, str]] = field(default_factory=list)
    #: the preemptor's PodScheduled message when it got nominated
    first_message: str = ""
    event_controllers: set[str] = field(default_factory=set)
    #: names of the objects the Preempted events name as related
    event_related: set[str] = field(default_factory=set)


async def run_preemption(
    cp: ControlPlane,
    rest: RestClient,
    sched: str,
    victims: Sequence[VictimSpec],
    preemptor_cpu: str,
    *,
    pdb_labels: dict[str, str] | None = None,
    expected_victims: int,
) -> Outcome:
    """Victims (name, node, cpu, priority class, labels) bound up front, then a HIGH pod."""
    out = Outcome()
    async with fresh_namespace(rest) as ns:
        if pdb_labels:
            await rest.post(
                f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": "guard", "namespace": ns},
                    # the disruption controller computes status.disruptionsAllowed
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": pdb_labels}},
                },
            )
        await create_pods(
            rest, [victim(n, ns, node, cpu, pc, **lbl) for n, node, cpu, pc, lbl in victims]
        )
        async with scheduler(cp, sched):
            await create_pods(
                rest,
                [
                    make_pod(
                        "preemptor",
                        ns,
                        cpu=preemptor_cpu,
                        scheduler_name=sched,
                        priority_class_name=HIGH,
                    )
                ],
            )

            async def nominated_and_evicted() -> dict[str, dict[str, Any]] | None:
                got = await list_pods(rest, ns)
                gone = [p for p in got.values() if p["metadata"].get("deletionTimestamp")]
                nnn = (got["preemptor"].get("status") or {}).get("nominatedNodeName")
                return got if nnn and len(gone) >= expected_victims else None

            got = await wait_for(nominated_and_evicted, what=f"{sched}: nomination and evictions")
            await asyncio.sleep(1.0)  # any further (wrong) eviction would show by now
            got = await list_pods(rest, ns)
            out.nominated = got["preemptor"]["status"]["nominatedNodeName"]
            out.first_message = (condition(got["preemptor"], "PodScheduled") or {}).get(
                "message", ""
            )
            for name, p in got.items():
                if p["metadata"].get("deletionTimestamp"):
                    c = condition(p, "DisruptionTarget") or {}
                    out.evicted[name] = (
                        c.get("type", ""),
                        c.get("status", ""),
                        c.get("reason", ""),
                        c.get("message", ""),
                    )
            assert not got["preemptor"]["spec"].get("nodeName"), "bound before victims left"

            await release_all(rest, ns)

            async def bound() -> str | None:
                p = await rest.get(f"{pods_path(ns)}/preemptor")
                node: str | None = p["spec"].get("nodeName")
                return node

            out.bound_to = await wait_for(bound, what=f"{sched}: preemptor bound")
            evs = await wait_for(
                lambda: _preempted(rest, ns, expected_victims), what=f"{sched}: Preempted events"
            )
            uid = (await rest.get(f"{pods_path(ns)}/preemptor"))["metadata"]["uid"]
            for e in evs:
                note = e["note"].replace(uid, "<preemptor-uid>")
                out.preempted_events.append((e["regarding"]["name"], e["type"], e["action"], note))
                out.event_controllers.add(e["reportingController"])
                out.event_related.add((e.get("related") or {}).get("name", ""))
            out.preempted_events.sort()
    return out


async def _preempted(rest: RestClient, ns: str, n: int) -> list[dict[str, Any]] | None:
    evs = await events(rest, ns, "Preempted")
    return evs if len(evs) >= n else None


def _normalised(o: Outcome, sched: str) -> Outcome:
    """The same outcome with the scheduler's own name taken out of the texts."""
    return Outcome(
        o.nominated,
        o.bound_to,
        {
            k: (t, s, r, m.replace(f"{sched}:", "<scheduler>:"))
            for k, (t, s, r, m) in o.evicted.items()
        },
        o.preempted_events,
        o.first_message,
    )


async def compare(
    cp: ControlPlane,
    rest: RestClient,
    victims: Sequence[VictimSpec],
    preemptor_cpu: str,
    *,
    pdb_labels: dict[str, str] | None = None,
    expected_victims: int,
) -> tuple[Outcome, Outcome]:
    ref = await run_preemption(
        cp,
        rest,
        REFERENCE,
        victims,
        preemptor_cpu,
        pdb_labels=pdb_labels,
        expected_victims=expected_victims,
    )
    ours = await run_preemption(
        cp,
        rest,
        SCHEDULER,
        victims,
        preemptor_cpu,
        pdb_labels=pdb_labels,
        expected_victims=expected_victims,
    )
    assert ref.event_controllers == {REFERENCE}
    assert ours.event_controllers == {SCHEDULER}
    # kube-scheduler 1.37 hands its event recorder a wrapper of the preemptor that the
    # recorder cannot reference, so its Preempted events carry no related object; ours
    # carry none either
    assert ref.event_related == {""}
    assert ours.event_related == {""}
    assert _normalised(ours, SCHEDULER) == _normalised(ref, REFERENCE)
    return ref, ours


async def test_preempts_the_same_victims_on_the_same_node(
    control_plane: ControlPlane, rest: RestClient, fresh_nodes: None, priority_classes: None
) -> None:
    await create_nodes(rest, [make_node("pre-a", cpu="4"), make_node("pre-b", cpu="4")])
    victims: list[VictimSpec] = [
        # pre-a: both must go, the more important at MID
        ("a-low", "pre-a", "2", LOW, {}),
        ("a-mid", "pre-a", "2", MID, {}),
        # pre-b: only the LOW pod must go; the TOP pod is not a victim at all
        ("b-top", "pre-b", "1", TOP, {}),
        ("b-low", "pre-b", "3", LOW, {}),
    ]
    _, ours = await compare(control_plane, rest, victims, "3", expected_victims=1)
    assert ours.nominated == ours.bound_to == "pre-b"
    assert ours.evicted == {
        "b-low": (
            "DisruptionTarget",
            "True",
            "PreemptionByScheduler",
            f"{SCHEDULER}: preempting to accommodate a higher priority pod",
        )
    }
    assert ours.preempted_events == [
        ("b-low", "Normal", "Preempting", "Preempted by pod <preemptor-uid> on node pre-b")
    ]
    # 1.37: a successful preemption says where it found room, at the end of the message
    assert ours.first_message == (
        "0/2 nodes are available: 2 Insufficient cpu. preemption: found a potential "
        "placement for pod on node pre-b, preempting 1 victims"
    )


async def test_pdb_protected_victim_is_reprieved_first(
    control_plane: ControlPlane, rest: RestClient, fresh_nodes: None, priority_classes: None
) -> None:
    await create_nodes(rest, [make_node("pre-c", cpu="2")])
    victims: list[VictimSpec] = [
        ("guarded", "pre-c", "1", LOW, {"app": "guarded"}),
        ("plain", "pre-c", "1", MID, {"app": "plain"}),
    ]
    _, ours = await compare(
        control_plane, rest, victims, "1", pdb_labels={"app": "guarded"}, expected_victims=1
    )
    # without the PDB the LOW pod would go; with it, the MID one does
    assert set(ours.evicted) == {"plain"}


@pytest.mark.parametrize(
    ("nodes", "victims", "preemptor_cpu", "winner"),
    [
        pytest.param(
            {"pre-d": "1", "pre-e": "1"},
            [
                ("d-guarded", "pre-d", "1", LOW, {"app": "guarded"}),
                ("e-mid", "pre-e", "1", MID, {}),
            ],
            "1",
            "pre-e",
            id="fewest-pdb-violations-over-lower-priority",
        ),
        pytest.param(
            {"pre-f": "2", "pre-g": "2"},
            [
                ("f-mid", "pre-f", "1", MID, {}),
                ("f-low", "pre-f", "1", LOW, {}),
                ("g-mid", "pre-g", "1", MID, {}),
                ("g-mid2", "pre-g", "1", MID, {}),
            ],
            "2",
            "pre-f",
            id="lowest-sum-of-priorities",
        ),
    ],
)
async def test_node_choice(
    control_plane: ControlPlane,
    rest: RestClient,
    fresh_nodes: None,
    priority_classes: None,
    nodes: dict[str, str],
    victims: list[VictimSpec],
    preemptor_cpu: str,
    winner: str,
) -> None:
    await create_nodes(rest, [make_node(n, cpu=cpu) for n, cpu in nodes.items()])
    expected = [v for v in victims if v[1] == winner]
    _, ours = await compare(
        control_plane,
        rest,
        victims,
        preemptor_cpu,
        pdb_labels={"app": "guarded"},
        expected_victims=len(expected),
    )
    assert ours.nominated == ours.bound_to == winner
    assert set(ours.evicted) == {v[0] for v in expected}


# ---- FailedScheduling messages ----------------------------------------------------------------


async def failed_messages(
    cp: ControlPlane, rest: RestClient, ns: str, pods: Sequence[dict[str, Any]]
) -> dict[str, tuple[str, str]]:
    """Run both schedulers on copies of ``pods``; name -> (ours, reference) condition message."""
    copies = []
    for p in pods:
        for sched in (SCHEDULER, REFERENCE):
            c = {**p, "metadata": {**p["metadata"]}, "spec": {**p["spec"]}}
            c["metadata"]["name"] = f"{p['metadata']['name']}-{sched}"
            c["spec"]["schedulerName"] = sched
            copies.append(c)
    ref = ReferenceScheduler.for_control_plane(cp, scheduler_name=REFERENCE)
    async with ref, running_kscheduler(cp):
        await create_pods(rest, copies)

        async def all_reported() -> dict[str, dict[str, Any]] | None:
            got = await list_pods(rest, ns)
            done = all(
                (condition(got.get(c["metadata"]["name"], {}), "PodScheduled") or {}).get("status")
                == "False"
                for c in copies
            )
            return got if done else None

        got = await wait_for(all_reported, what="PodScheduled=False on every pod")
    out = {}
    for p in pods:
        n = p["metadata"]["name"]
        ours, theirs = (
            (condition(got[f"{n}-{s}"], "PodScheduled") or {}).get("message", "")
            for s in (SCHEDULER, REFERENCE)
        )
        out[n] = (ours, theirs)
    return out


async def test_failed_scheduling_messages_match_word_for_word(
    control_plane: ControlPlane,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
    priority_classes: None,
) -> None:
    ns = namespace
    await create_nodes(
        rest,
        [
            make_node("m-tainted", cpu="4", taints=[taint("dedicated", "x")]),
            make_node("m-full", cpu="2"),
            make_node("m-mixed", cpu="2"),
        ],
    )
    await create_pods(
        rest,
        [
            make_pod("top", ns, cpu="2", node_name="m-full", priority_class_name=TOP),
            make_pod("top2", ns, cpu="1", node_name="m-mixed", priority_class_name=TOP),
            make_pod("low", ns, cpu="1", node_name="m-mixed", priority_class_name=LOW),
        ],
    )
    pods = [
        # every kind of dry-run verdict at once
        make_pod("mixed", ns, cpu="2", priority_class_name=HIGH),
        # preemptionPolicy: Never
        make_pod("never", ns, cpu="2", priority_class_name=NEVER),
        # larger than any node: unresolvable everywhere
        make_pod("huge", ns, cpu="16", priority_class_name=HIGH),
    ]
    msgs = await failed_messages(control_plane, rest, ns, pods)
    for name, (ours, theirs) in msgs.items():
        assert ours == theirs, name
    assert msgs["mixed"][1] == (
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. "
        "preemption: 0/3 nodes are available: 1 Insufficient cpu, "
        "1 No preemption victims found for incoming pod, "
        "1 Preemption is not helpful for scheduling."
    )
    assert msgs["never"][1].endswith(" preemption: not eligible due to preemptionPolicy=Never.")


async def test_failed_scheduling_message_after_a_pre_filter_rejection(
    control_plane: ControlPlane,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
    priority_classes: None,
) -> None:
    await create_nodes(rest, [make_node("pf-1", cpu="4")])
    p = make_pod("pvc", namespace, cpu="1", priority_class_name=HIGH)
    p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "missing"}}]
    msgs = await failed_messages(control_plane, rest, namespace, [p])
    ours, theirs = msgs["pvc"]
    # VolumeBinding rejects at PreFilter, so DynamicResources' PreFilter never runs and
    # its PostFilter fails on the missing state: upstream appends that error as is, and
    # DefaultPreemption does not run at all.
    assert theirs == '0/1 nodes are available: persistentvolumeclaim "missing" not found. not found'
    assert ours == theirs
