from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from kscheduler.framework import Code, CycleState, EventResource, QueueingHint
from kscheduler.framework.args import ConfigError
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.shape import UtilizationShapePoint
from kscheduler.framework.types import NodeInfo, PodInfo
from kscheduler.plugins import volume_binding
from kscheduler.plugins.volume_binding import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_NOT_ENOUGH_SPACE,
    ERR_REASON_PV_NOT_EXIST,
    ERR_UNBOUND_IMMEDIATE_CLAIMS,
    VolumeBinding,
    VolumeBindingArgs,
    parse_args,
)

from ..builders import node, pod
from ..fakes import FakeObjects

ZONE = "topology.kubernetes.io/zone"
PVCS, PVS, SCS = "persistentvolumeclaims", "persistentvolumes", "storageclasses"


# ---- builders ----------------------------------------------------------------------------
def claim_pod(*claims: str, name: str = "p", extra: list[dict[str, Any]] | None = None) -> PodInfo:
    raw = pod(name).raw()
    raw["spec"]["volumes"] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ] + list(extra or ())
    info = parse_pod(raw)
    assert info.parse_error is None
    return info


def pvc(
    name: str,
    *,
    sc: str | None = "wait",
    storage: str = "1Gi",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    volume: str = "",
    bound: bool = False,
    annotations: dict[str, str] | None = None,
    selector: dict[str, Any] | None = None,
) -> dict[str, Any]:
    ann = dict(annotations or {})
    if bound:
        ann[ANN_BIND_COMPLETED] = "yes"
    spec: dict[str, Any] = {
        "accessModes": list(modes),
        "resources": {"requests": {"storage": storage}},
    }
    if sc is not None:
        spec["storageClassName"] = sc
    if volume:
        spec["volumeName"] = volume
    if selector is not None:
        spec["selector"] = selector
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "annotations": ann,
        },
        "spec": spec,
        "status": {"phase": "Bound" if bound else "Pending"},
    }


def pv(
    name: str,
    *,
    sc: str = "wait",
    storage: str = "1Gi",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    phase: str = "Available",
    zone: str | None = None,
    claim: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "storageClassName": sc,
        "capacity": {"storage": storage},
        "accessModes": list(modes),
        "csi": {"driver": "csi.example.com", "volumeHandle": name},
    }
    if zone is not None:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}
                ]
            }
        }
    if claim is not None:
        spec["claimRef"] = {"namespace": "default", "name": claim}
    return {
        "metadata": {"name": name, "resourceVersion": "1", "labels": dict(labels or {})},
        "spec": spec,
        "status": {"phase": phase},
    }


def storage_class(
    name: str = "wait",
    *,
    mode: str | None = "WaitForFirstConsumer",
    provisioner: str = "kubernetes.io/no-provisioner",
    zones: list[str] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"name": name}, "provisioner": provisioner}
    if mode is not None:
        out["volumeBindingMode"] = mode
    if zones is not None:
        out["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]
    return out


# ---- fakes -------------------------------------------------------------------------------
class FakeSnapshot:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.nodes = {n.name: n for n in nodes}

    def get(self, name: str) -> NodeInfo | None:
        return self.nodes.get(name)


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


class ApiServer:
    """Applies updates (PUT) and merge patches to the objects (which double as the
    informer view); refuses writes to a status subresource."""

    def __init__(self, objects: FakeObjects) -> None:
        self.objects = objects
        self.requests: list[tuple[str, str, Any, str | None]] = []
        self.rv = 100
        #: Called after each write with (kind, object): a stand-in for controllers.
        self.on_write: Callable[[str, dict[str, Any]], None] | None = None

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None
    ) -> Any:
        self.requests.append((method, path, copy.deepcopy(body), content_type))
        parts = path.strip("/").split("/")
        if parts[-1] == "status":
            raise PermissionError(f"{method} {path}: forbidden")
        if parts[2] == "persistentvolumes":
            kind, ns, name = PVS, "", parts[3]
        else:
            kind, ns, name = PVCS, parts[3], parts[5]
        obj = self.objects.get(kind, ns, name)
        if obj is None:
            raise LookupError(f'{kind} "{name}" not found')
        want = (body.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != obj["metadata"]["resourceVersion"]:
            raise RuntimeError(f'Operation cannot be fulfilled on {kind} "{name}": conflict')
        patch = copy.deepcopy(body)
        (patch.get("metadata") or {}).pop("resourceVersion", None)
        if method == "PUT":
            obj.clear()
            obj.update(patch)
        else:
            merge(obj, patch)
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if self.on_write is not None:
            self.on_write(kind, obj)
        return copy.deepcopy(obj)


class Env:
    def __init__(
        self,
        objects: dict[str, list[dict[str, Any]]],
        nodes: list[NodeInfo] | None = None,
        args: VolumeBindingArgs | None = None,
    ) -> None:
        self.objects = FakeObjects(objects)
        self.api = ApiServer(self.objects)
        self.nodes = nodes or [
            node("n1").label(ZONE, "a").build(),
            node("n2").label(ZONE, "b").build(),
        ]
        self.snapshot = FakeSnapshot(self.nodes)
        self.plugin = VolumeBinding(
            self.objects,  # type: ignore[arg-type]
            self.snapshot,  # type: ignore[arg-type]
            self.api,  # type: ignore[arg-type]
            args or VolumeBindingArgs(),
        )

    def cycle(self, p: PodInfo) -> tuple[CycleState, Any, dict[str, Any]]:
        """PreFilter, then Filter on every node: (state, PreFilter status, node -> status)."""
        state = CycleState()
        _, st = self.plugin.pre_filter(state, p, self.nodes)
        if st is not None:
            return state, st, {}
        return state, None, {n.name: self.plugin.filter(state, p, n) for n in self.nodes}


def reasons(st: Any) -> list[str]:
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE, st
    return list(st.reasons)


# ---- PreFilter -------------------------------------------------------------------------
def test_pre_filter_skips_pods_without_claims() -> None:
    env = Env({})
    state, st, _ = env.cycle(claim_pod(extra=[{"name": "e", "emptyDir": {}}]))
    assert st is not None and st.code == Code.SKIP
    # Reserve and PreBind have nothing to do
    assert env.plugin.reserve(state, claim_pod(), "n1") is None


@pytest.mark.parametrize(
    ("claims", "extra", "objects", "reason"),
    [
        (("c",), None, {}, 'persistentvolumeclaim "c" not found'),
        (
            (),
            [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}],
            {},
            "waiting for ephemeral volume controller to create the persistentvolumeclaim "
            '"p-scratch"',
        ),
        (
            ("c",),
            None,
            {PVCS: [dict(pvc("c", volume="gone"), status={"phase": "Lost"})]},
            'persistentvolumeclaim "c" bound to non-existent persistentvolume "gone"',
        ),
        (
            ("c",),
            None,
            {PVCS: [pvc("c")]},
            # no class "wait": immediate binding, and not bound yet
            ERR_UNBOUND_IMMEDIATE_CLAIMS,
        ),
        (
            ("c",),
            None,
            {PVCS: [pvc("c", sc="fast")], SCS: [storage_class("fast", mode="Immediate")]},
            ERR_UNBOUND_IMMEDIATE_CLAIMS,
        ),
        (
            ("c",),
            None,
            # pre-bound by name but not bound yet: waits for the PV controller
            {PVCS: [pvc("c", volume="v1")], SCS: [storage_class()], PVS: [pv("v1")]},
            ERR_UNBOUND_IMMEDIATE_CLAIMS,
        ),
        (("c",), None, {PVCS: [pvc("c", sc=None)]}, ERR_UNBOUND_IMMEDIATE_CLAIMS),
    ],
)
def test_pre_filter_rejections(
    claims: tuple[str, ...],
    extra: list[dict[str, Any]] | None,
    objects: dict[str, list[dict[str, Any]]],
    reason: str,
) -> None:
    _, st, _ = Env(objects).cycle(claim_pod(*claims, extra=extra))
    assert reasons(st) == [reason]


def test_pre_filter_rejects_claims_being_deleted_and_foreign_ephemeral_claims() -> None:
    deleting = pvc("c")
    deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    _, st, _ = Env({PVCS: [deleting]}).cycle(claim_pod("c"))
    assert reasons(st) == ['persistentvolumeclaim "c" is being deleted']

    foreign = pvc("p-scratch")
    foreign["metadata"]["ownerReferences"] = [{"uid": "x", "controller": True}]
    eph = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]
    _, st, _ = Env({PVCS: [foreign]}).cycle(claim_pod(extra=eph))
    assert reasons(st) == [
        "PVC default/p-scratch was not created for pod default/p (pod is not owner)"
    ]


def test_class_without_binding_mode_is_an_error() -> None:
    _, st, _ = Env({PVCS: [pvc("c")], SCS: [storage_class(mode=None)]}).cycle(claim_pod("c"))
    assert st is not None and st.code == Code.ERROR
    assert st.message == 'VolumeBindingMode not set for StorageClass "wait"'


# ---- Filter ------------------------------------------------------------------------------
def test_bound_claims_check_volume_node_affinity() -> None:
    objects = {
        PVCS: [pvc("c", volume="v1", bound=True), pvc("d", volume="gone", bound=True)],
        PVS: [pv("v1", zone="a")],
    }
    env = Env(objects)
    _, st, by_node = env.cycle(claim_pod("c"))
    assert st is None
    assert by_node["n1"] is None
    assert reasons(by_node["n2"]) == [ERR_REASON_NODE_CONFLICT]
    _, _, by_node = env.cycle(claim_pod("d"))
    assert reasons(by_node["n1"]) == [ERR_REASON_PV_NOT_EXIST]


@pytest.mark.parametrize(
    ("claim", "volumes", "expected"),
    [
        # node affinity: only n1 is in zone a
        (pvc("c"), [pv("v1", zone="a")], {"n1": "v1", "n2": None}),
        (pvc("c"), [pv("v1")], {"n1": "v1", "n2": "v1"}),
        # the smallest volume that fits
        (pvc("c"), [pv("big", storage="10Gi"), pv("small", storage="2Gi")], {"n1": "small"}),
        (pvc("c", storage="5Gi"), [pv("small", storage="2Gi")], {"n1": None}),
        (pvc("c", storage="1.5Gi"), [pv("v", storage="1536Mi")], {"n1": "v"}),
        # phase, class, access modes, volume mode, selector, claimed volumes
        (pvc("c"), [pv("v1", phase="Pending")], {"n1": None}),
        (pvc("c"), [pv("v1", sc="other")], {"n1": None}),
        (pvc("c", modes=("ReadWriteMany",)), [pv("v1")], {"n1": None}),
        (
            pvc("c", modes=("ReadWriteOnce", "ReadOnlyMany")),
            [pv("v1", modes=("ReadOnlyMany", "ReadWriteOnce", "ReadWriteMany"))],
            {"n1": "v1"},
        ),
        (pvc("c"), [dict(pv("v1"), spec=dict(pv("v1")["spec"], volumeMode="Block"))], {"n1": None}),
        (pvc("c", selector={"matchLabels": {"tier": "gold"}}), [pv("v1")], {"n1": None}),
        (
            pvc("c", selector={"matchLabels": {"tier": "gold"}}),
            [pv("v1"), pv("v2", labels={"tier": "gold"})],
            {"n1": "v2"},
        ),
        (pvc("c"), [pv("v1", claim="someone-else")], {"n1": None}),
        # a volume pre-bound to the claim wins over a smaller free one, even if Pending
        (
            pvc("c"),
            [pv("free", storage="1Gi"), pv("mine", storage="5Gi", claim="c", phase="Pending")],
            {"n1": "mine"},
        ),
        # ... but when its node affinity rejects the node nothing else is tried there
        (
            pvc("c"),
            [pv("free"), pv("mine", claim="c", zone="a")],
            {"n1": "mine", "n2": None},
        ),
    ],
)
def test_static_matching(
    claim: dict[str, Any], volumes: list[dict[str, Any]], expected: dict[str, str | None]
) -> None:
    env = Env({PVCS: [claim], PVS: volumes, SCS: [storage_class()]})
    state, st, by_node = env.cycle(claim_pod("c"))
    assert st is None
    for node_name, want in expected.items():
        if want is None:
            assert reasons(by_node[node_name]) == [ERR_REASON_BIND_CONFLICT]
            continue
        assert by_node[node_name] is None
        chosen = state.get(volume_binding.STATE_KEY).by_node[node_name]
        assert [v.name for _, v in chosen.static] == [want]
        assert chosen.dynamic == []


def test_claims_are_matched_smallest_first_without_sharing_a_volume() -> None:
    objects = {
        PVCS: [pvc("big", storage="5Gi"), pvc("small", storage="1Gi")],
        PVS: [pv("v5", storage="5Gi"), pv("v10", storage="10Gi")],
        SCS: [storage_class()],
    }
    env = Env(objects)
    state, _, by_node = env.cycle(claim_pod("big", "small"))
    assert by_node["n1"] is None
    chosen = state.get(volume_binding.STATE_KEY).by_node["n1"]
    assert sorted((c.name, v.name) for c, v in chosen.static) == [("big", "v10"), ("small", "v5")]


@pytest.mark.parametrize(
    ("sc", "expected"),
    [
        (storage_class(provisioner="csi.example.com"), {"n1": True, "n2": True}),
        (storage_class(provisioner="csi.example.com", zones=["b"]), {"n1": False, "n2": True}),
        (storage_class(), {"n1": False, "n2": False}),  # no-provisioner
        (storage_class(provisioner=""), {"n1": False, "n2": False}),
    ],
)
def test_dynamic_provisioning(sc: dict[str, Any], expected: dict[str, bool]) -> None:
    env = Env({PVCS: [pvc("c")], SCS: [sc]})
    state, st, by_node = env.cycle(claim_pod("c"))
    assert st is None
    for node_name, ok in expected.items():
        if ok:
            assert by_node[node_name] is None
            chosen = state.get(volume_binding.STATE_KEY).by_node[node_name]
            assert [c.name for c in chosen.dynamic] == ["c"]
        else:
            assert reasons(by_node[node_name]) == [ERR_REASON_BIND_CONFLICT]


def csi_driver(name: str = "csi.example.com", capacity: bool | None = True) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if capacity is not None:
        spec["storageCapacity"] = capacity
    return {"metadata": {"name": name}, "spec": spec}


def storage_capacity(
    name: str,
    *,
    zone: str | None = "a",
    sc: str = "wait",
    capacity: str | None = None,
    maximum: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "kube-system"},
        "storageClassName": sc,
    }
    if zone is not None:
        out["nodeTopology"] = {"matchLabels": {ZONE: zone}}
    if capacity is not None:
        out["capacity"] = capacity
    if maximum is not None:
        out["maximumVolumeSize"] = maximum
    return out


@pytest.mark.parametrize(
    ("driver", "capacities", "expected"),
    [
        # the driver does not ask for capacity tracking: no check
        (csi_driver(capacity=False), [], {"n1": True, "n2": True}),
        (csi_driver(capacity=None), [], {"n1": True, "n2": True}),
        (None, [], {"n1": True, "n2": True}),
        # it does: a capacity of the class reachable from the node must hold 1Gi
        (csi_driver(), [], {"n1": False, "n2": False}),
        (csi_driver(), [storage_capacity("a", capacity="2Gi")], {"n1": True, "n2": False}),
        (csi_driver(), [storage_capacity("a", capacity="512Mi")], {"n1": False, "n2": False}),
        # maximumVolumeSize wins over capacity
        (
            csi_driver(),
            [storage_capacity("a", capacity="10Gi", maximum="512Mi")],
            {"n1": False, "n2": False},
        ),
        (
            csi_driver(),
            [storage_capacity("a", capacity="512Mi", maximum="1Gi")],
            {"n1": True, "n2": False},
        ),
        # another class's capacity, or one without a topology, does not count
        (csi_driver(), [storage_capacity("a", sc="other", capacity="2Gi")], {"n1": False}),
        (csi_driver(), [storage_capacity("x", zone=None, capacity="2Gi")], {"n1": False}),
    ],
)
def test_storage_capacity(
    driver: dict[str, Any] | None, capacities: list[dict[str, Any]], expected: dict[str, bool]
) -> None:
    objects: dict[str, list[dict[str, Any]]] = {
        PVCS: [pvc("c")],
        SCS: [storage_class(provisioner="csi.example.com")],
        volume_binding.CAPACITIES: capacities,
        volume_binding.CSI_DRIVERS: [driver] if driver else [],
    }
    env = Env(objects)
    _, st, by_node = env.cycle(claim_pod("c"))
    assert st is None
    for node_name, ok in expected.items():
        if ok:
            assert by_node[node_name] is None
        else:
            assert reasons(by_node[node_name]) == [ERR_REASON_NOT_ENOUGH_SPACE]


def test_claim_with_a_selected_node_fits_only_that_node() -> None:
    claim = pvc("c", annotations={ANN_SELECTED_NODE: "n2"})
    env = Env({PVCS: [claim], SCS: [storage_class(provisioner="csi.example.com")]})
    _, _, by_node = env.cycle(claim_pod("c"))
    assert reasons(by_node["n1"]) == [ERR_REASON_BIND_CONFLICT]
    assert by_node["n2"] is None


def test_several_reasons_at_once() -> None:
    objects = {
        PVCS: [pvc("b", volume="v1", bound=True), pvc("u")],
        PVS: [pv("v1", zone="b", sc="")],
        SCS: [storage_class()],
    }
    _, _, by_node = Env(objects).cycle(claim_pod("b", "u"))
    assert reasons(by_node["n1"]) == [ERR_REASON_NODE_CONFLICT, ERR_REASON_BIND_CONFLICT]


def test_malformed_claims_are_errors() -> None:
    bad = pvc("c", selector={"matchExpressions": [{"key": "k", "operator": "Bogus"}]})
    _, _, by_node = Env({PVCS: [bad], PVS: [pv("v1")], SCS: [storage_class()]}).cycle(
        claim_pod("c")
    )
    st = by_node["n1"]
    assert st is not None and st.code == Code.ERROR
    assert st.message.startswith("error creating internal label selector for claim: default/c:")


# ---- Reserve / Unreserve -------------------------------------------------------------------
def test_reserved_volume_is_not_offered_to_another_claim_until_unreserved() -> None:
    objects = {PVCS: [pvc("c1"), pvc("c2")], PVS: [pv("v1")], SCS: [storage_class()]}
    env = Env(objects)
    p1 = claim_pod("c1", name="p1")
    state1, _, by_node = env.cycle(p1)
    assert by_node["n1"] is None
    assert env.plugin.reserve(state1, p1, "n1") is None

    p2 = claim_pod("c2", name="p2")
    _, _, by_node = env.cycle(p2)
    assert reasons(by_node["n1"]) == [ERR_REASON_BIND_CONFLICT]
    # a second pod of the same claim gets the same volume
    state3, _, by_node = env.cycle(claim_pod("c1", name="p3"))
    assert by_node["n1"] is None
    assert [v.name for _, v in state3.get(volume_binding.STATE_KEY).by_node["n1"].static] == ["v1"]

    env.plugin.unreserve(state1, p1, "n1")
    env.plugin.unreserve(state1, p1, "n1")  # idempotent
    _, _, by_node = env.cycle(p2)
    assert by_node["n1"] is None


def test_reserved_provisioning_pins_the_claim_to_the_node() -> None:
    env = Env({PVCS: [pvc("c")], SCS: [storage_class(provisioner="csi.example.com")]})
    p1 = claim_pod("c", name="p1")
    state1, _, _ = env.cycle(p1)
    assert env.plugin.reserve(state1, p1, "n2") is None
    _, _, by_node = env.cycle(claim_pod("c", name="p2"))
    assert reasons(by_node["n1"]) == [ERR_REASON_BIND_CONFLICT]
    assert by_node["n2"] is None
    env.plugin.unreserve(state1, p1, "n2")
    _, _, by_node = env.cycle(claim_pod("c", name="p2"))
    assert by_node["n1"] is None


# ---- PreBind -------------------------------------------------------------------------------
async def test_pre_bind_with_all_claims_bound_does_nothing() -> None:
    env = Env({PVCS: [pvc("c", volume="v1", bound=True)], PVS: [pv("v1")]})
    p = claim_pod("c")
    state, _, _ = env.cycle(p)
    assert env.plugin.reserve(state, p, "n1") is None
    assert await env.plugin.pre_bind(state, p, "n1") is None
    assert env.api.requests == []


def pv_controller(env: Env) -> Callable[[str, dict[str, Any]], None]:
    """A stand-in for the PV controller: once a volume names a claim, it completes the
    claim's side of the binding."""

    def complete(kind: str, obj: dict[str, Any]) -> None:
        ref = obj.get("spec", {}).get("claimRef")
        if kind != PVS or not ref:
            return
        claim = env.objects.get(PVCS, ref["namespace"], ref["name"])
        assert claim is not None
        claim["spec"]["volumeName"] = obj["metadata"]["name"]
        claim["metadata"].setdefault("annotations", {})[ANN_BIND_COMPLETED] = "yes"

    return complete


async def test_pre_bind_static_binding_writes_the_claim_ref_and_waits_for_the_controller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(volume_binding, "POLL_INTERVAL_SECONDS", 0.001)
    env = Env({PVCS: [pvc("c")], PVS: [pv("v1", storage="2Gi")], SCS: [storage_class()]})
    p = claim_pod("c")
    state, _, _ = env.cycle(p)
    assert env.plugin.reserve(state, p, "n1") is None
    env.api.on_write = pv_controller(env)
    assert await env.plugin.pre_bind(state, p, "n1") is None

    # one write, the volume's, as kube-scheduler: the PV controller does the rest
    ((method, path, body, _),) = env.api.requests
    assert (method, path) == ("PUT", "/api/v1/persistentvolumes/v1")
    assert body["metadata"]["resourceVersion"] == "1"
    assert body["metadata"]["annotations"] == {ANN_BOUND_BY_CONTROLLER: "yes"}
    assert body["spec"]["claimRef"] == {
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "namespace": "default",
        "name": "c",
        "uid": "uid-c",
        "resourceVersion": "1",
    }
    assert body["spec"]["capacity"] == {"storage": "2Gi"}  # the whole object is written
    # the next pod of the claim sees it bound
    _, st, by_node = env.cycle(claim_pod("c", name="p2"))
    assert st is None and by_node["n2"] is None


async def test_pre_bind_static_binding_waits_for_the_controller_until_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(volume_binding, "POLL_INTERVAL_SECONDS", 0.001)
    env = Env(
        {PVCS: [pvc("c")], PVS: [pv("v1")], SCS: [storage_class()]}, args=VolumeBindingArgs(0)
    )
    p = claim_pod("c")
    state, _, _ = env.cycle(p)
    assert env.plugin.reserve(state, p, "n1") is None
    st = await env.plugin.pre_bind(state, p, "n1")
    assert st is not None and st.code == Code.ERROR
    assert st.message == "binding volumes: timed out waiting for the condition"


async def test_pre_bind_static_binding_fails_when_the_controller_drops_the_claim_ref(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(volume_binding, "POLL_INTERVAL_SECONDS", 0.001)
    env = Env({PVCS: [pvc("c")], PVS: [pv("v1")], SCS: [storage_class()]})
    p = claim_pod("c")
    state, _, _ = env.cycle(p)
    assert env.plugin.reserve(state, p, "n1") is None
    env.api.on_write = lambda kind, obj: obj["spec"].pop("claimRef")
    st = await env.plugin.pre_bind(state, p, "n1")
    assert st is not None and st.code == Code.ERROR
    assert st.message == 'binding volumes: ClaimRef got reset for pv "v1"'


async def test_pre_bind_fails_on_a_conflict() -> None:
    env = Env({PVCS: [pvc("c")], PVS: [pv("v1")], SCS: [storage_class()]})
    p = claim_pod("c")
    state, _, _ = env.cycle(p)
    assert env.plugin.reserve(state, p, "n1") is None
    env.objects.get(PVS, "", "v1")["metadata"]["resourceVersion"] = "7"  # type: ignore[index]
    st = await env.plugin.pre_bind(state, p, "n1")
    assert st is not None and st.code == Code.ERROR
    assert "conflict" in st.message


async def test_pre_bind_provisioning_waits_for_the_provisioner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(volume_binding, "POLL_INTERVAL_SECONDS", 0.001)
    env = Env({PVCS: [pvc("c")], SCS: [storage_class(provisioner="csi.example.com")]})
    p = claim_pod("c")
    state, _, _ = env.cycle(p)
    assert env.plugin.reserve(state, p, "n1") is None

    def provisioner(kind: str, obj: dict[str, Any]) -> None:
        if kind != PVCS or obj["metadata"]["annotations"].get(ANN_SELECTED_NODE) != "n1":
            return
        env.objects.objects.setdefault(PVS, []).append(pv("pvc-c", sc="wait", zone="a"))
        obj["spec"]["volumeName"] = "pvc-c"
        obj["metadata"]["annotations"][ANN_BIND_COMPLETED] = "yes"

    env.api.on_write = provisioner
    assert await env.plugin.pre_bind(state, p, "n1") is None
    ((method, path, body, _),) = env.api.requests
    assert (method, path) == ("PUT", "/api/v1/namespaces/default/persistentvolumeclaims/c")
    assert body["metadata"]["resourceVersion"] == "1"
    assert body["metadata"]["annotations"] == {ANN_SELECTED_NODE: "n1"}
    assert body["spec"] == pvc("c")["spec"]


async def test_pre_bind_provisioning_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(volume_binding, "POLL_INTERVAL_SECONDS", 0.001)
    sc = storage_class(provisioner="csi.example.com")

    # nobody provisions: the wait times out
    env = Env({PVCS: [pvc("c")], SCS: [sc]}, args=VolumeBindingArgs(0))
    p = claim_pod("c")
    state, _, _ = env.cycle(p)
    assert env.plugin.reserve(state, p, "n1") is None
    st = await env.plugin.pre_bind(state, p, "n1")
    assert st is not None and st.code == Code.ERROR
    assert st.message == "binding volumes: timed out waiting for the condition"

    # the provisioner gives up: it removes the selected node
    env = Env({PVCS: [pvc("c")], SCS: [sc]})
    state, _, _ = env.cycle(p)
    assert env.plugin.reserve(state, p, "n1") is None
    env.api.on_write = lambda kind, obj: obj["metadata"]["annotations"].pop(ANN_SELECTED_NODE)
    st = await env.plugin.pre_bind(state, p, "n1")
    assert st is not None and st.code == Code.ERROR
    assert st.message == 'binding volumes: provisioning failed for PVC "c"'

    # the provisioned volume cannot be used from the node
    env = Env({PVCS: [pvc("c")], SCS: [sc]})
    state, _, _ = env.cycle(p)
    assert env.plugin.reserve(state, p, "n1") is None

    def wrong_zone(kind: str, obj: dict[str, Any]) -> None:
        env.objects.objects.setdefault(PVS, []).append(pv("pvc-c", zone="b"))
        obj["spec"]["volumeName"] = "pvc-c"

    env.api.on_write = wrong_zone
    st = await env.plugin.pre_bind(state, p, "n1")
    assert st is not None and st.code == Code.ERROR
    assert st.message.startswith('binding volumes: pv "pvc-c" node affinity doesn\'t match node')


# ---- args, events ----------------------------------------------------------------------------
def test_parse_args() -> None:
    # StorageCapacityScoring is on by default in 1.37: the default shape
    assert parse_args({}) == VolumeBindingArgs(600, volume_binding.DEFAULT_SHAPE)
    assert (
        UtilizationShapePoint(0, 10),
        UtilizationShapePoint(100, 0),
    ) == volume_binding.DEFAULT_SHAPE
    shape = [{"utilization": 0, "score": 0}, {"utilization": 80, "score": 10}]
    assert parse_args({"shape": shape}).shape == (
        UtilizationShapePoint(0, 0),
        UtilizationShapePoint(80, 10),
    )
    with pytest.raises(ConfigError, match=r"shape\[1\].utilization: values must be sorted"):
        parse_args({"shape": [{"utilization": 50, "score": 1}, {"utilization": 10, "score": 1}]})
    with pytest.raises(ConfigError, match=r"shape\[0\].score: not in valid range \[0, 10\]"):
        parse_args({"shape": [{"utilization": 50, "score": 11}]})
    # without the gate: no score, and a shape is refused
    off = {"capacity_scoring": False}
    assert parse_args({}, **off) == VolumeBindingArgs(600)
    assert parse_args({"bindTimeoutSeconds": 30, "shape": None}, **off) == VolumeBindingArgs(30)
    with pytest.raises(ConfigError, match="bindTimeoutSeconds: invalid BindTimeoutSeconds"):
        parse_args({"bindTimeoutSeconds": -1})
    with pytest.raises(ConfigError, match="shape: unexpected field `shape`"):
        parse_args({"shape": [{"utilization": 0, "score": 0}]}, **off)
    with pytest.raises(ConfigError, match="bindTimeoutSeconds: expected integer"):
        parse_args({"bindTimeoutSeconds": "10"})
    with pytest.raises(ConfigError, match="other: unknown field"):
        parse_args({"other": 1})


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        # static bindings: the chosen volume's size against the claim's request
        ({PVCS: [pvc("c", storage="1Gi")], PVS: [pv("v", storage="4Gi", zone="a")]}, 75),
        ({PVCS: [pvc("c", storage="1Gi")], PVS: [pv("v", storage="1Gi", zone="a")]}, 0),
        # provisioning: the CSIStorageCapacity that admitted the claim on the node
        (
            {
                PVCS: [pvc("c", storage="1Gi")],
                volume_binding.CSI_DRIVERS: [csi_driver()],
                volume_binding.CAPACITIES: [storage_capacity("a", capacity="10Gi")],
            },
            90,
        ),
        # provisioning with a driver that tracks no capacity: nothing to score
        ({PVCS: [pvc("c", storage="1Gi")]}, 0),
    ],
)
def test_capacity_score(objects: dict[str, list[dict[str, Any]]], expected: int) -> None:
    sc = storage_class() if PVS in objects else storage_class(provisioner="csi.example.com")
    env = Env({SCS: [sc], **objects}, args=parse_args({}))
    p = claim_pod("c")
    state, st, by_node = env.cycle(p)
    assert st is None and by_node["n1"] is None
    assert env.plugin.pre_score(state, p, env.nodes) is None
    assert env.plugin.score(state, p, env.nodes[0]) == (expected, None)


def test_capacity_score_is_skipped_without_the_gate_or_claims() -> None:
    env = Env({PVCS: [pvc("c")], PVS: [pv("v", zone="a")], SCS: [storage_class()]})
    p = claim_pod("c")
    state, _, _ = env.cycle(p)
    st = env.plugin.pre_score(state, p, env.nodes)  # VolumeBindingArgs(): no shape
    assert st is not None and st.code == Code.SKIP
    env = Env({}, args=parse_args({}))
    state = CycleState()
    no_claims = pod("plain").build()
    assert env.plugin.pre_filter(state, no_claims, env.nodes)[1] is not None
    st = env.plugin.pre_score(state, no_claims, env.nodes)
    assert st is not None and st.code == Code.SKIP


def test_events_and_hints() -> None:
    reg = {e.event.resource: e for e in Env({}).plugin.events_to_register()}
    assert set(reg) == {
        EventResource.STORAGE_CLASS,
        EventResource.PERSISTENT_VOLUME_CLAIM,
        EventResource.PERSISTENT_VOLUME,
        EventResource.NODE,
        EventResource.CSI_NODE,
        EventResource.CSI_DRIVER,
        EventResource.CSI_STORAGE_CAPACITY,
    }
    p = claim_pod("c", extra=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}])

    def hint(resource: EventResource, old: Any, new: Any) -> QueueingHint:
        fn = reg[resource].hint
        assert fn is not None
        return fn(p, old, new)

    assert hint(EventResource.PERSISTENT_VOLUME_CLAIM, None, pvc("c")) is QueueingHint.QUEUE
    assert hint(EventResource.PERSISTENT_VOLUME_CLAIM, None, pvc("p-scratch")) is QueueingHint.QUEUE
    assert hint(EventResource.PERSISTENT_VOLUME_CLAIM, None, pvc("x")) is QueueingHint.SKIP

    old_sc = storage_class(zones=["a"])
    assert hint(EventResource.STORAGE_CLASS, None, old_sc) is QueueingHint.QUEUE
    assert (
        hint(EventResource.STORAGE_CLASS, old_sc, storage_class(zones=["b"])) is QueueingHint.QUEUE
    )
    assert (
        hint(EventResource.STORAGE_CLASS, old_sc, storage_class(zones=["a"])) is QueueingHint.SKIP
    )

    cap = {"storageClassName": "wait", "capacity": "1Gi"}
    assert hint(EventResource.CSI_STORAGE_CAPACITY, None, cap) is QueueingHint.QUEUE
    bigger = dict(cap, capacity="2Gi")
    assert hint(EventResource.CSI_STORAGE_CAPACITY, cap, bigger) is QueueingHint.QUEUE
    assert hint(EventResource.CSI_STORAGE_CAPACITY, bigger, cap) is QueueingHint.SKIP

    ann = "storage.alpha.kubernetes.io/migrated-plugins"
    csinode = {"metadata": {"name": "n1", "annotations": {}}}
    migrated = {"metadata": {"name": "n1", "annotations": {ann: "kubernetes.io/gce-pd"}}}
    assert hint(EventResource.CSI_NODE, None, csinode) is QueueingHint.QUEUE
    assert hint(EventResource.CSI_NODE, csinode, migrated) is QueueingHint.QUEUE
    assert hint(EventResource.CSI_NODE, migrated, migrated) is QueueingHint.SKIP


def test_pre_bind_pre_flight() -> None:
    # every claim bound: nothing for PreBind to do
    env = Env({PVCS: [pvc("c", volume="v1", bound=True)], PVS: [pv("v1")]})
    p = claim_pod("c")
    state, _, _ = env.cycle(p)
    assert env.plugin.reserve(state, p, "n1") is None
    result, st = env.plugin.pre_bind_pre_flight(state, p, "n1")
    assert result is not None and result.allow_parallel
    assert st is not None and st.code == Code.SKIP
    # a volume to bind: PreBind has work (the pod's nominatedNodeName is written first)
    env = Env({PVCS: [pvc("c")], PVS: [pv("v1")], SCS: [storage_class()]})
    state, _, _ = env.cycle(p)
    assert env.plugin.reserve(state, p, "n1") is None
    assert env.plugin.pre_bind_pre_flight(state, p, "n1")[1] is None
    # without its cycle state
    _, st = env.plugin.pre_bind_pre_flight(CycleState(), p, "n1")
    assert st is not None and st.code == Code.ERROR
