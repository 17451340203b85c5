"""Differential runner: one scenario through kube-scheduler and through kscheduler.

A scenario (YAML) describes a small cluster, the pods to schedule and the facts
expected of the outcome. :func:`run_scenario` plays it twice on fresh state of
one control plane: once with the real kube-scheduler (a :class:`ReferenceScheduler`
process whose single profile is named ``reference``) and once with kscheduler
running in-process (profile ``kscheduler``). Object names, creation order and
the profile are the same in both runs; only ``spec.schedulerName`` of the pods
to schedule differs. :func:`compare` then lists every :class:`Difference`.

Scenario format::

    name: node-resources-fit            # defaults to the file's stem
    description: one line or more
    schedulerConfig: {podInitialBackoffSeconds: 30}  # top-level fields, both schedulers
    featureGates: {DRAFractionalCapacityRange: true}  # --feature-gates of both schedulers
                                        # (gates kscheduler implements)
    config:                             # optional profile fragment, both schedulers
      plugins: {score: {disabled: [{name: ImageLocality}]}}
      pluginConfig: [{name: NodeResourcesFit, args: {scoringStrategy: {type: MostAllocated}}}]
    priorityClasses: [{name: high, value: 1000, preemptionPolicy: Never}]
    namespaces: [{name: team-a, labels: {team: a}}]
    nodes:                              # compact; count makes copies, "{i}" is the index
      - {name: "n{i}", count: 3, cpu: "2", memory: 4Gi, pods: 110,
         labels: {zone: "z{i}"}, taints: ["dedicated=gpu:NoSchedule"],
         images: {"nginx:1.25": 500000000}, unschedulable: false,
         extended: {example.com/gpu: 2}, declaredFeatures: [VolumeBindMountOptions]}
    objects: [...]                      # raw objects (Service, PV, PVC, StorageClass,
                                        # CSINode, PDB ...); a "status" is written after
                                        # create (not a PDB's, PV's or PVC's: the
                                        # controllers write those)
    existingPods:                       # created already bound (node: is spec.nodeName)
      - {name: old, node: n0, cpu: "1", labels: {app: db}}
      - {name: resized, node: n1, cpu: 500m,  # status: merged into the Running pod's
         status: {containerStatuses: [{name: main,  # status (subresource); container
           resources: {requests: {cpu: "1"}}}]}}  # statuses merged by name, conditions
                                                  # by type
    workloads:                          # raw Deployment/ReplicaSet/StatefulSet/DaemonSet
      - {apiVersion: apps/v1, kind: StatefulSet, metadata: {name: db},
         spec: {replicas: 3, selector: ..., template: {metadata: ..., spec: ...}}}
    pods:                               # created in order, schedulerName filled in
      - {name: web, cpu: 500m, memory: 1Gi, labels: {app: web}, nodeSelector: {...},
         tolerations: [...], affinity: {...}, topologySpreadConstraints: [...],
         priorityClassName: high, hostPort: 8080, image: nginx:1.25, pvcs: [claim],
         schedulingGates: [wait], spec: {...raw fields merged last...}}
      - {name: second, waitBound: true}  # created once everything before has settled
      - {name: late, afterNominated: web}  # created once web is nominated (victims may
                                           # still be terminating) and all is quiet
    updates:                            # merge patches of workloads, each once settled
      - {workload: web, patch: {spec: {template: {metadata: {labels: {rev: "2"}}}}}}
    expect:                             # facts, checked against both runs
      web: {bound: true, node: n1}
      second: {bound: false, messageContains: "Insufficient cpu"}
      preemptor: {bound: true, victims: [old], nominated: n0, events: [Scheduled]}
      claimant: {node: n1, nominatedDuringRun: n1}  # carried n1 at some poll (0.2 s)
      other: {tie: [n0, n1]}             # equally good nodes: each run's node is one
      worded: {bound: false, messageMayDiffer: "why the wording may differ"}
      db-0: {node: n2}                   # a StatefulSet's pods by name
      web-deploy: {bound: 3, pending: 0, ready: 3, nodes: [n0, n1, n1]}  # a workload
    expectClaims:                       # claims ("ns/name", or name in default)
      data: {volumeName: pv-a, phase: Bound}
      gpu: {devices: [gpus/node-a/gpu-0]}  # a ResourceClaim: request/pool/device, in order
                                          # (a firstAvailable request: main/sub/pool/device)
      shared: {shares: ["memory=10Gi", ""]}  # per result: "" not shared, "shared" a
                                          # shareID only, else its consumedCapacity
      web:gpu: {allocated: false}         # a template's claim: pod name, ":", pod claim name
      gpu-pod:extended-resources: {devices: [container-0-request-1/node-a/gpu-0]}
                                          # the claim made for a pod's extended resources
    deviceConditions:                   # the run plays a DRA driver: each time the claim
      gpu: [[failed], [attached]]       # is allocated (without device status), its devices
                                        # with bindingConditions get the next list's
                                        # conditions True in status.devices (the last list
                                        # repeats)
    schedulerStartsAfterPods: false     # true: all pods exist before the scheduler starts
    settleSeconds: 2                    # quiet time that ends a run
    timeoutSeconds: 60
    knownDifference: "why kscheduler still differs here"

Other pod fields: namespace, count, ephemeralStorage, extended, annotations,
images (one container each), hostPorts, containers, initContainers, volumes,
nodeName, terminationGracePeriodSeconds (0 unless given: deletion is then
immediate; with a grace period, kwok removes a deleted pod after the delay of
its ``pod-delete.stage.kwok.x-k8s.io/delay`` annotation, a Go duration such as
"10s").

What is compared (:func:`compare`): for every pod with a known name, whether it
is bound, pending or deleted, the reasons of the events regarding it
(events.k8s.io, as a set) and its nominatedNodeName; for every bound pod its
node: the runs must agree unless the scenario names a ``tie`` holding both
nodes (a tie is never expressed by leaving the node out); for a pending pod its
PodScheduled reason and message. Workload pods with random names (Deployment,
ReplicaSet, DaemonSet) are compared as a sorted multiset of placements (node or
pending reason, nominated node, message, event reasons), with the workload's
status counts; a StatefulSet's pods by name. Claims in the scenario's
namespaces: volumeName, phase and the selected-node annotation. ResourceClaims in
the scenario's namespaces (a claim made from a template is named after its pod and
the pod's claim name, "pod:claim"; the claim a scheduler makes for a pod's
extended resources backed by DRA, whose name is generated, "pod:extended-resources"):
whether allocated, each result's request, driver, pool, device and adminAccess in
order, whether it is a share of a device (a ``shareID`` that is a UUID; the IDs
themselves are random, upstream's too) and its ``consumedCapacity``, each result's
bindingConditions and bindingFailureConditions, the allocation's node selector and
the pods it is reserved for.

A run is settled when every pod to schedule is bound or carries
PodScheduled=False (or was deleted), no pod is terminating, every workload has
made its pods (or one of them is unschedulable), and nothing observed has
changed for ``settleSeconds``. Before the scheduler starts, existing pods are
Running (kwok) with their scenario ``status`` merged in, every
PodDisruptionBudget has been counted by the disruption controller and every
claim with a volumeName is Bound (the PV controller). The reference binary's
``--version`` must be the pinned
:data:`kscheduler.controlplane.binaries.K8S_VERSION`.

Run ``python -m kscheduler.difftest SCENARIO.yaml|DIR ...`` to play scenarios on
a fresh control plane and print the report; the exit status is 1 when a scenario
differs or breaks one of its expectations (a ``knownDifference`` scenario fails
when it agrees instead).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from kscheduler.controlplane.binaries import K8S_VERSION, find_kube_scheduler
from kscheduler.controlplane.builders import make_node, make_pod, wait_for_service_account
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.controlplane.rest import JSON, ApiError, RestClient
from kscheduler.framework import features

REFERENCE: Final = "reference"
"""schedulerName of kube-scheduler's profile in the reference run."""
KSCHEDULER: Final = "kscheduler"
"""schedulerName of kscheduler's profile in the other run."""

Which = Literal["reference", "kscheduler"]

DEFAULT_SETTLE_SECONDS = 2.0
DEFAULT_TIMEOUT_SECONDS = 60.0
_POLL_SECONDS = 0.2
_PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})


SELECTED_NODE_ANNOTATION: Final = "volume.kubernetes.io/selected-node"
_RESOURCE_API: Final = "/apis/resource.k8s.io/v1"
_NODE_LEASES: Final = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


class ScenarioError(ValueError):
    """A scenario file that cannot be read; names the file and the offending field."""


class ReferenceVersionError(RuntimeError):
    """The reference kube-scheduler is not the pinned Kubernetes version."""


async def reference_version(binary: str | Path | None = None) -> str:
    """The version the kube-scheduler binary reports (``--version``: "Kubernetes vX.Y.Z")."""
    path = Path(binary) if binary is not None else find_kube_scheduler()
    proc = await asyncio.create_subprocess_exec(
        str(path),
        "--version",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    text = out.decode(errors="replace").strip()
    words = text.split()
    if proc.returncode != 0 or len(words) != 2 or words[0] != "Kubernetes":
        raise ReferenceVersionError(
            f"{path} --version exited {proc.returncode} with {text[:200]!r}"
        )
    return words[1]


# --------------------------------------------------------------------------- scenario model


@dataclass(frozen=True, slots=True)
class PodExpectation:
    """Facts one pod's outcome must show (None: not checked)."""

    bound: bool | None = None
    node: str | None = None
    tie: frozenset[str] | None = None
    """Equally good nodes: each run's node must be one of them (they may differ)."""
    nominated: str | None = None
    nominated_during_run: str | None = None
    """A nominatedNodeName the pod must have carried at some point while the run went
    on (NominatedNodeNameForExpectation: set before a PreBind that waits, cleared by
    the binding), polled every 0.2 s."""
    message: str | None = None
    message_contains: tuple[str, ...] = ()
    message_may_differ: str | None = None
    victims: tuple[str, ...] | None = None
    events: tuple[str, ...] | None = None
    """The reasons of the events regarding the pod, as a set (sorted)."""


@dataclass(frozen=True, slots=True)
class WorkloadExpectation:
    """Facts a workload's outcome must show (None: not checked)."""

    bound: int | None = None
    pending: int | None = None
    ready: int | None = None
    nodes: tuple[str, ...] | None = None
    """The nodes of its bound pods, as a sorted multiset."""


@dataclass(frozen=True, slots=True)
class ClaimExpectation:
    """Facts a PersistentVolumeClaim (volumeName, phase) or a ResourceClaim (allocated,
    devices as "request/pool/device") must show at the end of a run."""

    volume_name: str | None = None
    phase: str | None = None
    allocated: bool | None = None
    devices: tuple[str, ...] | None = None
    shares: tuple[str, ...] | None = None
    """Per result, as :attr:`DeviceClaimOutcome.shares`."""


@dataclass(frozen=True, slots=True)
class PodStep:
    """One pod to schedule: its object (schedulerName unset) and when to create it."""

    pod: JSON
    wait_before: bool = False
    after_nominated: str | None = None
    """Created once this pod carries a nominatedNodeName and the cluster is quiet."""

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])


WORKLOAD_KINDS: Final = {
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
}


@dataclass(frozen=True, slots=True)
class Workload:
    """A controller object whose pods the controller-manager makes (schedulerName unset)."""

    obj: JSON

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"].get("namespace") or "default")

    @property
    def replicas(self) -> int | None:
        """spec.replicas (1 when unset); None for a DaemonSet (one pod per eligible node)."""
        if self.kind == "DaemonSet":
            return None
        value = (self.obj.get("spec") or {}).get("replicas")
        return 1 if value is None else int(value)

    @property
    def pod_names(self) -> list[str]:
        """The names of a StatefulSet's pods ({name}-{ordinal}); [] for the others."""
        if self.kind != "StatefulSet":
            return []
        return [f"{self.name}-{i}" for i in range(self.replicas or 0)]


@dataclass(frozen=True, slots=True)
class WorkloadUpdate:
    """A merge patch applied to a workload once the run has settled; it settles again."""

    workload: str
    patch: JSON


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str = ""
    path: Path | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    scheduler_config: Mapping[str, Any] = field(default_factory=dict)
    """Top-level KubeSchedulerConfiguration fields for both schedulers (backoffs)."""
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    """``--feature-gates`` of both schedulers (names kscheduler implements)."""
    priority_classes: tuple[JSON, ...] = ()
    namespaces: tuple[JSON, ...] = ()
    nodes: tuple[JSON, ...] = ()
    objects: tuple[JSON, ...] = ()
    existing_pods: tuple[JSON, ...] = ()
    workloads: tuple[Workload, ...] = ()
    pods: tuple[PodStep, ...] = ()
    updates: tuple[WorkloadUpdate, ...] = ()
    expect: Mapping[str, PodExpectation] = field(default_factory=dict)
    expect_workloads: Mapping[str, WorkloadExpectation] = field(default_factory=dict)
    expect_claims: Mapping[str, ClaimExpectation] = field(default_factory=dict)
    known_difference: str | None = None
    device_conditions: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    """Claim ("ns/name") -> the condition types set True on its devices at each of its
    allocations, in turn (the run plays the DRA driver; the last set repeats)."""
    scheduler_starts_after_pods: bool = False
    settle_seconds: float = DEFAULT_SETTLE_SECONDS
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    @property
    def scheduled_names(self) -> list[str]:
        """The pods a scheduler places whose names are known: the pods to schedule, then
        the StatefulSets' pods."""
        return [s.name for s in self.pods] + [n for w in self.workloads for n in w.pod_names]

    @property
    def pod_names(self) -> list[str]:
        """Every pod of the scenario with a known name (existing first, then to schedule)."""
        return [p["metadata"]["name"] for p in self.existing_pods] + self.scheduled_names

    def expectation(self, pod: str) -> PodExpectation:
        return self.expect.get(pod) or PodExpectation()

    def workload(self, name: str) -> Workload | None:
        return next((w for w in self.workloads if w.name == name), None)

    def expected_victims(self) -> set[str] | None:
        """The union of the victims the expectations name, or None if none says."""
        named = [e.victims for e in self.expect.values() if e.victims is not None]
        if not named:
            return None
        return {v for victims in named for v in victims}


# --------------------------------------------------------------------------- parsing


class _Fields:
    """A mapping read field by field; unknown keys and wrong types raise ScenarioError."""

    def __init__(self, raw: Any, where: str, allowed: Iterable[str]) -> None:
        if not isinstance(raw, dict):
            raise ScenarioError(f"{where}: expected a mapping, got {type(raw).__name__}")
        unknown = sorted(set(raw) - set(allowed))
        if unknown:
            raise ScenarioError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}")
        self.raw: dict[str, Any] = raw
        self.where = where

    def error(self, key: str, message: str) -> ScenarioError:
        return ScenarioError(f"{self.where}.{key}: {message}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        value = self.raw.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) and kind in (int, float):
            raise self.error(key, f"expected {getattr(kind, '__name__', kind)}, got bool")
        if not isinstance(value, kind):
            raise self.error(key, f"expected {getattr(kind, '__name__', kind)}, got {value!r}")
        return value

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self.raw.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool | dict | list):
            raise self.error(key, f"expected a string, got {value!r}")
        return str(value)

    def mapping(self, key: str) -> dict[str, Any]:
        value: dict[str, Any] = self.get(key, dict, {})
        return value

    def string_map(self, key: str) -> dict[str, str]:
        return {str(k): "" if v is None else str(v) for k, v in self.mapping(key).items()}

    def items(self, key: str) -> list[Any]:
        value: list[Any] = self.get(key, list, [])
        return value


def _keys(text: str) -> frozenset[str]:
    return frozenset(text.split())


_SCENARIO_KEYS = _keys(
    """
    name description config schedulerConfig featureGates priorityClasses namespaces nodes objects
    existingPods workloads pods
    updates expect expectClaims knownDifference schedulerStartsAfterPods settleSeconds
    timeoutSeconds deviceConditions
    """
)
#: Top-level configuration a scenario may set for both schedulers.
_SCHEDULER_CONFIG_KEYS = frozenset(
    {"podInitialBackoffSeconds", "podMaxBackoffSeconds", "percentageOfNodesToScore"}
)
_NODE_KEYS = _keys(
    """
    name count cpu memory pods labels annotations taints images unschedulable extended
    ephemeralStorage allocatable ready declaredFeatures
    """
)
_POD_KEYS = _keys(
    """
    name namespace count cpu memory ephemeralStorage extended labels annotations nodeSelector
    tolerations affinity topologySpreadConstraints priorityClassName hostPort hostPorts image
    images containers initContainers volumes pvcs schedulingGates nodeName
    terminationGracePeriodSeconds spec
    """
)
_EXPECT_KEYS = _keys(
    """
    bound node tie nominated nominatedDuringRun message messageContains messageMayDiffer
    victims events
    """
)
_WORKLOAD_EXPECT_KEYS = _keys("bound pending ready nodes")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def load_scenario(path: str | Path) -> Scenario:
    """Read and check one scenario file."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{p}: {exc}") from exc
    try:
        return parse_scenario(raw, path=p)
    except ScenarioError as exc:
        raise ScenarioError(f"{p}: {exc}") from None


def scenario_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories to their *.yaml files (sorted); keep files as given."""
    out: list[Path] = []
    for item in paths:
        p = Path(item)
        out.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    return out


def parse_scenario(raw: Any, *, path: Path | None = None) -> Scenario:
    f = _Fields(raw, "scenario", _SCENARIO_KEYS)
    name = f.string("name") or (path.stem if path is not None else "")
    if not name:
        raise f.error("name", "required")
    config = f.mapping("config")
    scheduler_config = f.mapping("schedulerConfig")
    unknown = sorted(set(scheduler_config) - _SCHEDULER_CONFIG_KEYS)
    if unknown:
        raise f.error(
            "schedulerConfig",
            f"unknown field(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(_SCHEDULER_CONFIG_KEYS))}",
        )
    if "schedulerName" in config:
        raise f.error("config.schedulerName", "set by the runner; leave it out")
    gates_raw = f.mapping("featureGates")
    if any(not isinstance(v, bool) for v in gates_raw.values()):
        raise f.error("featureGates", "expected NAME: true|false")
    try:
        feature_gates = features.parse_feature_gates(
            ",".join(f"{k}={str(v).lower()}" for k, v in gates_raw.items())
        )
    except features.FeatureGateError as exc:
        raise f.error("featureGates", str(exc)) from None
    classes = tuple(
        _priority_class(c, f"priorityClasses[{i}]")
        for i, c in enumerate(f.items("priorityClasses"))
    )
    namespaces = tuple(
        _namespace(n, f"namespaces[{i}]") for i, n in enumerate(f.items("namespaces"))
    )
    nodes: list[JSON] = []
    for i, n in enumerate(f.items("nodes")):
        nodes.extend(_nodes(n, f"nodes[{i}]"))
    objects = tuple(_raw_object(o, f"objects[{i}]") for i, o in enumerate(f.items("objects")))
    existing: list[JSON] = []
    for i, p in enumerate(f.items("existingPods")):
        existing.extend(_pods(p, f"existingPods[{i}]", existing=True))
    workloads = tuple(_workload(w, f"workloads[{i}]") for i, w in enumerate(f.items("workloads")))
    steps: list[PodStep] = []
    for i, p in enumerate(f.items("pods")):
        wait, after = False, None
        if isinstance(p, dict) and ("waitBound" in p or "afterNominated" in p):
            p = dict(p)
            wait = p.pop("waitBound", False)
            if not isinstance(wait, bool):
                raise ScenarioError(f"pods[{i}].waitBound: expected a bool, got {wait!r}")
            after = p.pop("afterNominated", None)
            if after is not None and not isinstance(after, str):
                raise ScenarioError(f"pods[{i}].afterNominated: expected a pod name")
        for j, pod in enumerate(_pods(p, f"pods[{i}]", existing=False)):
            first = j == 0
            steps.append(PodStep(pod, wait_before=wait and first, after_nominated=after))
            after = None
    names = [s.name for s in steps]
    for i, step in enumerate(steps):
        if step.after_nominated is not None and step.after_nominated not in names[:i]:
            raise ScenarioError(
                f"pods.{step.name}.afterNominated: {step.after_nominated!r} is not a pod "
                "created before it"
            )
    sts_pods = [n for w in workloads for n in w.pod_names]
    all_names = [p["metadata"]["name"] for p in existing] + names + sts_pods
    dupes = sorted({n for n in all_names if all_names.count(n) > 1})
    if dupes:
        raise ScenarioError(
            f"pods: names must be unique across existingPods, pods and StatefulSet pods: {dupes}"
        )
    workload_names = [w.name for w in workloads]
    clash = sorted(set(workload_names) & set(all_names)) or sorted(
        {n for n in workload_names if workload_names.count(n) > 1}
    )
    if clash:
        raise ScenarioError(f"workloads: names must be unique and not name a pod: {clash}")
    updates = tuple(
        _update(u, f"updates[{i}]", workload_names) for i, u in enumerate(f.items("updates"))
    )
    node_names = [n["metadata"]["name"] for n in nodes]
    if len(set(node_names)) != len(node_names):
        raise ScenarioError("nodes: node names must be unique")
    expect: dict[str, PodExpectation] = {}
    expect_workloads: dict[str, WorkloadExpectation] = {}
    for pod_name, facts in f.mapping("expect").items():
        where = f"expect.{pod_name}"
        if pod_name in workload_names:
            wexp = _workload_expectation(facts, where)
            for n in wexp.nodes or ():
                if n not in node_names:
                    raise ScenarioError(f"{where}.nodes: no such node {n!r}")
            expect_workloads[str(pod_name)] = wexp
            continue
        if pod_name not in all_names:
            raise ScenarioError(
                f"{where}: no such pod in existingPods, pods or a StatefulSet, nor a workload"
            )
        exp = _expectation(facts, where)
        for v in exp.victims or ():
            if v not in all_names:
                raise ScenarioError(f"{where}.victims: no such pod {v!r}")
        for key, named in (
            ("node", [exp.node]),
            ("nominated", [exp.nominated]),
            ("nominatedDuringRun", [exp.nominated_during_run]),
        ):
            for n in named:
                if n is not None and n not in node_names:
                    raise ScenarioError(f"{where}.{key}: no such node {n!r}")
        for n in sorted(exp.tie or ()):
            if n not in node_names:
                raise ScenarioError(f"{where}.tie: no such node {n!r}")
        expect[str(pod_name)] = exp
    expect_claims = {
        str(claim): _claim_expectation(facts, f"expectClaims.{claim}")
        for claim, facts in f.mapping("expectClaims").items()
    }
    known = (f.string("knownDifference") or "").strip() or None
    device_conditions: dict[str, tuple[tuple[str, ...], ...]] = {}
    for claim, turns in f.mapping("deviceConditions").items():
        where = f"deviceConditions.{claim}"
        if not isinstance(turns, list) or not turns:
            raise ScenarioError(f"{where}: expected a non-empty list of lists of condition types")
        sets = []
        for turn in turns:
            if not isinstance(turn, list) or not all(isinstance(t, str) and t for t in turn):
                raise ScenarioError(f"{where}: expected lists of condition types")
            sets.append(tuple(turn))
        key = str(claim) if "/" in str(claim) else f"default/{claim}"
        device_conditions[key] = tuple(sets)
    settle = float(f.get("settleSeconds", (int, float), DEFAULT_SETTLE_SECONDS))
    timeout = float(f.get("timeoutSeconds", (int, float), DEFAULT_TIMEOUT_SECONDS))
    return Scenario(
        name=name,
        description=(f.string("description") or "").strip(),
        path=path,
        config=config,
        scheduler_config=scheduler_config,
        feature_gates=feature_gates,
        priority_classes=classes,
        namespaces=namespaces,
        nodes=tuple(nodes),
        objects=objects,
        existing_pods=tuple(existing),
        workloads=workloads,
        pods=tuple(steps),
        updates=updates,
        expect=expect,
        expect_workloads=expect_workloads,
        expect_claims=expect_claims,
        known_difference=known,
        device_conditions=device_conditions,
        scheduler_starts_after_pods=bool(f.get("schedulerStartsAfterPods", bool, False)),
        settle_seconds=settle,
        timeout_seconds=timeout,
    )


def _priority_class(raw: Any, where: str) -> JSON:
    f = _Fields(raw, where, ("name", "value", "preemptionPolicy", "globalDefault", "description"))
    name = f.string("name")
    if not name:
        raise f.error("name", "required")
    value = f.get("value", int)
    if value is None:
        raise f.error("value", "required")
    out: JSON = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": bool(f.get("globalDefault", bool, False)),
    }
    policy = f.string("preemptionPolicy")
    if policy is not None:
        out["preemptionPolicy"] = policy
    description = f.string("description")
    if description is not None:
        out["description"] = description
    return out


def _namespace(raw: Any, where: str) -> JSON:
    if isinstance(raw, str):
        raw = {"name": raw}
    f = _Fields(raw, where, ("name", "labels"))
    name = f.string("name")
    if not name:
        raise f.error("name", "required")
    if name in _PROTECTED_NAMESPACES:
        raise f.error("name", f"{name!r} is shared with the control plane; use another name")
    labels = f.string_map("labels")
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _substitute(value: Any, index: int) -> Any:
    """Replace "{i}" in every string (keys included) with index."""
    if isinstance(value, str):
        return value.replace("{i}", str(index))
    if isinstance(value, list):
        return [_substitute(v, index) for v in value]
    if isinstance(value, dict):
        return {_substitute(k, index): _substitute(v, index) for k, v in value.items()}
    return value


def _copies(raw: Any, where: str) -> list[Any]:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {type(raw).__name__}")
    count = raw.get("count")
    if count is None:
        return [raw]
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ScenarioError(f"{where}.count: expected a positive integer, got {count!r}")
    body = {k: v for k, v in raw.items() if k != "count"}
    if "{i}" not in str(body.get("name", "")):
        raise ScenarioError(f'{where}.name: with count, the name needs "{{i}}"')
    return [_substitute(body, i) for i in range(count)]


def _taint(raw: Any, where: str) -> JSON:
    """A taint from {key, value, effect} or "key[=value]:Effect"."""
    if isinstance(raw, dict):
        f = _Fields(raw, where, ("key", "value", "effect"))
        key, effect = f.string("key"), f.string("effect")
        value = f.string("value")
    elif isinstance(raw, str) and ":" in raw:
        head, effect = raw.rsplit(":", 1)
        key, _, value_part = head.partition("=")
        value = value_part if "=" in head else None
    else:
        raise ScenarioError(f'{where}: expected {{key, value, effect}} or "key=value:Effect"')
    if not key:
        raise ScenarioError(f"{where}: taint key required")
    if effect not in _TAINT_EFFECTS:
        raise ScenarioError(f"{where}: effect must be one of {', '.join(_TAINT_EFFECTS)}")
    out: JSON = {"key": key, "effect": effect}
    if value:
        out["value"] = value
    return out


def _nodes(raw: Any, where: str) -> list[JSON]:
    out = []
    for body in _copies(raw, where):
        f = _Fields(body, where, _NODE_KEYS)
        name = f.string("name")
        if not name:
            raise f.error("name", "required")
        images = {str(k): int(v) for k, v in f.mapping("images").items()}
        taints = [_taint(t, f"{where}.taints[{j}]") for j, t in enumerate(f.items("taints"))]
        node = make_node(
            name,
            cpu=f.string("cpu", "4") or "4",
            memory=f.string("memory", "32Gi") or "32Gi",
            pods=int(f.get("pods", int, 110)),
            labels=f.string_map("labels"),
            annotations=f.string_map("annotations") or None,
            taints=taints or None,
            images=images or None,
            unschedulable=bool(f.get("unschedulable", bool, False)),
            extended=f.string_map("extended") or None,
            ephemeral_storage=f.string("ephemeralStorage", "100Gi"),
            allocatable=f.string_map("allocatable") or None,
            ready=bool(f.get("ready", bool, True)),
        )
        declared = f.items("declaredFeatures")
        if declared:
            node.setdefault("status", {})["declaredFeatures"] = [str(x) for x in declared]
        out.append(node)
    return out


def _raw_object(raw: Any, where: str) -> JSON:
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: expected a mapping")
    for key in ("apiVersion", "kind"):
        if not isinstance(raw.get(key), str):
            raise ScenarioError(f"{where}.{key}: required")
    meta = raw.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ScenarioError(f"{where}.metadata.name: required")
    if raw["kind"] in ("Pod", "Node", "Namespace", "PriorityClass"):
        raise ScenarioError(f"{where}: {raw['kind']} objects go in their own section")
    if (raw["apiVersion"], raw["kind"]) in WORKLOAD_KINDS:
        raise ScenarioError(f"{where}: a {raw['kind']} goes in workloads")
    annotations = meta.get("annotations") or {}
    if raw["kind"] == "PersistentVolumeClaim" and "pv.kubernetes.io/bind-completed" in annotations:
        raise ScenarioError(
            f"{where}.metadata.annotations: pv.kubernetes.io/bind-completed is the PV "
            "controller's; a claim with spec.volumeName is bound by it"
        )
    owner = _STATUS_OWNERS.get(str(raw["kind"]))
    if owner is not None and "status" in raw:
        raise ScenarioError(f"{where}.status: the {owner} writes it; leave it out")
    return copy.deepcopy(raw)


_STATUS_OWNERS: Final = {
    "PodDisruptionBudget": "disruption controller",
    "PersistentVolume": "PV controller",
    "PersistentVolumeClaim": "PV controller",
}


def _workload(raw: Any, where: str) -> Workload:
    """A raw Deployment, ReplicaSet, StatefulSet or DaemonSet with a pod template."""
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: expected a mapping")
    key = (raw.get("apiVersion"), raw.get("kind"))
    if key not in WORKLOAD_KINDS:
        kinds = ", ".join(f"{v} {k}" for v, k in sorted(WORKLOAD_KINDS))
        raise ScenarioError(f"{where}: expected one of {kinds}, got {key[0]} {key[1]}")
    meta = raw.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ScenarioError(f"{where}.metadata.name: required")
    spec = raw.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise ScenarioError(f"{where}.spec.template.spec: required")
    if "schedulerName" in template["spec"]:
        raise ScenarioError(f"{where}.spec.template.spec.schedulerName: set by the runner")
    replicas = spec.get("replicas")  # type: ignore[union-attr]
    if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool)):
        raise ScenarioError(f"{where}.spec.replicas: expected an integer, got {replicas!r}")
    if "status" in raw:
        raise ScenarioError(f"{where}.status: the controller writes it; leave it out")
    return Workload(copy.deepcopy(raw))


def _update(raw: Any, where: str, workloads: Sequence[str]) -> WorkloadUpdate:
    f = _Fields(raw, where, ("workload", "patch"))
    name = f.string("workload")
    if name not in workloads:
        raise f.error("workload", f"no such workload {name!r}")
    patch = f.mapping("patch")
    if not patch:
        raise f.error("patch", "required: a merge patch of the workload")
    template_spec = ((patch.get("spec") or {}).get("template") or {}).get("spec") or {}
    if "schedulerName" in template_spec:
        raise f.error("patch.spec.template.spec.schedulerName", "set by the runner")
    return WorkloadUpdate(str(name), copy.deepcopy(patch))


def _count(f: _Fields, key: str) -> int | None:
    value: int | None = f.get(key, int)
    if value is not None and value < 0:
        raise f.error(key, "expected a count >= 0")
    return value


def _workload_expectation(raw: Any, where: str) -> WorkloadExpectation:
    f = _Fields(raw if raw is not None else {}, where, _WORKLOAD_EXPECT_KEYS)
    nodes = f.raw.get("nodes")
    if nodes is not None and not isinstance(nodes, list):
        raise f.error("nodes", "expected a list of node names (a multiset)")
    return WorkloadExpectation(
        bound=_count(f, "bound"),
        pending=_count(f, "pending"),
        ready=_count(f, "ready"),
        nodes=tuple(sorted(str(n) for n in nodes)) if nodes is not None else None,
    )


def _claim_expectation(raw: Any, where: str) -> ClaimExpectation:
    f = _Fields(raw, where, ("volumeName", "phase", "allocated", "devices", "shares"))
    devices = _names(f, "devices")
    shares = _names(f, "shares")
    allocated = f.get("allocated", bool)
    if devices is not None:
        if allocated is False and devices:
            raise f.error("devices", "an unallocated claim has no devices")
        if any(d.count("/") not in (2, 3) for d in devices):
            raise f.error(
                "devices", 'expected "request/pool/device" (request: "main/sub") for each'
            )
    exp = ClaimExpectation(
        volume_name=f.string("volumeName"),
        phase=f.string("phase"),
        allocated=allocated,
        devices=devices,
        shares=shares,
    )
    if (
        exp.volume_name is None
        and exp.phase is None
        and allocated is None
        and devices is None
        and shares is None
    ):
        raise ScenarioError(f"{where}: expected volumeName, phase, allocated, devices or shares")
    if (exp.volume_name or exp.phase) and (allocated is not None or devices is not None):
        raise ScenarioError(f"{where}: a PersistentVolumeClaim's facts or a ResourceClaim's")
    return exp


def _container_ports(f: _Fields) -> list[JSON]:
    ports: list[JSON] = []
    single = f.get("hostPort", int)
    if single is not None:
        ports.append({"containerPort": single, "hostPort": single, "protocol": "TCP"})
    for j, item in enumerate(f.items("hostPorts")):
        if isinstance(item, int) and not isinstance(item, bool):
            ports.append({"containerPort": item, "hostPort": item, "protocol": "TCP"})
            continue
        pf = _Fields(item, f"{f.where}.hostPorts[{j}]", ("port", "protocol", "hostIP"))
        port = pf.get("port", int)
        if port is None:
            raise pf.error("port", "required")
        entry: JSON = {
            "containerPort": port,
            "hostPort": port,
            "protocol": pf.string("protocol", "TCP"),
        }
        host_ip = pf.string("hostIP")
        if host_ip:
            entry["hostIP"] = host_ip
        ports.append(entry)
    return ports


def deep_merge(base: Any, override: Any) -> Any:
    """override merged into base: mappings recursively, anything else replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = deep_merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)


_CONTAINER_STATUS_LISTS: Final = frozenset(
    {"containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"}
)


def merge_pod_status(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> JSON:
    """An existing pod's status with a scenario's ``status`` merged in: mappings
    recursively; the lists of container statuses (containerStatuses,
    initContainerStatuses, ephemeralContainerStatuses) entry by entry on ``name``,
    the conditions on ``type`` (an entry with a new name or type is appended); any
    other value replaced."""
    out: JSON = dict(current)
    for key, value in wanted.items():
        have = out.get(key)
        if key in _CONTAINER_STATUS_LISTS or key == "conditions":
            on = "type" if key == "conditions" else "name"
            merged = [dict(c) for c in have or [] if isinstance(c, dict)]
            for entry in value or []:
                at = next((i for i, c in enumerate(merged) if c.get(on) == entry.get(on)), None)
                if at is None:
                    merged.append(copy.deepcopy(entry))
                else:
                    merged[at] = deep_merge(merged[at], entry)
            out[key] = merged
        elif isinstance(have, dict) and isinstance(value, dict):
            out[key] = deep_merge(have, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _pods(raw: Any, where: str, *, existing: bool) -> list[JSON]:
    keys = _POD_KEYS | {"node", "status"} if existing else _POD_KEYS
    out = []
    for body in _copies(raw, where):
        f = _Fields(body, where, keys)
        name = f.string("name")
        if not name:
            raise f.error("name", "required")
        node_name = f.string("node") if existing else f.string("nodeName")
        if existing and not node_name:
            raise f.error("node", "required: existing pods are created bound")
        images = [str(i) for i in f.items("images")]
        grace = f.get("terminationGracePeriodSeconds", int, 0)
        pod = make_pod(
            name,
            f.string("namespace", "default") or "default",
            cpu=f.string("cpu"),
            memory=f.string("memory"),
            extended=f.string_map("extended") or None,
            node_selector=f.string_map("nodeSelector") or None,
            tolerations=f.items("tolerations") or None,
            priority_class_name=f.string("priorityClassName"),
            labels=f.string_map("labels") or None,
            annotations=f.string_map("annotations") or None,
            affinity=f.mapping("affinity") or None,
            topology_spread_constraints=f.items("topologySpreadConstraints") or None,
            node_name=node_name,
            scheduling_gates=[str(g) for g in f.items("schedulingGates")] or None,
            containers=f.items("containers") or None,
            init_containers=f.items("initContainers") or None,
            image=f.string("image") or (images[0] if images else "registry.k8s.io/pause:3.10"),
            termination_grace_period=grace,
        )
        spec = pod["spec"]
        main = spec["containers"][0]
        storage = f.string("ephemeralStorage")
        if storage is not None:
            main.setdefault("resources", {}).setdefault("requests", {})["ephemeral-storage"] = (
                storage
            )
        ports = _container_ports(f)
        if ports:
            main["ports"] = ports
        for j, image in enumerate(images[1:], start=1):
            spec["containers"].append({"name": f"c{j}", "image": image})
        volumes = list(f.items("volumes"))
        for j, claim in enumerate(f.items("pvcs")):
            volumes.append({"name": f"pvc-{j}", "persistentVolumeClaim": {"claimName": str(claim)}})
        if volumes:
            spec["volumes"] = volumes
        raw_spec = f.mapping("spec")
        if "schedulerName" in raw_spec:
            raise f.error("spec.schedulerName", "set by the runner; leave it out")
        pod["spec"] = deep_merge(spec, raw_spec)
        status = f.mapping("status")
        if status:
            for key in [*sorted(_CONTAINER_STATUS_LISTS), "conditions"]:
                on = "type" if key == "conditions" else "name"
                entries = status.get(key)
                if entries is not None and not (
                    isinstance(entries, list)
                    and all(isinstance(c, dict) and c.get(on) for c in entries)
                ):
                    raise f.error(f"status.{key}", f"expected a list of mappings with a {on}")
            pod["status"] = status
        out.append(pod)
    return out


def _names(f: _Fields, key: str) -> tuple[str, ...] | None:
    value = f.raw.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise f.error(key, "expected a list of names")
    return tuple(value)


def _expectation(raw: Any, where: str) -> PodExpectation:
    f = _Fields(raw if raw is not None else {}, where, {*_EXPECT_KEYS, "sameNode"})
    if "sameNode" in f.raw:
        raise f.error(
            "sameNode",
            "removed: every bound pod's node is compared; name equally good nodes with tie: [a, b]",
        )
    contains = f.raw.get("messageContains")
    if contains is None:
        contains_t: tuple[str, ...] = ()
    elif isinstance(contains, str):
        contains_t = (contains,)
    elif isinstance(contains, list):
        contains_t = tuple(str(c) for c in contains)
    else:
        raise f.error("messageContains", "expected a string or a list of strings")
    tie = _names(f, "tie")
    if tie is not None and len(set(tie)) < 2:
        raise f.error("tie", "expected two or more nodes")
    events = _names(f, "events")
    bound = f.get("bound", bool)
    if tie is not None:
        if bound is False:
            raise f.error("tie", "a pod expected pending has no node")
        bound = True
    exp = PodExpectation(
        bound=bound,
        node=f.string("node"),
        tie=frozenset(tie) if tie is not None else None,
        nominated=f.string("nominated"),
        nominated_during_run=f.string("nominatedDuringRun"),
        message=f.string("message"),
        message_contains=contains_t,
        message_may_differ=f.string("messageMayDiffer"),
        victims=_names(f, "victims"),
        events=tuple(sorted(set(events))) if events is not None else None,
    )
    if exp.node is not None and exp.bound is False:
        raise f.error("node", "a pod expected pending has no node")
    if exp.node is not None and exp.tie is not None:
        raise f.error("tie", "give node (one node) or tie (a set), not both")
    return exp


# --------------------------------------------------------------------------- outcomes


@dataclass(frozen=True, slots=True)
class PodOutcome:
    """What one pod of the scenario looked like when the run settled."""

    name: str
    exists: bool
    node: str | None = None
    reason: str | None = None
    message: str | None = None
    nominated_node: str | None = None
    terminating: bool = False
    events: tuple[str, ...] = ()
    """The reasons of the events regarding the pod (sorted, each once)."""

    @property
    def bound(self) -> bool:
        return self.exists and bool(self.node)

    def summary(self) -> str:
        if not self.exists:
            return "deleted"
        if self.node:
            text = f"bound to {self.node}"
        else:
            text = f"pending ({self.reason})" if self.reason else "pending, not reported"
        if self.nominated_node:
            text += f", nominated {self.nominated_node}"
        if self.terminating:
            text += ", terminating"
        return text

    def placement(self) -> tuple[str, str, str, tuple[str, ...]]:
        """What a pod with a random name is compared by: node (or reason), nomination, events."""
        where = self.node or f"pending:{self.reason or '-'}"
        return (where, self.nominated_node or "", self.message or "", self.events)


@dataclass(frozen=True, slots=True)
class WorkloadOutcome:
    """A workload's status and the placements of its pods (as a sorted multiset)."""

    name: str
    kind: str
    exists: bool = True
    status: tuple[tuple[str, int], ...] = ()
    pods: tuple[tuple[str, str, str, tuple[str, ...]], ...] = ()
    settled: bool = True
    """Its pods are placed and its controller has made them all (see _workload_settled)."""

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted(p[0] for p in self.pods if not p[0].startswith("pending:")))

    @property
    def pending(self) -> int:
        return sum(1 for p in self.pods if p[0].startswith("pending:"))

    def get(self, key: str) -> int:
        return dict(self.status).get(key, 0)


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """A PersistentVolumeClaim at the end of a run."""

    name: str
    volume_name: str | None = None
    phase: str | None = None
    selected_node: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceClaimOutcome:
    """A ResourceClaim at the end of a run: its allocation and reservations."""

    name: str
    allocated: bool = False
    devices: tuple[tuple[str, str, str, str, bool], ...] = ()
    """(request, driver, pool, device, adminAccess) of each result, in order."""
    node_selector: str | None = None
    """The allocation's node selector as canonical JSON."""
    reserved_for: tuple[str, ...] = ()
    """The names of the pods in status.reservedFor (sorted)."""
    shares: tuple[str, ...] = ()
    """Per result: "" (no shareID), "shared" (a shareID, no consumedCapacity) or its
    consumedCapacity as "name=quantity,..." (sorted by name); a shareID that is not a
    UUID shows as "bad shareID ..." and consumedCapacity without a shareID as
    "unshared ..."."""
    binding: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    """(bindingConditions, bindingFailureConditions) of each result, in order."""

    @property
    def device_names(self) -> tuple[str, ...]:
        """The results as "request/pool/device"."""
        return tuple(f"{r}/{p}/{d}" for r, _, p, d, _ in self.devices)

    def summary(self) -> str:
        if not self.allocated:
            return "not allocated"
        shares = self.shares or ("",) * len(self.devices)
        text = ", ".join(
            f"{r}={drv}/{p}/{d}{' (admin)' if admin else ''}{f' [{sh}]' if sh else ''}"
            for (r, drv, p, d, admin), sh in zip(self.devices, shares, strict=True)
        )
        reserved = ", ".join(self.reserved_for) or "-"
        binding = ""
        if any(ok or bad for ok, bad in self.binding):
            binding = "; binding conditions " + ", ".join(
                f"{'/'.join(ok) or '-'} (failure: {'/'.join(bad) or '-'})"
                for ok, bad in self.binding
            )
        return f"allocated {text or '(no devices)'}; reserved for {reserved}{binding}"


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything a run is judged by, as seen at one instant."""

    pods: Mapping[str, PodOutcome] = field(default_factory=dict)
    workloads: Mapping[str, WorkloadOutcome] = field(default_factory=dict)
    claims: Mapping[str, ClaimOutcome] = field(default_factory=dict)
    device_claims: Mapping[str, DeviceClaimOutcome] = field(default_factory=dict)


@dataclass(slots=True)
class RunOutcome:
    """One run of a scenario through one scheduler."""

    scheduler: Which
    pods: dict[str, PodOutcome] = field(default_factory=dict)
    workloads: dict[str, WorkloadOutcome] = field(default_factory=dict)
    claims: dict[str, ClaimOutcome] = field(default_factory=dict)
    device_claims: dict[str, DeviceClaimOutcome] = field(default_factory=dict)
    settled: bool = True
    seconds: float = 0.0
    log_path: Path | None = None
    error: str | None = None
    uids: dict[str, str] = field(default_factory=dict)
    """Pod name -> uid of every pod with a known name, kept after it is deleted."""
    nominated_seen: dict[str, set[str]] = field(default_factory=dict)
    """Pod name -> every nominatedNodeName seen on it while the run was polled."""

    def deleted(self, names: Iterable[str]) -> set[str]:
        return {n for n in names if n in self.pods and not self.pods[n].exists}

    def record(self, seen: Observation) -> None:
        self.pods = dict(seen.pods)
        self.workloads = dict(seen.workloads)
        self.claims = dict(seen.claims)
        self.device_claims = dict(seen.device_claims)


@dataclass(frozen=True, slots=True)
class Difference:
    """One fact on which the two runs disagree (or a run and the scenario, see source)."""

    pod: str
    field: str
    reference: Any
    ours: Any
    source: str = "compare"
    """"compare" (reference vs kscheduler) or "expect:<scheduler>" (expected vs actual)."""

    def describe(self) -> str:
        if self.source == "compare":
            return (
                f"{self.pod}: {self.field}: reference={_show(self.reference)} "
                f"kscheduler={_show(self.ours)}"
            )
        who = self.source.partition(":")[2]
        return (
            f"{self.pod}: {self.field}: expected={_show(self.reference)} {who}={_show(self.ours)}"
        )


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, set | frozenset):
        return "[" + ", ".join(sorted(map(str, value))) + "]"
    return str(value)


def _same_place(a: str | None, b: str | None, tie: frozenset[str] | None) -> bool:
    return a == b or (tie is not None and a in tie and b in tie)


def compare(scenario: Scenario, ref: RunOutcome, ours: RunOutcome) -> list[Difference]:
    """Every fact the two runs must share and do not.

    The same pods bound and pending and deleted (preemption victims); for every
    bound pod the same node, or two nodes of the pod's ``tie`` set; the same
    nominatedNodeName (``tie`` applies too); the same reasons of the events
    regarding each pod; for pods pending in both, the same PodScheduled reason
    and message word for word (unless ``messageMayDiffer``). Workloads: the same
    status counts and the same multiset of pod placements (StatefulSet pods are
    compared by name as above). Claims: the same volumeName, phase and selected
    node. ResourceClaims: the same allocation (devices in order, node selector) and
    reservations.
    """
    out: list[Difference] = []
    if ref.error or ours.error:
        out.append(Difference("(run)", "error", ref.error, ours.error))
    if not ref.settled or not ours.settled:
        out.append(Difference("(run)", "settled", ref.settled, ours.settled))
    scheduled = set(scenario.scheduled_names)
    for name in scenario.pod_names:
        r, o = ref.pods.get(name), ours.pods.get(name)
        if r is None and o is None:
            continue
        if r is None or o is None:
            out.append(Difference(name, "seen", r is not None, o is not None))
            continue
        if r.events != o.events:
            out.append(Difference(name, "event reasons", list(r.events), list(o.events)))
        if r.exists != o.exists:
            out.append(Difference(name, "deleted", not r.exists, not o.exists))
            continue
        if not r.exists or name not in scheduled:
            continue
        if r.bound != o.bound:
            out.append(Difference(name, "bound", r.summary(), o.summary()))
            continue
        exp = scenario.expectation(name)
        if r.bound and not _same_place(r.node, o.node, exp.tie):
            out.append(Difference(name, "node", r.node, o.node))
        if not _same_place(r.nominated_node, o.nominated_node, exp.tie):
            out.append(Difference(name, "nominatedNodeName", r.nominated_node, o.nominated_node))
        if not r.bound and exp.message_may_differ is None:
            if r.reason != o.reason:
                out.append(Difference(name, "reason", r.reason, o.reason))
            if r.message != o.message:
                out.append(Difference(name, "message", r.message, o.message))
    for workload in scenario.workloads:
        rw, ow = ref.workloads.get(workload.name), ours.workloads.get(workload.name)
        if rw is None or ow is None:
            continue
        if rw.status != ow.status:
            out.append(Difference(workload.name, "status", dict(rw.status), dict(ow.status)))
        if workload.kind != "StatefulSet" and rw.pods != ow.pods:
            out.append(Difference(workload.name, "pods", list(rw.pods), list(ow.pods)))
    for key in sorted(set(ref.claims) | set(ours.claims)):
        rc, oc = ref.claims.get(key), ours.claims.get(key)
        if rc != oc:
            out.append(Difference(key, "claim", rc, oc))
    for key in sorted(set(ref.device_claims) | set(ours.device_claims)):
        rd, od = ref.device_claims.get(key), ours.device_claims.get(key)
        if rd != od:
            out.append(
                Difference(
                    key,
                    "resourceclaim",
                    rd.summary() if rd else "absent",
                    od.summary() if od else "absent",
                )
            )
            if rd is not None and od is not None and rd.node_selector != od.node_selector:
                out.append(
                    Difference(key, "allocation nodeSelector", rd.node_selector, od.node_selector)
                )
    return out


def check_expectations(scenario: Scenario, run: RunOutcome) -> list[Difference]:
    """The scenario's own facts against one run (``Difference.reference`` = expected)."""
    src = f"expect:{run.scheduler}"
    out: list[Difference] = []
    for name, exp in scenario.expect.items():
        got = run.pods.get(name)
        if got is None:
            out.append(Difference(name, "exists", True, False, src))
            continue
        if exp.bound is not None and got.bound != exp.bound:
            out.append(Difference(name, "bound", exp.bound, got.summary(), src))
        if exp.node is not None and got.node != exp.node:
            out.append(Difference(name, "node", exp.node, got.node, src))
        if exp.tie is not None and got.bound and got.node not in exp.tie:
            out.append(Difference(name, "node in tie", exp.tie, got.node, src))
        if exp.nominated is not None and got.nominated_node != exp.nominated:
            out.append(
                Difference(name, "nominatedNodeName", exp.nominated, got.nominated_node, src)
            )
        seen_nominated = run.nominated_seen.get(name, set())
        if exp.nominated_during_run is not None and exp.nominated_during_run not in seen_nominated:
            out.append(
                Difference(
                    name, "nominated during the run", exp.nominated_during_run,
                    sorted(seen_nominated), src,
                )
            )  # fmt: skip
        if exp.message is not None and got.message != exp.message:
            out.append(Difference(name, "message", exp.message, got.message, src))
        for part in exp.message_contains:
            if part not in (got.message or ""):
                out.append(Difference(name, "message contains", part, got.message, src))
        if exp.events is not None and got.events != exp.events:
            out.append(Difference(name, "event reasons", list(exp.events), list(got.events), src))
    victims = scenario.expected_victims()
    if victims is not None:
        deleted = run.deleted(scenario.pod_names)
        if deleted != victims:
            out.append(Difference("(victims)", "deleted pods", victims, deleted, src))
    for name, wexp in scenario.expect_workloads.items():
        wl = run.workloads.get(name)
        if wl is None or not wl.exists:
            out.append(Difference(name, "workload exists", True, False, src))
            continue
        bound = len(wl.nodes)
        if wexp.bound is not None and bound != wexp.bound:
            out.append(Difference(name, "bound pods", wexp.bound, bound, src))
        if wexp.pending is not None and wl.pending != wexp.pending:
            out.append(Difference(name, "pending pods", wexp.pending, wl.pending, src))
        if wexp.ready is not None and wl.get("ready") != wexp.ready:
            out.append(Difference(name, "ready", wexp.ready, wl.get("ready"), src))
        if wexp.nodes is not None and wl.nodes != wexp.nodes:
            out.append(Difference(name, "nodes", list(wexp.nodes), list(wl.nodes), src))
    for key, cexp in scenario.expect_claims.items():
        full = key if "/" in key else f"default/{key}"
        if cexp.allocated is not None or cexp.devices is not None or cexp.shares is not None:
            dc = run.device_claims.get(full)
            if dc is None:
                out.append(Difference(key, "resourceclaim exists", True, False, src))
                continue
            if cexp.allocated is not None and dc.allocated != cexp.allocated:
                out.append(Difference(key, "allocated", cexp.allocated, dc.allocated, src))
            if cexp.devices is not None and dc.device_names != cexp.devices:
                out.append(
                    Difference(key, "devices", list(cexp.devices), list(dc.device_names), src)
                )
            if cexp.shares is not None and dc.shares != cexp.shares:
                out.append(Difference(key, "shares", list(cexp.shares), list(dc.shares), src))
            continue
        claim = run.claims.get(full)
        if claim is None:
            out.append(Difference(key, "claim exists", True, False, src))
            continue
        if cexp.volume_name is not None and claim.volume_name != cexp.volume_name:
            out.append(Difference(key, "volumeName", cexp.volume_name, claim.volume_name, src))
        if cexp.phase is not None and claim.phase != cexp.phase:
            out.append(Difference(key, "phase", cexp.phase, claim.phase, src))
    return out


@dataclass(slots=True)
class ScenarioResult:
    scenario: Scenario
    reference: RunOutcome
    ours: RunOutcome
    differences: list[Difference]
    reference_failures: list[Difference]
    our_failures: list[Difference]
    seconds: float

    @property
    def ok(self) -> bool:
        """Both runs agree and both meet the scenario's expectations."""
        return not (self.differences or self.reference_failures or self.our_failures)

    @property
    def status(self) -> str:
        """PASS, FAIL, KNOWN (differs as the scenario says), FIXED (known, but agrees now),
        or BAD-SCENARIO (the reference breaks the scenario's own facts)."""
        if self.reference_failures:
            return "BAD-SCENARIO"
        if self.scenario.known_difference:
            return "FIXED" if self.ok else "KNOWN"
        return "PASS" if self.ok else "FAIL"

    @property
    def failed(self) -> bool:
        return self.status in ("FAIL", "FIXED", "BAD-SCENARIO")


# --------------------------------------------------------------------------- running


@asynccontextmanager
async def running_kscheduler(
    cp: ControlPlane,
    config: str = "",
    *,
    kubeconfig: str | None = None,
    qps: float = -1,
    burst: int = 1000,
    sync_timeout: float = 30.0,
) -> AsyncIterator[Any]:
    """kscheduler in-process against cp (as system:kube-scheduler), caches synced.

    Yields the :class:`kscheduler.app.SchedulerApp`; stops it on exit.
    """
    from kscheduler.app import Options, SchedulerApp
    from kscheduler.config import load_config
    from kscheduler.kube import KubeClient
    from kscheduler.plugins import full_registry

    registry = full_registry()
    cfg = load_config(config, registry=registry)
    kube = await KubeClient.from_kubeconfig(
        kubeconfig or str(cp.scheduler_kubeconfig), qps=qps, burst=burst, pool_size=80
    )
    app = SchedulerApp(cfg, registry, kube, Options(leader_elect=False, shutdown_grace=10))
    stop = asyncio.Event()
    task = asyncio.create_task(app.run(stop), name="kscheduler-under-test")
    synced = asyncio.create_task(app.synced.wait(), name="kscheduler-synced")
    try:
        async with asyncio.timeout(sync_timeout):
            done, _ = await asyncio.wait({synced, task}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()
            raise RuntimeError("kscheduler stopped before its caches synced")
        yield app
    finally:
        synced.cancel()
        stop.set()
        try:
            async with asyncio.timeout(30):
                await task
        finally:
            await kube.close()


def _feature_gates_args(gates: Mapping[str, bool]) -> list[str]:
    if not gates:
        return []
    return ["--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in gates.items())]


def kscheduler_config(profile: Mapping[str, Any], top: Mapping[str, Any] | None = None) -> str:
    """The KubeSchedulerConfiguration YAML of kscheduler's run: one profile, and the
    top-level fields in top."""
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        **copy.deepcopy(dict(top or {})),
        "profiles": [{"schedulerName": KSCHEDULER, **copy.deepcopy(dict(profile))}],
    }
    return yaml.safe_dump(doc, sort_keys=False)


class DiffRunner:
    """Plays scenarios on one control plane; owns an admin RestClient for setup."""

    def __init__(self, cp: ControlPlane, api: RestClient) -> None:
        self.cp = cp
        self.api = api
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}
        self._reference_version: str | None = None

    # ---- the scenario ----------------------------------------------------------------------
    async def run(self, scenario: Scenario) -> ScenarioResult:
        began = time.monotonic()
        await self.check_reference_version()
        await self._wipe_run_state(scenario, objects=())
        await self._create_shared(scenario)
        try:
            ref = await self.run_once(scenario, REFERENCE)
            ours = await self.run_once(scenario, KSCHEDULER)
        finally:
            await self._delete_shared(scenario)
        return ScenarioResult(
            scenario=scenario,
            reference=ref,
            ours=ours,
            differences=compare(scenario, ref, ours),
            reference_failures=check_expectations(scenario, ref),
            our_failures=check_expectations(scenario, ours),
            seconds=time.monotonic() - began,
        )

    async def check_reference_version(self) -> str:
        """The reference binary's version; raises ReferenceVersionError unless it is the
        pinned K8S_VERSION (checked once per runner)."""
        if self._reference_version is None:
            self._reference_version = await reference_version()
        if self._reference_version != K8S_VERSION:
            raise ReferenceVersionError(
                f"{find_kube_scheduler()} --version says {self._reference_version!r}; "
                f"the pinned version is {K8S_VERSION}"
            )
        return self._reference_version

    async def run_once(self, scenario: Scenario, which: Which) -> RunOutcome:
        """One run on fresh state: setup, the scheduler, the workloads and pods, the
        updates, settle, observe, wipe."""
        began = time.monotonic()
        outcome = RunOutcome(scheduler=which)
        created: list[JSON] = []
        try:
            async with AsyncExitStack() as stack:
                await self._create_run_state(scenario, created, outcome)
                if scenario.device_conditions:
                    driver = asyncio.create_task(self._play_driver(scenario), name="driver")
                    stack.callback(driver.cancel)
                if not scenario.scheduler_starts_after_pods:
                    await self._start(stack, scenario, which, outcome)
                for workload in scenario.workloads:
                    body = copy.deepcopy(workload.obj)
                    body["spec"]["template"]["spec"]["schedulerName"] = which
                    await self.api.post(await self._object_path(body), body)
                for step in scenario.pods:
                    if step.wait_before:
                        await self._settle(scenario, outcome)
                    if step.after_nominated is not None:
                        seen = await self._settle(scenario, outcome, nominated=step.after_nominated)
                        held = seen.pods.get(step.after_nominated)
                        if held is None or held.bound or not held.nominated_node:
                            # the window closed before the pod came: it would prove nothing
                            raise RuntimeError(
                                f"{step.name}: {step.after_nominated} is "
                                f"{held.summary() if held else 'missing'}, not nominated and "
                                "waiting, when it is to be created"
                            )
                    pod = copy.deepcopy(step.pod)
                    pod["spec"]["schedulerName"] = which
                    made = await self.api.post(_pods_path(pod["metadata"]["namespace"]), pod)
                    outcome.uids[step.name] = made["metadata"]["uid"]
                if scenario.scheduler_starts_after_pods:
                    await self._start(stack, scenario, which, outcome)
                for update in scenario.updates:
                    await self._settle(scenario, outcome)
                    target = scenario.workload(update.workload)
                    assert target is not None  # checked when parsed
                    path = await self._object_path(target.obj)
                    await self.api.patch(f"{path}/{target.name}", update.patch, patch_type="merge")
                await self._settle(scenario, outcome)
        except Exception as exc:  # a broken run is a finding, not a crash
            outcome.error = f"{type(exc).__name__}: {exc}"
            outcome.settled = False
            with contextlib.suppress(Exception):
                outcome.record(await self._observe(scenario, outcome))
        finally:
            outcome.seconds = time.monotonic() - began
            await self._wipe_run_state(scenario, objects=created)
        return outcome

    async def _play_driver(self, scenario: Scenario) -> None:
        """deviceConditions: as a DRA driver would, set the binding conditions of a claim's
        allocated devices in its status.devices, the next set at each new allocation (an
        allocation whose devices have binding conditions and no status yet)."""
        turns: dict[str, int] = {}
        while True:
            await asyncio.sleep(_POLL_SECONDS)
            for key, sets in scenario.device_conditions.items():
                ns, _, name = key.partition("/")
                path = f"{_RESOURCE_API}/namespaces/{ns}/resourceclaims/{name}"
                try:
                    claim: JSON = await self.api.get(path)
                except ApiError:
                    continue
                status = claim.get("status") or {}
                results = [
                    r
                    for r in ((status.get("allocation") or {}).get("devices") or {}).get("results")
                    or []
                    if r.get("bindingConditions")
                ]
                if not results or status.get("devices"):
                    continue
                turn = turns.get(key, 0)
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                status["devices"] = [
                    {
                        "driver": r["driver"],
                        "pool": r["pool"],
                        "device": r["device"],
                        "conditions": [
                            {
                                "type": t,
                                "status": "True",
                                "reason": "Difftest",
                                "message": f"{t} (set by the differential runner)",
                                "lastTransitionTime": now,
                            }
                            for t in sets[min(turn, len(sets) - 1)]
                        ],
                    }
                    for r in results
                ]
                try:
                    await self.api.put(f"{path}/status", claim)
                except ApiError:
                    continue  # changed meanwhile: the next poll sees it again
                turns[key] = turn + 1

    async def _start(
        self, stack: AsyncExitStack, scenario: Scenario, which: Which, outcome: RunOutcome
    ) -> None:
        if which == REFERENCE:
            ref = ReferenceScheduler.for_control_plane(
                self.cp,
                scheduler_name=REFERENCE,
                profile_extra=copy.deepcopy(dict(scenario.config)),
                config_extra=copy.deepcopy(dict(scenario.scheduler_config)),
                extra_args=_feature_gates_args(scenario.feature_gates),
            )
            await ref.astart()
            stack.push_async_callback(ref.astop)
            outcome.log_path = ref.process.log_path
        else:
            if scenario.feature_gates:
                # in process: the gates are module state, put back when the run ends
                features.configure(features.gates_from(scenario.feature_gates))
                stack.callback(features.configure, features.FeatureGates())
            await stack.enter_async_context(
                running_kscheduler(
                    self.cp, kscheduler_config(scenario.config, scenario.scheduler_config)
                )
            )

    async def _settle(
        self, scenario: Scenario, outcome: RunOutcome, *, nominated: str | None = None
    ) -> Observation:
        """Poll until nothing observed changes for settleSeconds while every created pod
        is bound, reported or gone, none is terminating and every workload has its pods
        (with nominated: until that pod carries a nominatedNodeName; terminating pods,
        such as its victims, are then allowed). Records what it saw on outcome."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + scenario.timeout_seconds
        last: Observation | None = None
        stable_since = loop.time()
        while True:
            seen = await self._observe(scenario, outcome)
            for name, polled in seen.pods.items():
                if polled.nominated_node:
                    outcome.nominated_seen.setdefault(name, set()).add(polled.nominated_node)
            now = loop.time()
            if seen != last:
                last, stable_since = seen, now
            elif now - stable_since >= scenario.settle_seconds:
                if nominated is not None:
                    pod = seen.pods.get(nominated)
                    ready = pod is not None and bool(pod.nominated_node)
                else:
                    ready = _all_settled(scenario, seen)
                if ready:
                    outcome.record(seen)
                    return seen
            if now > deadline:
                outcome.settled = False
                outcome.record(seen)
                return seen
            await asyncio.sleep(_POLL_SECONDS)

    async def _observe(self, scenario: Scenario, outcome: RunOutcome) -> Observation:
        pods = await self.api.list("/api/v1/pods")
        events = await self.api.list("/apis/events.k8s.io/v1/events")
        claims = await self.api.list("/api/v1/persistentvolumeclaims")
        resource_claims = await self.api.list(f"{_RESOURCE_API}/resourceclaims")
        workloads: dict[str, JSON | None] = {}
        for workload in scenario.workloads:
            path = await self._object_path(workload.obj)
            try:
                workloads[workload.name] = await self.api.get(f"{path}/{workload.name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise
                workloads[workload.name] = None
        replicasets: list[JSON] = []
        if any(w.kind == "Deployment" for w in scenario.workloads):
            replicasets = await self.api.list("/apis/apps/v1/replicasets")
        by_key = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        for name, namespace in known_pods(scenario):
            pod = by_key.get((namespace, name))
            if pod is not None:
                outcome.uids[name] = pod["metadata"]["uid"]
        namespaces = scenario_namespaces(scenario)
        return observe(
            scenario,
            pods=pods,
            events=events,
            workloads=workloads,
            replicasets=replicasets,
            claims=[c for c in claims if c["metadata"]["namespace"] in namespaces],
            resource_claims=[
                c for c in resource_claims if c["metadata"]["namespace"] in namespaces
            ],
            uids=outcome.uids,
        )

    # ---- state -----------------------------------------------------------------------------
    async def _create_shared(self, scenario: Scenario) -> None:
        """Namespaces and priority classes: created once, shared by both runs."""
        for ns in scenario.namespaces:
            await self._ensure_namespace(ns)
        for pc in scenario.priority_classes:
            await self._ensure_priority_class(pc)

    async def _delete_shared(self, scenario: Scenario) -> None:
        for pc in scenario.priority_classes:
            path = f"/apis/scheduling.k8s.io/v1/priorityclasses/{pc['metadata']['name']}"
            await _delete_ignoring_missing(self.api, path)
        for ns in scenario.namespaces:
            await self._delete_namespace(ns["metadata"]["name"])

    async def _ensure_namespace(self, ns: JSON) -> None:
        name = ns["metadata"]["name"]
        try:
            await self.api.post("/api/v1/namespaces", ns)
        except ApiError as exc:
            if exc.status != 409:
                raise
            current: JSON = await self.api.get(f"/api/v1/namespaces/{name}")
            current["metadata"]["labels"] = {
                "kubernetes.io/metadata.name": name,
                **ns["metadata"]["labels"],
            }
            await self.api.put(f"/api/v1/namespaces/{name}", current)
        await wait_for_service_account(self.api, name)

    async def _delete_namespace(self, name: str) -> None:
        """Delete the namespace and wait for the namespace controller to finish it."""
        await _delete_ignoring_missing(self.api, f"/api/v1/namespaces/{name}", within=60)

    async def _ensure_priority_class(self, pc: JSON) -> None:
        path = "/apis/scheduling.k8s.io/v1/priorityclasses"
        name = pc["metadata"]["name"]
        try:
            await self.api.post(path, pc)
            return
        except ApiError as exc:
            if exc.status != 409:
                raise
        current: JSON = await self.api.get(f"{path}/{name}")
        same = all(
            current.get(k) == pc.get(k) for k in ("value", "globalDefault", "description")
        ) and current.get("preemptionPolicy", "PreemptLowerPriority") == pc.get(
            "preemptionPolicy", "PreemptLowerPriority"
        )
        if not same:  # value and policy are immutable: replace it
            await self.api.delete(f"{path}/{name}")
            await self.api.wait_deleted(f"{path}/{name}", within=30)
            await self.api.post(path, pc)

    async def _create_run_state(
        self, scenario: Scenario, created: list[JSON], outcome: RunOutcome
    ) -> None:
        """Nodes, extra objects (appended to created) and existing pods, in that order;
        then wait until kwok runs the existing pods, the disruption controller has
        counted them in every PodDisruptionBudget and the PV controller has bound every
        claim that names its volume."""
        node_uids: dict[str, str] = {}
        for node in scenario.nodes:
            made_node = await self.api.post("/api/v1/nodes", node)
            node_uids[made_node["metadata"]["name"]] = made_node["metadata"]["uid"]
        for name, uid in node_uids.items():
            # kwok runs a node's pods only while it holds the node's Lease, and sets a
            # Lease's owner only when it has none: once the Lease names this node as
            # its owner, the garbage collector leaves it and kwok runs what lands there
            await self.api.wait_for(f"{_NODE_LEASES}/{name}", _owned_by(uid), within=30)
        for obj in scenario.objects:
            path = await self._object_path(obj)
            body = {k: v for k, v in obj.items() if k != "status"}
            try:
                await self.api.post(path, body)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                # left over from an interrupted run: replace it
                item = f"{path}/{obj['metadata']['name']}"
                await _delete_ignoring_missing(self.api, item)
                await self.api.post(path, body)
            created.append(obj)
            if obj.get("status"):
                await self.api.patch(
                    f"{path}/{obj['metadata']['name']}/status",
                    {"status": obj["status"]},
                    patch_type="merge",
                )
        for pod in scenario.existing_pods:
            body = {k: v for k, v in pod.items() if k != "status"}
            made = await self.api.post(_pods_path(pod["metadata"]["namespace"]), body)
            outcome.uids[pod["metadata"]["name"]] = made["metadata"]["uid"]
        node_names = {n["metadata"]["name"] for n in scenario.nodes}
        for pod in scenario.existing_pods:
            if pod["spec"].get("nodeName") not in node_names:
                continue
            path = f"{_pods_path(pod['metadata']['namespace'])}/{pod['metadata']['name']}"
            try:
                await self._wait_running(path, pod, outcome)
            except TimeoutError as exc:
                # kwok runs pods only on nodes whose Lease it holds: say what it holds
                node = pod["spec"]["nodeName"]
                lease: JSON | None = None
                with contextlib.suppress(ApiError):  # absent or unreadable: "no Lease"
                    lease = await self.api.get(f"{_NODE_LEASES}/{node}")
                held = (
                    f"Lease {node}: holder {lease['spec'].get('holderIdentity')}, renewed "
                    f"{lease['spec'].get('renewTime')}, owners "
                    f"{lease['metadata'].get('ownerReferences')} (node uid {node_uids[node]})"
                    if lease
                    else f"no Lease {node}"
                )
                raise TimeoutError(f"{exc}; {held}") from exc
            if pod.get("status"):  # e.g. resized: allocated/actuated resources
                running = await self.api.get(path)
                status = merge_pod_status(running.get("status") or {}, pod["status"])
                await self.api.patch(f"{path}/status", {"status": status}, patch_type="merge")
        for obj in scenario.objects:
            path = f"{await self._object_path(obj)}/{obj['metadata']['name']}"
            if obj["kind"] == "PodDisruptionBudget":
                await self.api.wait_for(path, _budget_counted, within=30)
            if obj["kind"] == "PersistentVolumeClaim" and (obj.get("spec") or {}).get(
                "volumeName"
            ):  # pre-bound: the PV controller completes the bind
                await self.api.wait_for(
                    path, lambda c: (c.get("status") or {}).get("phase") == "Bound", within=30
                )

    async def _wait_running(self, path: str, pod: JSON, outcome: RunOutcome) -> None:
        """Wait (30 s) until kwok runs an existing pod. kwok plays the kubelet's last
        step for a deleted pod by deleting it again by name, without its uid, and when
        loaded it does so late (the benchmark saw it take new pods of a deleted pod's
        name): a pod of the last run's name that it takes here is made again (at most
        twice)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        remade = 0
        last: JSON = {}
        while loop.time() < deadline:
            try:
                last = await self.api.get(path)
            except ApiError as exc:
                if exc.status != 404 or remade == 2:
                    raise
                remade += 1
                body = {k: v for k, v in pod.items() if k != "status"}
                made = await self.api.post(_pods_path(pod["metadata"]["namespace"]), body)
                outcome.uids[pod["metadata"]["name"]] = made["metadata"]["uid"]
                continue
            if (last.get("status") or {}).get("phase") == "Running":
                return
            await asyncio.sleep(_POLL_SECONDS)
        raise TimeoutError(f"{path} not Running after 30s (made again {remade}x); last: {last}")

    async def _wipe_run_state(self, scenario: Scenario, *, objects: Sequence[JSON]) -> None:
        """No workloads, pods, claims or events in the scenario's namespaces, no pods
        anywhere, none of the scenario's objects, no nodes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        scoped = sorted(scenario_namespaces(scenario))
        collections = [
            "/apis/apps/v1/namespaces/{ns}/deployments",
            "/apis/apps/v1/namespaces/{ns}/statefulsets",
            "/apis/apps/v1/namespaces/{ns}/daemonsets",
            "/apis/apps/v1/namespaces/{ns}/replicasets",
        ]
        if scenario.workloads:
            for ns in scoped:
                for collection in collections:
                    with contextlib.suppress(ApiError):  # a namespace not created yet
                        await self.api.delete(
                            collection.format(ns=ns), body={"propagationPolicy": "Foreground"}
                        )
        namespaces = {ns["metadata"]["name"] for ns in await self.api.list("/api/v1/namespaces")}
        while True:
            for ns in sorted(namespaces):
                await self.api.delete(_pods_path(ns), {"gracePeriodSeconds": 0})
            left = [
                c.format(ns=ns)
                for ns in scoped
                for c in collections
                if scenario.workloads and await self.api.list(c.format(ns=ns))
            ]
            if not left and not await self.api.list("/api/v1/pods"):
                break
            if loop.time() > deadline:
                raise TimeoutError(f"pods or workloads ({left}) still present 60s after deletion")
            await asyncio.sleep(_POLL_SECONDS)
        for ns in scoped:
            if ns not in namespaces:
                continue
            await self.api.delete(f"/api/v1/namespaces/{ns}/persistentvolumeclaims")
            await self.api.delete(f"{_RESOURCE_API}/namespaces/{ns}/resourceclaims")
            await self.api.delete(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
        for ns in scoped:
            # the resourceclaim controller removes a claim's finalizer once it is unused
            while ns in namespaces and (
                await self.api.list(f"/api/v1/namespaces/{ns}/persistentvolumeclaims")
                or await self.api.list(f"{_RESOURCE_API}/namespaces/{ns}/resourceclaims")
            ):
                if loop.time() > deadline:
                    raise TimeoutError(f"claims in {ns} still present 60s after deletion")
                await asyncio.sleep(_POLL_SECONDS)
        for obj in reversed(objects):
            path = await self._object_path(obj)
            await _delete_ignoring_missing(self.api, f"{path}/{obj['metadata']['name']}")
        await self.api.delete("/api/v1/nodes")
        while await self.api.list("/api/v1/nodes"):
            if loop.time() > deadline:
                raise TimeoutError("nodes still present 60s after deleting them all")
            await asyncio.sleep(_POLL_SECONDS)
        # no node Lease outlives its node: a node of the next run with the same name
        # would get the old Lease, which still names the old node as its owner, and
        # lose it to the garbage collector (kwok then leaves its pods Pending until it
        # makes a new one, one renew interval later)
        while await self.api.list(_NODE_LEASES):
            if loop.time() > deadline:
                raise TimeoutError("node Leases still present 60s after deleting every node")
            await self.api.delete(_NODE_LEASES)
            await asyncio.sleep(_POLL_SECONDS)

    async def _object_path(self, obj: Mapping[str, Any]) -> str:
        """The collection path of obj, from the apiserver's discovery documents."""
        api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
        key = (api_version, kind)
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            doc: JSON = await self.api.get(base)
            for res in doc.get("resources") or []:
                if res.get("kind") == kind and "/" not in res["name"]:
                    self._resources[key] = (f"{base}/{res['name']}", bool(res["namespaced"]))
                    break
            else:
                raise ScenarioError(f"the apiserver serves no {kind} in {api_version}")
        collection, namespaced = self._resources[key]
        if not namespaced:
            return collection
        base, _, plural = collection.rpartition("/")
        ns = obj["metadata"].get("namespace") or "default"
        return f"{base}/namespaces/{ns}/{plural}"


def _owned_by(uid: str) -> Callable[[JSON], bool]:
    """Whether an object names the object with this UID among its owners."""

    def owned(obj: JSON) -> bool:
        refs = (obj.get("metadata") or {}).get("ownerReferences") or []
        return any(ref.get("uid") == uid for ref in refs)

    return owned


def _pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


async def _delete_ignoring_missing(api: RestClient, path: str, *, within: float = 30) -> None:
    """Delete and wait until it is gone (finalizers such as pvc-protection are removed
    by their controllers once nothing uses the object)."""
    try:
        await api.delete(path)
    except ApiError as exc:
        if exc.status != 404:
            raise
        return
    await api.wait_deleted(path, within=within)


def _budget_counted(pdb: Mapping[str, Any]) -> bool:
    """The disruption controller has seen this generation and counted its pods."""
    status = pdb.get("status") or {}
    generation = (pdb.get("metadata") or {}).get("generation", 1)
    return bool(
        status.get("observedGeneration", 0) >= generation
        and status.get("currentHealthy", 0) == status.get("expectedPods", 0)
    )


def scenario_namespaces(scenario: Scenario) -> set[str]:
    """Every namespace the scenario's pods, workloads and objects may live in."""
    out = {"default"} | {ns["metadata"]["name"] for ns in scenario.namespaces}
    out |= {p["metadata"]["namespace"] for p in scenario.existing_pods}
    out |= {s.pod["metadata"]["namespace"] for s in scenario.pods}
    out |= {w.namespace for w in scenario.workloads}
    out |= {
        str(o["metadata"]["namespace"]) for o in scenario.objects if o["metadata"].get("namespace")
    }
    return out


def known_pods(scenario: Scenario) -> list[tuple[str, str]]:
    """(name, namespace) of every pod with a known name: existing pods, the pods to
    schedule, the StatefulSets' pods."""
    out = [(p["metadata"]["name"], p["metadata"]["namespace"]) for p in scenario.existing_pods]
    out += [(s.name, s.pod["metadata"]["namespace"]) for s in scenario.pods]
    out += [(n, w.namespace) for w in scenario.workloads for n in w.pod_names]
    return out


_WORKLOAD_STATUS: Final = {
    "Deployment": ("replicas", "readyReplicas", "updatedReplicas", "availableReplicas"),
    "ReplicaSet": ("replicas", "readyReplicas", "availableReplicas"),
    "StatefulSet": ("replicas", "readyReplicas", "currentReplicas", "updatedReplicas"),
    "DaemonSet": ("desiredNumberScheduled", "currentNumberScheduled", "numberReady"),
}


def _workload_status(kind: str, obj: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The counts compared between runs; "ready" is readyReplicas (numberReady)."""
    status = obj.get("status") or {}
    counts = {key: int(status.get(key) or 0) for key in _WORKLOAD_STATUS[kind]}
    counts["ready"] = counts.get("numberReady", counts.get("readyReplicas", 0))
    return tuple(sorted(counts.items()))


def _pod_outcome(name: str, pod: Mapping[str, Any], reasons: Mapping[str, set[str]]) -> PodOutcome:
    cond = _condition(pod, "PodScheduled")
    failed = cond is not None and cond.get("status") == "False"
    status = pod.get("status") or {}
    return PodOutcome(
        name,
        exists=True,
        node=pod["spec"].get("nodeName") or None,
        reason=cond.get("reason") if failed and cond else None,
        message=cond.get("message") if failed and cond else None,
        nominated_node=status.get("nominatedNodeName") or None,
        terminating=bool(pod["metadata"].get("deletionTimestamp")),
        events=tuple(sorted(reasons.get(pod["metadata"].get("uid", ""), ()))),
    )


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def observe(
    scenario: Scenario,
    *,
    pods: Sequence[JSON],
    events: Sequence[JSON] = (),
    workloads: Mapping[str, JSON | None] | None = None,
    replicasets: Sequence[JSON] = (),
    claims: Sequence[JSON] = (),
    resource_claims: Sequence[JSON] = (),
    uids: Mapping[str, str] | None = None,
) -> Observation:
    """The outcome of a run from lists of its objects.

    Pods with a known name (absent ones: exists=False, with the events of the uid
    they had, from uids); each workload's status and the placements of the pods it
    controls (a Deployment's through its ReplicaSets); the claims by "ns/name"; the
    ResourceClaims by "ns/name", "ns/pod:claim" for one made from a template, or
    "ns/pod:extended-resources" for one made for the pod's extended resources.
    """
    reasons: dict[str, set[str]] = {}
    for ev in events:
        regarding = ev.get("regarding") or {}
        if regarding.get("kind") == "Pod" and regarding.get("uid"):
            reasons.setdefault(str(regarding["uid"]), set()).add(str(ev.get("reason") or ""))
    by_key = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    out: dict[str, PodOutcome] = {}
    for name, namespace in known_pods(scenario):
        pod = by_key.get((namespace, name))
        if pod is None:
            uid = (uids or {}).get(name, "")
            out[name] = PodOutcome(name, exists=False, events=tuple(sorted(reasons.get(uid, ()))))
        else:
            out[name] = _pod_outcome(name, pod, reasons)
    objects = workloads or {}
    owner: dict[str, str] = {}
    for workload in scenario.workloads:
        obj = objects.get(workload.name)
        if obj is not None:
            owner[str(obj["metadata"]["uid"])] = workload.name
    for rs in replicasets:
        parent = _controller_uid(rs)
        if parent in owner:
            owner[str(rs["metadata"]["uid"])] = owner[parent]
    members: dict[str, list[PodOutcome]] = {w.name: [] for w in scenario.workloads}
    for pod in pods:
        parent = _controller_uid(pod)
        if parent in owner:
            members[owner[parent]].append(_pod_outcome(pod["metadata"]["name"], pod, reasons))
    wl_out: dict[str, WorkloadOutcome] = {}
    for workload in scenario.workloads:
        obj = objects.get(workload.name)
        if obj is None:
            wl_out[workload.name] = WorkloadOutcome(workload.name, workload.kind, exists=False)
            continue
        mine = members[workload.name]
        wl_out[workload.name] = WorkloadOutcome(
            workload.name,
            workload.kind,
            status=_workload_status(workload.kind, obj),
            pods=tuple(sorted(p.placement() for p in mine)),
            settled=_workload_settled(workload.kind, obj, mine),
        )
    claim_out: dict[str, ClaimOutcome] = {}
    for claim in claims:
        meta = claim["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        claim_out[key] = ClaimOutcome(
            key,
            volume_name=(claim.get("spec") or {}).get("volumeName") or None,
            phase=(claim.get("status") or {}).get("phase") or None,
            selected_node=(meta.get("annotations") or {}).get(SELECTED_NODE_ANNOTATION),
        )
    device_out = {c.name: c for c in (_device_claim_outcome(claim) for claim in resource_claims)}
    return Observation(pods=out, workloads=wl_out, claims=claim_out, device_claims=device_out)


POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
"""The pod's claim name on a ResourceClaim the controller made from a template."""
EXTENDED_RESOURCE_CLAIM_ANNOTATION: Final = "resource.kubernetes.io/extended-resource-claim"
"""Marks the ResourceClaim a scheduler made for a pod's extended resources."""
EXTENDED_RESOURCE_CLAIM_KEY: Final = "extended-resources"
"""Its name in the outcome, after the pod's name and ":" (the real name is random)."""


def _device_claim_outcome(claim: Mapping[str, Any]) -> DeviceClaimOutcome:
    meta = claim["metadata"]
    name = str(meta["name"])
    pod_claim = (meta.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION)
    owner = next(
        (
            r
            for r in meta.get("ownerReferences") or []
            if r.get("controller") and r.get("kind") == "Pod"
        ),
        None,
    )
    if pod_claim and owner is not None:
        name = f"{owner['name']}:{pod_claim}"
    annotations = meta.get("annotations") or {}
    if annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true" and owner is not None:
        name = f"{owner['name']}:{EXTENDED_RESOURCE_CLAIM_KEY}"
    status = claim.get("status") or {}
    alloc = status.get("allocation")
    reserved = tuple(
        sorted(str(r.get("name")) for r in status.get("reservedFor") or [] if r.get("name"))
    )
    key = f"{meta['namespace']}/{name}"
    if not alloc:
        return DeviceClaimOutcome(key, reserved_for=reserved)
    results = ((alloc.get("devices") or {}).get("results")) or []
    selector = alloc.get("nodeSelector")
    return DeviceClaimOutcome(
        key,
        allocated=True,
        devices=tuple(
            (
                str(r.get("request", "")),
                str(r.get("driver", "")),
                str(r.get("pool", "")),
                str(r.get("device", "")),
                bool(r.get("adminAccess")),
            )
            for r in results
        ),
        node_selector=json.dumps(selector, sort_keys=True) if selector is not None else None,
        reserved_for=reserved,
        shares=tuple(_share(r) for r in results),
        binding=tuple(
            (
                tuple(str(c) for c in r.get("bindingConditions") or []),
                tuple(str(c) for c in r.get("bindingFailureConditions") or []),
            )
            for r in results
        ),
    )


def _share(result: Mapping[str, Any]) -> str:
    """A result's share of its device, as :attr:`DeviceClaimOutcome.shares` writes it."""
    share_id = result.get("shareID")
    consumed = result.get("consumedCapacity") or {}
    text = ",".join(f"{k}={consumed[k]}" for k in sorted(consumed))
    if share_id is None:
        return f"unshared {text}" if text else ""
    try:
        uuid.UUID(str(share_id))
    except ValueError:
        return f"bad shareID {share_id!r} {text}".rstrip()
    return text or "shared"


def _workload_settled(kind: str, obj: Mapping[str, Any], pods: Sequence[PodOutcome]) -> bool:
    """Its pods are placed or reported and the controller has made all it wants: as many
    pods as replicas (a Deployment: all updated and the old ones gone; a StatefulSet: all
    ready; a DaemonSet: desiredNumberScheduled), or one is unschedulable, which may
    hold the controller back."""
    if any(p.terminating or (not p.node and p.reason is None) for p in pods):
        return False
    if any(not p.node for p in pods):
        return True
    status = obj.get("status") or {}
    if status.get("observedGeneration", 0) < (obj.get("metadata") or {}).get("generation", 1):
        return False
    if kind == "DaemonSet":
        return len(pods) == int(status.get("desiredNumberScheduled") or 0)
    spec_replicas = (obj.get("spec") or {}).get("replicas")
    want = 1 if spec_replicas is None else int(spec_replicas)
    if len(pods) != want:
        return False
    if kind == "Deployment":
        return int(status.get("updatedReplicas") or 0) == want == int(status.get("replicas") or 0)
    if kind == "StatefulSet":
        return int(status.get("readyReplicas") or 0) == want
    return True


def _all_settled(scenario: Scenario, seen: Observation) -> bool:
    """Every pod to schedule bound, reported or gone; no pod terminating; every
    workload settled."""
    scheduled = set(scenario.scheduled_names)
    for name, pod in seen.pods.items():
        if pod.terminating:
            return False
        if name in scheduled and pod.exists and not pod.node and pod.reason is None:
            return False
    for step in scenario.pods:
        if step.name not in seen.pods:
            return False
    return all(w.settled or not w.exists for w in seen.workloads.values())


def _condition(pod: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


async def run_scenario(cp: ControlPlane, scenario: Scenario) -> ScenarioResult:
    """Play one scenario on cp with a fresh admin client."""
    async with cp.client() as api:
        return await DiffRunner(cp, api).run(scenario)


# --------------------------------------------------------------------------- report


def format_result(result: ScenarioResult, *, verbose: bool = False) -> str:
    sc = result.scenario
    where = f" ({sc.path})" if sc.path is not None else ""
    lines = [f"=== {result.status} {sc.name}{where}  {result.seconds:.1f}s"]
    if verbose and sc.description:
        lines += [f"    {line}" for line in sc.description.splitlines()]
    if sc.known_difference:
        lines.append(f"    known difference: {sc.known_difference}")
    ref, ours = result.reference, result.ours
    lines.append(
        f"    runs: reference {ref.seconds:.1f}s{'' if ref.settled else ' (not settled)'}, "
        f"kscheduler {ours.seconds:.1f}s{'' if ours.settled else ' (not settled)'}"
    )
    show_all = verbose or not result.ok
    if show_all:
        width = max((len(n) for n in sc.pod_names), default=4)
        for name in sc.pod_names:
            r, o = ref.pods.get(name), ours.pods.get(name)
            rs = r.summary() if r else "?"
            os_ = o.summary() if o else "?"
            lines.append(f"    {name:<{width}}  reference: {rs:<28} kscheduler: {os_}")
            for label, pod in (("reference", r), ("kscheduler", o)):
                if pod is not None and pod.message and verbose:
                    lines.append(f"    {'':<{width}}    {label}: {pod.message}")
                if pod is not None and pod.events and verbose:
                    lines.append(f"    {'':<{width}}    {label} events: {', '.join(pod.events)}")
        for workload in sc.workloads:
            for label, wl in (("reference", ref.workloads), ("kscheduler", ours.workloads)):
                got = wl.get(workload.name)
                if got is None:
                    continue
                counts = ", ".join(f"{k}={v}" for k, v in got.status)
                nodes = ", ".join(got.nodes) or "-"
                lines.append(
                    f"    {workload.kind} {workload.name} {label}: {counts}; nodes: {nodes}; "
                    f"pending: {got.pending}"
                )
        for key in sorted(set(ref.claims) | set(ours.claims)):
            for label, claims in (("reference", ref.claims), ("kscheduler", ours.claims)):
                c = claims.get(key)
                if c is not None:
                    lines.append(
                        f"    claim {key} {label}: {c.phase or '-'} volume {c.volume_name or '-'}"
                        f" selected-node {c.selected_node or '-'}"
                    )
        for key in sorted(set(ref.device_claims) | set(ours.device_claims)):
            for label, dclaims in (
                ("reference", ref.device_claims),
                ("kscheduler", ours.device_claims),
            ):
                d = dclaims.get(key)
                if d is not None:
                    lines.append(f"    resourceclaim {key} {label}: {d.summary()}")
    for title, diffs in (
        ("differences", result.differences),
        ("reference breaks the scenario's expectations", result.reference_failures),
        ("kscheduler breaks the scenario's expectations", result.our_failures),
    ):
        if diffs:
            lines.append(f"    {title} ({len(diffs)}):")
            lines += [f"      - {d.describe()}" for d in diffs]
    if ref.error:
        lines.append(f"    reference run error: {ref.error}")
    if ours.error:
        lines.append(f"    kscheduler run error: {ours.error}")
    if result.failed and ref.log_path is not None:
        lines.append(f"    kube-scheduler log: {ref.log_path}")
    return "\n".join(lines)


def format_summary(results: Sequence[ScenarioResult]) -> str:
    """One line: how many scenarios, how long, how many of each status."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    total = sum(r.seconds for r in results)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return f"--- {len(results)} scenario(s) in {total:.1f}s: {summary}"


def format_report(results: Sequence[ScenarioResult], *, verbose: bool = False) -> str:
    parts = [format_result(r, verbose=verbose) for r in results]
    return "\n".join([*parts, format_summary(results)])


# --------------------------------------------------------------------------- CLI


async def _main_async(files: Sequence[Path], verbose: bool) -> int:
    scenarios = [load_scenario(f) for f in files]
    results: list[ScenarioResult] = []
    async with ControlPlane() as cp, cp.client() as api:
        runner = DiffRunner(cp, api)
        for scenario in scenarios:
            result = await runner.run(scenario)
            results.append(result)
            print(format_result(result, verbose=verbose), flush=True)
    print(format_summary(results))
    return 1 if any(r.failed for r in results) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kscheduler.difftest",
        description="Run scenarios through kube-scheduler and kscheduler and compare outcomes.",
    )
    parser.add_argument("scenarios", nargs="+", help="scenario files or directories of *.yaml")
    parser.add_argument("-v", "--verbose", action="store_true", help="show every pod and message")
    parser.add_argument(
        "--log-level", type=int, default=0, help="kscheduler's log verbosity (0: warnings)"
    )
    args = parser.parse_args(argv)
    from kscheduler import logs

    logs.configure(args.log_level)
    files = scenario_files(args.scenarios)
    if not files:
        parser.error("no scenario files found")
    try:
        return asyncio.run(_main_async(files, args.verbose))
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
