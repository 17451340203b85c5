from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kscheduler.algorithm import Algorithm
from kscheduler.cache import Cache, Snapshot
from kscheduler.framework import Code, CycleState, NodeToStatus, PodInfo, QueueingHint, Status
from kscheduler.framework.args import ConfigError
from kscheduler.framework.dra import allocated_devices
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.runtime import Framework
from kscheduler.informers import Informer
from kscheduler.plugins import (
    default_binder,
    default_preemption,
    dynamic_resources,
    node_resources_fit,
    priority_sort,
)
from kscheduler.plugins.dynamic_resources import (
    ENTRY,
    MSG_STATE_NOT_FOUND,
    DynamicResources,
)

from ..builders import node, pod
from ..fakes import FakeClient, FakeObjects, FakeRecorder, framework

PL = DynamicResources(None)


def with_claims() -> PodInfo:
    raw = pod("claims").req(cpu="1").raw()
    raw["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "my-gpu"}]
    info = parse_pod(raw)
    assert info.parse_error is None
    return info


def test_extension_points() -> None:
    assert ENTRY.extension_points == frozenset(
        {
            "preEnqueue",
            "preFilter",
            "filter",
            "postFilter",
            "preScore",
            "score",
            "reserve",
            "preBind",
        }
    )
    assert ENTRY.parse_args is dynamic_resources.parse_args


async def test_pod_without_claims_skips_then_has_nothing_to_deallocate() -> None:
    state = CycleState()
    assert PL.pre_filter(state, pod("p").req(cpu="1").build(), []) == (
        None,
        Status.skip(),
    )
    res, st = await PL.post_filter(state, pod("p").build(), NodeToStatus())
    assert res is None
    assert st is not None
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE, [])


async def test_post_filter_without_its_pre_filter_is_an_error() -> None:
    res, st = await PL.post_filter(CycleState(), pod("p").build(), NodeToStatus())
    assert res is None
    assert st is not None
    assert (st.code, st.message) == (Code.ERROR, MSG_STATE_NOT_FOUND)
    assert MSG_STATE_NOT_FOUND == "not found"


async def test_pod_whose_claim_is_missing_is_rejected_with_upstreams_message() -> None:
    pl = DynamicResources(_Handle(FakeObjects()))
    state = CycleState()
    res, st = pl.pre_filter(state, with_claims(), [])
    assert res is None
    assert st is not None
    assert (st.code, st.message) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        'resourceclaim.resource.k8s.io "my-gpu" not found',
    )
    pre = pl.pre_enqueue(with_claims())
    assert pre is not None and pre.message == st.message


class _Handle:
    def __init__(self, objects: FakeObjects) -> None:
        self.objects = objects


def _framework(cache: Cache, objects: FakeObjects | None = None) -> tuple[Framework, Snapshot]:
    fwk, snap, _, _ = framework(
        [
            priority_sort.ENTRY,
            node_resources_fit.ENTRY,
            dynamic_resources.ENTRY,
            default_preemption.ENTRY,
            default_binder.ENTRY,
        ],
        {
            "queueSort": ["PrioritySort"],
            "preFilter": ["NodeResourcesFit", "DynamicResources"],
            "filter": ["NodeResourcesFit"],
            "postFilter": ["DynamicResources", "DefaultPreemption"],
            "bind": ["DefaultBinder"],
        },
        cache=cache,
        objects=objects,
    )
    return fwk, snap


async def test_in_a_profile_its_message_comes_before_preemption() -> None:
    cache = Cache()
    ni = node("n1").alloc(cpu="1", pods=110).build()
    assert ni.node is not None
    cache.add_node(ni.node)
    fwk, snap = _framework(cache)
    snap.update()
    state = CycleState()
    p = pod("p").req(cpu="2").build()
    feasible, diagnosis = Algorithm().find_nodes_that_fit(fwk, state, p, snap)
    assert feasible == []
    _, st = await fwk.run_post_filter(state, p, diagnosis.node_to_status)
    assert st is not None
    assert st.message == (
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )

    # a pod whose claim does not exist never reaches Filter
    state = CycleState()
    feasible, diagnosis = Algorithm().find_nodes_that_fit(fwk, state, with_claims(), snap)
    assert feasible == []
    assert diagnosis.pre_filter_msg == 'resourceclaim.resource.k8s.io "my-gpu" not found'
    assert diagnosis.unschedulable_plugins == {"DynamicResources"}


def test_args_filter_timeout_as_upstream_validates_it() -> None:
    assert dynamic_resources.parse_args({}) == dynamic_resources.DynamicResourcesArgs(10.0, 600.0)
    got = dynamic_resources.parse_args({"filterTimeout": "1m30s", "bindingTimeout": "2s"})
    assert (got.filter_timeout, got.binding_timeout) == (90.0, 2.0)
    assert dynamic_resources.parse_args({"filterTimeout": "0"}).filter_timeout == 0.0
    with pytest.raises(ConfigError, match=r'filterTimeout: Invalid value: "-1s": must be zero'):
        dynamic_resources.parse_args({"filterTimeout": "-1s"})
    with pytest.raises(ConfigError, match=r'bindingTimeout: Invalid value: "500ms": must be at'):
        dynamic_resources.parse_args({"bindingTimeout": "500ms"})
    with pytest.raises(ConfigError, match="filterTimeout: expected duration string"):
        dynamic_resources.parse_args({"filterTimeout": 10})
    with pytest.raises(ConfigError, match="unknown field"):
        dynamic_resources.parse_args({"filterTimeOut": "1s"})


def test_filter_past_its_timeout_is_an_error_naming_the_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = "gpu.example.com"
    objects = FakeObjects(
        {
            "resourceslices": [
                {
                    "metadata": {"name": "n1-gpu", "uid": "s1", "resourceVersion": "1"},
                    "spec": {
                        "driver": driver,
                        "nodeName": "n1",
                        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                        "devices": [{"name": "gpu-0"}],
                    },
                }
            ],
            "deviceclasses": [
                {
                    "metadata": {"name": "gpu"},
                    "spec": {
                        "selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]
                    },
                }
            ],
            "resourceclaims": [
                {
                    "metadata": {"namespace": "default", "name": "my-gpu", "uid": "c1"},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]
                        }
                    },
                }
            ],
        }
    )
    ni = node("n1").alloc(cpu="4", pods=110).build()
    for timeout, want in ((0.0, None), (10.0, None), (10.0, Code.ERROR)):
        if want is not None:  # the clock jumps 11s between Filter's start and the search
            ticks = iter([0.0])
            monkeypatch.setattr(time, "monotonic", lambda t=ticks: next(t, 11.0))
        args = dynamic_resources.DynamicResourcesArgs(timeout)
        pl = DynamicResources(_Handle(objects), args)  # type: ignore[arg-type]
        state = CycleState()
        assert pl.pre_filter(state, with_claims(), [ni]) == (None, None)
        st = pl.filter(state, with_claims(), ni)
        if want is None:
            assert st is None
        else:
            assert st is not None
            assert (st.code, st.message) == (want, "node n1: timed out trying to allocate devices")


def test_an_allocation_error_is_wrapped_as_upstreams_framework_wraps_filter_errors() -> None:
    driver = "gpu.example.com"
    objects = FakeObjects(
        {
            "resourceslices": [
                {
                    "metadata": {"name": "n1-gpu", "uid": "s1", "resourceVersion": "1"},
                    "spec": {
                        "driver": driver,
                        "nodeName": "n1",
                        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 2},
                        "devices": [{"name": "gpu-0"}],
                    },
                }
            ],
            "deviceclasses": [{"metadata": {"name": "gpu"}, "spec": {}}],
            "resourceclaims": [
                {
                    "metadata": {"namespace": "default", "name": "my-gpu", "uid": "c1"},
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "r",
                                    "exactly": {"deviceClassName": "gpu", "allocationMode": "All"},
                                }
                            ]
                        }
                    },
                }
            ],
        }
    )
    cache = Cache()
    ni = node("n1").alloc(cpu="4", pods=110).build()
    assert ni.node is not None
    cache.add_node(ni.node)
    fwk, _, _, _ = framework(
        [priority_sort.ENTRY, dynamic_resources.ENTRY, default_binder.ENTRY],
        {
            "queueSort": ["PrioritySort"],
            "preFilter": ["DynamicResources"],
            "filter": ["DynamicResources"],
            "bind": ["DefaultBinder"],
        },
        cache=cache,
        objects=objects,
    )
    state = CycleState()
    p = with_claims()
    fwk.run_pre_filter(state, p, [ni])
    want = (
        'running "DynamicResources" filter plugin: claim default/my-gpu, request r: asks for '
        "all devices, but resource pool gpu.example.com/n1 is currently being updated"
    )
    st = fwk.run_filter(state, p, ni)
    assert st is not None and (st.code, st.message, st.plugin) == (
        Code.ERROR,
        want,
        "DynamicResources",
    )
    found = fwk.run_filters_on(fwk.filters_to_run(state), state, p, [ni])
    assert found[0].message == want


# ---- DRADeviceBindingConditions -------------------------------------------------------------
class _BindingHandle:
    def __init__(self, objects: FakeObjects) -> None:
        self.objects = objects
        self.client = FakeClient()
        self.recorder = FakeRecorder()


def _bound_claim(
    pod_uid: str, *, at: str, conditions: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """A claim allocated to a device with binding conditions and reserved for the pod."""
    claim: dict[str, Any] = {
        "metadata": {"namespace": "default", "name": "my-gpu", "uid": "c1", "resourceVersion": "5"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "r",
                            "driver": "gpu.example.com",
                            "pool": "n1",
                            "device": "gpu-0",
                            "bindingConditions": ["attached", "ready"],
                            "bindingFailureConditions": ["failed"],
                        }
                    ]
                },
                "allocationTimestamp": at,
            },
            "reservedFor": [{"resource": "pods", "name": "claims", "uid": pod_uid}],
        },
    }
    if conditions is not None:
        claim["status"]["devices"] = [
            {
                "driver": "gpu.example.com",
                "pool": "n1",
                "device": "gpu-0",
                "conditions": conditions,
            }
        ]
    return claim


def _cond(type_: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def _now(delta: float = 0.0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_claim_ready_for_binding_as_upstream() -> None:
    ready = dynamic_resources.claim_ready_for_binding
    uid = "p1"
    assert not ready(_bound_claim(uid, at=_now(), conditions=None))  # no device status yet
    assert not ready(_bound_claim(uid, at=_now(), conditions=[_cond("attached")]))
    assert not ready(
        _bound_claim(uid, at=_now(), conditions=[_cond("attached"), _cond("ready", "False")])
    )
    assert ready(_bound_claim(uid, at=_now(), conditions=[_cond("ready"), _cond("attached")]))
    failed = _bound_claim(
        uid, at=_now(), conditions=[_cond("attached"), _cond("failed", reason="R", message="no")]
    )
    with pytest.raises(dynamic_resources.BindingFailed) as exc:
        ready(failed)
    assert str(exc.value) == 'device binding failed: claim=my-gpu, reason=R, message="no"'
    plain = _bound_claim(uid, at=_now(), conditions=None)
    del plain["status"]["allocation"]["devices"]["results"][0]["bindingConditions"]
    assert ready(plain)


async def _pre_bind_with(
    claim: dict[str, Any], timeout: float, driver: Any = None
) -> tuple[Status | None, _BindingHandle, float]:
    p = with_claims()
    claim["status"]["reservedFor"][0]["uid"] = p.uid
    objects = FakeObjects(
        {"resourceclaims": [claim], "deviceclasses": [{"metadata": {"name": "gpu"}}]}
    )
    handle = _BindingHandle(objects)
    pl = DynamicResources(handle, dynamic_resources.DynamicResourcesArgs(binding_timeout=timeout))  # type: ignore[arg-type]
    state = CycleState()
    assert pl.pre_filter(state, p, []) == (None, None)
    task = asyncio.create_task(driver(objects)) if driver is not None else None
    t0 = time.monotonic()
    st = await pl.pre_bind(state, p, "n1")
    if task is not None:
        await task
    return st, handle, time.monotonic() - t0


async def test_pre_bind_waits_for_the_binding_conditions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dynamic_resources, "BINDING_POLL", 0.02)

    async def driver(objects: FakeObjects) -> None:
        await asyncio.sleep(0.1)
        done = _bound_claim("", at=_now(), conditions=[_cond("attached"), _cond("ready")])
        done["metadata"]["resourceVersion"] = "6"
        done["status"]["reservedFor"] = objects.objects["resourceclaims"][0]["status"][
            "reservedFor"
        ]
        objects.objects["resourceclaims"] = [done]

    st, handle, took = await _pre_bind_with(_bound_claim("", at=_now(), conditions=None), 5, driver)
    assert st is None
    assert took >= 0.1
    assert handle.recorder.events == [
        (
            "default/claims",
            "Normal",
            "BindingConditionsPending",
            "waiting for binding conditions for device on node n1",
        )
    ]


async def test_pre_bind_fails_on_a_binding_failure_condition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dynamic_resources, "BINDING_POLL", 0.02)

    async def driver(objects: FakeObjects) -> None:
        await asyncio.sleep(0.05)
        bad = _bound_claim(
            "", at=_now(), conditions=[_cond("failed", reason="Broken", message="fan")]
        )
        bad["metadata"]["resourceVersion"] = "6"
        objects.objects["resourceclaims"] = [bad]

    st, _, _ = await _pre_bind_with(_bound_claim("", at=_now(), conditions=None), 5, driver)
    assert st is not None
    assert (st.code, st.message) == (
        Code.ERROR,
        'device binding failed: claim=my-gpu, reason=Broken, message="fan"',
    )


async def test_pre_bind_gives_up_at_the_binding_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dynamic_resources, "BINDING_POLL", 0.02)
    # (allocationTimestamp ahead, so that the claim's own timeout does not come first)
    st, _, took = await _pre_bind_with(_bound_claim("", at=_now(5), conditions=None), 0.15)
    assert st is not None
    assert (st.code, st.message) == (
        Code.ERROR,
        "device binding timeout: context deadline exceeded",
    )
    assert 0.15 <= took < 1
    # allocated longer ago than bindingTimeout: the claim itself has timed out
    st, _, took = await _pre_bind_with(_bound_claim("", at=_now(-60), conditions=None), 30)
    assert st is not None
    assert st.message == "device binding timeout: claim=my-gpu"
    assert took < 1


def test_filter_finds_a_failed_or_timed_out_claim_unavailable() -> None:
    ni = node("n1").alloc(cpu="4", pods=110).build()
    cases = [
        (_bound_claim("", at=_now(), conditions=None), None),
        (
            _bound_claim("", at=_now(-700), conditions=None),
            "resourceclaim not available on the node",
        ),
        (
            _bound_claim("", at=_now(), conditions=[_cond("failed")]),
            "resourceclaim not available on the node",
        ),
    ]
    for claim, want in cases:
        p = with_claims()
        claim["status"]["reservedFor"][0]["uid"] = p.uid
        pl = DynamicResources(_BindingHandle(FakeObjects({"resourceclaims": [claim]})))  # type: ignore[arg-type]
        state = CycleState()
        assert pl.pre_filter(state, p, [ni]) == (None, None)
        st = pl.filter(state, p, ni)
        if want is None:
            assert st is None
        else:
            assert st is not None
            assert (st.code, st.message) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, want)


# ---- DRADeviceTaintRules ----------------------------------------------------------------------
def test_a_device_taint_rule_change_queues_pods_only_when_device_taints_change() -> None:
    slice_obj = {
        "metadata": {"name": "n1-gpu", "resourceVersion": "1"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
        },
    }
    pl = DynamicResources(_BindingHandle(FakeObjects({"resourceslices": [slice_obj]})))  # type: ignore[arg-type]

    def rule(device: str, key: str = "broken", **extra: Any) -> dict[str, Any]:
        return {
            "metadata": {"name": "r", **extra},
            "spec": {
                "deviceSelector": {"driver": "gpu.example.com", "device": device},
                "taint": {"key": key, "effect": "NoSchedule"},
            },
        }

    hint = pl._after_taint_rule_change
    p = with_claims()
    assert hint(p, None, rule("gpu-0")) == QueueingHint.QUEUE
    assert hint(p, rule("gpu-0"), None) == QueueingHint.QUEUE
    assert hint(p, None, rule("gpu-9")) == QueueingHint.SKIP  # selects no device
    assert hint(p, rule("gpu-0"), rule("gpu-0", labels={"a": "b"})) == QueueingHint.SKIP
    assert hint(p, rule("gpu-0"), rule("gpu-0", key="other")) == QueueingHint.QUEUE
    assert hint(p, rule("gpu-9"), rule("gpu-1")) == QueueingHint.QUEUE
    assert hint(pod("plain").build(), None, rule("gpu-0")) == QueueingHint.SKIP


def test_filter_honours_device_taint_rules() -> None:
    driver = "gpu.example.com"
    ni = node("n1").alloc(cpu="4", pods=110).build()

    def objects(rules: list[dict[str, Any]], tolerations: list[Any]) -> FakeObjects:
        return FakeObjects(
            {
                "resourceslices": [
                    {
                        "metadata": {"name": "n1-gpu", "uid": "s1", "resourceVersion": "1"},
                        "spec": {
                            "driver": driver,
                            "nodeName": "n1",
                            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                            "devices": [{"name": "gpu-0"}],
                        },
                    }
                ],
                "deviceclasses": [{"metadata": {"name": "gpu"}, "spec": {}}],
                "devicetaintrules": rules,
                "resourceclaims": [
                    {
                        "metadata": {"namespace": "default", "name": "my-gpu", "uid": "c1"},
                        "spec": {
                            "devices": {
                                "requests": [
                                    {
                                        "name": "r",
                                        "exactly": {
                                            "deviceClassName": "gpu",
                                            "tolerations": tolerations,
                                        },
                                    }
                                ]
                            }
                        },
                    }
                ],
            }
        )

    rule = {
        "metadata": {"name": "drain", "resourceVersion": "1"},
        "spec": {
            "deviceSelector": {"pool": "n1"},
            "taint": {"key": "drain", "effect": "NoExecute"},
        },
    }
    tol = [{"key": "drain", "operator": "Exists", "effect": "NoExecute"}]
    for rules, tolerations, want in (
        ([], [], None),
        ([rule], [], Code.UNSCHEDULABLE_AND_UNRESOLVABLE),
        ([rule], tol, None),
    ):
        pl = DynamicResources(_BindingHandle(objects(rules, tolerations)))  # type: ignore[arg-type]
        state = CycleState()
        assert pl.pre_filter(state, with_claims(), [ni]) == (None, None)
        st = pl.filter(state, with_claims(), ni)
        assert (st.code if st else None) == want
        if st is not None:
            assert st.message == "cannot allocate all claims"


# ---- a device allocated by another scheduler since Filter ------------------------------------
async def test_pre_bind_refuses_a_device_another_claim_got_meanwhile() -> None:
    driver = "gpu.example.com"
    ni = node("n1").alloc(cpu="4", pods=110).build()
    mine = {
        "metadata": {"namespace": "default", "name": "my-gpu", "uid": "c1", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    objects = FakeObjects(
        {
            "resourceslices": [
                {
                    "metadata": {"name": "n1-gpu", "uid": "s1", "resourceVersion": "1"},
                    "spec": {
                        "driver": driver,
                        "nodeName": "n1",
                        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                        "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
                    },
                }
            ],
            "deviceclasses": [{"metadata": {"name": "gpu"}, "spec": {}}],
            "resourceclaims": [mine],
        }
    )
    handle = _BindingHandle(objects)
    pl = DynamicResources(handle)  # type: ignore[arg-type]
    p = with_claims()
    state = CycleState()
    assert pl.pre_filter(state, p, [ni]) == (None, None)
    assert pl.filter(state, p, ni) is None
    assert pl.reserve(state, p, "n1") is None
    # another scheduler writes gpu-0 (the device picked in Filter) into its own claim
    objects.objects["resourceclaims"].append(
        {
            "metadata": {
                "namespace": "other",
                "name": "theirs",
                "uid": "c2",
                "resourceVersion": "2",
            },
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "r", "driver": driver, "pool": "n1", "device": "gpu-0"}
                        ]
                    }
                }
            },
        }
    )
    st = await pl.pre_bind(state, p, "n1")
    assert st is not None
    assert (st.code, st.message) == (
        Code.ERROR,
        "device gpu.example.com/n1/gpu-0 for claim default/my-gpu got allocated to claim "
        "other/theirs in the meantime",
    )
    assert handle.client.requests == []  # nothing written
    pl.unreserve(state, p, "n1")
    # the next attempt takes the other device
    state = CycleState()
    assert pl.pre_filter(state, p, [ni]) == (None, None)
    assert pl.filter(state, p, ni) is None
    assert pl.reserve(state, p, "n1") is None
    assert pl._in_flight["c1"][1]["devices"]["results"][0]["device"] == "gpu-1"


class _ClaimInformerObjects:
    """An object lister whose claims come from a real Informer store (it tells
    which claims changed); other kinds are empty."""

    def __init__(self) -> None:
        self.claims: Informer[dict[str, Any]] = Informer(
            _NoWatch(), "/apis/resource.k8s.io/v1/resourceclaims"
        )

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.claims.list(namespace) if kind == dynamic_resources.CLAIMS else []

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get(namespace, name) if kind == dynamic_resources.CLAIMS else None

    def changes_since(self, kind: str, cursor: int | None) -> tuple[int, list[str] | None]:
        assert kind == dynamic_resources.CLAIMS
        return self.claims.changes_since(cursor)


class _NoWatch:
    async def list_json(self, path: str, params: Any = None) -> dict[str, Any]:
        raise AssertionError("not used")

    def watch_json(self, path: str, params: Any = None) -> Any:
        raise AssertionError("not used")


def _allocated_claim(name: str, rv: int, devices: list[str], uid: str = "") -> dict[str, Any]:
    results = [{"request": "r", "driver": "d", "pool": "p", "device": dev} for dev in devices]
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid or f"uid-{name}",
            "resourceVersion": str(rv),
        },
        "spec": {"devices": {"requests": [{"name": "r"}]}},
        "status": {"allocation": {"devices": {"results": results}}} if devices else {},
    }


def test_devices_in_use_follow_each_claim_change_as_a_full_count_does() -> None:
    """The sums kept from the informer's change log equal a count over every claim,
    through adds, reallocations, deallocations, deletions and a re-created name."""
    rng = random.Random(7)
    objects = _ClaimInformerObjects()
    pl = DynamicResources(_Handle(objects))  # type: ignore[arg-type]
    names = [f"c{i}" for i in range(12)]
    uids = {n: f"uid-{n}" for n in names}
    for rv in range(1, 400):
        name = rng.choice(names)
        if rng.random() < 0.15:
            objects.claims.apply("DELETED", _allocated_claim(name, rv, [], uids[name]))
            uids[name] = f"uid-{name}-{rv}"  # the next one with this name is another claim
        else:
            devices = rng.sample([f"dev{i}" for i in range(30)], rng.randint(0, 2))
            objects.claims.apply("MODIFIED", _allocated_claim(name, rv, devices, uids[name]))
        if rng.random() < 0.5:
            continue  # several changes between two cycles
        taken, shared = pl._taken()
        assert taken == allocated_devices(objects.claims.list())
        assert shared == {}
        for claim in objects.claims.list():
            mine = claim["status"].get("allocation")
            if not mine:
                continue
            uid = claim["metadata"]["uid"]
            others = allocated_devices(
                c for c in objects.claims.list() if c["metadata"]["uid"] != uid
            )
            clash = pl._allocated_to_another_claim(uid, mine)
            assert (clash is not None) == bool(allocated_devices([claim]) & others)


def test_claim_hint_queues_the_claims_own_pods_and_any_pod_when_devices_are_freed() -> None:
    hint = DynamicResources(None)._after_claim_change

    def templated(name: str, made: str | None) -> PodInfo:
        raw = pod(name).raw()
        raw["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
        if made is not None:
            raw["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": made}]}
        return parse_pod(raw)

    def claim(name: str, namespace: str = "default", allocated: bool = False) -> dict[str, Any]:
        obj: dict[str, Any] = {"metadata": {"namespace": namespace, "name": name}}
        if allocated:
            obj["status"] = {"allocation": {"devices": {"results": []}}}
        return obj

    direct = with_claims()  # refers to my-gpu by name
    waiting = templated("waiting", None)  # its claim not made yet
    made = templated("made", "made-gpu-x")
    plain = pod("plain").build()
    pods = [direct, waiting, made, plain]

    def answers(old: Any, new: Any) -> list[QueueingHint]:
        return [hint(p, old, new) for p in pods]

    Q, S = QueueingHint.QUEUE, QueueingHint.SKIP
    # the same event object asked about each waiting pod in turn, as the queue does
    assert answers(None, claim("my-gpu")) == [Q, S, S, S]
    assert answers(None, claim("made-gpu-x")) == [S, S, Q, S]
    assert answers(None, claim("my-gpu", namespace="other")) == [S, S, S, S]
    assert answers(None, claim("unrelated")) == [S, S, S, S]
    # another claim's devices freed: every pod using DRA may fit now
    assert answers(claim("unrelated", allocated=True), claim("unrelated")) == [Q, Q, Q, S]
    assert answers(claim("unrelated", allocated=True), None) == [Q, Q, Q, S]
    assert answers(claim("my-gpu"), None) == [S, S, S, S]  # deleted, held nothing
    # the pod's next version names the claim made from its template
    assert hint(templated("waiting", "waiting-gpu-1"), None, claim("waiting-gpu-1")) == Q
    assert hint(waiting, None, claim("waiting-gpu-1")) == S


class _DeviceObjects(_ClaimInformerObjects):
    """Claims in an Informer store (which tells what changed), slices and classes in
    lists."""

    def __init__(self, others: dict[str, list[dict[str, Any]]]) -> None:
        super().__init__()
        self.others = others

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        if kind == dynamic_resources.CLAIMS:
            return super().list(kind, namespace)
        return list(self.others.get(kind, []))

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == dynamic_resources.CLAIMS:
            return super().get(kind, namespace, name)
        return next((o for o in self.others.get(kind, []) if o["metadata"]["name"] == name), None)

    def changes_since(self, kind: str, cursor: int | None) -> tuple[int, list[str] | None]:
        if kind == dynamic_resources.CLAIMS:
            return super().changes_since(kind, cursor)
        return 0, None  # not kept: the plugin lists them


def test_allocations_kept_across_cycles_match_allocating_anew() -> None:
    """Filter's allocations with the memo on equal a fresh allocation each cycle, while
    devices are reserved, allocated, freed and nodes change; pods from one template
    (the same spec) share results, and a second spec gets its own."""
    driver = "gpu.example.com"

    def slice_obj(name: str, devices: int, **spec: Any) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "uid": name, "resourceVersion": "1"},
            "spec": {
                "driver": driver,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"dev-{i}"} for i in range(devices)],
                **spec,
            },
        }

    names = [f"n{i}" for i in range(5)]
    slices = [slice_obj(n, 3, nodeName=n) for n in names]
    slices.append(slice_obj("shared", 2, allNodes=True))  # a pool every node sees
    zone_a = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    # a pool the nodes labelled zone=a see
    slices.append(slice_obj("zonal", 2, nodeSelector={"nodeSelectorTerms": [zone_a]}))
    objects = _DeviceObjects(
        {"resourceslices": slices, "deviceclasses": [{"metadata": {"name": "gpu"}, "spec": {}}]}
    )
    kept = DynamicResources(_Handle(objects))  # type: ignore[arg-type]
    fresh = DynamicResources(_Handle(objects))  # type: ignore[arg-type]
    fresh.memo_allocations = False
    nodes = {n: node(n).alloc(cpu="4", pods=110).build() for n in names}
    specs = [
        {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
        {
            "devices": {
                "requests": [
                    {"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2}},
                ]
            }
        },
    ]
    rng = random.Random(11)
    rv = 0
    allocated: list[dict[str, Any]] = []
    in_flight: list[str] = []
    fits = 0
    for step in range(300):
        rv += 1
        claim = {
            "metadata": {
                "namespace": "ns",
                "name": f"c{step}",
                "uid": f"uid-{step}",
                "resourceVersion": str(rv),
            },
            "spec": rng.choice(specs),
        }
        objects.claims.apply("ADDED", claim)
        raw = pod(f"p{step}").raw()
        raw["metadata"]["namespace"] = "ns"
        raw["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"c{step}"}]
        p = parse_pod(raw)
        answers = []
        for pl in (kept, fresh):
            state = CycleState()
            assert pl.pre_filter(state, p, list(nodes.values())) == (None, None)
            statuses = {}
            for n, ni in nodes.items():
                st = pl.filter(state, p, ni)
                statuses[n] = None if st is None else (st.code, st.message)
            s = state.get(dynamic_resources.STATE_KEY)
            answers.append((statuses, s.node_allocations, state))
        assert answers[0][:2] == answers[1][:2], step
        feasible = [n for n, st in answers[0][0].items() if st is None]
        fits += bool(feasible)
        if feasible and rng.random() < 0.7:
            chosen = rng.choice(feasible)
            for pl, (_, _, state) in zip((kept, fresh), answers, strict=True):
                assert pl.reserve(state, p, chosen) is None
            in_flight.append(claim["metadata"]["uid"])
        roll = rng.random()
        if in_flight and roll < 0.5:  # an allocation in flight is written, or given up
            uid = in_flight.pop(rng.randrange(len(in_flight)))
            allocation = kept._in_flight[uid][1]
            for pl in (kept, fresh):
                pl._end_in_flight(uid)
            if rng.random() < 0.8:
                name = f"c{uid.removeprefix('uid-')}"
                rv += 1
                done = {
                    **objects.claims.get("ns", name),  # type: ignore[dict-item]
                    "status": {"allocation": allocation},
                }
                done["metadata"] = {**done["metadata"], "resourceVersion": str(rv)}
                objects.claims.apply("MODIFIED", done)
                allocated.append(done)
        elif allocated and roll < 0.7:  # a claim deleted: its devices are free again
            gone = allocated.pop(rng.randrange(len(allocated)))
            objects.claims.apply("DELETED", gone)
        elif roll < 0.8:  # a node's labels change (it may see the zonal pool, or not)
            n = rng.choice(names)
            zone = rng.choice("ab")
            nodes[n] = node(n).alloc(cpu="4", pods=110).label("zone", zone).build()
    assert 50 < fits < 300  # the devices ran out at times, and were freed again
    assert kept._memo_size > 0


def test_pre_score_skips_unless_a_claim_lists_alternatives() -> None:
    def state_with(*requests: dict[str, Any]) -> CycleState:
        state = CycleState()
        claim = {"metadata": {"name": "c"}, "spec": {"devices": {"requests": list(requests)}}}
        state.write(
            dynamic_resources.STATE_KEY,
            dynamic_resources._State(claims=[dynamic_resources._ClaimInfo("gpu", claim)]),
        )
        return state

    p = with_claims()
    exact = {"name": "r", "exactly": {"deviceClassName": "gpu"}}
    either = {"name": "e", "firstAvailable": [{"name": "a", "deviceClassName": "gpu"}]}
    assert PL.pre_score(CycleState(), p, []) == Status.skip()  # no PreFilter state
    assert PL.pre_score(state_with(), p, []) == Status.skip()
    assert PL.pre_score(state_with(exact), p, []) == Status.skip()
    assert PL.pre_score(state_with(exact, either), p, []) is None
