"""The allocator's consumable capacity (allowMultipleAllocations devices, capacity
requests, request policies) and per-device node selection (in memory)."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest

from kscheduler.framework import CycleState, PodInfo, Status
from kscheduler.framework.cel import SELECTOR_MAX_LENGTH
from kscheduler.framework.dra import (
    AllocationError,
    Allocator,
    DeviceID,
    Slice,
    allocated_devices,
    result_devices,
    shared_capacity,
)
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.quantity import format_quantity
from kscheduler.plugins.dynamic_resources import DynamicResources
from tests.unit.builders import node, pod
from tests.unit.fakes import FakeObjects

DRIVER = "gpu.example.com"
CLASSES = {
    "gpu": {
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }
}


def shared_dev(
    name: str, memory: str = "40Gi", policy: dict[str, Any] | None = None, **kw: Any
) -> dict[str, Any]:
    cap: dict[str, Any] = {"value": memory}
    if policy is not None:
        cap["requestPolicy"] = policy
    return {"name": name, "allowMultipleAllocations": True, "capacity": {"memory": cap}, **kw}


def slice_(name: str, devices: list[dict[str, Any]], **spec: Any) -> Slice:
    spec.setdefault("nodeName", "n1")
    return Slice.parse(
        {
            "metadata": {"name": name, "resourceVersion": "1"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
                **spec,
            },
        }
    )


def claim(*requests: dict[str, Any], name: str = "c") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": name},
        "spec": {"devices": {"requests": list(requests)}},
    }


def req(name: str = "r", memory: str | None = None, **kw: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu", **kw}
    if memory is not None:
        exactly["capacity"] = {"requests": {"memory": memory}}
    return {"name": name, "exactly": exactly}


def results(allocation: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = allocation["devices"]["results"]
    return out


def one(
    slices: list[Slice], c: dict[str, Any], node: str = "n1", **kw: Any
) -> list[dict[str, Any]] | None:
    got = Allocator(slices, CLASSES, set(), **kw).allocate(node, {}, [c])
    return None if got is None else results(got[0])


# ---- consumable capacity -------------------------------------------------------------------
def test_a_share_gets_a_share_id_and_its_consumed_capacity() -> None:
    got = one([slice_("s", [shared_dev("a")])], claim(req(memory="10Gi")))
    assert got is not None and len(got) == 1
    assert got[0]["device"] == "a"
    assert got[0]["consumedCapacity"] == {"memory": "10Gi"}
    assert uuid.UUID(got[0]["shareID"]).version == 4


def test_explain_shows_a_share() -> None:
    got = Allocator([slice_("s", [shared_dev("a")])], CLASSES, set()).allocate(
        "n1", {}, [claim(req(memory="10Gi"))]
    )
    assert got is not None
    assert result_devices(got[0]) == [f"r: {DRIVER}/p/a (shared: memory=10Gi)"]


def test_allocated_shares_leave_the_rest_of_the_capacity() -> None:
    slices = [slice_("s", [shared_dev("a")])]
    first = Allocator(slices, CLASSES, set()).allocate("n1", {}, [claim(req(memory="30Gi"))])
    assert first is not None
    allocated = [{"status": {"allocation": first[0]}}]
    assert allocated_devices(allocated) == set()
    shared = shared_capacity(allocated)
    assert shared == {DeviceID(DRIVER, "p", "a"): {"memory": Decimal(30 * 2**30)}}
    a = Allocator(slices, CLASSES, set(), shared=shared)
    assert a.allocate("n1", {}, [claim(req(memory="10Gi"))]) is not None
    assert a.allocate("n1", {}, [claim(req(memory="11Gi"))]) is None


def test_shares_picked_in_the_same_search_count() -> None:
    # two requests of one claim: 30Gi each; the second does not fit on a any more
    devices = [shared_dev("a"), shared_dev("b")]
    got = one([slice_("s", devices)], claim(req("x", "30Gi"), req("y", "30Gi")))
    assert got is not None
    assert [(r["request"], r["device"]) for r in got] == [("x", "a"), ("y", "b")]
    # 20Gi each: both shares on a, each with its own share ID
    got = one([slice_("s", devices)], claim(req("x", "20Gi"), req("y", "20Gi")))
    assert got is not None
    assert [r["device"] for r in got] == ["a", "a"]
    assert got[0]["shareID"] != got[1]["shareID"]


def test_without_a_request_a_share_takes_the_default_or_everything() -> None:
    policy = {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}
    got = one([slice_("s", [shared_dev("a", policy=policy)])], claim(req()))
    assert got is not None and got[0]["consumedCapacity"] == {"memory": "1Gi"}
    got = one([slice_("s", [shared_dev("a")])], claim(req()))
    assert got is not None and got[0]["consumedCapacity"] == {"memory": "40Gi"}
    # a device taken whole by one share: nothing left for a second share
    shared = {DeviceID(DRIVER, "p", "a"): {"memory": Decimal(40 * 2**30)}}
    assert one([slice_("s", [shared_dev("a")])], claim(req()), shared=shared) is None


def test_a_shared_device_without_capacity_gets_a_share_id_only() -> None:
    d = {"name": "a", "allowMultipleAllocations": True}
    got = one([slice_("s", [d])], claim(req()))
    assert got is not None and "consumedCapacity" not in got[0] and "shareID" in got[0]


FRACTIONAL = {"default": "1", "validRange": {"min": "500m", "step": "250m"}}


@pytest.mark.parametrize(
    ("policy", "asked", "fractional", "want"),
    [
        ({"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}, "1.5Gi", True, "2Gi"),
        ({"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}, "1.5Gi", False, "2Gi"),
        (
            {"default": "1Gi", "validRange": {"min": "1Gi", "step": "512Mi"}},
            "1100Mi",
            True,
            "1536Mi",
        ),
        ({"default": "4Gi", "validRange": {"min": "4Gi"}}, "1Gi", False, "4Gi"),
        ({"default": "1Gi", "validRange": {"min": "1Gi"}}, "3Gi", False, "3Gi"),
        ({"default": "1Gi", "validValues": ["1Gi", "4Gi", "8Gi"]}, "3Gi", False, "4Gi"),
        (FRACTIONAL, "600m", True, "750m"),
        (FRACTIONAL, "1100m", True, "1250m"),
        # without DRAFractionalCapacityRange (the default): whole units, each rounded up
        (FRACTIONAL, "600m", False, "1"),
        (FRACTIONAL, "1100m", False, "2"),
        ({"default": "1", "validRange": {"min": "1", "step": "2"}}, "3500m", True, "5"),
    ],
)
def test_requests_are_rounded_up_to_the_policy(
    policy: dict[str, Any], asked: str, fractional: bool, want: str
) -> None:
    got = one(
        [slice_("s", [shared_dev("a", policy=policy)])],
        claim(req(memory=asked)),
        fractional_capacity=fractional,
    )
    assert got is not None
    assert got[0]["consumedCapacity"] == {"memory": want}


@pytest.mark.parametrize(
    "policy",
    [
        {"default": "1Gi", "validRange": {"min": "1Gi", "max": "8Gi", "step": "1Gi"}},
        {"default": "1Gi", "validValues": ["1Gi", "4Gi", "8Gi"]},
    ],
)
def test_a_request_above_the_policy_skips_the_device(policy: dict[str, Any]) -> None:
    devices = [shared_dev("a", policy=policy), shared_dev("b")]
    got = one([slice_("s", devices)], claim(req(memory="9Gi")))
    assert got is not None and got[0]["device"] == "b"
    assert got[0]["consumedCapacity"] == {"memory": "9Gi"}


def test_a_request_for_a_capacity_the_device_lacks_skips_it() -> None:
    other = {"name": "a", "allowMultipleAllocations": True, "capacity": {"cores": {"value": "8"}}}
    got = one([slice_("s", [other, shared_dev("b")])], claim(req(memory="1Gi")))
    assert got is not None and got[0]["device"] == "b"


def test_a_capacity_request_on_a_dedicated_device() -> None:
    small = {"name": "small", "capacity": {"memory": {"value": "8Gi"}}}
    big = {"name": "big", "capacity": {"memory": {"value": "80Gi"}}}
    got = one([slice_("s", [small, big])], claim(req(memory="16Gi")))
    assert got is not None
    assert got[0]["device"] == "big"
    assert "shareID" not in got[0] and "consumedCapacity" not in got[0]


def test_an_unrepresentable_request_is_an_error() -> None:
    policy = {"default": "1", "validRange": {"min": "1", "step": "1"}}
    with pytest.raises(AllocationError, match="not a representable milli value"):
        one(
            [slice_("s", [shared_dev("a", policy=policy)])],
            claim(req(memory="1.0001")),
            fractional_capacity=True,
        )


def test_all_mode_leaves_out_devices_too_small() -> None:
    devices = [shared_dev("a", "10Gi"), shared_dev("b", "40Gi"), shared_dev("c", "40Gi")]
    got = one([slice_("s", devices)], claim(req(memory="20Gi", allocationMode="All")))
    assert got is not None and [r["device"] for r in got] == ["b", "c"]
    # what is taken counts when the devices are allocated: All then fails
    shared = {DeviceID(DRIVER, "p", "c"): {"memory": Decimal(30 * 2**30)}}
    assert (
        one([slice_("s", devices)], claim(req(memory="20Gi", allocationMode="All")), shared=shared)
        is None
    )


def test_a_shared_device_charges_its_counters_once() -> None:
    counters = slice_(
        "counters", [], sharedCounters=[{"name": "g", "counters": {"m": {"value": "1"}}}]
    )
    dev = shared_dev("a", consumesCounters=[{"counterSet": "g", "counters": {"m": {"value": "1"}}}])
    parts = slice_("parts", [dev])
    for s in (counters, parts):
        s.slice_count = 2
    # already shared by an allocated claim: its counters are spent, yet another share fits
    shared = {DeviceID(DRIVER, "p", "a"): {"memory": Decimal(2**30)}}
    got = one([counters, parts], claim(req(memory="1Gi")), shared=shared)
    assert got is not None and got[0]["device"] == "a"
    # two shares picked in one search charge the counter once
    got = one([counters, parts], claim(req("x", "1Gi"), req("y", "1Gi")))
    assert got is not None and [r["device"] for r in got] == ["a", "a"]


def test_admin_access_results_are_not_counted_as_shares() -> None:
    alloc = {
        "devices": {
            "results": [
                {"driver": DRIVER, "pool": "p", "device": "a", "shareID": "x", "adminAccess": True},
                {"driver": DRIVER, "pool": "p", "device": "b", "shareID": "y"},
                {
                    "driver": DRIVER,
                    "pool": "p",
                    "device": "b",
                    "shareID": "z",
                    "consumedCapacity": {"memory": "1Gi"},
                },
            ]
        }
    }
    assert shared_capacity([{"status": {"allocation": alloc}}]) == {
        DeviceID(DRIVER, "p", "b"): {"memory": Decimal(2**30)}
    }


@pytest.mark.parametrize(
    ("value", "fmt", "text"),
    [
        (Decimal(2**31), "BinarySI", "2Gi"),
        (Decimal(1536 * 2**20), "BinarySI", "1536Mi"),
        (Decimal(1000), "BinarySI", "1k"),
        (Decimal("1.5"), "BinarySI", "1500m"),
        (Decimal("0.75"), "DecimalSI", "750m"),
        (Decimal(5), "DecimalSI", "5"),
        (Decimal(12000), "DecimalSI", "12k"),
        (Decimal(1000), "DecimalExponent", "1e3"),
    ],
)
def test_quantities_are_written_as_the_api_writes_them(value: Decimal, fmt: str, text: str) -> None:
    assert format_quantity(value, fmt) == text


# ---- per-device node selection -------------------------------------------------------------
def per_device_slice() -> Slice:
    zone_a = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
        ]
    }
    return slice_(
        "s",
        [
            {"name": "on-n1", "nodeName": "n1"},
            {"name": "in-zone-a", "nodeSelector": zone_a},
            {"name": "anywhere", "allNodes": True},
        ],
        nodeName=None,
        perDeviceNodeSelection=True,
    )


def test_each_device_reaches_the_nodes_it_names() -> None:
    s = [per_device_slice()]
    a = Allocator(s, CLASSES, set())
    all_of_them = claim(req(allocationMode="All"))
    got = a.allocate("n1", {"zone": "b"}, [all_of_them])
    assert got is not None
    assert [r["device"] for r in results(got[0])] == ["on-n1", "anywhere"]
    assert got[0]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
        ]
    }
    got = a.allocate("n2", {"zone": "a"}, [all_of_them])
    assert got is not None
    assert [r["device"] for r in results(got[0])] == ["in-zone-a", "anywhere"]
    assert got[0]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
        ]
    }
    got = a.allocate("n3", {}, [claim(req())])
    assert got is not None
    assert [r["device"] for r in results(got[0])] == ["anywhere"]
    assert "nodeSelector" not in got[0]


def test_a_per_device_slice_with_no_device_for_the_node_is_not_seen() -> None:
    s = slice_("s", [{"name": "d", "nodeName": "n1"}], nodeName=None, perDeviceNodeSelection=True)
    assert Allocator([s], CLASSES, set()).allocate("n2", {}, [claim(req())]) is None
    got = Allocator([s], CLASSES, set()).allocate("n1", {}, [claim(req())])
    assert got is not None and results(got[0])[0]["device"] == "d"


# ---- CEL limits ----------------------------------------------------------------------------
def test_a_selector_longer_than_the_api_allows_is_a_compile_error() -> None:
    pad = " " * (SELECTOR_MAX_LENGTH - len("true"))
    fits = req()
    fits["exactly"]["selectors"] = [{"cel": {"expression": pad + "true"}}]
    assert one([slice_("s", [{"name": "a"}])], claim(fits)) is not None
    too_long = req()
    too_long["exactly"]["selectors"] = [{"cel": {"expression": pad + " true"}}]
    with pytest.raises(AllocationError, match="CEL compile error: expression too long"):
        one([slice_("s", [{"name": "a"}])], claim(too_long))


# ---- the plugin: allocated and in-flight shares --------------------------------------------
class _Handle:
    def __init__(self, objects: FakeObjects) -> None:
        self.objects = objects


def _pod_with(claim_name: str) -> PodInfo:
    raw = pod(claim_name).req(cpu="1").raw()
    raw["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    info = parse_pod(raw)
    assert info.parse_error is None
    return info


def _claim_object(name: str, memory: str, allocated: str | None = None) -> dict[str, Any]:
    c = claim(req(memory=memory), name=name)
    c["metadata"].update(namespace="default", resourceVersion="1")
    if allocated is not None:
        result: dict[str, Any] = {"request": "r", "driver": DRIVER, "pool": "p", "device": "a"}
        result |= {"shareID": str(uuid.uuid4()), "consumedCapacity": {"memory": allocated}}
        c["status"] = {"allocation": {"devices": {"results": [result]}}}
    return c


def test_allocated_and_in_flight_shares_count_for_the_next_pod() -> None:
    raw_slice = {
        "metadata": {"name": "s", "resourceVersion": "1"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "n1",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": [shared_dev("a")],
        },
    }
    objects = FakeObjects(
        {
            "resourceslices": [raw_slice],
            "deviceclasses": [CLASSES["gpu"]],
            "resourceclaims": [
                _claim_object("old", "5Gi", allocated="5Gi"),
                _claim_object("first", "30Gi"),
                _claim_object("too-big", "10Gi"),
                _claim_object("last", "5Gi"),
            ],
        }
    )
    pl = DynamicResources(_Handle(objects))  # type: ignore[arg-type]
    ni = node("n1").alloc(cpu="4", pods=110).build()

    def attempt(name: str) -> tuple[CycleState, Status | None]:
        state = CycleState()
        assert pl.pre_filter(state, _pod_with(name), [ni]) == (None, None)
        return state, pl.filter(state, _pod_with(name), ni)

    state, st = attempt("first")  # 5Gi allocated + 30Gi
    assert st is None
    assert pl.reserve(state, _pod_with("first"), "n1") is None  # now in flight
    _, st = attempt("too-big")  # 5 + 30 + 10 > 40
    assert st is not None and st.message == "cannot allocate all claims"
    _, st = attempt("last")  # 5 + 30 + 5 = 40
    assert st is None
    pl.unreserve(state, _pod_with("first"), "n1")
    _, st = attempt("too-big")  # the in-flight share dropped
    assert st is None


def test_a_negative_capacity_is_an_error_for_any_request() -> None:
    d = {"name": "a", "capacity": {"memory": {"value": "-1Gi"}}}
    with pytest.raises(AllocationError, match='capacity "memory": capacity value is negative'):
        one([slice_("s", [d])], claim(req()))
