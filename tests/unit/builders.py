"""Small builders for plugin tests: raw pod/node JSON in, parsed records out.

    pod("p").req(cpu="1", memory="1Gi").toleration("k", "v", "NoSchedule").build()
    node("n1").alloc(cpu="4", memory="8Gi", pods=110).labels(zone="a").with_pods(p).build()

Resource keyword names use ``_`` for ``-`` (``ephemeral_storage``); other names
(extended resources) go through ``**{"example.com/gpu": "1"}``.
"""

from __future__ import annotations

import copy
from typing import Any

from kscheduler.framework.parse import parse_node, parse_pod
from kscheduler.framework.types import NodeInfo, NodeRecord, PodInfo, QueuedPodInfo


def _resources(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in values.items():
        out["ephemeral-storage" if k == "ephemeral_storage" else k] = v
    return out


class PodBuilder:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self._raw: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
            "spec": {"containers": []},
            "status": {},
        }

    @property
    def _spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._raw["spec"]
        return spec

    def uid(self, uid: str) -> PodBuilder:
        self._raw["metadata"]["uid"] = uid
        return self

    def labels(self, **labels: str) -> PodBuilder:
        self._raw["metadata"].setdefault("labels", {}).update(labels)
        return self

    def container(
        self,
        requests: dict[str, Any] | None = None,
        *,
        name: str = "",
        image: str = "",
        ports: list[dict[str, Any]] | None = None,
    ) -> PodBuilder:
        """A container with exactly these requests (None: no resources block at all)."""
        c: dict[str, Any] = {"name": name or f"c{len(self._spec['containers'])}"}
        c["image"] = image or "registry.k8s.io/pause:3.10"
        if requests is not None:
            c["resources"] = {"requests": _resources(requests)}
        if ports:
            c["ports"] = ports
        self._spec["containers"].append(c)
        return self

    def req(self, **requests: Any) -> PodBuilder:
        """Add a container requesting ``requests``."""
        return self.container(requests)

    def init(self, **requests: Any) -> PodBuilder:
        """Add an ordinary init container requesting ``requests``."""
        return self._init(False, requests)

    def sidecar(self, **requests: Any) -> PodBuilder:
        """Add a restartable init container (restartPolicy Always) requesting ``requests``."""
        return self._init(True, requests)

    def _init(self, sidecar: bool, requests: dict[str, Any]) -> PodBuilder:
        inits = self._spec.setdefault("initContainers", [])
        c: dict[str, Any] = {"name": f"i{len(inits)}", "image": "busybox"}
        if requests:
            c["resources"] = {"requests": _resources(requests)}
        if sidecar:
            c["restartPolicy"] = "Always"
        inits.append(c)
        return self

    def overhead(self, **res: Any) -> PodBuilder:
        self._spec["overhead"] = _resources(res)
        return self

    def pod_requests(self, **res: Any) -> PodBuilder:
        """Pod-level spec.resources.requests."""
        self._spec["resources"] = {"requests": _resources(res)}
        return self

    def node_selector(self, **labels: str) -> PodBuilder:
        self._spec.setdefault("nodeSelector", {}).update(labels)
        return self

    def _node_affinity(self) -> dict[str, Any]:
        aff = self._spec.setdefault("affinity", {})
        na: dict[str, Any] = aff.setdefault("nodeAffinity", {})
        return na

    def required_terms(self, *terms: dict[str, Any]) -> PodBuilder:
        """Required node affinity: each term a raw NodeSelectorTerm (ORed)."""
        req = self._node_affinity().setdefault(
            "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": []}
        )
        req["nodeSelectorTerms"].extend(terms)
        return self

    def preferred(self, weight: int, term: dict[str, Any]) -> PodBuilder:
        pref = self._node_affinity().setdefault(
            "preferredDuringSchedulingIgnoredDuringExecution", []
        )
        pref.append({"weight": weight, "preference": term})
        return self

    def toleration(
        self, key: str = "", value: str = "", effect: str = "", operator: str = ""
    ) -> PodBuilder:
        t: dict[str, Any] = {}
        if key:
            t["key"] = key
        if operator:
            t["operator"] = operator
        if value:
            t["value"] = value
        if effect:
            t["effect"] = effect
        self._spec.setdefault("tolerations", []).append(t)
        return self

    def host_port(self, port: int, protocol: str = "", ip: str = "") -> PodBuilder:
        """A hostPort on the last container (a new one if there is none)."""
        p: dict[str, Any] = {"containerPort": port, "hostPort": port}
        if protocol:
            p["protocol"] = protocol
        if ip:
            p["hostIP"] = ip
        containers = self._spec["containers"]
        if not containers:
            return self.container(None, ports=[p])
        containers[-1].setdefault("ports", []).append(p)
        return self

    def priority(self, value: int) -> PodBuilder:
        self._spec["priority"] = value
        return self

    def gates(self, *names: str) -> PodBuilder:
        self._spec["schedulingGates"] = [{"name": n} for n in names]
        return self

    def on(self, node_name: str) -> PodBuilder:
        """spec.nodeName: the pod is bound (or assigned) to ``node_name``."""
        self._spec["nodeName"] = node_name
        return self

    def nominated(self, node_name: str) -> PodBuilder:
        self._raw["status"]["nominatedNodeName"] = node_name
        return self

    def raw(self) -> dict[str, Any]:
        return copy.deepcopy(self._raw)

    def build(self) -> PodInfo:
        info = parse_pod(self.raw())
        assert info.parse_error is None, info.parse_error
        return info


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._raw: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "spec": {},
            "status": {"allocatable": {}},
        }
        self._pods: list[PodInfo] = []

    def alloc(self, **res: Any) -> NodeBuilder:
        self._raw["status"]["allocatable"].update(_resources(res))
        return self

    def labels(self, **labels: str) -> NodeBuilder:
        self._raw["metadata"].setdefault("labels", {}).update(labels)
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self._raw["metadata"].setdefault("labels", {})[key] = value
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        t: dict[str, Any] = {"key": key, "effect": effect}
        if value:
            t["value"] = value
        self._raw["spec"].setdefault("taints", []).append(t)
        return self

    def unschedulable(self, value: bool = True) -> NodeBuilder:
        self._raw["spec"]["unschedulable"] = value
        return self

    def image(self, name: str, size: int) -> NodeBuilder:
        self._raw["status"].setdefault("images", []).append({"names": [name], "sizeBytes": size})
        return self

    def declared_features(self, *names: str) -> NodeBuilder:
        """status.declaredFeatures, in the order given."""
        self._raw["status"]["declaredFeatures"] = list(names)
        return self

    def with_pods(self, *pods: PodInfo) -> NodeBuilder:
        self._pods.extend(pods)
        return self

    def raw(self) -> dict[str, Any]:
        return copy.deepcopy(self._raw)

    def record(self) -> NodeRecord:
        return parse_node(self.raw())

    def build(self) -> NodeInfo:
        rec = self.record()
        ni = NodeInfo(rec.name, rec)
        for p in self._pods:
            ni.add_pod(p.with_node(rec.name) if p.node_name != rec.name else p)
        return ni


def pod(name: str, namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def queued(p: PodInfo, timestamp: float) -> QueuedPodInfo:
    return QueuedPodInfo(p, timestamp)


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    """A NodeSelectorTerm with one matchExpressions requirement."""
    r: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        r["values"] = list(values)
    return {"matchExpressions": [r]}


def field_in(*names: str) -> dict[str, Any]:
    """A NodeSelectorTerm with matchFields metadata.name In names."""
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(names)}]}


def term(
    expressions: list[dict[str, Any]] | None = None, fields: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    t: dict[str, Any] = {}
    if expressions:
        t["matchExpressions"] = expressions
    if fields:
        t["matchFields"] = fields
    return t
