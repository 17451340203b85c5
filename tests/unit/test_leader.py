"""LeaderElector against an in-memory Lease API and a fake clock.

The fake clock only moves when a test advances it; sleeping electors wake in
time order, so several electors can share one timeline.
"""

from __future__ import annotations

import asyncio
import copy
import heapq
import itertools
import os
import re
import socket
from collections.abc import Callable
from typing import Any

import pytest

from kscheduler.kube import ApiError
from kscheduler.leader import JITTER, LeaderElector, LeadershipLost, process_identity

NS, NAME = "kube-system", "kscheduler"
PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
LD, RD, RP = 15.0, 10.0, 2.0


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(seconds, 0.0), next(self._seq), fut))
        await fut

    async def settle(self) -> None:
        for _ in range(50):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking sleepers in order and letting them run."""
        await self.settle()
        target = self.now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            when, _, fut = heapq.heappop(self._sleepers)
            self.now = max(self.now, when)
            if not fut.done():
                fut.set_result(None)
            await self.settle()
        self.now = target
        await self.settle()


class FakeLeaseApi:
    """One namespace's Leases with resourceVersion checks, like the apiserver."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.rv = itertools.count(1)
        self.calls: list[tuple[str, str]] = []
        #: errors raised by the next calls, in order
        self.fail: list[BaseException] = []
        #: called before each PUT is applied (e.g. to let a rival write first)
        self.before_put: Callable[[], None] | None = None
        self.hang = False

    async def _enter(self, method: str, path: str) -> None:
        self.calls.append((method, path))
        if self.hang:
            await asyncio.Event().wait()
        if self.fail:
            raise self.fail.pop(0)

    async def get_json(self, path: str) -> Any:
        await self._enter("GET", path)
        name = path.rsplit("/", 1)[-1]
        if name not in self.leases:
            raise ApiError(404, reason="NotFound")
        return copy.deepcopy(self.leases[name])

    async def post_json(self, path: str, body: Any) -> Any:
        await self._enter("POST", path)
        name = body["metadata"]["name"]
        if name in self.leases:
            raise ApiError(409, reason="AlreadyExists")
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(next(self.rv))
        self.leases[name] = obj
        return copy.deepcopy(obj)

    async def put_json(self, path: str, body: Any) -> Any:
        await self._enter("PUT", path)
        if self.before_put is not None:
            hook, self.before_put = self.before_put, None
            hook()
        name = path.rsplit("/", 1)[-1]
        current = self.leases.get(name)
        if current is None:
            raise ApiError(404, reason="NotFound")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiError(409, reason="Conflict")
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(next(self.rv))
        self.leases[name] = obj
        return copy.deepcopy(obj)

    # test helpers
    def spec(self) -> dict[str, Any]:
        return dict(self.leases[NAME]["spec"])

    def put_record(self, **spec: Any) -> None:
        """Another party writes the lease (creating it if needed)."""
        lease = self.leases.setdefault(
            NAME,
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": NAME, "namespace": NS},
                "spec": {},
            },
        )
        lease["spec"] = {**lease["spec"], **spec}
        lease["metadata"]["resourceVersion"] = str(next(self.rv))


@pytest.fixture
def ft() -> FakeTime:
    return FakeTime()


@pytest.fixture
def api() -> FakeLeaseApi:
    return FakeLeaseApi()


def elector(
    api: FakeLeaseApi, ft: FakeTime, identity: str, changes: list[bool] | None = None
) -> LeaderElector:
    return LeaderElector(
        api,
        namespace=NS,
        name=NAME,
        identity=identity,
        lease_duration=LD,
        renew_deadline=RD,
        retry_period=RP,
        clock=ft.clock,
        sleep=ft.sleep,
        wall_clock=lambda: 1_700_000_000.0 + ft.now,
        leader_changed=changes.append if changes is not None else None,
    )


async def _acquired_within(
    ft: FakeTime, le: LeaderElector, seconds: float, step: float = 0.1
) -> float:
    """Run le.acquire() on the fake clock; return the fake seconds it took."""
    start = ft.now
    task = asyncio.create_task(le.acquire())
    try:
        while not task.done():
            if ft.now - start > seconds:
                raise AssertionError(f"not acquired within {seconds}s (holder {le.holder!r})")
            await ft.advance(step)
        task.result()
        return ft.now - start
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_creates_missing_lease_and_leads(api: FakeLeaseApi, ft: FakeTime) -> None:
    changes: list[bool] = []
    a = elector(api, ft, "a", changes)
    await a.acquire()
    spec = api.spec()
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert MICRO_TIME.match(spec["acquireTime"]) and spec["acquireTime"] == spec["renewTime"]
    assert a.is_leader() and changes == [True]
    assert [m for m, _ in api.calls] == ["GET", "POST"]


async def test_fractional_lease_duration_is_rounded_up(api: FakeLeaseApi, ft: FakeTime) -> None:
    a = LeaderElector(
        api,
        namespace=NS,
        name=NAME,
        identity="a",
        lease_duration=2.5,
        renew_deadline=2.0,
        retry_period=0.5,
        clock=ft.clock,
        sleep=ft.sleep,
    )
    await a.acquire()
    assert api.spec()["leaseDurationSeconds"] == 3


async def test_standby_does_not_steal_a_renewed_lease(api: FakeLeaseApi, ft: FakeTime) -> None:
    a, b = elector(api, ft, "a"), elector(api, ft, "b")
    await a.acquire()
    hold = asyncio.create_task(a.hold())
    acquire_b = asyncio.create_task(b.acquire())
    await ft.advance(10 * LD)
    assert not acquire_b.done() and not hold.done()
    assert api.spec()["holderIdentity"] == "a" and a.is_leader()
    assert b.holder == "a"
    for t in (hold, acquire_b):
        t.cancel()
    await asyncio.gather(hold, acquire_b, return_exceptions=True)


async def test_processes_sharing_hostname_and_pid_never_both_lead(
    api: FakeLeaseApi, ft: FakeTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas on one node's host network, each PID 1 in its container: their
    identities still differ, so the second cannot take the first's Lease as its own."""
    monkeypatch.setattr(socket, "gethostname", lambda: "node-1")
    monkeypatch.setattr(os, "getpid", lambda: 1)
    id_a, id_b = process_identity(), process_identity()
    assert id_a != id_b
    assert id_a.startswith("node-1_") and id_b.startswith("node-1_")
    a, b = elector(api, ft, id_a), elector(api, ft, id_b)
    await a.acquire()
    hold = asyncio.create_task(a.hold())
    acquire_b = asyncio.create_task(b.acquire())
    await ft.advance(10 * LD)
    assert not acquire_b.done(), "b acquired a Lease that a holds and renews"
    assert a.is_leader() and not b.is_leader()
    assert api.spec()["holderIdentity"] == id_a
    for t in (hold, acquire_b):
        t.cancel()
    await asyncio.gather(hold, acquire_b, return_exceptions=True)


@pytest.mark.parametrize(
    "renew_time",
    ["2000-01-01T00:00:00.000000Z", "2100-01-01T00:00:00.000000Z"],
    ids=["remote-time-in-the-past", "remote-time-in-the-future"],
)
async def test_takeover_is_timed_on_the_local_clock(
    api: FakeLeaseApi, ft: FakeTime, renew_time: str
) -> None:
    """The holder's renewTime is never compared with our clock: whatever it says, a
    standby waits leaseDurationSeconds from when it first saw the record unchanged."""
    api.put_record(
        holderIdentity="dead",
        leaseDurationSeconds=15,
        acquireTime=renew_time,
        renewTime=renew_time,
        leaseTransitions=4,
    )
    changes: list[bool] = []
    b = elector(api, ft, "b", changes)
    took = await _acquired_within(ft, b, LD + RP)
    assert LD <= took <= LD + 0.2
    spec = api.spec()
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 5
    assert spec["acquireTime"] == spec["renewTime"] != renew_time
    assert changes == [True]


async def test_takeover_uses_the_records_lease_duration(api: FakeLeaseApi, ft: FakeTime) -> None:
    api.put_record(holderIdentity="other", leaseDurationSeconds=40, renewTime="x")
    b = elector(api, ft, "b")
    took = await _acquired_within(ft, b, 40 + RP)
    assert 40 <= took <= 40 + 0.2


async def test_a_changed_record_restarts_the_wait(api: FakeLeaseApi, ft: FakeTime) -> None:
    api.put_record(holderIdentity="other", leaseDurationSeconds=15, renewTime="t0")
    b = elector(api, ft, "b")
    task = asyncio.create_task(b.acquire())
    await ft.advance(10)
    api.put_record(renewTime="t1")  # the holder renews
    await ft.advance(10)
    assert not task.done(), "the renewal 10s ago must count"
    await ft.advance(LD)
    assert task.done()
    await task
    assert api.spec()["holderIdentity"] == "b"


async def test_released_lease_is_taken_on_the_next_poll(api: FakeLeaseApi, ft: FakeTime) -> None:
    api.put_record(holderIdentity="", leaseDurationSeconds=1, renewTime="t", leaseTransitions=2)
    b = elector(api, ft, "b")
    took = await _acquired_within(ft, b, RP)
    assert took < RP
    assert api.spec()["leaseTransitions"] == 3


async def test_conflict_on_takeover_is_retried_later(api: FakeLeaseApi, ft: FakeTime) -> None:
    """Two standbys race for an expired lease: the loser's PUT gets 409 and it waits."""
    api.put_record(holderIdentity="dead", leaseDurationSeconds=15, renewTime="t")
    b = elector(api, ft, "b")
    task = asyncio.create_task(b.acquire())
    await ft.advance(1)
    api.before_put = lambda: api.put_record(holderIdentity="c", renewTime="c1")
    await ft.advance(LD)
    assert ("PUT", PATH) in api.calls
    assert not task.done(), "b must not lead after losing the race"
    await ft.advance(RP * (1 + JITTER))
    assert not task.done()
    assert b.holder == "c"
    assert api.spec()["holderIdentity"] == "c"
    await ft.advance(LD + 2 * RP)  # c never renews: b takes over from c
    assert task.done()
    await task
    assert api.spec()["holderIdentity"] == "b"


async def test_create_race_is_lost_quietly(api: FakeLeaseApi, ft: FakeTime) -> None:
    api.fail = [ApiError(404, reason="NotFound")]
    api.put_record(holderIdentity="c", leaseDurationSeconds=15, renewTime="c0")
    b = elector(api, ft, "b")
    task = asyncio.create_task(b.acquire())
    await ft.advance(RP * 2)
    assert not task.done()
    assert ("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases") in api.calls
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_acquire_keeps_trying_through_errors(api: FakeLeaseApi, ft: FakeTime) -> None:
    api.fail = [ApiError(500, reason="InternalError"), ConnectionError("reset"), ApiError(403)]
    a = elector(api, ft, "a")
    took = await _acquired_within(ft, a, 4 * RP * (1 + JITTER))
    assert took >= 3 * RP
    assert a.holder == "a"


async def test_renewal_keeps_acquire_time_and_transitions(api: FakeLeaseApi, ft: FakeTime) -> None:
    a = elector(api, ft, "a")
    await a.acquire()
    first = api.spec()
    hold = asyncio.create_task(a.hold())
    api.calls.clear()
    await ft.advance(RP * 3 + 0.1)
    spec = api.spec()
    assert spec["acquireTime"] == first["acquireTime"]
    assert spec["renewTime"] > first["renewTime"]
    assert spec["leaseTransitions"] == first["leaseTransitions"]
    # the holder renews with the version it wrote last: one PUT per period, no GET
    assert [m for m, _ in api.calls] == ["PUT", "PUT", "PUT"]
    hold.cancel()
    await asyncio.gather(hold, return_exceptions=True)


async def test_hold_gives_up_after_renew_deadline(api: FakeLeaseApi, ft: FakeTime) -> None:
    changes: list[bool] = []
    a = elector(api, ft, "a", changes)
    await a.acquire()
    renewed = ft.now
    hold = asyncio.create_task(a.hold())
    api.fail = [ApiError(503, reason="ServiceUnavailable")] * 100
    await ft.advance(RD - 0.01)
    assert a.is_leader() and not hold.done()
    await ft.advance(0.02)
    assert not a.is_leader(), "is_leader is bounded by the last good renewal + renewDeadline"
    await ft.advance(0.1)
    assert hold.done()
    with pytest.raises(LeadershipLost, match="renewDeadline"):
        await hold
    assert ft.now - renewed < LD
    assert changes == [True, False]


async def test_hold_stops_at_once_when_someone_else_holds(api: FakeLeaseApi, ft: FakeTime) -> None:
    a = elector(api, ft, "a")
    await a.acquire()
    hold = asyncio.create_task(a.hold())
    await ft.advance(RP + 0.1)
    api.put_record(holderIdentity="intruder", renewTime="i0", leaseTransitions=9)
    await ft.advance(RP)
    assert hold.done()
    with pytest.raises(LeadershipLost, match="intruder"):
        await hold
    assert not a.is_leader()
    assert api.spec()["holderIdentity"] == "intruder", "a lost holder never writes again"


async def test_renewal_conflict_from_own_write_is_recovered(
    api: FakeLeaseApi, ft: FakeTime
) -> None:
    """A 409 while the Lease still names us (our earlier write landed after all): re-read, renew."""
    a = elector(api, ft, "a")
    await a.acquire()
    hold = asyncio.create_task(a.hold())
    api.put_record(renewTime="written-by-our-timed-out-request")
    await ft.advance(RP + 0.1)
    assert not hold.done() and a.is_leader()
    assert api.spec()["holderIdentity"] == "a"
    hold.cancel()
    await asyncio.gather(hold, return_exceptions=True)


async def test_hung_renewal_is_cut_at_the_deadline(api: FakeLeaseApi) -> None:
    a = LeaderElector(
        api,
        namespace=NS,
        name=NAME,
        identity="a",
        lease_duration=0.5,
        renew_deadline=0.3,
        retry_period=0.1,
    )
    await a.acquire()
    api.hang = True
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(a.hold(), 2.0)
    assert loop.time() - t0 < 0.45
    assert not a.is_leader()


async def test_release_hands_the_lease_over(api: FakeLeaseApi, ft: FakeTime) -> None:
    changes: list[bool] = []
    a, b = elector(api, ft, "a", changes), elector(api, ft, "b")
    await a.acquire()
    acquire_b = asyncio.create_task(b.acquire())
    await ft.advance(RP * 3)
    assert not acquire_b.done()
    assert await a.release()
    spec = api.spec()
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)
    assert spec["leaseTransitions"] == 0
    assert not a.is_leader() and changes == [True, False]
    released = ft.now
    while not acquire_b.done():
        await ft.advance(0.05)
    assert ft.now - released <= RP * (1 + JITTER)
    await acquire_b
    assert api.spec()["holderIdentity"] == "b"
    assert api.spec()["leaseTransitions"] == 1


async def test_release_with_a_stale_version_rereads(api: FakeLeaseApi, ft: FakeTime) -> None:
    a = elector(api, ft, "a")
    await a.acquire()
    api.put_record(renewTime="a-late-write")  # still ours, newer resourceVersion
    assert await a.release()
    assert api.spec()["holderIdentity"] == ""


async def test_release_does_nothing_when_not_holder(api: FakeLeaseApi, ft: FakeTime) -> None:
    a = elector(api, ft, "a")
    await a.acquire()
    api.put_record(holderIdentity="b", renewTime="b0")
    assert await a.release()
    assert api.spec()["holderIdentity"] == "b"
    api.calls.clear()
    a2 = elector(api, ft, "never-led")
    assert await a2.release()
    assert api.calls == []


def test_standby_delay_has_bounded_jitter_and_stops_at_expiry(
    api: FakeLeaseApi, ft: FakeTime
) -> None:
    b = elector(api, ft, "b")
    delays = [b._standby_delay() for _ in range(200)]
    assert all(RP <= d <= RP * (1 + JITTER) for d in delays)
    assert max(delays) > min(delays)
    b._observe(
        {
            "metadata": {"resourceVersion": "1"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        }
    )
    ft.now += 14.5
    assert b._standby_delay() == pytest.approx(0.51)


@pytest.mark.parametrize(
    ("ld", "rd", "rp", "identity"),
    [(10, 10, 2, "a"), (15, 10, 10, "a"), (15, 10, 0, "a"), (15, 10, 2, "")],
)
def test_rejects_unsafe_settings(ld: float, rd: float, rp: float, identity: str) -> None:
    with pytest.raises(ValueError):
        LeaderElector(
            FakeLeaseApi(),
            namespace=NS,
            name=NAME,
            identity=identity,
            lease_duration=ld,
            renew_deadline=rd,
            retry_period=rp,
        )
