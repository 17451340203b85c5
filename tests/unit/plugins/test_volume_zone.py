from __future__ import annotations

from typing import Any

import pytest

from kscheduler.framework import ActionType, Code, CycleState, EventResource, QueueingHint
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.types import PodInfo
from kscheduler.plugins.volume_zone import (
    ERR_REASON_CONFLICT,
    LABEL_BETA_REGION,
    LABEL_BETA_ZONE,
    LABEL_REGION,
    LABEL_ZONE,
    VolumeZone,
    label_zones_to_set,
)

from ..builders import node, pod
from ..fakes import FakeObjects

ZONE_A = {LABEL_ZONE: "a", LABEL_REGION: "r1"}


def claim_pod(*claims: str, namespace: str = "default") -> PodInfo:
    raw = pod("p", namespace).raw()
    raw["spec"]["volumes"] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    info = parse_pod(raw)
    assert info.parse_error is None
    return info


def pvc(name: str, volume: str = "", sc: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"volumeName": volume} if volume else {}
    if sc is not None:
        spec["storageClassName"] = sc
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def pv(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels)}, "spec": {}}


def sc(name: str, mode: str | None = "WaitForFirstConsumer") -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"name": name}, "provisioner": "example.com/p"}
    if mode is not None:
        out["volumeBindingMode"] = mode
    return out


def plugin(objects: dict[str, list[dict[str, Any]]]) -> VolumeZone:
    return VolumeZone(FakeObjects(objects))


def run(p: PodInfo, objects: dict[str, list[dict[str, Any]]], node_labels: dict[str, str]) -> Any:
    pl = plugin(objects)
    ni = node("n").build()
    ni.node.labels.update(node_labels)  # type: ignore[union-attr]
    state = CycleState()
    _, st = pl.pre_filter(state, p, [ni])
    if st is not None:
        return st
    return pl.filter(state, p, ni)


@pytest.mark.parametrize(
    ("pv_labels", "node_labels", "fits"),
    [
        ({LABEL_ZONE: "a"}, ZONE_A, True),
        ({LABEL_ZONE: "b"}, ZONE_A, False),
        ({LABEL_ZONE: "a__b"}, ZONE_A, True),
        ({LABEL_ZONE: "b__c"}, ZONE_A, False),
        ({LABEL_REGION: "r1"}, ZONE_A, True),
        ({LABEL_REGION: "r2"}, ZONE_A, False),
        ({LABEL_ZONE: "a", LABEL_REGION: "r2"}, ZONE_A, False),
        # a beta label on the volume matches the GA label on the node, and vice versa only
        # when the node carries that very label
        ({LABEL_BETA_ZONE: "a"}, ZONE_A, True),
        ({LABEL_BETA_REGION: "r2"}, ZONE_A, False),
        ({LABEL_ZONE: "a"}, {LABEL_BETA_ZONE: "a"}, False),
        ({LABEL_BETA_ZONE: "a"}, {LABEL_BETA_ZONE: "a"}, True),
        # a node without any zone/region label takes any volume
        ({LABEL_ZONE: "b"}, {"other": "x"}, True),
        # a value with an empty zone is ignored
        ({LABEL_ZONE: "b__"}, ZONE_A, True),
    ],
)
def test_filter(pv_labels: dict[str, str], node_labels: dict[str, str], fits: bool) -> None:
    objects = {
        "persistentvolumeclaims": [pvc("c", "v1")],
        "persistentvolumes": [pv("v1", **pv_labels)],
    }
    st = run(claim_pod("c"), objects, node_labels)
    if fits:
        assert st is None or st.code == Code.SKIP
    else:
        assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert st.reasons == [ERR_REASON_CONFLICT]


def test_every_volume_must_fit() -> None:
    objects = {
        "persistentvolumeclaims": [pvc("c1", "v1"), pvc("c2", "v2")],
        "persistentvolumes": [pv("v1", **{LABEL_ZONE: "a"}), pv("v2", **{LABEL_ZONE: "b"})],
    }
    st = run(claim_pod("c1", "c2"), objects, ZONE_A)
    assert st is not None and st.reasons == [ERR_REASON_CONFLICT]


@pytest.mark.parametrize(
    ("claims", "objects", "reason"),
    [
        (("",), {}, "PersistentVolumeClaim had no name"),
        (("c",), {}, 'persistentvolumeclaim "c" not found'),
        (("c",), {"persistentvolumeclaims": [pvc("c", "v1")]}, 'persistentvolume "v1" not found'),
        (
            ("c",),
            {"persistentvolumeclaims": [pvc("c")]},
            "PersistentVolumeClaim had no pv name and storageClass name",
        ),
        (
            ("c",),
            {"persistentvolumeclaims": [pvc("c", sc="fast")]},
            'storageclass.storage.k8s.io "fast" not found',
        ),
        (
            ("c",),
            {"persistentvolumeclaims": [pvc("c", sc="fast")], "storageclasses": [sc("fast", None)]},
            'VolumeBindingMode not set for StorageClass "fast"',
        ),
        (
            ("c",),
            {
                "persistentvolumeclaims": [pvc("c", sc="fast")],
                "storageclasses": [sc("fast", "Immediate")],
            },
            "PersistentVolume had no name",
        ),
    ],
)
def test_pre_filter_rejections(
    claims: tuple[str, ...], objects: dict[str, list[dict[str, Any]]], reason: str
) -> None:
    _, st = plugin(objects).pre_filter(CycleState(), claim_pod(*claims), [])
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == [reason]


@pytest.mark.parametrize(
    "objects",
    [
        {},  # no claims at all
        {"persistentvolumeclaims": [pvc("c", sc="wait")], "storageclasses": [sc("wait")]},
        {"persistentvolumeclaims": [pvc("c", "v1")], "persistentvolumes": [pv("v1")]},
    ],
)
def test_pre_filter_skips(objects: dict[str, list[dict[str, Any]]]) -> None:
    p = claim_pod("c") if objects else claim_pod()
    _, st = plugin(objects).pre_filter(CycleState(), p, [])
    assert st is not None and st.code == Code.SKIP


def test_beta_storage_class_annotation_wins() -> None:
    claim = pvc("c", sc="immediate")
    claim["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "wait"}
    objects = {
        "persistentvolumeclaims": [claim],
        "storageclasses": [sc("wait"), sc("immediate", "Immediate")],
    }
    _, st = plugin(objects).pre_filter(CycleState(), claim_pod("c"), [])
    assert st is not None and st.code == Code.SKIP


def test_label_zones_to_set() -> None:
    assert label_zones_to_set("a") == {"a"}
    assert label_zones_to_set(" a__b ") == {"a", "b"}
    assert label_zones_to_set("a____b") is None


def test_events_and_hints() -> None:
    pl = plugin({})
    reg = {e.event.resource: e for e in pl.events_to_register()}
    assert reg[EventResource.NODE].event.action == ActionType.ADD | ActionType.UPDATE_NODE_LABEL
    assert reg[EventResource.STORAGE_CLASS].event.action == ActionType.ADD
    p = claim_pod("c")

    sc_hint = reg[EventResource.STORAGE_CLASS].hint
    assert sc_hint is not None
    assert sc_hint(p, None, sc("x")) is QueueingHint.QUEUE
    assert sc_hint(p, None, sc("x", "Immediate")) is QueueingHint.SKIP

    pvc_hint = reg[EventResource.PERSISTENT_VOLUME_CLAIM].hint
    assert pvc_hint is not None
    assert pvc_hint(p, None, pvc("c")) is QueueingHint.QUEUE
    assert pvc_hint(p, None, pvc("d")) is QueueingHint.SKIP

    pv_hint = reg[EventResource.PERSISTENT_VOLUME].hint
    assert pv_hint is not None
    assert pv_hint(p, None, pv("v")) is QueueingHint.QUEUE
    old = pv("v", **{LABEL_ZONE: "a"})
    assert pv_hint(p, old, pv("v", **{LABEL_ZONE: "b"})) is QueueingHint.QUEUE
    assert pv_hint(p, old, pv("v", **{LABEL_ZONE: "a"}, other="x")) is QueueingHint.SKIP
