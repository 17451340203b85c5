"""Raw-JSON builders for fake Nodes and Pods, and concurrent bulk create/delete.

Nodes have no kubelet: their status (capacity, allocatable, Ready) is whatever
we POST, and the apiserver keeps it. Pods never run.

    nodes = [make_node(f"n{i}", cpu="8", labels={ZONE: f"z{i % 3}"}) for i in range(100)]
    await create_nodes(rest, nodes)
    await create_pods(rest, [make_pod(f"p{i}", ns, cpu="100m", scheduler_name="kscheduler")
                             for i in range(1000)])
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from kscheduler.controlplane.rest import JSON, ApiClientLike, ApiError

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
DEFAULT_CONCURRENCY = 48


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def taint(key: str, value: str | None = None, effect: str = "NoSchedule") -> JSON:
    out: JSON = {"key": key, "effect": effect}
    if value is not None:
        out["value"] = value
    return out


def toleration(
    key: str | None = None,
    value: str | None = None,
    effect: str | None = None,
    operator: str | None = None,
    toleration_seconds: int | None = None,
) -> JSON:
    """A toleration; operator defaults to Equal with a value, Exists without."""
    out: JSON = {"operator": operator or ("Equal" if value is not None else "Exists")}
    if key is not None:
        out["key"] = key
    if value is not None:
        out["value"] = value
    if effect is not None:
        out["effect"] = effect
    if toleration_seconds is not None:
        out["tolerationSeconds"] = toleration_seconds
    return out


def make_node(
    name: str,
    cpu: str = "4",
    memory: str = "32Gi",
    pods: int = 110,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, Any]] | None = None,
    images: Mapping[str, int] | None = None,
    unschedulable: bool = False,
    extended: Mapping[str, str | int] | None = None,
    ephemeral_storage: str | None = "100Gi",
    allocatable: Mapping[str, str | int] | None = None,
    ready: bool = True,
) -> JSON:
    """A Node with capacity == allocatable (override entries with ``allocatable``).

    labels are merged over kubelet's defaults (hostname, os, arch); images maps
    an image name to its size in bytes; extended adds resources such as
    ``{"example.com/gpu": 2}``.
    """
    capacity: dict[str, str] = {"cpu": str(cpu), "memory": str(memory), "pods": str(pods)}
    if ephemeral_storage is not None:
        capacity["ephemeral-storage"] = ephemeral_storage
    for resource, quantity in (extended or {}).items():
        capacity[resource] = str(quantity)
    alloc = dict(capacity)
    for resource, quantity in (allocatable or {}).items():
        alloc[resource] = str(quantity)
    now = _now()
    metadata: JSON = {
        "name": name,
        "labels": {
            HOSTNAME: name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **(labels or {}),
        },
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    spec: JSON = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    status: JSON = {
        "capacity": capacity,
        "allocatable": alloc,
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "fake node",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
        "addresses": [{"type": "Hostname", "address": name}],
    }
    if images:
        status["images"] = [{"names": [image], "sizeBytes": size} for image, size in images.items()]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }


def make_pod(
    name: str,
    namespace: str = "default",
    *,
    cpu: str | None = None,
    memory: str | None = None,
    extended: Mapping[str, str | int] | None = None,
    scheduler_name: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, Any]] | None = None,
    priority_class_name: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    topology_spread_constraints: Sequence[Mapping[str, Any]] | None = None,
    host_port: int | None = None,
    node_name: str | None = None,
    scheduling_gates: Sequence[str] | None = None,
    containers: Sequence[Mapping[str, Any]] | None = None,
    init_containers: Sequence[Mapping[str, Any]] | None = None,
    image: str = PAUSE_IMAGE,
    termination_grace_period: int | None = 0,
) -> JSON:
    """A Pod with one container requesting cpu/memory/extended (unless containers is given).

    Priority goes through a PriorityClass (``priority_class_name``, see
    make_priority_class): the Priority admission plugin rejects a bare
    spec.priority that disagrees with the class. termination_grace_period
    defaults to 0 so that deleting a bound pod (no kubelet) is immediate.
    """
    if containers is None:
        requests: dict[str, str] = {}
        if cpu is not None:
            requests["cpu"] = cpu
        if memory is not None:
            requests["memory"] = memory
        for resource, quantity in (extended or {}).items():
            requests[resource] = str(quantity)
        container: JSON = {"name": "main", "image": image}
        if requests:
            resources: JSON = {"requests": requests}
            extended_limits = {r: str(q) for r, q in (extended or {}).items()}
            if extended_limits:  # extended resources need limit == request
                resources["limits"] = extended_limits
            container["resources"] = resources
        if host_port is not None:
            container["ports"] = [
                {"containerPort": host_port, "hostPort": host_port, "protocol": "TCP"}
            ]
        container_list = [container]
    else:
        container_list = [copy.deepcopy(dict(c)) for c in containers]
    metadata: JSON = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    spec: JSON = {"containers": container_list}
    if init_containers:
        spec["initContainers"] = [copy.deepcopy(dict(c)) for c in init_containers]
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if priority_class_name is not None:
        spec["priorityClassName"] = priority_class_name
    if affinity:
        spec["affinity"] = copy.deepcopy(dict(affinity))
    if topology_spread_constraints:
        spec["topologySpreadConstraints"] = [
            copy.deepcopy(dict(c)) for c in topology_spread_constraints
        ]
    if node_name is not None:
        spec["nodeName"] = node_name
    if scheduling_gates:
        spec["schedulingGates"] = [{"name": gate} for gate in scheduling_gates]
    if termination_grace_period is not None:
        spec["terminationGracePeriodSeconds"] = termination_grace_period
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def make_priority_class(
    name: str,
    value: int,
    *,
    preemption_policy: str | None = None,
    global_default: bool = False,
) -> JSON:
    out: JSON = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": global_default,
    }
    if preemption_policy is not None:
        out["preemptionPolicy"] = preemption_policy
    return out


def make_namespace(name: str, labels: Mapping[str, str] | None = None) -> JSON:
    metadata: JSON = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


# --------------------------------------------------------------------------- bulk operations


async def run_bounded(
    items: Iterable[Any],
    fn: Callable[[Any], Awaitable[Any]],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> list[Any]:
    """await fn(item) for every item with at most `concurrency` in flight; results in order.

    The first failure cancels the rest and is raised.
    """
    work = list(items)
    results: list[Any] = [None] * len(work)
    indexes = iter(range(len(work)))

    async def worker() -> None:
        for i in indexes:
            results[i] = await fn(work[i])

    async with asyncio.TaskGroup() as tg:
        for _ in range(max(1, min(concurrency, len(work)))):
            tg.create_task(worker())
    return results


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


async def create_nodes(
    api: ApiClientLike, nodes: Iterable[JSON], *, concurrency: int = DEFAULT_CONCURRENCY
) -> list[JSON]:
    """POST every node (status included; the apiserver keeps it); return the created objects."""

    async def create(node: JSON) -> JSON:
        created: JSON = await api.post("/api/v1/nodes", node)
        return created

    return await run_bounded(nodes, create, concurrency=concurrency)


async def create_pods(
    api: ApiClientLike,
    pods: Iterable[JSON],
    *,
    namespace: str | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> list[JSON]:
    """POST every pod into its metadata.namespace (or `namespace`, which overrides it)."""

    async def create(pod: JSON) -> JSON:
        ns = namespace or pod.get("metadata", {}).get("namespace") or "default"
        if pod.get("metadata", {}).get("namespace") != ns:
            pod = {**pod, "metadata": {**pod.get("metadata", {}), "namespace": ns}}
        created: JSON = await api.post(pods_path(ns), pod)
        return created

    return await run_bounded(pods, create, concurrency=concurrency)


async def create_namespace(
    api: ApiClientLike,
    name: str,
    *,
    exist_ok: bool = True,
    labels: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> JSON:
    """Create the namespace and wait for its ``default`` ServiceAccount.

    The ServiceAccount admission plugin refuses pods that name no account until
    the controller-manager has created ``default`` in the namespace.
    """
    try:
        ns: JSON = await api.post("/api/v1/namespaces", make_namespace(name, labels))
    except Exception as exc:  # this module's ApiError, or kscheduler.kube's
        if getattr(exc, "status", None) != 409 or not exist_ok:
            raise
        ns = await api.get(f"/api/v1/namespaces/{name}")
    await wait_for_service_account(api, name, timeout=timeout)
    return ns


async def wait_for_service_account(
    api: ApiClientLike, namespace: str, name: str = "default", *, timeout: float = 30.0
) -> None:
    """Wait until the ServiceAccount exists (the controller-manager creates ``default``)."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            await api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
            return
        except Exception as exc:  # this module's ApiError, or kscheduler.kube's
            if getattr(exc, "status", None) != 404:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"ServiceAccount {namespace}/{name} did not appear in {timeout:.0f}s: "
                "is kube-controller-manager running?"
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)


async def delete_all_pods(api: ApiClientLike, namespace: str | None = None) -> None:
    """Delete every pod in namespace (every namespace if None) immediately (grace 0)."""
    if namespace is None:
        namespaces = [ns["metadata"]["name"] for ns in await api.list("/api/v1/namespaces")]
    else:
        namespaces = [namespace]
    for ns in namespaces:
        await api.delete(pods_path(ns), {"gracePeriodSeconds": 0})


async def delete_all_nodes(api: ApiClientLike) -> None:
    await api.delete("/api/v1/nodes")


async def delete_namespace(api: ApiClientLike, name: str) -> None:
    """Delete the pods in the namespace at once (grace 0), then the namespace; the
    namespace controller removes what is left in it and finalizes it."""
    await delete_all_pods(api, name)
    try:
        await api.delete(f"/api/v1/namespaces/{name}")
    except ApiError as exc:
        if exc.status != 404:
            raise
