"""Node updates that change nothing the scheduler reads (status heartbeats)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from kscheduler.cache import Cache
from kscheduler.eventhandlers import EventHandlers, node_unchanged, node_update_action
from kscheduler.framework.parse import parse_node
from kscheduler.framework.types import NodeRecord
from kscheduler.informers import Callbacks, Informer
from kscheduler.queue import SchedulingQueue
from tests.unit.builders import node
from tests.unit.test_informers_unit import FakeWatchClient

JSON = dict[str, Any]


def kubelet_node(name: str = "n1", rv: int = 1, beat: str = "2026-12-07T10:00:00Z") -> JSON:
    """A Node as a kubelet keeps it: conditions with heartbeat times, addresses, info."""
    raw = node(name).alloc(cpu="4", memory="8Gi", pods=110).labels(zone="a").raw()
    raw["metadata"].update(uid=f"uid-{name}", resourceVersion=str(rv), annotations={"a": "1"})
    raw["status"].update(
        capacity={"cpu": "4", "memory": "8Gi", "pods": "110"},
        conditions=[
            {
                "type": t,
                "status": "False" if t != "Ready" else "True",
                "reason": f"Kubelet{t}",
                "lastHeartbeatTime": beat,
                "lastTransitionTime": "2026-12-07T09:00:00Z",
            }
            for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
        ],
        addresses=[{"type": "InternalIP", "address": "10.0.0.1"}],
        nodeInfo={"kubeletVersion": "v1.37.2"},
    )
    return raw


def heartbeat(raw: JSON, rv: int, beat: str) -> JSON:
    new = copy.deepcopy(raw)
    new["metadata"]["resourceVersion"] = str(rv)
    for c in new["status"]["conditions"]:
        c["lastHeartbeatTime"] = beat
    return new


def handlers() -> tuple[EventHandlers, Cache]:
    cache = Cache()
    queue = SchedulingQueue(sort_key=lambda q: 0, pre_enqueue=lambda p: None, events={})
    return EventHandlers(cache=cache, queue=queue, scheduler_names=["s"]), cache


def cached_node() -> tuple[EventHandlers, Cache, JSON, NodeRecord]:
    """Handlers whose cache holds kubelet_node(): the handlers, the cache, the
    node's JSON and its record."""
    h, cache = handlers()
    first = kubelet_node()
    rec = h.parse_node_or_none(first)
    assert rec is not None
    h.node_added(rec)
    return h, cache, first, rec


def test_a_heartbeat_is_taken_in_place_and_leaves_the_cache_generation_alone() -> None:
    h, cache, first, rec = cached_node()
    generation, ni_generation = cache.generation, cache.nodes["n1"].generation

    beat = heartbeat(first, 2, "2026-12-07T10:00:40Z")
    again = h.reparse_node(rec, beat)
    assert again is rec and rec.raw is beat and rec.resource_version == "2"
    h.node_updated(rec, again)
    assert (cache.generation, cache.nodes["n1"].generation) == (generation, ni_generation)
    assert cache.nodes["n1"].node is rec


def test_a_change_the_scheduler_reads_is_parsed_and_counted() -> None:
    h, cache, first, rec = cached_node()
    generation = cache.nodes["n1"].generation

    changed = heartbeat(first, 2, "2026-12-07T10:00:40Z")
    changed["metadata"]["labels"]["zone"] = "b"
    new = h.reparse_node(rec, changed)
    assert new is not None and new is not rec and new.labels["zone"] == "b"
    h.node_updated(rec, new)
    assert cache.nodes["n1"].generation == generation + 1
    assert cache.nodes["n1"].node is new and rec.raw is first  # the old record untouched


def test_a_node_that_could_not_be_parsed_is_parsed_again() -> None:
    h, _ = handlers()
    bad = kubelet_node()
    bad["status"]["allocatable"] = ["not", "a", "map"]
    assert h.parse_node_or_none(bad) is None and "n1" in h.bad_nodes
    fixed = h.reparse_node(None, kubelet_node(rv=2))
    assert fixed is not None and fixed.resource_version == "2" and not h.bad_nodes


Change = Callable[[JSON], None]


def _set(*path: str, value: Any) -> Change:
    def change(raw: JSON) -> None:
        d = raw
        for key in path[:-1]:
            d = d.setdefault(key, {})
        d[path[-1]] = value

    return change


def _condition(field: str, value: Any, i: int = 3) -> Change:
    def change(raw: JSON) -> None:
        raw["status"]["conditions"][i][field] = value

    return change


def _drop(*path: str) -> Change:
    def change(raw: JSON) -> None:
        d = raw
        for key in path[:-1]:
            d = d[key]
        del d[path[-1]]

    return change


#: Changes a node update may carry that the scheduler reads, or may read: none of
#: them may be taken for a heartbeat.
CHANGES: dict[str, Change] = {
    "label": _set("metadata", "labels", "zone", value="b"),
    "label added": _set("metadata", "labels", "x", value="y"),
    "annotation": _set("metadata", "annotations", "a", value="2"),
    "uid": _set("metadata", "uid", value="other"),
    "deletion": _set("metadata", "deletionTimestamp", value="2026-12-07T10:01:00Z"),
    "taint": _set("spec", "taints", value=[{"key": "k", "effect": "NoSchedule"}]),
    "unschedulable": _set("spec", "unschedulable", value=True),
    "allocatable": _set("status", "allocatable", "cpu", value="3"),
    "capacity": _set("status", "capacity", "cpu", value="8"),
    "condition status": _condition("status", "False"),
    "condition type": _condition("type", "NetworkUnavailable", 0),
    "condition added": lambda raw: raw["status"]["conditions"].append(
        {"type": "Extra", "status": "True"}
    ),
    "conditions reordered": lambda raw: raw["status"]["conditions"].reverse(),
    "conditions gone": _drop("status", "conditions"),
    "images": _set("status", "images", value=[{"names": ["img"], "sizeBytes": 10}]),
    "declared features": _set("status", "declaredFeatures", value=["F"]),
    "node info": _set("status", "nodeInfo", "kubeletVersion", value="v1.38.0"),
    "spec field added": _set("spec", "podCIDR", value="10.1.0.0/24"),
    "top-level key": _set("extra", value={}),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_node_unchanged_sees_every_other_change(name: str) -> None:
    old = kubelet_node()
    new = heartbeat(old, 2, "2026-12-07T10:00:40Z")
    assert node_unchanged(old, new)
    CHANGES[name](new)
    assert not node_unchanged(old, new)
    assert not node_unchanged(new, old)


def test_only_the_heartbeat_details_of_conditions_are_ignored() -> None:
    old = kubelet_node()
    new = heartbeat(old, 7, "2026-12-07T10:05:00Z")
    for c in new["status"]["conditions"]:
        c["reason"] = "Other"
        c["message"] = "details"
        c["lastTransitionTime"] = "2026-12-07T10:04:00Z"
    new["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    assert node_unchanged(old, new)


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_what_node_unchanged_accepts_parses_the_same_and_wakes_nobody(name: str) -> None:
    """node_unchanged(a, b) implies the same NodeRecord fields and no update action;
    checked on every pair of the versions above."""
    base = kubelet_node()
    versions = [base, heartbeat(base, 2, "2026-12-07T10:00:40Z")]
    changed = heartbeat(base, 3, "2026-12-07T10:01:20Z")
    CHANGES[name](changed)
    versions.append(changed)
    for a in versions:
        for b in versions:
            if not node_unchanged(a, b):
                continue
            ra, rb = parse_node(copy.deepcopy(a)), parse_node(copy.deepcopy(b))
            assert fields(ra) == fields(rb)
            assert not node_update_action(ra, rb)


def fields(rec: NodeRecord) -> tuple[Any, ...]:
    return (rec.name, rec.labels, rec.taints, rec.allocatable, rec.unschedulable, rec.images)


def test_through_the_informer_a_heartbeat_keeps_the_stored_record() -> None:
    h, cache = handlers()
    inf: Informer[NodeRecord | None] = Informer(
        FakeWatchClient(), "/api/v1/nodes", transform=h.parse_node_or_none
    )
    inf.retransform = h.reparse_node
    updates: list[tuple[NodeRecord | None, NodeRecord | None]] = []

    def updated(old: NodeRecord | None, new: NodeRecord | None) -> None:
        updates.append((old, new))
        h.node_updated(old, new)

    inf.add_handler(Callbacks(h.node_added, updated, h.node_deleted))
    first = kubelet_node()
    inf.replace([first])
    stored = inf.get(None, "n1")
    assert stored is not None and cache.nodes["n1"].node is stored
    generation = cache.nodes["n1"].generation
    beat = heartbeat(first, 2, "2026-12-07T10:00:40Z")
    inf.apply("MODIFIED", beat)
    assert inf.get(None, "n1") is stored and stored.raw is beat
    assert updates == [(stored, stored)] and cache.nodes["n1"].generation == generation
    tainted = heartbeat(beat, 3, "2026-12-07T10:01:20Z")
    tainted["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    inf.apply("MODIFIED", tainted)
    now = inf.get(None, "n1")
    assert now is not None and now is not stored and now.taints
    assert cache.nodes["n1"].node is now and cache.nodes["n1"].generation == generation + 1
    # a relist that brings a heartbeat-only version changes nothing either
    inf.replace([heartbeat(tainted, 4, "2026-12-07T10:02:00Z")])
    assert inf.get(None, "n1") is now and cache.nodes["n1"].generation == generation + 1
    # deleted and made again under the same name: parsed whole, reported as such
    again = kubelet_node(rv=5)
    again["metadata"]["uid"] = "uid-other"
    inf.apply("MODIFIED", again)
    last = inf.get(None, "n1")
    assert last is not None and last is not now and last.raw is again
