from __future__ import annotations

from typing import Any

import pytest

from kscheduler.framework import Code, CycleState, EventResource, QueueingHint
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.types import NodeInfo, PodInfo
from kscheduler.plugins.node_volume_limits import (
    ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,
    MIGRATED_PLUGINS_ANNOTATION,
    NodeVolumeLimits,
    volume_limits,
)

from ..builders import node, pod
from ..fakes import FakeObjects

DRIVER = "csi.example.com"


def claim_pod(
    name: str, *claims: str, uid: str = "", extra: list[dict[str, Any]] | None = None
) -> PodInfo:
    b = pod(name)
    if uid:
        b.uid(uid)
    raw = b.raw()
    raw["spec"]["volumes"] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ] + list(extra or ())
    info = parse_pod(raw)
    assert info.parse_error is None
    return info


def pvc(name: str, volume: str = "", sc: str = "", owner: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": "x", "uid": owner, "controller": True}]
    spec: dict[str, Any] = {}
    if volume:
        spec["volumeName"] = volume
    if sc:
        spec["storageClassName"] = sc
    return {"metadata": meta, "spec": spec}


def csi_pv(name: str, driver: str = DRIVER, handle: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"csi": {"driver": driver, "volumeHandle": handle or f"h-{name}"}},
    }


def csi_node(
    name: str, limits: dict[str, int | None], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    drivers = []
    for driver, count in limits.items():
        d: dict[str, Any] = {"name": driver, "nodeID": name}
        if count is not None:
            d["allocatable"] = {"count": count}
        drivers.append(d)
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"drivers": drivers},
    }


def base_objects(**extra: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    objects: dict[str, list[dict[str, Any]]] = {
        "persistentvolumeclaims": [pvc(f"c{i}", f"pv{i}") for i in range(1, 6)],
        "persistentvolumes": [csi_pv(f"pv{i}") for i in range(1, 6)],
        "csinodes": [csi_node("n", {DRIVER: 2})],
    }
    for k, v in extra.items():
        objects[k] = objects.get(k, []) + v
    return objects


def run(p: PodInfo, ni: NodeInfo, objects: dict[str, list[dict[str, Any]]]) -> Any:
    pl = NodeVolumeLimits(FakeObjects(objects))
    state = CycleState()
    _, st = pl.pre_filter(state, p, [ni])
    if st is not None:
        return st
    return pl.filter(state, p, ni)


@pytest.mark.parametrize(
    ("existing", "wanted", "fits"),
    [
        ((), ("c1", "c2"), True),
        ((), ("c1", "c2", "c3"), False),
        (("c1",), ("c2",), True),
        (("c1",), ("c2", "c3"), False),
        (("c1", "c2"), ("c3",), False),
        # a volume already on the node is not attached twice
        (("c1", "c2"), ("c1",), True),
        (("c1", "c2"), ("c2", "c1"), True),
        # the same claim twice in one pod is one volume
        ((), ("c1", "c1", "c2"), True),
    ],
)
def test_limit(existing: tuple[str, ...], wanted: tuple[str, ...], fits: bool) -> None:
    builder = node("n")
    if existing:
        builder.with_pods(claim_pod("e", *existing))
    st = run(claim_pod("p", *wanted), builder.build(), base_objects())
    if fits:
        assert st is None
    else:
        assert st is not None and st.code == Code.UNSCHEDULABLE
        assert st.reasons == [ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED]


def test_limits_are_per_driver() -> None:
    objects = base_objects(
        persistentvolumes=[csi_pv("other1", "other.example.com")],
        persistentvolumeclaims=[pvc("o1", "other1")],
    )
    objects["csinodes"] = [csi_node("n", {DRIVER: 1, "other.example.com": 1})]
    ni = node("n").with_pods(claim_pod("e", "c1")).build()
    assert run(claim_pod("p", "o1"), ni, objects) is None
    st = run(claim_pod("p", "c2"), ni, objects)
    assert st is not None and st.code == Code.UNSCHEDULABLE


@pytest.mark.parametrize(
    "csinodes",
    [
        [],  # no CSINode: no limits
        [csi_node("n", {DRIVER: None})],  # a driver without a count
        [csi_node("n", {"other.example.com": 0})],  # a limit for another driver only
        [csi_node("other-node", {DRIVER: 0})],
    ],
)
def test_unlimited(csinodes: list[dict[str, Any]]) -> None:
    objects = base_objects()
    objects["csinodes"] = csinodes
    assert run(claim_pod("p", "c1", "c2", "c3"), node("n").build(), objects) is None


def test_unbound_claim_counts_against_its_provisioner() -> None:
    objects = base_objects(
        persistentvolumeclaims=[pvc("new1", sc="fast"), pvc("new2", sc="fast")],
        storageclasses=[{"metadata": {"name": "fast"}, "provisioner": DRIVER}],
    )
    ni = node("n").with_pods(claim_pod("e", "c1")).build()
    assert run(claim_pod("p", "new1"), ni, objects) is None
    st = run(claim_pod("p", "new1", "new2"), ni, objects)
    assert st is not None and st.code == Code.UNSCHEDULABLE


def test_unbound_claim_without_class_is_not_counted() -> None:
    objects = base_objects(persistentvolumeclaims=[pvc("new1"), pvc("new2", sc="missing")])
    ni = node("n").with_pods(claim_pod("e", "c1", "c2")).build()
    assert run(claim_pod("p", "new1", "new2"), ni, objects) is None


def test_missing_claim_of_the_new_pod_is_unresolvable() -> None:
    st = run(claim_pod("p", "nope"), node("n").build(), base_objects())
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ['looking up PVC default/nope: persistentvolumeclaim "nope" not found']


def test_missing_claim_of_an_existing_pod_is_not_counted() -> None:
    ni = node("n").with_pods(claim_pod("e", "nope", "c1")).build()
    assert run(claim_pod("p", "c2"), ni, base_objects()) is None


def test_generic_ephemeral_volume() -> None:
    eph = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    objects = base_objects(
        persistentvolumeclaims=[pvc("p-scratch", "pv-eph", owner="uid-p")],
        persistentvolumes=[csi_pv("pv-eph")],
    )
    ni = node("n").with_pods(claim_pod("e", "c1")).build()
    assert run(claim_pod("p", uid="uid-p", extra=[eph]), ni, objects) is None
    st = run(claim_pod("p", "c2", uid="uid-p", extra=[eph]), ni, objects)
    assert st is not None and st.code == Code.UNSCHEDULABLE
    # a claim of that name that the pod does not own
    st = run(claim_pod("p", uid="someone-else", extra=[eph]), ni, objects)
    assert st is not None and st.code == Code.ERROR
    assert "(pod is not owner)" in st.message


def test_volume_attachments_count_volumes_still_attached() -> None:
    def va(pv: str, node_name: str = "n", attacher: str = DRIVER) -> dict[str, Any]:
        return {
            "metadata": {"name": f"va-{pv}"},
            "spec": {
                "attacher": attacher,
                "nodeName": node_name,
                "source": {"persistentVolumeName": pv},
            },
        }

    ni = node("n").with_pods(claim_pod("e", "c1")).build()
    # pv1 is used by a pod and attached: once; pv3 is still attached after its pod left
    objects = base_objects(volumeattachments=[va("pv1"), va("pv3")])
    st = run(claim_pod("p", "c2"), ni, objects)
    assert st is not None and st.code == Code.UNSCHEDULABLE
    for ignored in (va("pv3", node_name="other"), va("pv3", attacher=""), va("missing")):
        assert run(claim_pod("p", "c2"), ni, base_objects(volumeattachments=[ignored])) is None


def test_in_tree_volumes_count_as_their_csi_driver() -> None:
    ebs_driver = "ebs.csi.aws.com"
    ebs_pv = {"metadata": {"name": "ebs1"}, "spec": {"awsElasticBlockStore": {"volumeID": "vol-1"}}}
    inline = {"name": "inline", "awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-2"}}
    objects = base_objects(
        persistentvolumes=[ebs_pv, csi_pv("csi-ebs", ebs_driver, "vol-3")],
        persistentvolumeclaims=[pvc("e1", "ebs1"), pvc("e3", "csi-ebs")],
    )
    objects["csinodes"] = [csi_node("n", {ebs_driver: 2})]
    ni = node("n").with_pods(claim_pod("e", "e1")).build()
    assert run(claim_pod("p", extra=[inline]), ni, objects) is None
    st = run(claim_pod("p", "e3", extra=[inline]), ni, objects)
    assert st is not None and st.code == Code.UNSCHEDULABLE
    # without a CSINode nothing is migrated (and nothing is limited)
    objects["csinodes"] = []
    assert run(claim_pod("p", "e3", extra=[inline]), ni, objects) is None


def test_portworx_needs_the_migrated_plugins_annotation() -> None:
    px = "pxd.portworx.com"
    pvs = [
        {"metadata": {"name": f"px{i}"}, "spec": {"portworxVolume": {"volumeID": f"id{i}"}}}
        for i in (1, 2)
    ]
    objects = base_objects(
        persistentvolumes=pvs, persistentvolumeclaims=[pvc("x1", "px1"), pvc("x2", "px2")]
    )
    ni = node("n").with_pods(claim_pod("e", "x1")).build()
    objects["csinodes"] = [csi_node("n", {px: 1})]
    assert run(claim_pod("p", "x2"), ni, objects) is None
    annotations = {MIGRATED_PLUGINS_ANNOTATION: "kubernetes.io/portworx-volume"}
    objects["csinodes"] = [csi_node("n", {px: 1}, annotations)]
    st = run(claim_pod("p", "x2"), ni, objects)
    assert st is not None and st.code == Code.UNSCHEDULABLE


@pytest.mark.parametrize(
    ("volumes", "skip"),
    [
        ([], True),
        ([{"name": "e", "emptyDir": {}}], True),
        ([{"name": "c", "persistentVolumeClaim": {"claimName": "c1"}}], False),
        ([{"name": "e", "ephemeral": {"volumeClaimTemplate": {}}}], False),
        ([{"name": "g", "gcePersistentDisk": {"pdName": "d"}}], False),
        ([{"name": "f", "azureFile": {"shareName": "s", "secretName": "x"}}], False),
    ],
)
def test_pre_filter(volumes: list[dict[str, Any]], skip: bool) -> None:
    p = claim_pod("p", extra=volumes)
    _, st = NodeVolumeLimits(FakeObjects()).pre_filter(CycleState(), p, [])
    assert (st is not None and st.code == Code.SKIP) is skip


def test_volume_limits() -> None:
    assert volume_limits(None) == {}
    assert volume_limits(csi_node("n", {"a": 3, "b": None})) == {"a": 3}


def test_hints() -> None:
    pl = NodeVolumeLimits(FakeObjects())
    hints = {(e.event.resource, e.event.action): e.hint for e in pl.events_to_register()}
    assert len(hints) == 4
    p = claim_pod("p", "c1")
    csi_update = next(h for (r, _), h in hints.items() if r is EventResource.CSI_NODE and h)
    old = csi_node("n", {DRIVER: 2})
    assert csi_update(p, old, csi_node("n", {DRIVER: 3})) is QueueingHint.QUEUE
    assert csi_update(p, old, csi_node("n", {DRIVER: 2})) is QueueingHint.SKIP
    assert csi_update(p, old, csi_node("n", {DRIVER: 2, "new": 1})) is QueueingHint.QUEUE

    pod_deleted = next(h for (r, _), h in hints.items() if r is EventResource.POD)
    assert pod_deleted is not None
    bound = claim_pod("d", "c9").with_node("n")
    assert pod_deleted(p, bound, None) is QueueingHint.QUEUE
    assert pod_deleted(p, claim_pod("d", "c9"), None) is QueueingHint.SKIP  # never placed
    assert pod_deleted(p, claim_pod("d").with_node("n"), None) is QueueingHint.SKIP

    claim_added = next(
        h for (r, _), h in hints.items() if r is EventResource.PERSISTENT_VOLUME_CLAIM
    )
    assert claim_added is not None
    assert claim_added(p, None, pvc("c1")) is QueueingHint.QUEUE
    assert claim_added(p, None, pvc("c2")) is QueueingHint.SKIP


def csi_driver(name: str, prevent: bool | None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if prevent is not None:
        spec["preventPodSchedulingIfMissing"] = prevent
    return {"metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("drivers", "csinodes", "scaling", "message"),
    [
        # the driver opts in and the node lacks it (no CSINode, or one without it)
        ([csi_driver(DRIVER, True)], [], True, f"{DRIVER} CSI driver is not installed on the node"),
        (
            [csi_driver(DRIVER, True)],
            [csi_node("n", {"other.example.com": 5})],
            True,
            f"{DRIVER} CSI driver is not installed on the node",
        ),
        # the node has it
        ([csi_driver(DRIVER, True)], [csi_node("n", {DRIVER: None})], True, None),
        # no opt-in, or no CSIDriver object: counts as installed
        ([csi_driver(DRIVER, False)], [], True, None),
        ([csi_driver(DRIVER, None)], [], True, None),
        ([], [], True, None),
        # VolumeLimitScaling off: no check
        ([csi_driver(DRIVER, True)], [], False, None),
    ],
)
def test_driver_must_be_installed(
    drivers: list[dict[str, Any]],
    csinodes: list[dict[str, Any]],
    scaling: bool,
    message: str | None,
) -> None:
    objects = base_objects()
    objects["csinodes"] = csinodes
    objects["csidrivers"] = drivers
    pl = NodeVolumeLimits(FakeObjects(objects), volume_limit_scaling=scaling)
    p = claim_pod("p", "c1")
    ni = node("n").build()
    state = CycleState()
    _, st = pl.pre_filter(state, p, [ni])
    assert st is None
    got = pl.filter(state, p, ni)
    if message is None:
        assert got is None
    else:
        assert got is not None and got.code == Code.UNSCHEDULABLE and got.reasons == [message]
