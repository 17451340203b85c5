"""Extended resources backed by DRA (DRAExtendedResource): the DeviceClass mapping,
the claim's requests per container, NodeResourcesFit's skip and DynamicResources'
claim from PreFilter to PreBind and its cleanup."""

from __future__ import annotations

import asyncio
from typing import Any

from kscheduler.framework import ActionType, Code, CycleState, EventResource, NodeToStatus
from kscheduler.framework import QueueingHint as QH
from kscheduler.framework.dra import (
    DEVICE_REPORT_KEY,
    extended_resource_classes,
    extended_resource_devices,
    extended_resource_requests,
    is_dra_extended_resource_name,
)
from kscheduler.plugins import balanced_allocation, node_resources_fit
from kscheduler.plugins.balanced_allocation import NodeResourcesBalancedAllocation
from kscheduler.plugins.dynamic_resources import (
    EXTENDED_CLAIM_NAME,
    EXTENDED_POD_CLAIM,
    MSG_DELETED,
    MSG_EXTENDED_CANNOT_FIT,
    MSG_EXTENDED_STALE,
    DynamicResources,
)
from kscheduler.plugins.node_resources_fit import (
    MSG_SIGNATURE_DRA,
    NodeResourcesFit,
    NodeResourcesFitArgs,
)

from ..builders import node, pod
from ..fakes import FakeObjects

GPU = "example.com/gpu"
DRIVER = "gpu.example.com"


def _class(
    name: str, ext: str | None = None, created: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}
    if ext:
        spec["extendedResourceName"] = ext
    return {
        "metadata": {"name": name, "resourceVersion": "1", "creationTimestamp": created},
        "spec": spec,
    }


def _slice(node_name: str, n: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node_name}-gpu", "uid": f"s-{node_name}", "resourceVersion": "1"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(n)],
        },
    }


# ---- mapping and requests ---------------------------------------------------------------------


def test_names_a_device_class_may_back() -> None:
    assert is_dra_extended_resource_name("example.com/gpu")
    assert is_dra_extended_resource_name("deviceclass.resource.kubernetes.io/gpu")
    for name in ("cpu", "hugepages-2Mi", "kubernetes.io/foo", "requests.example.com/gpu"):
        assert not is_dra_extended_resource_name(name)


def test_class_mapping_implicit_names_and_the_newest_explicit_one() -> None:
    old = _class("old", GPU, "2026-01-01T00:00:00Z")
    new = _class("new", GPU, "2026-01-02T00:00:00Z")
    same_b = _class("b", "example.com/tpu", "2026-01-01T00:00:00Z")
    same_a = _class("a", "example.com/tpu", "2026-01-01T00:00:00Z")
    m = extended_resource_classes([old, new, same_b, same_a])
    assert m[GPU] is new
    assert m["example.com/tpu"] is same_a  # same creation time: the smaller name
    assert m["deviceclass.resource.kubernetes.io/old"] is old
    assert m["deviceclass.resource.kubernetes.io/b"] is same_b
    assert extended_resource_classes([_class("plain")]) == {
        "deviceclass.resource.kubernetes.io/plain": _class("plain")
    }


def test_one_request_per_long_lived_container_sorted_by_name() -> None:
    spec = (
        pod("p")
        .container({"cpu": "1", GPU: "2"}, name="a")
        .container({GPU: "1", "example.com/aaa": "1"}, name="b")
        .raw()["spec"]
    )
    classes = {GPU: _class("gpu")}
    reqs, maps = extended_resource_requests(spec, [GPU], classes)
    assert reqs == [
        {
            "name": "container-0-request-1",  # GPU sorts after cpu in container a
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2},
        },
        {
            "name": "container-1-request-1",
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1},
        },
    ]
    assert maps == [
        {"containerName": "a", "resourceName": GPU, "requestName": "container-0-request-1"},
        {"containerName": "b", "resourceName": GPU, "requestName": "container-1-request-1"},
    ]


def test_init_containers_reuse_later_requests_and_share_the_largest() -> None:
    builder = pod("p")
    builder.init(**{GPU: "3"})  # i0: reuses c0's 2, asks 1 more
    builder.init(**{GPU: "4"})  # i1: reuses c0's 2, asks 2 more: the largest
    builder.init(**{GPU: "1"})  # i2: c0's 2 are enough
    builder.container({GPU: "2"}, name="c0")
    spec = builder.raw()["spec"]
    reqs, maps = extended_resource_requests(spec, [GPU], {GPU: _class("gpu")})
    assert [(r["name"], r["exactly"]["count"]) for r in reqs] == [
        ("container-1-request-0", 2),
        ("container-3-request-0", 2),
    ]
    assert maps == [
        {"containerName": "c0", "resourceName": GPU, "requestName": "container-3-request-0"},
        {"containerName": "i0", "resourceName": GPU, "requestName": "container-3-request-0"},
        {"containerName": "i0", "resourceName": GPU, "requestName": "container-1-request-0"},
        {"containerName": "i1", "resourceName": GPU, "requestName": "container-3-request-0"},
        {"containerName": "i1", "resourceName": GPU, "requestName": "container-1-request-0"},
        {"containerName": "i2", "resourceName": GPU, "requestName": "container-3-request-0"},
    ]


def test_a_sidecar_is_long_lived() -> None:
    builder = pod("p")
    builder.sidecar(**{GPU: "1"})
    builder.container({GPU: "1"}, name="c0")
    reqs, _ = extended_resource_requests(builder.raw()["spec"], [GPU], {GPU: _class("gpu")})
    assert [r["name"] for r in reqs] == ["container-0-request-0", "container-1-request-0"]


# ---- NodeResourcesFit ------------------------------------------------------------------------


class _Handle:
    def __init__(self, objects: FakeObjects, client: Any = None) -> None:
        self.objects = objects
        self.client = client


def test_fit_skips_a_backed_resource_on_nodes_without_it() -> None:
    objects = FakeObjects({"deviceclasses": [_class("gpu", GPU)]})
    fit = NodeResourcesFit(NodeResourcesFitArgs(), _Handle(objects))  # type: ignore[arg-type]
    p = pod("p").container({"cpu": "1", GPU: "2"}).build()
    plain = node("plain").alloc(cpu="4", pods=10).build()
    plugin_node = node("dp").alloc(cpu="4", pods=10, **{GPU: "1"}).build()
    state = CycleState()
    fit.pre_filter(state, p, [])
    assert fit.filter(state, p, plain) is None
    st = fit.filter(state, p, plugin_node)  # the node advertises it: checked as usual
    assert st is not None and st.reasons == [f"Insufficient {GPU}"]
    other = pod("o").container({"cpu": "1", "example.com/fpga": "1"}).build()
    state = CycleState()
    fit.pre_filter(state, other, [])
    st = fit.filter(state, other, plain)
    assert st is not None and st.reasons == ["Insufficient example.com/fpga"]
    assert fit.sign_pod(p)[1] == fit.sign_pod(p)[1]
    sign_status = fit.sign_pod(p)[1]
    assert sign_status is not None and sign_status.message == MSG_SIGNATURE_DRA
    assert fit.sign_pod(other)[1] is None
    without = NodeResourcesFit(NodeResourcesFitArgs(), _Handle(FakeObjects()))  # type: ignore[arg-type]
    state = CycleState()
    without.pre_filter(state, p, [])
    st = without.filter(state, p, plain)
    assert st is not None and st.reasons == [f"Insufficient {GPU}"]


def test_fit_device_class_hint() -> None:
    fit = NodeResourcesFit(NodeResourcesFitArgs())
    reg = fit.events_to_register()[2]
    assert reg.event.resource is EventResource.DEVICE_CLASS
    assert reg.hint is not None
    p = pod("p").container({GPU: "1", "deviceclass.resource.kubernetes.io/fpga": "1"}).build()
    assert reg.hint(p, None, _class("other", GPU)) is QH.QUEUE
    assert reg.hint(p, None, _class("fpga")) is QH.QUEUE
    assert reg.hint(p, None, _class("other")) is QH.SKIP
    assert reg.hint(p, _class("other", GPU), _class("other", GPU)) is QH.SKIP
    assert reg.hint(p, _class("other"), _class("other", GPU)) is QH.QUEUE
    assert reg.hint(p, _class("fpga"), _class("fpga", "example.com/x")) is QH.SKIP


# ---- DynamicResources ------------------------------------------------------------------------


class _Client:
    """Answers the writes PreBind and the cleanup make, and records them."""

    def __init__(self, objects: FakeObjects) -> None:
        self.objects = objects
        self.calls: list[tuple[str, str, Any]] = []

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None
    ) -> Any:
        self.calls.append((method, path, body))
        if method == "POST":
            created = {**body, "metadata": {**body["metadata"], "name": "p-extended-resources-x"}}
            created["metadata"]["uid"] = "real-uid"
            created["metadata"]["resourceVersion"] = "5"
            # the informer sees it at once
            self.objects.objects.setdefault("resourceclaims", []).append(created)
            return created
        if method == "PUT":
            return {**body, "metadata": {**body["metadata"], "resourceVersion": "6"}}
        return {}


def _objects() -> FakeObjects:
    return FakeObjects(
        {
            "deviceclasses": [_class("gpu", GPU)],
            "resourceslices": [_slice("n1", 2), _slice("n2", 4)],
        }
    )


def _gpu_pod(count: str = "2") -> Any:
    return pod("p").uid("pod-uid").container({"cpu": "1", GPU: count}, name="main").build()


def test_claim_made_in_memory_allocated_and_written_in_prebind() -> None:
    objects = _objects()
    client = _Client(objects)
    pl = DynamicResources(_Handle(objects, client))  # type: ignore[arg-type]
    p = _gpu_pod("3")
    n1 = node("n1").alloc(cpu="4", pods=10).build()
    n2 = node("n2").alloc(cpu="4", pods=10).build()
    dp = node("dp").alloc(cpu="4", pods=10, **{GPU: "8"}).build()
    state = CycleState()
    assert pl.pre_filter(state, p, [n1, n2, dp]) == (None, None)
    st = pl.filter(state, p, n1)  # two devices: too few
    assert st is not None and st.message == "cannot allocate all claims"
    assert pl.filter(state, p, n2) is None
    assert pl.filter(state, p, dp) is None  # the device plugin serves it there
    assert pl.reserve(state, p, "n2") is None
    # the devices are taken for the next pod while in flight
    second = pod("q").uid("q-uid").container({GPU: "2"}).build()
    s2 = CycleState()
    pl.pre_filter(s2, second, [n2])
    st = pl.filter(s2, second, n2)
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert asyncio.run(pl.pre_bind(state, p, "n2")) is None
    methods = [(m, path) for m, path, _ in client.calls]
    assert methods == [
        ("POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"),
        (
            "PUT",
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/p-extended-resources-x",
        ),
        (
            "PUT",
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/"
            "p-extended-resources-x/status",
        ),
        ("PATCH", "/api/v1/namespaces/default/pods/p/status"),
    ]
    created = client.calls[0][2]
    meta = created["metadata"]
    assert "name" not in meta and "uid" not in meta
    assert meta["generateName"] == "p-extended-resources-"
    assert meta["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pod-uid", "controller": True}
    ]
    assert created["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-1",
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 3},
        }
    ]
    status = client.calls[2][2]["status"]
    assert [r["device"] for r in status["allocation"]["devices"]["results"]] == [
        "gpu-0",
        "gpu-1",
        "gpu-2",
    ]
    assert status["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "pod-uid"}]
    assert client.calls[3][2] == {
        "status": {
            "extendedResourceClaimStatus": {
                "requestMappings": [
                    {
                        "containerName": "main",
                        "resourceName": GPU,
                        "requestName": "container-0-request-1",
                    }
                ],
                "resourceClaimName": "p-extended-resources-x",
            }
        }
    }

    # binding failed after PreBind: Unreserve deletes the claim it created
    async def unreserve() -> None:
        pl.unreserve(state, p, "n2")
        await asyncio.sleep(0.05)

    client.calls.clear()
    asyncio.run(unreserve())
    assert [(m, path.rsplit("/", 1)[-1]) for m, path, _ in client.calls] == [
        ("PUT", "p-extended-resources-x"),
        ("DELETE", "p-extended-resources-x"),
    ]
    assert client.calls[0][2]["metadata"]["finalizers"] == []


def test_node_served_by_its_allocatable_needs_no_claim() -> None:
    objects = _objects()
    client = _Client(objects)
    pl = DynamicResources(_Handle(objects, client))  # type: ignore[arg-type]
    p = _gpu_pod()
    dp = node("dp").alloc(cpu="4", pods=10, **{GPU: "8"}).build()
    state = CycleState()
    pl.pre_filter(state, p, [dp])
    assert pl.filter(state, p, dp) is None
    assert pl.reserve(state, p, "dp") is None
    assert asyncio.run(pl.pre_bind(state, p, "dp")) is None
    assert client.calls == []


def test_unbacked_resource_missing_on_the_node_cannot_fit() -> None:
    pl = DynamicResources(_Handle(_objects()))  # type: ignore[arg-type]
    p = pod("p").container({GPU: "1", "example.com/fpga": "1"}).build()
    n2 = node("n2").alloc(cpu="4", pods=10).build()
    state = CycleState()
    state.record = True
    pl.pre_filter(state, p, [n2])
    st = pl.filter(state, p, n2)
    assert st is not None
    assert (st.code, st.message) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, MSG_EXTENDED_CANNOT_FIT)
    [entry] = state.get(DEVICE_REPORT_KEY)["n2"]  # explain says why
    assert entry.reason == MSG_EXTENDED_CANNOT_FIT


def test_claim_left_from_an_earlier_attempt_is_deleted_in_postfilter() -> None:
    objects = _objects()
    stale = {
        "metadata": {
            "namespace": "default",
            "name": "p-extended-resources-old",
            "uid": "old-uid",
            "resourceVersion": "3",
            "finalizers": ["resource.kubernetes.io/delete-protection"],
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "p",
                    "uid": "pod-uid",
                    "controller": True,
                }
            ],
        },
        "spec": {"devices": {"requests": [{"name": "container-0-request-1"}]}},
    }
    objects.objects["resourceclaims"] = [stale]
    client = _Client(objects)
    pl = DynamicResources(_Handle(objects, client))  # type: ignore[arg-type]
    p = _gpu_pod()
    n2 = node("n2").alloc(cpu="4", pods=10).build()
    state = CycleState()
    assert pl.pre_filter(state, p, [n2]) == (None, None)
    st = pl.filter(state, p, n2)
    assert st is not None and st.message == MSG_EXTENDED_STALE
    _, st = asyncio.run(pl.post_filter(state, p, NodeToStatus()))
    assert st is not None and (st.code, st.message) == (Code.UNSCHEDULABLE, MSG_DELETED)
    assert [m for m, _, _ in client.calls] == ["PUT", "DELETE"]
    # a pod without a leftover claim has nothing to delete
    fresh = CycleState()
    objects.objects["resourceclaims"] = []
    pl.pre_filter(fresh, p, [n2])
    assert pl.filter(fresh, p, n2) is None
    claim = fresh.get("PreFilterDynamicResources").claims[-1].claim
    assert claim["metadata"]["name"] == EXTENDED_CLAIM_NAME


def test_hints_cover_pods_with_backed_extended_resources() -> None:
    pl = DynamicResources(_Handle(_objects()))  # type: ignore[arg-type]
    regs = {r.event.resource: r for r in pl.events_to_register()}
    claims = regs[EventResource.RESOURCE_CLAIM]
    assert claims.event.action & ActionType.DELETE
    assert claims.hint is not None
    p = _gpu_pod()
    allocated = {"metadata": {"name": "x"}, "status": {"allocation": {"devices": {}}}}
    assert claims.hint(p, allocated, None) is QH.QUEUE
    assert claims.hint(p, {"metadata": {"name": "x"}}, None) is QH.SKIP
    slices = regs[EventResource.RESOURCE_SLICE]
    assert slices.hint is not None
    assert slices.hint(p, None, _slice("n1", 1)) is QH.QUEUE
    assert slices.hint(pod("cpu-only").req(cpu="1").build(), None, _slice("n1", 1)) is QH.SKIP


# ---- scoring ---------------------------------------------------------------------------------


def _scoring_objects() -> FakeObjects:
    selected = _slice("sel", 2)
    del selected["spec"]["nodeName"]
    selected["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["yes"]}]}
        ]
    }
    other_driver = _slice("n1", 3)
    other_driver["metadata"]["name"] = "n1-other"
    other_driver["spec"]["driver"] = "other.example.com"
    claim = {
        "metadata": {"namespace": "default", "name": "c", "uid": "c"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "r", "driver": DRIVER, "pool": "n1", "device": "gpu-0"},
                        {"request": "r", "driver": DRIVER, "pool": "n1", "device": "gpu-1"},
                    ]
                }
            }
        },
    }
    per_device = _slice("per-device", 0)
    del per_device["spec"]["nodeName"]
    per_device["spec"]["perDeviceNodeSelection"] = True
    per_device["spec"]["devices"] = [
        {"name": "a", "nodeName": "n4"},
        {"name": "b", "allNodes": True},
        {"name": "c", "nodeName": "n5"},
    ]
    return FakeObjects(
        {
            "deviceclasses": [_class("gpu", GPU)],
            "resourceslices": [_slice("n1", 4), other_driver, selected, per_device],
            "resourceclaims": [claim],
        }
    )


def test_devices_of_the_class_on_a_node_count_as_its_allocatable() -> None:
    devices = extended_resource_devices([GPU, "cpu"], _scoring_objects().list)
    assert devices is not None
    # n1: its own four (two allocated) and the device for all nodes; the other
    # driver's do not match the class
    assert devices.totals(GPU, "n1", {}) == (5, 2)
    # the selector slice reaches labelled nodes only
    assert devices.totals(GPU, "n3", {"gpu": "yes"}) == (3, 0)
    # per-device node selection: its own device and the one for all nodes
    assert devices.totals(GPU, "n4", {}) == (2, 0)
    assert devices.totals("example.com/none", "n1", {}) == (0, 0)
    assert extended_resource_devices(["cpu", "memory"], _scoring_objects().list) is None
    assert extended_resource_devices(["example.com/none"], _scoring_objects().list) is None


def test_fit_and_balanced_allocation_score_the_devices() -> None:
    objects = _scoring_objects()
    fit = NodeResourcesFit(
        node_resources_fit.parse_args(
            {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": GPU}]}}
        ),
        _Handle(objects),  # type: ignore[arg-type]
    )
    p = pod("p").container({GPU: "1"}).build()
    n1 = node("n1").alloc(cpu="4", pods=10).build()
    n2 = node("n2").alloc(cpu="4", pods=10).build()
    dp = node("dp").alloc(cpu="4", pods=10, **{GPU: "10"}).build()
    state = CycleState()
    assert fit.pre_score(state, p, [n1, n2, dp]) is None
    assert fit.score(state, p, n1)[0] == 60  # (2 + 1) / 5
    assert fit.score(state, p, n2)[0] == 100  # only the device for all nodes: 1 / 1

    assert fit.score(state, p, dp)[0] == 10  # the device plugin's allocatable
    assert fit.score(CycleState(), p, n1)[0] == 60  # without PreScore
    balanced = NodeResourcesBalancedAllocation(
        balanced_allocation.parse_args({"resources": [{"name": "cpu"}, {"name": GPU}]}),
        _Handle(objects),  # type: ignore[arg-type]
    )
    q = pod("q").container({"cpu": "2", GPU: "1"}).build()
    state = CycleState()
    assert balanced.pre_score(state, q, [n1]) is None
    # with q: cpu 2/4, gpu 3/5: std 0.05; without: 0 and 2/5: std 0.2
    assert balanced.score(state, q, n1)[0] == 50 + (50 + 95 - 80) // 2


def _pod_spec(*containers: tuple[str, str, dict[str, str]]) -> dict[str, Any]:
    """("init" | "sidecar" | "main", name, requests) in order within each list."""
    spec: dict[str, Any] = {"containers": [], "initContainers": []}
    for kind, name, requests in containers:
        c: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
        if kind == "sidecar":
            c["restartPolicy"] = "Always"
        spec["containers" if kind == "main" else "initContainers"].append(c)
    return spec


def test_mappings_with_init_containers_and_a_sidecar() -> None:
    init = "example.com/gpuinit"
    classes = {GPU: _class("gpu"), init: _class("gpuinit")}
    cases = [
        (  # two init containers: both map to the larger one's request
            _pod_spec(
                ("main", "con0", {GPU: "1"}),
                ("init", "init-con0", {init: "1"}),
                ("init", "init-con1", {init: "2"}),
            ),
            [
                ("container-1-request-0", "init-con0", init),
                ("container-1-request-0", "init-con1", init),
                ("container-2-request-0", "con0", GPU),
            ],
        ),
        (  # an init container before a sidecar reuses the sidecar's device
            _pod_spec(
                ("main", "con0", {GPU: "1"}),
                ("init", "init-con0", {init: "1"}),
                ("sidecar", "sidecar-con1", {init: "1"}),
                ("init", "init-con2", {init: "2"}),
            ),
            [
                ("container-1-request-0", "init-con0", init),
                ("container-1-request-0", "sidecar-con1", init),
                ("container-2-request-0", "init-con2", init),
                ("container-3-request-0", "con0", GPU),
            ],
        ),
    ]
    for spec, want in cases:
        reqs, maps = extended_resource_requests(spec, [GPU, init], classes)
        got = sorted((m["requestName"], m["containerName"], m["resourceName"]) for m in maps)
        assert got == want
        assert sorted({m["requestName"] for m in maps}) == [r["name"] for r in reqs]


def test_explain_reports_the_extended_claim_per_node() -> None:
    pl = DynamicResources(_Handle(_objects()))  # type: ignore[arg-type]
    p = _gpu_pod("3")
    n1 = node("n1").alloc(cpu="4", pods=10).build()
    n2 = node("n2").alloc(cpu="4", pods=10).build()
    dp = node("dp").alloc(cpu="4", pods=10, **{GPU: "8"}).build()
    state = CycleState()
    state.record = True
    pl.pre_filter(state, p, [n1, n2, dp])
    for ni in (n1, n2, dp):
        pl.filter(state, p, ni)
    report = state.get(DEVICE_REPORT_KEY)
    [on_n2] = report["n2"]
    assert (on_n2.claim, on_n2.pod_claim) == ("default/<extended-resources>", EXTENDED_POD_CLAIM)
    assert on_n2.devices == [f"container-0-request-1: {DRIVER}/n2/gpu-{i}" for i in range(3)]
    [on_n1] = report["n1"]
    assert on_n1.reason == (
        "no free devices on the node satisfy its requests, selectors and constraints"
    )
    [on_dp] = report["dp"]
    assert on_dp.reason == "the node's allocatable serves the pod's extended resources"
