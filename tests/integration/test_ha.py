"""Two kscheduler processes on one Lease against the real apiserver.

Exactly one schedules; kill -9 of the leader lets the standby take over within
leaseDuration + retryPeriod; SIGTERM of the leader hands over within about a
retryPeriod and exits 0; no pod is lost or bound twice; /metrics moves.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from kscheduler.controlplane.builders import create_nodes, create_pods, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane, ManagedProcess, free_ports
from kscheduler.controlplane.rest import ApiError, RestClient
from kscheduler.framework.quantity import parse_quantity
from kscheduler.leader import JITTER
from tests.integration.runner import wait_for

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 1.0
#: Room for process start-up, request latency and our 50 ms polling on a busy 2-core box.
SLACK = 1.5
NODES = 4
NODE_CPU = "4"
POD_CPU = "100m"


@dataclass
class Cluster:
    ns: str
    name: str  # schedulerName and Lease name
    config: Path
    rest: RestClient
    cp: ControlPlane

    @property
    def lease_path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.ns}/leases/{self.name}"

    async def lease(self) -> dict[str, Any]:
        try:
            lease: dict[str, Any] = await self.rest.get(self.lease_path)
        except ApiError as exc:
            if exc.status == 404:
                return {}
            raise
        return lease

    async def holder(self) -> str:
        return str(((await self.lease()).get("spec") or {}).get("holderIdentity") or "")

    async def pods(self) -> list[dict[str, Any]]:
        answer = await self.rest.get(f"/api/v1/namespaces/{self.ns}/pods")
        items: list[dict[str, Any]] = answer["items"]
        return items

    async def create_pods(self, prefix: str, count: int) -> None:
        await create_pods(
            self.rest,
            [
                make_pod(
                    f"{prefix}-{i}", self.ns, cpu=POD_CPU, memory="64Mi", scheduler_name=self.name
                )
                for i in range(count)
            ],
        )

    async def bound_count(self) -> int:
        return sum(1 for p in await self.pods() if p["spec"].get("nodeName"))


class Replica:
    """One ``python -m kscheduler`` process with its own /metrics port and log file."""

    def __init__(self, cluster: Cluster, label: str, port: int, workdir: Path) -> None:
        self.label = label
        self.port = port
        self.log_path = workdir / f"kscheduler-{label}.log"
        argv = [
            sys.executable, "-m", "kscheduler",
            "--config", str(cluster.config),
            "--kubeconfig", str(cluster.cp.scheduler_kubeconfig),
            "--bind-address", "127.0.0.1",
            "--secure-port", "0",
            "--insecure-port", str(self.port),
            "--log-format", "json",
            "--shutdown-grace", "10",
        ]  # fmt: skip
        self.proc = ManagedProcess(f"kscheduler-{label}", argv, self.log_path)

    def start(self) -> None:
        self.proc.start()

    @property
    def pid(self) -> int:
        assert self.proc.pid is not None
        return self.proc.pid

    def owns(self, holder: str) -> bool:
        """``holder`` is the identity this replica announced when it began its election."""
        return any(
            e.get("event") == "waiting for the leader lease" and e.get("identity") == holder
            for e in self.events()
        )

    def events(self) -> list[dict[str, Any]]:
        out = []
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        for line in text.splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

    def bound(self) -> Counter[str]:
        return Counter(e["pod"] for e in self.events() if e.get("event") == "bound")

    async def metrics(self) -> dict[str, float]:
        """Every sample as 'name{k="v",...}' (labels sorted) -> value."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.port}/metrics") as resp,
        ):
            assert resp.status == 200
            text = await resp.text()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}"] = s.value
        return out

    async def wait_serving(self) -> None:
        async def up() -> bool:
            if not self.proc.alive():
                raise AssertionError(f"{self.label} exited early:\n{self.proc.log_tail()}")
            try:
                await self.metrics()
            except (aiohttp.ClientError, OSError):
                return False
            return True

        await wait_for(up, timeout=30, interval=0.1, what=f"{self.label} /metrics")

    async def wait_exit(self, timeout: float) -> int:
        async def exited() -> bool:
            return not self.proc.alive()

        await wait_for(exited, timeout=timeout, interval=0.05, what=f"{self.label} to exit")
        rc = self.proc.returncode
        assert rc is not None
        return rc

    def stop(self) -> None:
        self.proc.stop(timeout=10)


def metric(samples: dict[str, float], name: str, /, **labels: str) -> float:
    key = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return samples.get(key, 0.0)


def histogram_count(samples: dict[str, float], name: str, /, **labels: str) -> float:
    """Sum of _count over every series of ``name`` whose labels include ``labels``."""
    total = 0.0
    want = [f'{k}="{v}"' for k, v in labels.items()]
    for key, v in samples.items():
        if key.startswith(f"{name}_count{{") and all(w in key for w in want):
            total += v
    return total


@pytest_asyncio.fixture
async def cluster(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> AsyncIterator[Cluster]:
    name = f"ha-{uuid.uuid4().hex[:8]}"
    # system:kube-scheduler may create Leases but get/update only the one named
    # kube-scheduler: a kscheduler Lease needs a Role of its own, as in deploy/.
    await rest.post(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "resourceNames": [name],
                    "verbs": ["get", "update"],
                },
            ],
        },
    )
    await rest.post(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": "system:kube-scheduler",
                }
            ],
        },
    )
    await create_nodes(
        rest, [make_node(f"ha-node-{i}", cpu=NODE_CPU, memory="16Gi") for i in range(NODES)]
    )
    config = control_plane.workdir / f"{name}.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "leaderElection:\n"
        "  leaderElect: true\n"
        f"  leaseDuration: {LEASE_DURATION:g}s\n"
        f"  renewDeadline: {RENEW_DEADLINE:g}s\n"
        f"  retryPeriod: {RETRY_PERIOD:g}s\n"
        f"  resourceNamespace: {namespace}\n"
        f"  resourceName: {name}\n"
        "profiles:\n"
        f"  - schedulerName: {name}\n"
    )
    yield Cluster(namespace, name, config, rest, control_plane)


@pytest_asyncio.fixture
async def replicas(cluster: Cluster, tmp_path: Path) -> AsyncIterator[tuple[Replica, Replica]]:
    """Start two replicas; the first to come up takes the Lease, the other stands by."""
    port_a, port_b = free_ports(2)
    first = Replica(cluster, "a", port_a, tmp_path)
    second = Replica(cluster, "b", port_b, tmp_path)
    try:
        first.start()
        await first.wait_serving()
        second.start()
        await second.wait_serving()
        yield first, second
    finally:
        for r in (first, second):
            await asyncio.to_thread(r.stop)
            print(f"---- {r.label} (pid {r.proc.pid}) log tail ----\n{r.proc.log_tail(15)}")


async def leader_of(cluster: Cluster, a: Replica, b: Replica) -> tuple[Replica, Replica]:
    holder = await wait_for(cluster.holder, timeout=30, interval=0.1, what="a lease holder")
    if a.owns(holder):
        return a, b
    assert b.owns(holder), f"holder {holder!r} is neither replica (pids {a.pid}, {b.pid})"
    return b, a


async def time_until_holder(
    cluster: Cluster, replica: Replica, start: float, limit: float
) -> float:
    """Poll the Lease every 50 ms until ``replica`` holds it; seconds since ``start``."""

    async def held() -> bool:
        return replica.owns(await cluster.holder())

    await wait_for(held, timeout=limit, interval=0.05, what=f"{replica.label} to hold the lease")
    return time.monotonic() - start


async def assert_all_bound_once(cluster: Cluster, expected: int, *replicas: Replica) -> None:
    async def all_bound() -> bool:
        return await cluster.bound_count() == expected

    await wait_for(all_bound, timeout=60, interval=0.2, what=f"{expected} pods bound")
    pods = await cluster.pods()
    assert len(pods) == expected
    # no node holds more than it has: the two replicas never both placed on one view
    used: Counter[str] = Counter()
    for p in pods:
        used[p["spec"]["nodeName"]] += parse_quantity(POD_CPU, milli=True)
    assert all(v <= parse_quantity(NODE_CPU, milli=True) for v in used.values()), used
    # a pod bound twice would carry two Scheduled events (the second bind is refused)
    events = await cluster.rest.get(f"/apis/events.k8s.io/v1/namespaces/{cluster.ns}/events")
    scheduled = Counter(
        e["regarding"]["name"] for e in events["items"] if e.get("reason") == "Scheduled"
    )
    assert not [n for n, c in scheduled.items() if c > 1], scheduled
    # and no pod is logged bound by both replicas, or twice by one
    logged: Counter[str] = Counter()
    for r in replicas:
        logged.update(r.bound())
    assert not [k for k, c in logged.items() if c > 1], logged


async def test_one_leader_schedules_and_kill_9_fails_over(
    cluster: Cluster, replicas: tuple[Replica, Replica], record_property: Any
) -> None:
    leader, standby = await leader_of(cluster, *replicas)
    before = await leader.metrics()
    status = "leader_election_master_status"
    assert metric(before, status, name=cluster.name) == 1
    assert metric(await standby.metrics(), status, name=cluster.name) == 0

    # an unschedulable pod and a first batch: the leader alone schedules them
    await create_pods(
        cluster.rest,
        [make_pod("huge", cluster.ns, cpu="100", scheduler_name=cluster.name)],
    )
    await cluster.create_pods("first", 30)

    async def first_bound() -> bool:
        return await cluster.bound_count() == 30

    await wait_for(first_bound, timeout=60, what="the first batch bound")
    during = await leader.metrics()
    attempts = "scheduler_schedule_attempts_total"
    assert metric(during, attempts, profile=cluster.name, result="scheduled") >= 30
    assert metric(during, attempts, profile=cluster.name, result="unschedulable") >= 1
    assert histogram_count(
        during, "scheduler_scheduling_attempt_duration_seconds", profile=cluster.name
    ) > histogram_count(before, "scheduler_scheduling_attempt_duration_seconds")
    assert histogram_count(during, "scheduler_pod_scheduling_sli_duration_seconds") >= 30
    for point in ("PreFilter", "Bind"):
        assert (
            histogram_count(
                during,
                "scheduler_framework_extension_point_duration_seconds",
                extension_point=point,
                profile=cluster.name,
            )
            >= 30
        )
    pending = "scheduler_pending_pods"
    assert metric(before, pending, queue="unschedulable") == 0
    assert (
        metric(during, pending, queue="unschedulable") + metric(during, pending, queue="backoff")
        == 1
    ), "the huge pod waits in the queue"
    stand = await standby.metrics()
    assert metric(stand, attempts, profile=cluster.name, result="scheduled") == 0
    assert not standby.bound(), "the standby must not bind"
    assert len(leader.bound()) == 30
    await cluster.rest.delete(
        f"/api/v1/namespaces/{cluster.ns}/pods/huge", {"gracePeriodSeconds": 0}
    )

    async def huge_gone() -> bool:
        s = await leader.metrics()
        return sum(metric(s, pending, queue=q) for q in ("active", "backoff", "unschedulable")) == 0

    await wait_for(huge_gone, timeout=10, what="the pending gauges back at 0")

    # a second batch, and kill -9 of the leader while it is scheduling it
    transitions = int((await cluster.lease())["spec"].get("leaseTransitions") or 0)
    await cluster.create_pods("second", 60)

    async def some_bound() -> bool:
        return await cluster.bound_count() >= 40

    await wait_for(some_bound, timeout=60, interval=0.05, what="part of the second batch bound")
    leader.proc.signal(signal.SIGKILL)
    killed = time.monotonic()
    took = await time_until_holder(cluster, standby, killed, LEASE_DURATION + 10)
    record_property("kill9_takeover_seconds", round(took, 2))
    print(f"kill -9 takeover: {took:.2f}s (leaseDuration {LEASE_DURATION:g}s)")
    assert took <= LEASE_DURATION + RETRY_PERIOD * (1 + JITTER) + SLACK
    lease = await cluster.lease()
    assert lease["spec"]["leaseTransitions"] == transitions + 1
    # the old leader may have bound the whole second batch before it died: a few more
    # pods make sure the new leader has work of its own
    await cluster.create_pods("third", 10)
    await assert_all_bound_once(cluster, 100, leader, standby)
    assert standby.bound(), "the new leader finished the workload"
    after = await standby.metrics()
    assert metric(after, status, name=cluster.name) == 1
    assert metric(after, attempts, profile=cluster.name, result="scheduled") >= 1


async def test_sigterm_hands_over_within_a_retry_period(
    cluster: Cluster, replicas: tuple[Replica, Replica], record_property: Any
) -> None:
    leader, standby = await leader_of(cluster, *replicas)
    transitions = int((await cluster.lease())["spec"].get("leaseTransitions") or 0)
    await cluster.create_pods("work", 60)

    async def some_bound() -> bool:
        return await cluster.bound_count() >= 20

    await wait_for(some_bound, timeout=60, interval=0.05, what="part of the workload bound")
    leader.proc.signal(signal.SIGTERM)
    terminated = time.monotonic()
    took = await time_until_holder(cluster, standby, terminated, LEASE_DURATION + 10)
    record_property("sigterm_handover_seconds", round(took, 2))
    print(f"SIGTERM handover: {took:.2f}s (retryPeriod {RETRY_PERIOD:g}s)")
    assert took <= RETRY_PERIOD * (1 + JITTER) + SLACK, "the lease was not released"
    assert await leader.wait_exit(timeout=20) == 0
    released = [e for e in leader.events() if e.get("event") == "released the leader lease"]
    assert released, "the leader released its lease"
    lease = await cluster.lease()
    assert lease["spec"]["leaseTransitions"] == transitions + 1
    # binds in flight at SIGTERM were finished by the old leader; the rest and
    # anything new is the new leader's
    await cluster.create_pods("more", 60)
    await assert_all_bound_once(cluster, 120, leader, standby)
    assert leader.bound() and standby.bound(), "both took part in the workload"
    assert all(not k.split("/")[1].startswith("more-") for k in leader.bound())
