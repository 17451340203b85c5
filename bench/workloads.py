"""Workloads modelled on upstream scheduler_perf (test/integration/scheduler_perf).

Node and pod templates mirror scheduler_perf's ``templates/`` directory:

* node-default: 4 CPU, 32Gi, 110 pods, Ready (no ephemeral storage);
* pod-default: one pause container requesting (and limited to) 100m / 500Mi;
* pod-with-node-affinity: pod-default plus a required zone In [zone1, zone2];
* pod-with-topology-spreading: label color=blue, maxSkew 5 over zones, DoNotSchedule;
* pod-with-pod-anti-affinity: label color=green, required anti-affinity to
  color=green on kubernetes.io/hostname in both workload namespaces;
* pod-low-priority: 900m / 500Mi; pod-high-priority: 3000m / 500Mi at priority 10;
* pod-high-priority-large-cpu: 9 CPU at priority 10 (fits no node);
* dra/ pod-with-claim-template: one pause container using one claim made from
  a ResourceClaimTemplate (one device of a DeviceClass that selects the test
  driver's devices), no cpu or memory requests; each node publishes one
  ResourceSlice of 10 devices (resourceslice-basic-devices: the same
  attributes and capacities).

Priority 10 comes from a PriorityClass: the harness keeps the Priority admission
plugin on, which rejects a bare ``spec.priority``.

Sizes follow the workloads' ``500Nodes`` (quick) and ``5000Nodes`` performance
entries. One deliberate difference: the ``init`` pods are created already bound
(round robin over the nodes, which is where a least-allocated scheduler puts
identical pods on identical nodes), so that both schedulers start every run
from the same cluster state and only the measured pods go through the
scheduler under test.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kscheduler.controlplane.builders import HOSTNAME, ZONE, make_node, make_pod

JSON = dict[str, Any]

PAUSE = "registry.k8s.io/pause:3.10.1"
HIGH_PRIORITY_CLASS = "bench-high"
HIGH_PRIORITY = 10

#: (pod name, namespace, schedulerName) -> Pod
PodTemplate = Callable[[str, str, str], JSON]


def _container(cpu: str, memory: str, *, limits: bool = True) -> JSON:
    resources: JSON = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        resources["limits"] = {"cpu": cpu, "memory": memory}
    return {
        "name": "pause",
        "image": PAUSE,
        "ports": [{"containerPort": 80}],
        "resources": resources,
    }


def _pod(
    name: str,
    namespace: str,
    scheduler: str,
    *,
    cpu: str = "100m",
    memory: str = "500Mi",
    limits: bool = True,
    labels: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> JSON:
    return make_pod(
        name,
        namespace,
        scheduler_name=scheduler,
        labels=labels,
        containers=[_container(cpu, memory, limits=limits)],
        **kwargs,
    )


def pod_default(name: str, namespace: str, scheduler: str) -> JSON:
    return _pod(name, namespace, scheduler)


def pod_with_node_affinity(name: str, namespace: str, scheduler: str) -> JSON:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": ZONE, "operator": "In", "values": ["zone1", "zone2"]}
                        ]
                    }
                ]
            }
        }
    }
    return _pod(name, namespace, scheduler, affinity=affinity)


def pod_with_topology_spreading(name: str, namespace: str, scheduler: str) -> JSON:
    constraint = {
        "maxSkew": 5,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"color": "blue"}},
    }
    return _pod(
        name,
        namespace,
        scheduler,
        labels={"color": "blue"},
        topology_spread_constraints=[constraint],
    )


def pod_with_pod_anti_affinity(namespaces: list[str]) -> PodTemplate:
    """Anti-affinity to every color=green pod of ``namespaces`` on the same host."""
    term = {
        "labelSelector": {"matchLabels": {"color": "green"}},
        "topologyKey": HOSTNAME,
        "namespaces": list(namespaces),
    }

    def template(name: str, namespace: str, scheduler: str) -> JSON:
        affinity = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [dict(term)]}
        }
        return _pod(name, namespace, scheduler, labels={"color": "green"}, affinity=affinity)

    return template


def pod_with_claim_template(name: str, namespace: str, scheduler: str) -> JSON:
    """dra/templates/pod-with-claim-template.yaml: the claim comes from the
    controller-manager's resourceclaim controller, as in a real cluster."""
    container = {"name": "pause", "image": PAUSE, "resources": {"claims": [{"name": "resource"}]}}
    pod = make_pod(name, namespace, scheduler_name=scheduler, containers=[container])
    pod["spec"]["resourceClaims"] = [
        {"name": "resource", "resourceClaimTemplateName": DRA_CLAIM_TEMPLATE}
    ]
    return pod


def pod_low_priority(name: str, namespace: str, scheduler: str) -> JSON:
    return _pod(name, namespace, scheduler, cpu="900m")


def pod_high_priority(name: str, namespace: str, scheduler: str) -> JSON:
    return _pod(
        name,
        namespace,
        scheduler,
        cpu="3000m",
        priority_class_name=HIGH_PRIORITY_CLASS,
        termination_grace_period=None,
    )


def pod_high_priority_large_cpu(name: str, namespace: str, scheduler: str) -> JSON:
    return _pod(
        name,
        namespace,
        scheduler,
        cpu="9",
        limits=False,
        priority_class_name=HIGH_PRIORITY_CLASS,
        termination_grace_period=None,
    )


# --------------------------------------------------------------------------- nodes

#: node index -> extra labels
NodeLabels = Callable[[int], dict[str, str]]


def no_labels(i: int) -> dict[str, str]:
    return {}


def zone_labels(*values: str) -> NodeLabels:
    """scheduler_perf's labelNodePrepareStrategy: ZONE set to one of ``values``."""

    def labels(i: int) -> dict[str, str]:
        return {ZONE: values[i % len(values)]}

    return labels


def node_name(i: int) -> str:
    return f"bench-node-{i:05d}"


def node_default(i: int, labels: NodeLabels = no_labels) -> JSON:
    """scheduler_perf's node-default: 4 CPU, 32Gi, 110 pods."""
    return make_node(
        node_name(i), cpu="4", memory="32Gi", pods=110, labels=labels(i), ephemeral_storage=None
    )


# --------------------------------------------------------------------------- devices

DRA_DRIVER = "test-driver.cdi.k8s.io"
DRA_CLASS = "bench-test-class"
DRA_CLAIM_TEMPLATE = "test-claim-template"
RESOURCE_API = "/apis/resource.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class Devices:
    """scheduler_perf's dra SchedulingWithResourceClaimTemplate set-up: one
    ResourceSlice per node with ``per_node`` devices, a DeviceClass selecting the
    driver, a ResourceClaimTemplate in the measured namespace, and ``init_claims``
    claims already allocated (upstream's allocResourceClaims op; here round robin
    over the nodes, device by device), which leave the rest of the devices to the
    measured pods."""

    per_node: int = 10
    pci_roots: int = 2
    init_claims: int = 0
    init_namespace: str = "init"

    def device_class(self) -> JSON:
        expression = f'device.driver == "{DRA_DRIVER}"'
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRA_CLASS},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }

    def resource_slice(self, i: int) -> JSON:
        node = node_name(i)
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"bench-slice-{i:05d}"},
            "spec": {
                "driver": DRA_DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [self._device(d) for d in range(self.per_node)],
            },
        }

    def _device(self, d: int) -> JSON:
        root = d % self.pci_roots
        strings = {
            "driver": "xe",
            "resource.k8s.io/pciRoot": str(root),
            "family": "Arc Pro B-Series",
            "health": "Healthy",
            "model": "B60",
            "pciAddress": f"0000:0{d}:00.0",
            "pciId": "0xe211",
            "pciRoot": f"0{root}",
            "resource.kubernetes.io/pciBusID": f"0000:0{d}:00.0",
            "resource.kubernetes.io/pciRoot": f"pci0000:0{root}",
            "type": "gpu",
        }
        attributes: JSON = {k: {"string": v} for k, v in strings.items()}
        attributes["driverVersion"] = {"version": "1.2.3"}
        attributes["sriov"] = {"bool": True}
        return {
            "name": f"basic-device-{d}",
            "attributes": attributes,
            "capacity": {"memory": {"value": "24480Mi"}, "millicores": {"value": "1k"}},
        }

    def claim_template(self, namespace: str) -> JSON:
        request = {"name": "req-0", "exactly": {"deviceClassName": DRA_CLASS}}
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": DRA_CLAIM_TEMPLATE, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        }

    def allocated_claims(self, namespace: str, nodes: int) -> list[tuple[JSON, JSON]]:
        """(claim, its status) for each init claim: claim k takes device k // nodes
        of node k % nodes."""
        if self.init_claims > nodes * self.per_node:
            raise ValueError(f"{self.init_claims} init claims exceed the devices of {nodes} nodes")
        out = []
        for k in range(self.init_claims):
            node = node_name(k % nodes)
            claim: JSON = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"init-claim-{k}", "namespace": namespace},
                "spec": {
                    "devices": {
                        "requests": [{"name": "req-0", "exactly": {"deviceClassName": DRA_CLASS}}]
                    }
                },
            }
            result = {
                "request": "req-0",
                "driver": DRA_DRIVER,
                "pool": node,
                "device": f"basic-device-{k // nodes}",
            }
            term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            status = {
                "allocation": {
                    "devices": {"results": [result]},
                    "nodeSelector": {"nodeSelectorTerms": [term]},
                }
            }
            out.append((claim, status))
        return out


# --------------------------------------------------------------------------- workloads


@dataclass(frozen=True, slots=True)
class PodGroup:
    """``count`` pods from ``template`` in namespace ``<workload ns prefix>-<namespace>``."""

    template: PodTemplate
    count: int
    namespace: str


@dataclass(frozen=True, slots=True)
class Churn:
    """scheduler_perf's churn op in create mode: one new pod every ``interval`` seconds."""

    template: PodTemplate
    interval: float
    namespace: str = "churn"


def namespace_name(workload: str, short: str) -> str:
    return f"{workload.lower()}-{short}"


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    nodes: int
    measure: PodGroup
    init: tuple[PodGroup, ...] = ()
    node_labels: NodeLabels = no_labels
    churn: Churn | None = None
    priority_classes: tuple[tuple[str, int], ...] = ()
    upstream: str = ""
    notes: str = ""
    #: Seconds without a bind (after every pod was created) before giving up.
    stall_timeout: float = 30.0
    devices: Devices | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def namespace(self, short: str) -> str:
        return namespace_name(self.name, short)

    def namespaces(self) -> list[str]:
        names = [g.namespace for g in (*self.init, self.measure)]
        if self.devices is not None and self.devices.init_claims:
            names.append(self.devices.init_namespace)
        if self.churn is not None:
            names.append(self.churn.namespace)
        out: list[str] = []
        for n in names:
            if self.namespace(n) not in out:
                out.append(self.namespace(n))
        return out

    def make_nodes(self) -> list[JSON]:
        return [node_default(i, self.node_labels) for i in range(self.nodes)]

    def init_pods(self, scheduler: str) -> list[JSON]:
        """Init pods, bound round robin (see the module docstring)."""
        out = []
        k = 0
        for g in self.init:
            ns = self.namespace(g.namespace)
            for i in range(g.count):
                pod = g.template(f"init-{i}", ns, scheduler)
                pod["spec"]["nodeName"] = node_name(k % self.nodes)
                k += 1
                out.append(pod)
        return out

    def measured_pods(self, scheduler: str, prefix: str = "pod") -> list[JSON]:
        """The measured pods, named ``<prefix>-<i>`` (bench.run gives each run its own
        prefix: kwok may still be deleting the last run's pods by name)."""
        ns = self.namespace(self.measure.namespace)
        count = self.measure.count
        return [self.measure.template(f"{prefix}-{i}", ns, scheduler) for i in range(count)]


SIZES = ("quick", "5000")


def workloads(size: str) -> list[Workload]:
    """Every workload at ``size`` ("quick" or "5000"), in run order."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; expected one of {', '.join(SIZES)}")
    big = size == "5000"

    def pick(quick: int, full: int) -> int:
        return full if big else quick

    anti = "SchedulingPodAntiAffinity"
    anti_ns = [namespace_name(anti, "sched-1"), namespace_name(anti, "sched-0")]
    return [
        Workload(
            "SchedulingBasic",
            nodes=pick(500, 5000),
            init=(PodGroup(pod_default, pick(500, 1000), "init"),),
            measure=PodGroup(pod_default, pick(1000, 10000), "measure"),
            upstream="misc/performance-config.yaml SchedulingBasic "
            + ("5000Nodes_10000Pods" if big else "500Nodes"),
        ),
        Workload(
            "SchedulingNodeAffinity",
            nodes=pick(500, 5000),
            node_labels=zone_labels("zone1"),
            init=(PodGroup(pod_with_node_affinity, pick(500, 5000), "init"),),
            measure=PodGroup(pod_with_node_affinity, pick(1000, 10000), "measure"),
            upstream="affinity/performance-config.yaml SchedulingNodeAffinity "
            + ("5000Nodes_10000Pods" if big else "500Nodes"),
        ),
        Workload(
            "TopologySpreading",
            nodes=pick(500, 5000),
            node_labels=zone_labels("moon-1", "moon-2", "moon-3"),
            init=(PodGroup(pod_default, pick(1000, 5000), "init"),),
            measure=PodGroup(pod_with_topology_spreading, pick(1000, 5000), "measure"),
            upstream="topology_spreading/performance-config.yaml TopologySpreading "
            + ("5000Nodes_5000Pods" if big else "500Nodes"),
        ),
        Workload(
            anti,
            nodes=pick(500, 5000),
            init=(PodGroup(pod_with_pod_anti_affinity(anti_ns), pick(100, 1000), "sched-0"),),
            measure=PodGroup(pod_with_pod_anti_affinity(anti_ns), pick(400, 2000), "sched-1"),
            upstream="affinity/performance-config.yaml SchedulingPodAntiAffinity "
            + ("5000Nodes_2000Pods" if big else "500Nodes"),
        ),
        Workload(
            "Preemption",
            nodes=pick(500, 1000),
            init=(PodGroup(pod_low_priority, pick(2000, 4000), "init"),),
            measure=PodGroup(pod_high_priority, pick(500, 1000), "measure"),
            priority_classes=((HIGH_PRIORITY_CLASS, HIGH_PRIORITY),),
            upstream="misc/performance-config.yaml PreemptionBasic "
            + ("1000Nodes" if big else "(500 nodes, 4 low-priority pods per node)"),
            notes="every measured pod must preempt 3 of the 4 low-priority pods of a node",
            # at 50 qps a first pass over every preemptor (victims' status patches and
            # deletes, nominations, events) takes minutes before binds start
            stall_timeout=240.0,
        ),
        Workload(
            "Unschedulable",
            nodes=pick(500, 5000),
            init=(PodGroup(pod_default, pick(10, 100), "init"),),
            measure=PodGroup(pod_default, pick(1000, 10000), "measure"),
            churn=Churn(pod_high_priority_large_cpu, 0.2),
            priority_classes=((HIGH_PRIORITY_CLASS, HIGH_PRIORITY),),
            upstream="misc/performance-config.yaml Unschedulable "
            + ("5kNodes/100Init/10kPods" if big else "500Nodes/10Init/1kPods"),
            notes="an unschedulable 9-CPU high-priority pod is created every 200 ms",
        ),
        Workload(
            "SchedulingWithResourceClaimTemplate",
            nodes=pick(200, 500),
            devices=Devices(init_claims=pick(1000, 2500)),
            measure=PodGroup(pod_with_claim_template, pick(1000, 2500), "measure"),
            upstream="dra/performance-config.yaml SchedulingWithResourceClaimTemplate "
            + ("5000pods_500nodes" if big else "2000pods_200nodes"),
            notes="one device per pod from a claim template; the ResourceClaims are made by "
            "the controller-manager; upstream's largest DRA size is 500 nodes",
        ),
    ]


WORKLOAD_NAMES = tuple(w.name for w in workloads("quick"))


def with_uid(pod: JSON, uid: str, *, created: str = "2025-01-01T00:00:00Z") -> JSON:
    """A copy of a template pod with the server-set fields an in-process test needs."""
    out = copy.deepcopy(pod)
    meta = out["metadata"]
    meta["uid"] = uid
    meta["resourceVersion"] = "1"
    meta["creationTimestamp"] = created
    out.setdefault("status", {"phase": "Pending"})
    return out
