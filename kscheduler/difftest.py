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
                                        # CSINode, PDB ...); a "status" is written after create
    existingPods:                       # created already bound (node: is spec.nodeName)
      - {name: old, node: n0, cpu: "1", labels: {app: db}}
    pods:                               # created in order, schedulerName filled in
      - {name: web, cpu: 500m, memory: 1Gi, labels: {app: web}, nodeSelector: {...},
         tolerations: [...], affinity: {...}, topologySpreadConstraints: [...],
         priorityClassName: high, hostPort: 8080, image: nginx:1.25, pvcs: [claim],
         schedulingGates: [wait], spec: {...raw fields merged last...}}
      - {name: second, waitBound: true}  # created once everything before has settled
    expect:                             # facts, checked against both runs
      web: {bound: true, node: n1}       # node: also asserts the two runs agree on it
      second: {bound: false, messageContains: "Insufficient cpu"}
      preemptor: {bound: true, victims: [old]}
      other: {sameNode: true}            # no fixed node, but both runs must agree
      worded: {bound: false, messageMayDiffer: "why the wording may differ"}
    schedulerStartsAfterPods: false     # true: all pods exist before the scheduler starts
    settleSeconds: 2                    # quiet time that ends a run
    timeoutSeconds: 60
    knownDifference: "why kscheduler still differs here"

Other pod fields: namespace, count, ephemeralStorage, extended, annotations,
images (one container each), hostPorts, containers, initContainers, volumes,
nodeName, terminationGracePeriodSeconds (0 unless given: there is no kubelet to
finish a graceful deletion). A run is settled when every pod to schedule is bound
or carries PodScheduled=False (or was deleted) and nothing observed has changed
for ``settleSeconds``.

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
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from kscheduler.controlplane.builders import make_node, make_pod, wait_for_service_account
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.controlplane.rest import JSON, ApiError, RestClient

REFERENCE: Final = "reference"
"""schedulerName of kube-scheduler's profile in the reference run."""
KSCHEDULER: Final = "kscheduler"
"""schedulerName of kscheduler's profile in the other run."""

Which = Literal["reference", "kscheduler"]

DEFAULT_SETTLE_SECONDS = 2.0
DEFAULT_TIMEOUT_SECONDS = 60.0
_POLL_SECONDS = 0.2
_PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})


class ScenarioError(ValueError):
    """A scenario file that cannot be read; names the file and the offending field."""


# --------------------------------------------------------------------------- scenario model


@dataclass(frozen=True, slots=True)
class PodExpectation:
    """Facts one pod's outcome must show (None: not checked)."""

    bound: bool | None = None
    node: str | None = None
    same_node: bool = False
    message: str | None = None
    message_contains: tuple[str, ...] = ()
    message_may_differ: str | None = None
    victims: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class PodStep:
    """One pod to schedule: its object (schedulerName unset) and whether to settle first."""

    pod: JSON
    wait_before: bool = False

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str = ""
    path: Path | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    priority_classes: tuple[JSON, ...] = ()
    namespaces: tuple[JSON, ...] = ()
    nodes: tuple[JSON, ...] = ()
    objects: tuple[JSON, ...] = ()
    existing_pods: tuple[JSON, ...] = ()
    pods: tuple[PodStep, ...] = ()
    expect: Mapping[str, PodExpectation] = field(default_factory=dict)
    known_difference: str | None = None
    scheduler_starts_after_pods: bool = False
    settle_seconds: float = DEFAULT_SETTLE_SECONDS
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    @property
    def pod_names(self) -> list[str]:
        """Every pod of the scenario (existing first, then to schedule), in creation order."""
        return [p["metadata"]["name"] for p in self.existing_pods] + [s.name for s in self.pods]

    def expectation(self, pod: str) -> PodExpectation:
        return self.expect.get(pod) or PodExpectation()

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
    name description config priorityClasses namespaces nodes objects existingPods pods expect
    knownDifference schedulerStartsAfterPods settleSeconds timeoutSeconds
    """
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
    bound node sameNode message messageContains messageMayDiffer victims
    """
)
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
    if "schedulerName" in config:
        raise f.error("config.schedulerName", "set by the runner; leave it out")
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
    steps: list[PodStep] = []
    for i, p in enumerate(f.items("pods")):
        wait = False
        if isinstance(p, dict) and "waitBound" in p:
            p = dict(p)
            wait = p.pop("waitBound")
            if not isinstance(wait, bool):
                raise ScenarioError(f"pods[{i}].waitBound: expected a bool, got {wait!r}")
        for j, pod in enumerate(_pods(p, f"pods[{i}]", existing=False)):
            steps.append(PodStep(pod, wait_before=wait and j == 0))
    all_names = [p["metadata"]["name"] for p in existing] + [s.name for s in steps]
    dupes = sorted({n for n in all_names if all_names.count(n) > 1})
    if dupes:
        raise ScenarioError(f"pods: names must be unique across existingPods and pods: {dupes}")
    node_names = [n["metadata"]["name"] for n in nodes]
    if len(set(node_names)) != len(node_names):
        raise ScenarioError("nodes: node names must be unique")
    expect: dict[str, PodExpectation] = {}
    for pod_name, facts in f.mapping("expect").items():
        where = f"expect.{pod_name}"
        if pod_name not in all_names:
            raise ScenarioError(f"{where}: no such pod in existingPods or pods")
        exp = _expectation(facts, where)
        for v in exp.victims or ():
            if v not in all_names:
                raise ScenarioError(f"{where}.victims: no such pod {v!r}")
        if exp.node is not None and exp.node not in node_names:
            raise ScenarioError(f"{where}.node: no such node {exp.node!r}")
        expect[str(pod_name)] = exp
    known = (f.string("knownDifference") or "").strip() or None
    settle = float(f.get("settleSeconds", (int, float), DEFAULT_SETTLE_SECONDS))
    timeout = float(f.get("timeoutSeconds", (int, float), DEFAULT_TIMEOUT_SECONDS))
    return Scenario(
        name=name,
        description=(f.string("description") or "").strip(),
        path=path,
        config=config,
        priority_classes=classes,
        namespaces=namespaces,
        nodes=tuple(nodes),
        objects=objects,
        existing_pods=tuple(existing),
        pods=tuple(steps),
        expect=expect,
        known_difference=known,
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
    return copy.deepcopy(raw)


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


def _pods(raw: Any, where: str, *, existing: bool) -> list[JSON]:
    keys = _POD_KEYS | {"node"} if existing else _POD_KEYS
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
        out.append(pod)
    return out


def _expectation(raw: Any, where: str) -> PodExpectation:
    f = _Fields(raw if raw is not None else {}, where, _EXPECT_KEYS)
    contains = f.raw.get("messageContains")
    if contains is None:
        contains_t: tuple[str, ...] = ()
    elif isinstance(contains, str):
        contains_t = (contains,)
    elif isinstance(contains, list):
        contains_t = tuple(str(c) for c in contains)
    else:
        raise f.error("messageContains", "expected a string or a list of strings")
    victims = f.raw.get("victims")
    if victims is not None and not isinstance(victims, list):
        raise f.error("victims", "expected a list of pod names")
    exp = PodExpectation(
        bound=f.get("bound", bool),
        node=f.string("node"),
        same_node=bool(f.get("sameNode", bool, False)),
        message=f.string("message"),
        message_contains=contains_t,
        message_may_differ=f.string("messageMayDiffer"),
        victims=tuple(str(v) for v in victims) if victims is not None else None,
    )
    if exp.node is not None and exp.bound is False:
        raise f.error("node", "a pod expected pending has no node")
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

    @property
    def bound(self) -> bool:
        return self.exists and bool(self.node)

    def summary(self) -> str:
        if not self.exists:
            return "deleted"
        if self.node:
            return f"bound to {self.node}"
        text = f"pending ({self.reason})" if self.reason else "pending, not reported"
        if self.nominated_node:
            text += f", nominated {self.nominated_node}"
        return text


@dataclass(slots=True)
class RunOutcome:
    """One run of a scenario through one scheduler."""

    scheduler: Which
    pods: dict[str, PodOutcome] = field(default_factory=dict)
    settled: bool = True
    seconds: float = 0.0
    log_path: Path | None = None
    error: str | None = None

    def deleted(self, names: Iterable[str]) -> set[str]:
        return {n for n in names if n in self.pods and not self.pods[n].exists}


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


def compare(scenario: Scenario, ref: RunOutcome, ours: RunOutcome) -> list[Difference]:
    """Every fact the two runs must share and do not.

    The same pods bound and pending; the same node where the scenario pins one
    (``node:``) or asks for agreement (``sameNode: true``); for pods pending in
    both, the same PodScheduled message word for word (unless
    ``messageMayDiffer``); the same pods deleted (preemption victims).
    """
    out: list[Difference] = []
    if ref.error or ours.error:
        out.append(Difference("(run)", "error", ref.error, ours.error))
    if not ref.settled or not ours.settled:
        out.append(Difference("(run)", "settled", ref.settled, ours.settled))
    scheduled = [s.name for s in scenario.pods]
    for name in scenario.pod_names:
        r, o = ref.pods.get(name), ours.pods.get(name)
        if r is None or o is None:
            continue
        if r.exists != o.exists:
            out.append(Difference(name, "deleted", not r.exists, not o.exists))
            continue
        if not r.exists or name not in scheduled:
            continue
        if r.bound != o.bound:
            out.append(Difference(name, "bound", r.summary(), o.summary()))
            continue
        exp = scenario.expectation(name)
        if r.bound and (exp.node is not None or exp.same_node) and r.node != o.node:
            out.append(Difference(name, "node", r.node, o.node))
        if not r.bound and exp.message_may_differ is None:
            if r.reason != o.reason:
                out.append(Difference(name, "reason", r.reason, o.reason))
            if r.message != o.message:
                out.append(Difference(name, "message", r.message, o.message))
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
        if exp.message is not None and got.message != exp.message:
            out.append(Difference(name, "message", exp.message, got.message, src))
        for part in exp.message_contains:
            if part not in (got.message or ""):
                out.append(Difference(name, "message contains", part, got.message, src))
    victims = scenario.expected_victims()
    if victims is not None:
        deleted = run.deleted(scenario.pod_names)
        if deleted != victims:
            out.append(Difference("(victims)", "deleted pods", victims, deleted, src))
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


def kscheduler_config(profile: Mapping[str, Any]) -> str:
    """The KubeSchedulerConfiguration YAML of kscheduler's run: one profile."""
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": KSCHEDULER, **copy.deepcopy(dict(profile))}],
    }
    return yaml.safe_dump(doc, sort_keys=False)


class DiffRunner:
    """Plays scenarios on one control plane; owns an admin RestClient for setup."""

    def __init__(self, cp: ControlPlane, api: RestClient) -> None:
        self.cp = cp
        self.api = api
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    # ---- the scenario ----------------------------------------------------------------------
    async def run(self, scenario: Scenario) -> ScenarioResult:
        began = time.monotonic()
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

    async def run_once(self, scenario: Scenario, which: Which) -> RunOutcome:
        """One run on fresh state: setup, the scheduler, the pods, settle, observe, wipe."""
        began = time.monotonic()
        outcome = RunOutcome(scheduler=which)
        created: list[JSON] = []
        try:
            async with AsyncExitStack() as stack:
                await self._create_run_state(scenario, created)
                if not scenario.scheduler_starts_after_pods:
                    await self._start(stack, scenario, which, outcome)
                for step in scenario.pods:
                    if step.wait_before:
                        await self._settle(scenario, outcome)
                    pod = copy.deepcopy(step.pod)
                    pod["spec"]["schedulerName"] = which
                    await self.api.post(_pods_path(pod["metadata"]["namespace"]), pod)
                if scenario.scheduler_starts_after_pods:
                    await self._start(stack, scenario, which, outcome)
                outcome.pods = await self._settle(scenario, outcome)
        except Exception as exc:  # a broken run is a finding, not a crash
            outcome.error = f"{type(exc).__name__}: {exc}"
            outcome.settled = False
            with contextlib.suppress(Exception):
                outcome.pods = _observe(scenario, await self.api.list("/api/v1/pods"))
        finally:
            outcome.seconds = time.monotonic() - began
            await self._wipe_run_state(scenario, objects=created)
        return outcome

    async def _start(
        self, stack: AsyncExitStack, scenario: Scenario, which: Which, outcome: RunOutcome
    ) -> None:
        if which == REFERENCE:
            ref = ReferenceScheduler.for_control_plane(
                self.cp,
                scheduler_name=REFERENCE,
                profile_extra=copy.deepcopy(dict(scenario.config)),
            )
            await ref.astart()
            stack.push_async_callback(ref.astop)
            outcome.log_path = ref.process.log_path
        else:
            await stack.enter_async_context(
                running_kscheduler(self.cp, kscheduler_config(scenario.config))
            )

    async def _settle(self, scenario: Scenario, outcome: RunOutcome) -> dict[str, PodOutcome]:
        """Poll until every created pod is bound, reported or gone, and nothing changes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + scenario.timeout_seconds
        last: dict[str, PodOutcome] | None = None
        stable_since = loop.time()
        while True:
            seen = _observe(scenario, await self.api.list("/api/v1/pods"))
            now = loop.time()
            if seen != last:
                last, stable_since = seen, now
            elif _all_settled(scenario, seen) and now - stable_since >= scenario.settle_seconds:
                return seen
            if now > deadline:
                outcome.settled = False
                return seen
            await asyncio.sleep(_POLL_SECONDS)

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

    async def _create_run_state(self, scenario: Scenario, created: list[JSON]) -> None:
        """Nodes, extra objects (appended to created) and existing pods, in that order."""
        for node in scenario.nodes:
            await self.api.post("/api/v1/nodes", node)
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
            await self.api.post(_pods_path(pod["metadata"]["namespace"]), pod)

    async def _wipe_run_state(self, scenario: Scenario, *, objects: Sequence[JSON]) -> None:
        """No pods anywhere, none of the scenario's objects, no nodes."""
        namespaces = {ns["metadata"]["name"] for ns in await self.api.list("/api/v1/namespaces")}
        for ns in sorted(namespaces):
            await self.api.delete(_pods_path(ns), {"gracePeriodSeconds": 0})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while await self.api.list("/api/v1/pods"):
            if loop.time() > deadline:
                raise TimeoutError("pods still present 60s after deleting them all")
            await asyncio.sleep(_POLL_SECONDS)
        for obj in reversed(objects):
            path = await self._object_path(obj)
            await _delete_ignoring_missing(self.api, f"{path}/{obj['metadata']['name']}")
        await self.api.delete("/api/v1/nodes")
        while await self.api.list("/api/v1/nodes"):
            if loop.time() > deadline:
                raise TimeoutError("nodes still present 60s after deleting them all")
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


def _observe(scenario: Scenario, items: Sequence[JSON]) -> dict[str, PodOutcome]:
    """The outcome of every scenario pod in a pod list (absent pods: exists=False)."""
    by_key = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in items}
    out: dict[str, PodOutcome] = {}
    templates = [*scenario.existing_pods, *(s.pod for s in scenario.pods)]
    for template in templates:
        meta = template["metadata"]
        name = meta["name"]
        pod = by_key.get((meta["namespace"], name))
        if pod is None:
            out[name] = PodOutcome(name, exists=False)
            continue
        cond = _condition(pod, "PodScheduled")
        failed = cond is not None and cond.get("status") == "False"
        status = pod.get("status") or {}
        out[name] = PodOutcome(
            name,
            exists=True,
            node=pod["spec"].get("nodeName") or None,
            reason=cond.get("reason") if failed and cond else None,
            message=cond.get("message") if failed and cond else None,
            nominated_node=status.get("nominatedNodeName") or None,
        )
    return out


def _all_settled(scenario: Scenario, seen: Mapping[str, PodOutcome]) -> bool:
    for step in scenario.pods:
        pod = seen.get(step.name)
        if pod is None:
            return False
        if pod.exists and not pod.node and pod.reason is None:
            return False
    return True


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
