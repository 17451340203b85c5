"""The structured-parameters allocator and its CEL environment (in memory)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kscheduler.framework.cel import (
    CelRuntimeError,
    compare_semver,
    compile_selector,
    make_device_input,
)
from kscheduler.framework.dra import (
    AllocationError,
    AllocationTimeout,
    Allocator,
    DeviceID,
    FailedOnNode,
    Slice,
    SliceIndex,
    TaintRule,
    allocated_devices,
    gather_pools,
)

DRIVER = "gpu.example.com"


def dev(name: str, **attrs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "attributes": {}, "capacity": {}}
    for k, v in attrs.items():
        if k == "memory":
            out["capacity"]["memory"] = {"value": v}
        elif k == "taints":
            out["taints"] = v
        elif isinstance(v, bool):
            out["attributes"][k] = {"bool": v}
        elif isinstance(v, int):
            out["attributes"][k] = {"int": v}
        elif k.endswith("version"):
            out["attributes"][k] = {"version": v}
        else:
            out["attributes"][k] = {"string": v}
    return out


def slice_(
    name: str,
    node: str,
    devices: list[dict[str, Any]],
    *,
    pool: str = "",
    gen: int = 1,
    count: int = 1,
) -> Slice:
    return Slice.parse(
        {
            "metadata": {"name": name, "uid": name, "resourceVersion": "1"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": pool or node, "generation": gen, "resourceSliceCount": count},
                "devices": devices,
            },
        }
    )


def cls(name: str, *exprs: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]},
    }


CLASSES = {"gpu": cls("gpu", f'device.driver == "{DRIVER}"')}


def claim(*requests: dict[str, Any], constraints: list[Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "c", "uid": "u1"},
        "spec": {"devices": {"requests": list(requests), "constraints": constraints or []}},
    }


def exact(
    name: str, count: int = 1, *sels: str, mode: str = "ExactCount", **kw: Any
) -> dict[str, Any]:
    e: dict[str, Any] = {"deviceClassName": "gpu", "allocationMode": mode, **kw}
    if mode == "ExactCount":
        e["count"] = count
    if sels:
        e["selectors"] = [{"cel": {"expression": s}} for s in sels]
    return {"name": name, "exactly": e}


def picked(result: list[dict[str, Any]] | None) -> list[list[tuple[str, str]]]:
    assert result is not None
    return [[(r["request"], r["device"]) for r in a["devices"]["results"]] for a in result]


SLICES = [
    slice_(
        "n1-b",
        "n1",
        [dev("gpu-2", model="B", index=2), dev("gpu-3", model="A", index=3)],
        pool="n1",
        count=2,
    ),
    slice_(
        "n1-a",
        "n1",
        [dev("gpu-0", model="A", index=0), dev("gpu-1", model="B", index=1)],
        pool="n1",
        count=2,
    ),
]


def test_search_order_is_pool_then_slice_name_then_device() -> None:
    a = Allocator(SLICES, CLASSES, set())
    assert picked(a.allocate("n1", {}, [claim(exact("r", 3))])) == [
        [("r", "gpu-0"), ("r", "gpu-1"), ("r", "gpu-2")]
    ]
    res = a.allocate("n1", {}, [claim(exact("r", 1))])
    assert res is not None
    assert res[0]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
        ]
    }
    assert a.allocate("n2", {}, [claim(exact("r", 1))]) is None


def test_a_search_past_its_deadline_stops_with_upstreams_message() -> None:
    # 24 devices, 12 wanted with matching models where only 6 share one: a long search
    many = [dev(f"gpu-{i}", model=f"m{i % 4}") for i in range(24)]
    a = Allocator([slice_("big", "big", many)], CLASSES, set())
    hard = claim(exact("r", 12), constraints=[{"matchAttribute": f"{DRIVER}/model"}])
    with pytest.raises(
        AllocationTimeout, match=r"^node big: timed out trying to allocate devices$"
    ):
        a.allocate("big", {}, [hard], deadline=time.monotonic() - 1)
    assert a.allocate("n1", {}, [claim(exact("r", 1))], deadline=time.monotonic() + 60) is None
    assert picked(
        Allocator(SLICES, CLASSES, set()).allocate(
            "n1", {}, [claim(exact("r", 1))], deadline=time.monotonic() + 60
        )
    ) == [[("r", "gpu-0")]]


def test_taken_devices_and_request_selectors() -> None:
    a = Allocator(SLICES, CLASSES, {DeviceID(DRIVER, "n1", "gpu-0")})
    sel = f'device.attributes["{DRIVER}"].model == "A"'
    assert picked(a.allocate("n1", {}, [claim(exact("r", 1, sel))])) == [[("r", "gpu-3")]]
    assert a.allocate("n1", {}, [claim(exact("r", 2, sel))]) is None


def test_all_mode_and_incomplete_pool() -> None:
    a = Allocator(SLICES, CLASSES, set())
    assert picked(a.allocate("n1", {}, [claim(exact("r", mode="All"))])) == [
        [("r", "gpu-0"), ("r", "gpu-1"), ("r", "gpu-2"), ("r", "gpu-3")]
    ]
    half = Allocator(SLICES[:1], CLASSES, set())
    with pytest.raises(AllocationError, match="is currently being updated"):
        half.allocate("n1", {}, [claim(exact("r", mode="All"))])
    assert half.allocate("n1", {}, [claim(exact("r", 1))]) is None


def test_newest_generation_only() -> None:
    old = slice_("old", "n1", [dev("a")], pool="p", gen=1)
    new = slice_("new", "n1", [dev("b")], pool="p", gen=2)
    assert picked(
        Allocator([old, new], CLASSES, set()).allocate("n1", {}, [claim(exact("r"))])
    ) == [[("r", "b")]]


def test_match_and_distinct_attribute_backtrack() -> None:
    a = Allocator(SLICES, CLASSES, set())
    match = [{"matchAttribute": f"{DRIVER}/model"}]
    assert picked(a.allocate("n1", {}, [claim(exact("r", 2), constraints=match)])) == [
        [("r", "gpu-0"), ("r", "gpu-3")]
    ]
    distinct = [{"distinctAttribute": f"{DRIVER}/model", "requests": ["x", "y"]}]
    assert picked(a.allocate("n1", {}, [claim(exact("x"), exact("y"), constraints=distinct)])) == [
        [("x", "gpu-0"), ("y", "gpu-1")]
    ]


def test_first_available_takes_the_first_subrequest_that_fits() -> None:
    a = Allocator(SLICES, CLASSES, set())
    req = {
        "name": "r",
        "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu", "count": 5},
            {"name": "small", "deviceClassName": "gpu", "count": 2},
        ],
    }
    assert picked(a.allocate("n1", {}, [claim(req)])) == [
        [("r/small", "gpu-0"), ("r/small", "gpu-1")]
    ]


def test_admin_access_may_take_devices_in_use() -> None:
    taken = {DeviceID(DRIVER, "n1", f"gpu-{i}") for i in range(4)}
    a = Allocator(SLICES, CLASSES, taken)
    assert a.allocate("n1", {}, [claim(exact("r"))]) is None
    res = a.allocate("n1", {}, [claim(exact("r", adminAccess=True))])
    assert picked(res) == [[("r", "gpu-0")]]
    assert res is not None and res[0]["devices"]["results"][0]["adminAccess"] is True
    assert allocated_devices([{"status": {"allocation": res[0]}}]) == set()


def test_taints_need_tolerations() -> None:
    taint = [{"key": "broken", "effect": "NoSchedule"}]
    s = [slice_("s", "n1", [dev("a", taints=taint), dev("b")])]
    a = Allocator(s, CLASSES, set())
    assert picked(a.allocate("n1", {}, [claim(exact("r"))])) == [[("r", "b")]]
    tol = [{"key": "broken", "operator": "Exists"}]
    assert picked(a.allocate("n1", {}, [claim(exact("r", tolerations=tol))])) == [[("r", "a")]]


def test_cel_runtime_error_is_an_allocation_error() -> None:
    a = Allocator(SLICES, CLASSES, set())
    with pytest.raises(AllocationError, match="CEL runtime error"):
        a.allocate("n1", {}, [claim(exact("r", 1, 'device.attributes["x.io"].y == 1'))])


def test_selector_results_are_kept_per_device_version() -> None:
    s = [slice_("s", "n1", [dev("a", model="A")])]
    expr = 'device.attributes["gpu.example.com"].model == "A"'
    a = Allocator(s, {"gpu": cls("gpu", expr)}, set())
    a.allocate("n1", {}, [claim(exact("r"))])
    assert s[0].devices[0].cel_results == {expr: True}


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ('device.driver == "gpu.example.com"', True),
        ('device.attributes["gpu.example.com"].model == "A"', True),
        ("device.attributes['gpu.example.com'].index > 1", True),
        ('device.capacity["gpu.example.com"].memory.compareTo(quantity("10Gi")) >= 0', True),
        ('device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("16Gi"))', False),
        ('device.capacity["gpu.example.com"].memory == quantity("16384Mi")', True),
        ('device.attributes["gpu.example.com"].driverversion.isLessThan(semver("1.10.0"))', True),
        ('device.attributes["gpu.example.com"].driverversion.major() == 1', True),
        ('"x" in device.attributes["other.example.com"]', False),
        ('cel.bind(a, device.attributes["gpu.example.com"], a.model == "A" && a.index == 2)', True),
        ('quantity("1.5Gi").isInteger()', True),
        ('isSemver("1.2")', False),
    ],
)
def test_cel_environment(expr: str, want: bool) -> None:
    d = make_device_input(
        DRIVER,
        {"model": {"string": "A"}, "index": {"int": 2}, "driverversion": {"version": "1.9.0"}},
        {"memory": {"value": "16Gi"}},
    )
    assert compile_selector(expr).matches(d) is want


def test_cel_errors() -> None:
    d = make_device_input(DRIVER, {}, {})
    with pytest.raises(CelRuntimeError):
        compile_selector('device.attributes["x.io"].y == 1').matches(d)
    with pytest.raises(CelRuntimeError, match="could not be converted to bool"):
        compile_selector("device.driver").matches(d)


def test_semver_order() -> None:
    assert compare_semver("1.0.0-alpha", "1.0.0") == -1
    assert compare_semver("1.0.0-alpha.1", "1.0.0-alpha.beta") == -1
    assert compare_semver("1.0.0+build", "1.0.0") == 0
    assert compare_semver("2.0.0", "1.10.0") == 1


# ---- partitionable devices (shared counters) ------------------------------------------------
def counter_slice(
    name: str, node: str, sets: dict[str, dict[str, str]], *, pool: str, count: int
) -> Slice:
    return Slice.parse(
        {
            "metadata": {"name": name, "uid": name, "resourceVersion": "1"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
                "sharedCounters": [
                    {"name": s, "counters": {k: {"value": v} for k, v in c.items()}}
                    for s, c in sets.items()
                ],
            },
        }
    )


def part(
    name: str, counter_set: str = "gpu-0", memory: str = "20Gi", **attrs: Any
) -> dict[str, Any]:
    d = dev(name, **attrs)
    d["consumesCounters"] = [{"counterSet": counter_set, "counters": {"memory": {"value": memory}}}]
    return d


def partitioned(*devices: dict[str, Any]) -> list[Slice]:
    """Pool n1: a counter slice (gpu-0 with 40Gi of memory) and a device slice."""
    return [
        slice_("n1-devices", "n1", list(devices), pool="n1", count=2),
        counter_slice("n1-counters", "n1", {"gpu-0": {"memory": "40Gi"}}, pool="n1", count=2),
    ]


HALVES = (part("whole", memory="40Gi"), part("half-0"), part("half-1"))


def test_partitions_share_the_counters_of_their_counter_set() -> None:
    s = partitioned(*HALVES)
    a = Allocator(s, CLASSES, set())
    # the whole device first, in slice order
    assert picked(a.allocate("n1", {}, [claim(exact("r"))])) == [[("r", "whole")]]
    # two devices: the whole one leaves nothing for a half; the search goes back
    assert picked(a.allocate("n1", {}, [claim(exact("r", 2))])) == [
        [("r", "half-0"), ("r", "half-1")]
    ]
    assert a.allocate("n1", {}, [claim(exact("r", 3))]) is None
    # two claims of the same pod share the counters too
    two = [claim(exact("r")), claim(exact("r"))]
    assert picked(a.allocate("n1", {}, two)) == [[("r", "half-0")], [("r", "half-1")]]


def test_allocated_devices_consume_counters() -> None:
    s = partitioned(*HALVES)
    half = DeviceID(DRIVER, "n1", "half-0")
    a = Allocator(s, CLASSES, {half})
    # 20Gi left: not enough for the whole device
    assert picked(a.allocate("n1", {}, [claim(exact("r"))])) == [[("r", "half-1")]]
    assert a.allocate("n1", {}, [claim(exact("r", 2))]) is None
    whole = Allocator(s, CLASSES, {DeviceID(DRIVER, "n1", "whole")})
    assert whole.allocate("n1", {}, [claim(exact("r"))]) is None
    # allocations with admin access take no device and so no counters
    admin = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "r",
                            "driver": DRIVER,
                            "pool": "n1",
                            "device": "whole",
                            "adminAccess": True,
                        }
                    ]
                }
            }
        }
    }
    free = Allocator(s, CLASSES, allocated_devices([admin]))
    assert picked(free.allocate("n1", {}, [claim(exact("r"))])) == [[("r", "whole")]]


def test_a_rejected_partition_gives_its_counters_back() -> None:
    taint = [{"key": "broken", "effect": "NoSchedule"}]
    s = partitioned(part("whole", memory="40Gi", taints=taint), part("half-0"), part("half-1"))
    a = Allocator(s, CLASSES, set())
    assert picked(a.allocate("n1", {}, [claim(exact("r", 2))])) == [
        [("r", "half-0"), ("r", "half-1")]
    ]
    # a constraint that turns a partition down gives its counters back too
    s = partitioned(
        part("whole", memory="40Gi", model="A"),
        part("half-0", model="B"),
        part("half-1", model="B"),
    )
    attr = f"{DRIVER}/model"
    a = Allocator(s, CLASSES, set())
    both = claim(exact("r", 2), constraints=[{"matchAttribute": attr}])
    assert picked(a.allocate("n1", {}, [both])) == [[("r", "half-0"), ("r", "half-1")]]


def test_all_mode_over_partitions_needs_counters_for_each() -> None:
    a = Allocator(partitioned(*HALVES), CLASSES, set())
    assert a.allocate("n1", {}, [claim(exact("r", mode="All"))]) is None
    b = Allocator(partitioned(*HALVES[1:]), CLASSES, set())
    assert picked(b.allocate("n1", {}, [claim(exact("r", mode="All"))])) == [
        [("r", "half-0"), ("r", "half-1")]
    ]


def test_every_counter_of_the_pool_must_have_enough_left() -> None:
    # as upstream: a counter set overdrawn by allocated devices blocks every
    # partition of the pool, even one consuming another set
    s = [
        slice_(
            "d",
            "n1",
            [part("a0", "a", "10Gi"), part("a1", "a", "10Gi"), part("b0", "b", "10Gi")],
            pool="n1",
            count=2,
        ),
        counter_slice(
            "c", "n1", {"a": {"memory": "10Gi"}, "b": {"memory": "10Gi"}}, pool="n1", count=2
        ),
    ]
    taken = {DeviceID(DRIVER, "n1", "a0"), DeviceID(DRIVER, "n1", "a1")}
    assert Allocator(s, CLASSES, taken).allocate("n1", {}, [claim(exact("r"))]) is None
    ok = Allocator(s, CLASSES, {DeviceID(DRIVER, "n1", "a0")})
    assert picked(ok.allocate("n1", {}, [claim(exact("r"))])) == [[("r", "b0")]]


def test_counters_of_devices_on_other_nodes_count() -> None:
    # one pool over two nodes; its counter slice is published for n2
    s = [
        slice_("p-n1", "n1", [part("n1-half", memory="30Gi")], pool="p", count=3),
        slice_("p-n2", "n2", [part("n2-half", memory="30Gi")], pool="p", count=3),
        counter_slice("p-counters", "n2", {"gpu-0": {"memory": "40Gi"}}, pool="p", count=3),
    ]
    assert picked(Allocator(s, CLASSES, set()).allocate("n1", {}, [claim(exact("r"))])) == [
        [("r", "n1-half")]
    ]
    taken = {DeviceID(DRIVER, "p", "n2-half")}
    assert Allocator(s, CLASSES, taken).allocate("n1", {}, [claim(exact("r"))]) is None


@pytest.mark.parametrize(
    ("devices", "sets"),
    [
        ([part("x", "missing")], {"gpu-0": {"memory": "40Gi"}}),
        ([part("x")], {"gpu-0": {"cores": "4"}}),
    ],
    ids=["counter set not found", "counter not found"],
)
def test_invalid_counter_references_make_the_pool_invalid(
    devices: list[dict[str, Any]], sets: dict[str, dict[str, str]]
) -> None:
    s = [
        slice_("d", "n1", devices, pool="n1", count=2),
        counter_slice("c", "n1", sets, pool="n1", count=2),
    ]
    with pytest.raises(FailedOnNode, match="invalid resource pools were encountered"):
        Allocator(s, CLASSES, set()).allocate("n1", {}, [claim(exact("r"))])
    with pytest.raises(
        AllocationError, match=r"resource pool gpu\.example\.com/n1 is currently invalid"
    ):
        Allocator(s, CLASSES, set()).allocate("n1", {}, [claim(exact("r", mode="All"))])


def test_duplicate_counter_set_names_make_the_pool_invalid() -> None:
    s = [
        slice_("d", "n1", [part("x")], pool="n1", count=3),
        counter_slice("c1", "n1", {"gpu-0": {"memory": "40Gi"}}, pool="n1", count=3),
        counter_slice("c2", "n1", {"gpu-0": {"memory": "40Gi"}}, pool="n1", count=3),
    ]
    with pytest.raises(FailedOnNode, match="invalid resource pools"):
        Allocator(s, CLASSES, set()).allocate("n1", {}, [claim(exact("r"))])


def test_devices_with_binding_conditions_are_allocated_last_and_carry_them() -> None:
    bound = dev("bc-0")
    bound["bindingConditions"] = ["attached"]
    bound["bindingFailureConditions"] = ["failed"]
    bound["bindsToNode"] = True
    net = Slice.parse(
        {
            "metadata": {"name": "fabric", "uid": "f", "resourceVersion": "1"},
            "spec": {
                "driver": DRIVER,
                "allNodes": True,
                "pool": {"name": "a-fabric", "generation": 1, "resourceSliceCount": 1},
                "devices": [bound],
            },
        }
    )
    plain = [slice_("n1", "n1", [dev("gpu-0")], pool="z-local")]
    # the fabric pool sorts first by name but has binding conditions: searched last
    first = Allocator([net, *plain], CLASSES, set()).allocate("n1", {}, [claim(exact("r"))])
    assert picked(first) == [[("r", "gpu-0")]]
    assert first is not None and "bindingConditions" not in first[0]["devices"]["results"][0]
    taken = {DeviceID(DRIVER, "z-local", "gpu-0")}
    res = Allocator([net, *plain], CLASSES, taken).allocate("n1", {}, [claim(exact("r"))])
    assert res is not None
    (result,) = res[0]["devices"]["results"]
    assert result["device"] == "bc-0"
    assert result["bindingConditions"] == ["attached"]
    assert result["bindingFailureConditions"] == ["failed"]
    # bindsToNode: an all-nodes device limits the allocation to the chosen node
    assert res[0]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
        ]
    }
    bound.pop("bindsToNode")
    net2 = Slice.parse(
        {
            "metadata": {"name": "fabric", "uid": "f", "resourceVersion": "2"},
            "spec": {
                "driver": DRIVER,
                "allNodes": True,
                "pool": {"name": "a-fabric", "generation": 1, "resourceSliceCount": 1},
                "devices": [bound],
            },
        }
    )
    res = Allocator([net2], CLASSES, set()).allocate("n1", {}, [claim(exact("r"))])
    assert res is not None and "nodeSelector" not in res[0]


def rule(name: str, taint: dict[str, Any], **selector: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"deviceSelector": selector, "taint": taint},
    }


def test_device_taint_rules_taint_the_devices_they_select() -> None:
    s = [
        slice_("n1", "n1", [dev("gpu-0"), dev("gpu-1")]),
        slice_("n1-other", "n1", [dev("gpu-0")], pool="other"),
    ]
    broken = {"key": "broken", "value": "fan", "effect": "NoSchedule"}
    by_device = TaintRule.parse(rule("one", broken, device="gpu-0", pool="n1"))
    assert by_device is not None
    a = Allocator(s, CLASSES, set(), [by_device])
    assert picked(a.allocate("n1", {}, [claim(exact("r", 2))])) == [
        [("r", "gpu-1"), ("r", "gpu-0")]
    ]
    tol = [{"key": "broken", "operator": "Equal", "value": "fan", "effect": "NoSchedule"}]
    assert picked(a.allocate("n1", {}, [claim(exact("r", 1, tolerations=tol))])) == [
        [("r", "gpu-0")]
    ]
    # a driver-wide NoExecute rule taints every device of the driver
    everything = TaintRule.parse(
        rule("all", {"key": "drain", "effect": "NoExecute"}, driver=DRIVER)
    )
    assert everything is not None
    assert (
        Allocator(s, CLASSES, set(), [everything]).allocate("n1", {}, [claim(exact("r"))]) is None
    )
    other = TaintRule.parse(rule("x", {"key": "drain", "effect": "NoExecute"}, driver="x.io"))
    assert other is not None
    assert picked(Allocator(s, CLASSES, set(), [other]).allocate("n1", {}, [claim(exact("r"))]))
    # effect None only informs; a rule without a selector selects nothing
    info = TaintRule.parse(rule("info", {"key": "note", "effect": "None"}))
    assert info is not None
    assert picked(Allocator(s, CLASSES, set(), [info]).allocate("n1", {}, [claim(exact("r"))]))
    assert TaintRule.parse({"metadata": {"name": "none"}, "spec": {"taint": broken}}) is None


def reaching(name: str, how: dict[str, Any]) -> Slice:
    """A slice of one device in its own pool that reaches nodes as ``how`` says."""
    return Slice.parse(
        {
            "metadata": {"name": name, "uid": name, "resourceVersion": "1"},
            "spec": {
                "driver": DRIVER,
                **how,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": [dev("d")],
            },
        }
    )


def pool_names(pools: list[Any]) -> list[str]:
    return [p.pool for p in pools]


def test_slice_index_keeps_pools_per_node_while_no_slice_reaches_nodes_by_labels() -> None:
    network = reaching("net", {"allNodes": True})
    index = SliceIndex([slice_("a-local", "a", [dev("x")]), network])
    first = index.pools("a", {})
    assert index.pools("a", {"rack": "1"}) is first  # kept: the labels cannot matter
    assert pool_names(first) == pool_names(gather_pools(index, "a", {})) == ["a", "net"]
    assert pool_names(index.pools("b", {})) == ["net"]
    by_label = reaching("rack-1", {"nodeSelector": _rack_selector("1")})
    index = SliceIndex([slice_("a-local", "a", [dev("x")]), network, by_label])
    assert pool_names(index.pools("a", {"rack": "1"})) == ["a", "net", "rack-1"]
    assert pool_names(index.pools("a", {"rack": "2"})) == ["a", "net"]  # not kept


def _rack_selector(value: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "rack", "operator": "In", "values": [value]}]}
    return {"nodeSelectorTerms": [term]}
