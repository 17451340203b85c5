"""reparse_pod: a new version of a pod parsed from the last one equals parse_pod's."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from kscheduler.framework.parse import parse_pod, reparse_pod
from kscheduler.framework.types import PodInfo
from tests.unit.builders import expr, pod

JSON = dict[str, Any]


def pending() -> JSON:
    raw = (
        pod("p", "ns")
        .labels(app="a")
        .req(cpu="100m", memory="500Mi")
        .required_terms(expr("zone", "In", "z1"))
        .toleration("k", "v")
        .host_port(8080)
        .raw()
    )
    raw["metadata"].update(resourceVersion="1", creationTimestamp="2026-12-07T10:00:00Z")
    raw["spec"]["containers"][0]["image"] = "pause"
    raw["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    return raw


def _version(raw: JSON, rv: int) -> JSON:
    new = copy.deepcopy(raw)
    new["metadata"]["resourceVersion"] = str(rv)
    return new


def bound(raw: JSON) -> JSON:
    new = _version(raw, 2)
    new["spec"]["nodeName"] = "n1"
    new["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    return new


def running(raw: JSON) -> JSON:
    """What kwok (or a kubelet) reports once the pod runs."""
    new = _version(raw, 3)
    new["status"].update(
        phase="Running",
        startTime="2026-12-07T10:00:02Z",
        hostIP="10.0.0.1",
        podIP="10.1.0.1",
        podIPs=[{"ip": "10.1.0.1"}],
        conditions=[
            {"type": t, "status": "True", "lastTransitionTime": "2026-12-07T10:00:02Z"}
            for t in ("PodScheduled", "Initialized", "Ready", "ContainersReady")
        ],
        containerStatuses=[
            {
                "name": "c0",
                "image": "pause",
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": "2026-12-07T10:00:02Z"}},
            }
        ],
    )
    new["metadata"]["managedFields"] = [{"manager": "kwok", "subresource": "status"}]
    return new


Change = Callable[[JSON], None]


def _at(path: str, value: Any) -> Change:
    def change(raw: JSON) -> None:
        *head, last = path.split(".")
        d = raw
        for k in head:
            d = d.setdefault(k, {})
        d[last] = value

    return change


def _container(field: str, value: Any) -> Change:
    def change(raw: JSON) -> None:
        raw["spec"]["containers"][0][field] = value

    return change


def _status_container(field: str, value: Any) -> Change:
    def change(raw: JSON) -> None:
        statuses = raw["status"].setdefault("containerStatuses", [{"name": "c0"}])
        statuses[0][field] = value

    return change


#: Later changes to the running pod: each must come out as parse_pod has it.
CHANGES: dict[str, Change] = {
    "label": _at("metadata.labels.app", "b"),
    "annotation": _at("metadata.annotations.x", "y"),
    "deletion": _at("metadata.deletionTimestamp", "2026-12-07T10:05:00Z"),
    "nominated": _at("status.nominatedNodeName", "n2"),
    "phase": _at("status.phase", "Succeeded"),
    "start time": _at("status.startTime", "2026-12-07T10:09:00Z"),
    "image": _container("image", "other"),
    "requests": _container("resources", {"requests": {"cpu": "2", "memory": "1Gi"}}),
    "priority": _at("spec.priority", 10),
    "bad priority": _at("spec.priority", "high"),
    "gates": _at("spec.schedulingGates", [{"name": "g"}]),
    "node moved": _at("spec.nodeName", "n2"),
    "allocated": _status_container("allocatedResources", {"cpu": "4", "memory": "500Mi"}),
    "actuated": _status_container("resources", {"requests": {"cpu": "3", "memory": "500Mi"}}),
    "pod-level status": _at("status.resources", {"requests": {"cpu": "5"}}),
    "resize pending": _at(
        "status.conditions",
        [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}],
    ),
    "statuses not a list": _at("status.containerStatuses", {"c0": {}}),
    "status not a map": _at("status", ["bad"]),
    "no status": lambda raw: raw.pop("status"),
    "uid": _at("metadata.uid", "other"),
}


def fields(p: PodInfo) -> dict[str, Any]:
    return {f: getattr(p, f) for f in PodInfo.__dataclass_fields__ if f not in ("ext", "raw")}


def versions(change: str | None = None) -> list[JSON]:
    p = pending()
    b = bound(p)
    r = running(b)
    out = [p, b, r]
    if change is not None:
        c = _version(r, 4)
        CHANGES[change](c)
        out.append(c)
    return out


@pytest.mark.parametrize("change", [None, *sorted(CHANGES)])
def test_every_later_version_parses_as_parse_pod_has_it(change: str | None) -> None:
    vs = versions(change)
    for i, a in enumerate(vs):
        for b in vs[i + 1 :]:
            old = parse_pod(copy.deepcopy(a))
            new = reparse_pod(old, copy.deepcopy(b))
            want = parse_pod(copy.deepcopy(b))
            assert fields(new) == fields(want), (change, a["metadata"], b["metadata"])
            assert new.raw == want.raw and new is not old and not new.ext


def test_a_binding_and_a_status_report_reuse_what_was_parsed() -> None:
    p, b, r = versions()
    first = parse_pod(p)
    first.ext["cache"] = object()
    on_node = reparse_pod(first, b)
    assert on_node.node_name == "n1" and on_node.resource_version == "2"
    assert on_node.required_node_affinity is first.required_node_affinity
    assert on_node.labels is first.labels and on_node.requests is first.requests
    assert not on_node.ext  # per-version caches start again
    runs = reparse_pod(on_node, r)
    assert (runs.phase, runs.start_time) == ("Running", "2026-12-07T10:00:02Z")
    assert runs.tolerations is first.tolerations and runs.raw is r
    assert "managedFields" not in runs.raw["metadata"]


def test_a_change_that_is_read_is_parsed_again() -> None:
    *_, r, c = versions("label")
    old = parse_pod(r)
    new = reparse_pod(old, c)
    assert new.labels == {"app": "b"} and new.labels is not old.labels


def test_a_pod_that_failed_to_parse_is_parsed_whole() -> None:
    *_, r, c = versions("bad priority")
    broken = parse_pod(c)
    assert broken.parse_error
    fixed = reparse_pod(broken, _version(r, 5))
    assert fixed.parse_error is None and fixed.priority == 0
