from __future__ import annotations

from typing import Any

import pytest

from kscheduler.framework import ActionType, Code, CycleState, EventResource, QueueingHint
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.types import NodeInfo, PodInfo
from kscheduler.plugins.volume_restrictions import (
    ERR_REASON_DISK_CONFLICT,
    ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT,
    VolumeRestrictions,
)

from ..builders import PodBuilder, node, pod
from ..fakes import FakeObjects


class FakeSnapshot:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.nodes = nodes

    def is_pvc_used_by_pods(self, key: str) -> bool:
        return any(key in n.pvc_refs for n in self.nodes)


def with_volumes(b: PodBuilder, *volumes: dict[str, Any]) -> PodInfo:
    raw = b.raw()
    raw["spec"]["volumes"] = list(volumes)
    info = parse_pod(raw)
    assert info.parse_error is None
    return info


def claim_vol(claim: str) -> dict[str, Any]:
    return {"name": f"v-{claim}", "persistentVolumeClaim": {"claimName": claim}}


def pvc(name: str, *modes: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": list(modes or ("ReadWriteOnce",))},
    }


def gce(pd: str, ro: bool = False) -> dict[str, Any]:
    return {"name": "g", "gcePersistentDisk": {"pdName": pd, "readOnly": ro}}


def ebs(vid: str, ro: bool = False) -> dict[str, Any]:
    return {"name": "e", "awsElasticBlockStore": {"volumeID": vid, "readOnly": ro}}


def iscsi(iqn: str, ro: bool = False) -> dict[str, Any]:
    return {"name": "i", "iscsi": {"iqn": iqn, "targetPortal": "t", "lun": 0, "readOnly": ro}}


def rbd(monitors: list[str], image: str, pool: str = "rbd", ro: bool = False) -> dict[str, Any]:
    return {
        "name": "r",
        "rbd": {"monitors": monitors, "image": image, "pool": pool, "readOnly": ro},
    }


def plugin(nodes: list[NodeInfo], claims: list[dict[str, Any]] | None = None) -> VolumeRestrictions:
    return VolumeRestrictions(
        FakeObjects({"persistentvolumeclaims": claims or []}),
        FakeSnapshot(nodes),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("existing", "wanted", "conflict"),
    [
        (gce("a"), gce("a"), True),
        (gce("a", ro=True), gce("a"), True),
        (gce("a", ro=True), gce("a", ro=True), False),
        (gce("a"), gce("b"), False),
        (ebs("vol-1"), ebs("vol-1"), True),
        (ebs("vol-1", ro=True), ebs("vol-1", ro=True), True),
        (ebs("vol-1"), ebs("vol-2"), False),
        (iscsi("iqn.a"), iscsi("iqn.a"), True),
        (iscsi("iqn.a", ro=True), iscsi("iqn.a", ro=True), False),
        (iscsi("iqn.a"), iscsi("iqn.b"), False),
        (rbd(["m1", "m2"], "img"), rbd(["m2", "m3"], "img"), True),
        (rbd(["m1"], "img"), rbd(["m2"], "img"), False),
        (rbd(["m1"], "img"), rbd(["m1"], "other"), False),
        (rbd(["m1"], "img", pool="p1"), rbd(["m1"], "img", pool="p2"), False),
        (rbd(["m1"], "img", ro=True), rbd(["m1"], "img", ro=True), False),
        (gce("a"), ebs("a"), False),
    ],
)
def test_disk_conflicts(existing: dict[str, Any], wanted: dict[str, Any], conflict: bool) -> None:
    ni = node("n").with_pods(with_volumes(pod("e"), existing)).build()
    p = with_volumes(pod("p"), wanted)
    pl = plugin([ni])
    state = CycleState()
    assert pl.pre_filter(state, p, [ni]) == (None, None)
    st = pl.filter(state, p, ni)
    if conflict:
        assert st is not None and st.code == Code.UNSCHEDULABLE
        assert st.reasons == [ERR_REASON_DISK_CONFLICT]
    else:
        assert st is None


def test_pre_filter_skips_pods_without_restricted_volumes_or_claims_in_use() -> None:
    p = with_volumes(pod("p"), {"name": "x", "emptyDir": {}}, claim_vol("c"))
    pl = plugin([], [pvc("c", "ReadWriteOncePod")])
    _, st = pl.pre_filter(CycleState(), p, [])
    assert st is not None and st.code == Code.SKIP


def test_pre_filter_rejects_a_missing_claim() -> None:
    p = with_volumes(pod("p"), claim_vol("missing"))
    _, st = plugin([]).pre_filter(CycleState(), p, [])
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ['persistentvolumeclaim "missing" not found']


@pytest.mark.parametrize(
    ("modes", "used", "rejected"),
    [
        (("ReadWriteOncePod",), True, True),
        (("ReadWriteOncePod",), False, False),
        (("ReadWriteOnce",), True, False),
        (("ReadWriteMany", "ReadWriteOncePod"), True, True),
    ],
)
def test_read_write_once_pod(modes: tuple[str, ...], used: bool, rejected: bool) -> None:
    holder = with_volumes(pod("holder"), claim_vol("c"))
    n1 = node("n1").with_pods(holder).build() if used else node("n1").build()
    n2 = node("n2").build()
    p = with_volumes(pod("p"), claim_vol("c"), gce("disk"))
    pl = plugin([n1, n2], [pvc("c", *modes)])
    state = CycleState()
    assert pl.pre_filter(state, p, [n1, n2]) == (None, None)
    for ni in (n1, n2):  # every node, not only the holder's
        st = pl.filter(state, p, ni)
        if rejected:
            assert st is not None and st.code == Code.UNSCHEDULABLE
            assert st.reasons == [ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT]
        else:
            assert st is None


def test_claim_in_another_namespace_does_not_conflict() -> None:
    holder = with_volumes(pod("holder", "other"), claim_vol("c"))
    n1 = node("n1").with_pods(holder).build()
    p = with_volumes(pod("p"), claim_vol("c"))
    pl = plugin([n1], [pvc("c", "ReadWriteOncePod")])
    _, st = pl.pre_filter(CycleState(), p, [n1])
    assert st is not None and st.code == Code.SKIP


def test_add_and_remove_pod_adjust_the_conflict_count() -> None:
    holder = with_volumes(pod("holder"), claim_vol("c"))
    n1 = node("n1").with_pods(holder).build()
    p = with_volumes(pod("p"), claim_vol("c"))
    pl = plugin([n1], [pvc("c", "ReadWriteOncePod")])
    state = CycleState()
    assert pl.pre_filter(state, p, [n1]) == (None, None)
    simulated = state.clone()
    assert pl.remove_pod(simulated, p, holder, n1) is None
    assert pl.filter(simulated, p, n1) is None
    # the original state is untouched by the simulation
    st = pl.filter(state, p, n1)
    assert st is not None and st.code == Code.UNSCHEDULABLE
    assert pl.add_pod(simulated, p, holder, n1) is None
    st = pl.filter(simulated, p, n1)
    assert st is not None and st.code == Code.UNSCHEDULABLE


def test_filter_without_pre_filter_state_is_an_error() -> None:
    p = with_volumes(pod("p"), gce("a"))
    ni = node("n").build()
    st = plugin([ni]).filter(CycleState(), p, ni)
    assert st is not None and st.code == Code.ERROR


def test_events() -> None:
    events = {(e.event.resource, e.event.action) for e in plugin([]).events_to_register()}
    assert events == {
        (EventResource.POD, ActionType.DELETE),
        (EventResource.NODE, ActionType.ADD),
        (EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD),
    }


def _hint(resource: EventResource) -> Any:
    for e in plugin([]).events_to_register():
        if e.event.resource is resource:
            return e.hint
    raise AssertionError(resource)


@pytest.mark.parametrize(
    ("deleted", "expected"),
    [
        (with_volumes(pod("d"), gce("a")), QueueingHint.QUEUE),
        (with_volumes(pod("d"), gce("b")), QueueingHint.SKIP),
        (with_volumes(pod("d"), claim_vol("c")), QueueingHint.QUEUE),
        (with_volumes(pod("d", "other"), gce("a")), QueueingHint.SKIP),
        (with_volumes(pod("d"), claim_vol("x")), QueueingHint.SKIP),
    ],
)
def test_hint_pod_deleted(deleted: PodInfo, expected: QueueingHint) -> None:
    p = with_volumes(pod("p"), gce("a"), claim_vol("c"))
    assert _hint(EventResource.POD)(p, deleted, None) is expected


@pytest.mark.parametrize(
    ("added", "expected"),
    [
        (pvc("c"), QueueingHint.QUEUE),
        (pvc("x"), QueueingHint.SKIP),
        (pvc("c", namespace="other"), QueueingHint.SKIP),
    ],
)
def test_hint_claim_added(added: dict[str, Any], expected: QueueingHint) -> None:
    p = with_volumes(pod("p"), claim_vol("c"))
    assert _hint(EventResource.PERSISTENT_VOLUME_CLAIM)(p, None, added) is expected
