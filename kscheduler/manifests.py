"""Manifests for ``kscheduler explain -f``: documents read, checked, and turned into
the pods their controllers would create.

A file holds one or more YAML documents (JSON is YAML too), each a Kubernetes
object or a ``List`` of them. Pod-producing kinds are Pod, Deployment, ReplicaSet,
StatefulSet, Job and DaemonSet; PodDisruptionBudget, Service,
PersistentVolumeClaim, ResourceClaim and ResourceClaimTemplate are accepted as
objects the plugins read (preemption reads PDBs, default topology spreading
reads Services, volume binding reads claims, DynamicResources reads
ResourceClaims, which the what-if makes from templates as below).

Pods are derived as the controllers and the API server's admission would make
them, as far as the scheduler can see:

- names: ``<rs>-<5 chars>`` (ReplicaSet; a Deployment's ReplicaSet is
  ``<deploy>-<pod-template-hash>``), ``<sts>-<ordinal>`` (StatefulSet, from
  ``spec.ordinals.start``), ``<job>-<5 chars>`` or ``<job>-<index>-<5 chars>``
  (Indexed Job), ``<ds>-<5 chars>`` (DaemonSet);
- the labels the controllers add (``pod-template-hash``,
  ``statefulset.kubernetes.io/pod-name``, ``apps.kubernetes.io/pod-index``,
  ``job-name``, ``batch.kubernetes.io/job-completion-index`` ...) and a
  controlling owner reference, which default topology spreading follows to the
  ReplicaSet or StatefulSet;
- a StatefulSet's claims ``<template>-<sts>-<ordinal>`` from its
  volumeClaimTemplates, mounted in place of the template's volume of that name;
- a ResourceClaim per ``spec.resourceClaims`` entry that names a
  ResourceClaimTemplate, as the resourceclaim controller makes it (see
  :func:`claim_from_template`), recorded in the pod's
  ``status.resourceClaimStatuses``;
- a DaemonSet's pod per eligible node (the node's labels match the template's
  nodeSelector and required node affinity, and the template, with the
  controller's default tolerations, tolerates its NoSchedule and NoExecute
  taints), pinned by required node affinity ``matchFields metadata.name``;
- namespace: the document's, else the ``--namespace`` given.

The pod-template-hash and controller-revision-hash values are not the
controllers' (they hash Go structures); they are stable per template and only
matter to constraints that select on those labels.
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from kscheduler.framework.parse import parse_pod
from kscheduler.framework.selectors import LabelSelector, SelectorError
from kscheduler.framework.types import NodeRecord, Taint, Toleration

JSON = dict[str, Any]

POD_KINDS = ("Pod", "Deployment", "ReplicaSet", "StatefulSet", "Job", "DaemonSet")
OBJECT_KINDS = {
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Service": "services",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
}
API_VERSIONS = {
    "Pod": ("v1",),
    "Service": ("v1",),
    "PersistentVolumeClaim": ("v1",),
    "Deployment": ("apps/v1",),
    "ReplicaSet": ("apps/v1",),
    "StatefulSet": ("apps/v1",),
    "DaemonSet": ("apps/v1",),
    "Job": ("batch/v1",),
    "PodDisruptionBudget": ("policy/v1",),
    "ResourceClaim": ("resource.k8s.io/v1",),
    "ResourceClaimTemplate": ("resource.k8s.io/v1",),
}

#: The annotation the resourceclaim controller puts on a claim it made for a pod:
#: the name of the pod's spec.resourceClaims entry.
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"

#: Tolerations the DaemonSet controller adds to every daemon pod.
DAEMON_TOLERATIONS: tuple[tuple[str, str], ...] = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)
HOST_NETWORK_TOLERATION = ("node.kubernetes.io/network-unavailable", "NoSchedule")
#: Tolerations the DefaultTolerationSeconds admission plugin adds to every pod.
ADMISSION_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")

#: Characters Kubernetes uses for generated name suffixes and hashes.
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"


class ManifestError(Exception):
    """A document that cannot be used; the message names file, document and field."""

    exit_code = 2

    def __init__(self, source: str, index: int, where: str, reason: str) -> None:
        loc = f"{source}: document {index}" if index else source
        super().__init__(f"{loc}: {where}: {reason}" if where else f"{loc}: {reason}")
        self.source, self.index, self.where, self.reason = source, index, where, reason


@dataclass(slots=True)
class Document:
    source: str
    #: 1-based position in the file (items of a List count one by one)
    index: int
    obj: JSON

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"]["namespace"])

    def error(self, where: str, reason: str) -> ManifestError:
        return ManifestError(self.source, self.index, where, reason)


# --------------------------------------------------------------------------- reading


def read_documents(source: str, text: str, namespace: str = "default") -> list[Document]:
    """Every object of ``text`` (from ``source``), checked, namespace filled in.

    Raises ManifestError naming the document and the field.
    """
    try:
        raw_docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(source, 0, where, f"not YAML or JSON: {problem}") from exc
    out: list[Document] = []
    index = 0
    for raw in raw_docs:
        if raw is None:
            continue  # an empty document (a trailing ---)
        items: list[Any] = [raw]
        if isinstance(raw, dict) and str(raw.get("kind", "")).endswith("List"):
            listed = raw.get("items")
            if not isinstance(listed, list):
                index += 1
                raise ManifestError(source, index, "items", "a List needs a list of items")
            items = listed
        for obj in items:
            index += 1
            doc = Document(source, index, obj if isinstance(obj, dict) else {})
            check_document(doc, obj, namespace)
            out.append(doc)
    if not out:
        raise ManifestError(source, 0, "", "no Kubernetes object in it")
    return out


def check_document(doc: Document, obj: Any, namespace: str) -> None:
    """Raise ManifestError unless ``obj`` is a usable object of a known kind; fills in
    the namespace (cluster-scoped kinds are not accepted)."""
    if not isinstance(obj, dict):
        raise doc.error("", f"not a manifest: expected an object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        raise doc.error("kind", "not a manifest: missing")
    api = obj.get("apiVersion")
    if not isinstance(api, str) or not api:
        raise doc.error("apiVersion", "not a manifest: missing")
    if kind not in API_VERSIONS:
        known = ", ".join(sorted(API_VERSIONS))
        raise doc.error("kind", f"unknown kind {kind!r} (explain -f takes {known})")
    if api not in API_VERSIONS[kind]:
        raise doc.error("apiVersion", f"{api!r} is not an apiVersion of {kind}")
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise doc.error("metadata", "expected an object")
    name = meta.get("name")
    if not name and kind == "Pod" and isinstance(meta.get("generateName"), str):
        meta["name"] = name = meta["generateName"] + _suffix(random.Random(doc.index))
    if not isinstance(name, str) or not name:
        raise doc.error("metadata.name", "missing")
    ns = meta.get("namespace")
    if ns is None or ns == "":
        meta["namespace"] = namespace
    elif not isinstance(ns, str):
        raise doc.error("metadata.namespace", "expected a string")
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and (
            not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())
        ):
            raise doc.error(f"metadata.{key}", "expected a map of strings")
    spec = obj.get("spec")
    spec_required = (*POD_KINDS, "PodDisruptionBudget", "ResourceClaim", "ResourceClaimTemplate")
    if kind in spec_required and not isinstance(spec, dict):
        raise doc.error("spec", "missing" if spec is None else "expected an object")
    if kind == "Pod":
        _check_pod_spec(doc, obj, "")
    elif kind in POD_KINDS:
        _check_controller(doc, obj)
    elif kind == "PodDisruptionBudget":
        _check_pdb(doc, obj)


def _check_pod_spec(doc: Document, pod: JSON, prefix: str) -> None:
    """The pod (or template as a pod) parses as the scheduler parses pods."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise doc.error(f"{prefix}spec", "missing" if spec is None else "expected an object")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise doc.error(f"{prefix}spec.containers", "a pod needs at least one container")
    for i, c in enumerate(containers):
        if not isinstance(c, dict):
            raise doc.error(f"{prefix}spec.containers[{i}]", "expected an object")
    probe = copy.deepcopy(pod)
    probe.setdefault("metadata", {}).setdefault("name", "probe")
    parsed = parse_pod(probe)
    if parsed.parse_error is not None:
        err = parsed.parse_error
        # the parser names fields from the pod ("spec.…"); from a template they sit deeper
        if err.startswith(("spec.", "metadata.")):
            raise doc.error("", f"pod template does not parse: {prefix}{err}")
        raise doc.error(f"{prefix}spec", f"pod template does not parse: {err}")


def _int_field(doc: Document, spec: JSON, key: str, default: int, where: str) -> int:
    value = spec.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise doc.error(where, f"expected an integer, got {value!r}")
    if value < 0:
        raise doc.error(where, f"must not be negative, got {value}")
    return value


def _check_controller(doc: Document, obj: JSON) -> None:
    spec = obj["spec"]
    tmpl = spec.get("template")
    if not isinstance(tmpl, dict):
        raise doc.error("spec.template", "missing" if tmpl is None else "expected an object")
    tmeta = tmpl.setdefault("metadata", {})
    if not isinstance(tmeta, dict):
        raise doc.error("spec.template.metadata", "expected an object")
    labels = tmeta.get("labels")
    if labels is not None and (
        not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values())
    ):
        raise doc.error("spec.template.metadata.labels", "expected a map of strings")
    _check_pod_spec(doc, tmpl, "spec.template.")
    kind = doc.kind
    for key in ("replicas",) if kind in ("Deployment", "ReplicaSet", "StatefulSet") else ():
        _int_field(doc, spec, key, 1, f"spec.{key}")
    if kind == "Job":
        _int_field(doc, spec, "parallelism", 1, "spec.parallelism")
        _int_field(doc, spec, "completions", 0, "spec.completions")
        mode = spec.get("completionMode") or "NonIndexed"
        if mode not in ("NonIndexed", "Indexed"):
            raise doc.error("spec.completionMode", f"unknown mode {mode!r}")
        if mode == "Indexed" and spec.get("completions") is None:
            raise doc.error("spec.completions", "required when completionMode is Indexed")
        return
    if kind == "StatefulSet":
        ordinals = spec.get("ordinals")
        if ordinals is not None:
            if not isinstance(ordinals, dict):
                raise doc.error("spec.ordinals", "expected an object")
            _int_field(doc, ordinals, "start", 0, "spec.ordinals.start")
        templates = spec.get("volumeClaimTemplates") or []
        if not isinstance(templates, list):
            raise doc.error("spec.volumeClaimTemplates", "expected a list")
        for i, t in enumerate(templates):
            where = f"spec.volumeClaimTemplates[{i}]"
            if not isinstance(t, dict) or not isinstance(t.get("metadata"), dict):
                raise doc.error(f"{where}.metadata", "missing")
            if not isinstance(t["metadata"].get("name"), str) or not t["metadata"]["name"]:
                raise doc.error(f"{where}.metadata.name", "missing")
            if not isinstance(t.get("spec"), dict):
                raise doc.error(f"{where}.spec", "missing")
    # Deployment, ReplicaSet, StatefulSet, DaemonSet: a selector matching the template
    raw_sel = spec.get("selector")
    if not isinstance(raw_sel, dict):
        raise doc.error("spec.selector", "missing" if raw_sel is None else "expected an object")
    try:
        sel = LabelSelector.parse(raw_sel, "spec.selector")
    except SelectorError as exc:
        raise doc.error("spec.selector", str(exc)) from exc
    if sel.is_empty():
        raise doc.error("spec.selector", "empty: it would select every pod")
    if not sel.matches(labels or {}):
        raise doc.error(
            "spec.template.metadata.labels", "`selector` does not match template `labels`"
        )


def _check_pdb(doc: Document, obj: JSON) -> None:
    spec = obj["spec"]
    if "minAvailable" in spec and "maxUnavailable" in spec:
        raise doc.error("spec", "minAvailable and maxUnavailable cannot both be set")
    for key in ("minAvailable", "maxUnavailable"):
        value = spec.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise doc.error(f"spec.{key}", f"expected an integer or a percentage, got {value!r}")
        if isinstance(value, str) and not _percent(value):
            raise doc.error(f"spec.{key}", f"expected an integer or a percentage, got {value!r}")
    raw_sel = spec.get("selector")
    if raw_sel is not None:
        try:
            LabelSelector.parse(raw_sel, "spec.selector")
        except SelectorError as exc:
            raise doc.error("spec.selector", str(exc)) from exc


def _percent(value: str) -> bool:
    return value.endswith("%") and value[:-1].isdigit()


# --------------------------------------------------------------------------- derivation


def _suffix(rng: random.Random, n: int = 5) -> str:
    return "".join(rng.choice(_ALPHANUMS) for _ in range(n))


def template_hash(template: Any) -> str:
    """A stable, Kubernetes-looking hash of a pod template (not the controller's)."""
    digest = hashlib.sha256(yaml.safe_dump(template, sort_keys=True).encode()).digest()
    value = int.from_bytes(digest[:4], "big")
    out = ""
    while value:
        value, r = divmod(value, len(_ALPHANUMS))
        out += _ALPHANUMS[r]
    return out[:10] or "b"


def fake_uid(*parts: object) -> str:
    """A deterministic UUID-shaped uid for an object that does not exist."""
    h = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass(slots=True)
class Workload:
    """One pod-producing document and how to derive its pods."""

    doc: Document
    #: pods the controller creates now (DaemonSet: decided per node, see daemon_nodes)
    replicas: int
    #: objects that exist once the workload is applied and that plugins read, by kind
    #: (a Deployment's ReplicaSet, the StatefulSet itself), without claims
    owners: list[tuple[str, JSON]] = field(default_factory=list)
    #: "OrderedReady" StatefulSets create a pod only once the previous one runs
    ordered: bool = False
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    #: the pod template's hash (pod-template-hash, controller-revision-hash)
    hash: str = ""
    #: generated names given out so far
    names: set[str] = field(default_factory=set)

    @property
    def kind(self) -> str:
        return self.doc.kind

    @property
    def key(self) -> str:
        return f"{self.doc.kind}/{self.doc.namespace}/{self.doc.name}"

    # ---- the pods ----
    def pod(self, i: int, node: str = "") -> JSON:
        """Replica ``i`` (0-based) as the controller creates it; a DaemonSet's for ``node``."""
        obj = self.doc.obj
        ns, name = self.doc.namespace, self.doc.name
        if self.kind == "Pod":
            pod = copy.deepcopy(obj)
            pod.pop("status", None)
            pod["metadata"]["name"] = self.pod_name(i)  # --max: copies of a bare pod
            _admit(pod)
            return pod
        spec = obj["spec"]
        tmpl = copy.deepcopy(spec["template"])
        meta = tmpl.setdefault("metadata", {})
        labels: dict[str, str] = dict(meta.get("labels") or {})
        annotations: dict[str, str] = dict(meta.get("annotations") or {})
        owner_kind, owner_name = self.kind, name
        pod_name = self.pod_name(i)
        if self.kind == "Deployment":
            labels["pod-template-hash"] = self.hash
            owner_kind, owner_name = "ReplicaSet", f"{name}-{self.hash}"
        elif self.kind == "StatefulSet":
            labels["controller-revision-hash"] = f"{name}-{self.hash}"
            labels["statefulset.kubernetes.io/pod-name"] = pod_name
            labels["apps.kubernetes.io/pod-index"] = str(self.ordinal(i))
            pspec = tmpl["spec"]
            pspec.setdefault("hostname", pod_name)
            for claim in self.claims(i):
                _mount_claim(pspec, claim)
        elif self.kind == "Job":
            uid = fake_uid("job", ns, name)
            labels.update(
                {
                    "batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-name": name,
                    "controller-uid": uid,
                    "job-name": name,
                }
            )
            if spec.get("completionMode") == "Indexed":
                labels["batch.kubernetes.io/job-completion-index"] = str(i)
                annotations["batch.kubernetes.io/job-completion-index"] = str(i)
        elif self.kind == "DaemonSet":
            labels["controller-revision-hash"] = self.hash
            labels["pod-template-generation"] = "1"
            _pin_daemon_pod(tmpl["spec"], node)
        meta.clear()
        meta.update(
            {
                "name": pod_name,
                "namespace": ns,
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1" if owner_kind != "Job" else "batch/v1",
                        "kind": owner_kind,
                        "name": owner_name,
                        "uid": fake_uid(owner_kind, ns, owner_name),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            }
        )
        if annotations:
            meta["annotations"] = annotations
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl["spec"]}
        _admit(pod)
        return pod

    def pod_name(self, i: int) -> str:
        """The name the controller gives replica ``i`` (random suffixes from the
        workload's own generator, so a run is reproducible)."""
        name = self.doc.name
        if self.kind == "Pod":
            return name if i == 0 else f"{name}-{i}"
        if self.kind == "StatefulSet":
            return f"{name}-{self.ordinal(i)}"
        if self.kind == "Deployment":
            prefix = f"{name}-{self.hash}-"
        elif self.kind == "Job" and self.doc.obj["spec"].get("completionMode") == "Indexed":
            prefix = f"{name}-{i}-"
        else:
            prefix = f"{name}-"
        while True:  # a generated name that is taken is generated again
            out = prefix + _suffix(self.rng)
            if out not in self.names:
                self.names.add(out)
                return out

    def ordinal(self, i: int) -> int:
        ordinals = self.doc.obj["spec"].get("ordinals") or {}
        return int(ordinals.get("start") or 0) + i

    def claims(self, i: int) -> list[JSON]:
        """The PersistentVolumeClaims replica ``i`` of a StatefulSet mounts."""
        if self.kind != "StatefulSet":
            return []
        spec = self.doc.obj["spec"]
        name, ns = self.doc.name, self.doc.namespace
        sel_labels = (spec.get("selector") or {}).get("matchLabels") or {}
        out = []
        for t in spec.get("volumeClaimTemplates") or []:
            claim = copy.deepcopy(t)
            cmeta = claim["metadata"]
            tmpl_name = cmeta["name"]
            cname = f"{tmpl_name}-{name}-{self.ordinal(i)}"
            labels = dict(cmeta.get("labels") or {})
            labels.update(sel_labels)
            claim["apiVersion"], claim["kind"] = "v1", "PersistentVolumeClaim"
            claim["metadata"] = {
                "name": cname,
                "namespace": ns,
                "labels": labels,
                "uid": fake_uid("pvc", ns, cname),
                "resourceVersion": "1",
                "annotations": dict(cmeta.get("annotations") or {}),
            }
            claim["status"] = {"phase": "Pending"}
            claim.setdefault("_template", tmpl_name)
            out.append(claim)
        return out

    # ---- DaemonSet ----
    def daemon_nodes(self, nodes: Iterable[NodeRecord]) -> list[str]:
        """The nodes the DaemonSet controller makes a pod for, in the order given."""
        spec = self.doc.obj["spec"]["template"]["spec"]
        probe = parse_pod(
            {"metadata": {"name": "probe", "namespace": self.doc.namespace}, "spec": spec}
        )
        tolerations = list(probe.tolerations) + [
            Toleration(key, "Exists", "", effect) for key, effect in _daemon_tolerations(spec)
        ]
        pinned = spec.get("nodeName") or ""
        out = []
        for n in nodes:
            if pinned and n.name != pinned:
                continue
            if any(n.labels.get(k) != v for k, v in probe.node_selector.items()):
                continue
            req = probe.required_node_affinity
            if req is not None and not req.matches(n.labels, n.name):
                continue
            if not _tolerated(n.taints, tolerations):
                continue
            out.append(n.name)
        return out


def _tolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> bool:
    for t in taints:
        if t.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tol.tolerates(t) for tol in tolerations):
            return False
    return True


def _daemon_tolerations(spec: JSON) -> list[tuple[str, str]]:
    out = list(DAEMON_TOLERATIONS)
    if spec.get("hostNetwork"):
        out.append(HOST_NETWORK_TOLERATION)
    return out


def _has_toleration(tolerations: list[Any], key: str, effect: str) -> bool:
    for t in tolerations:
        if not isinstance(t, dict):
            continue
        if t.get("key", "") == key and t.get("effect", "") in ("", effect):
            return True
        if (
            not t.get("key")
            and t.get("operator") == "Exists"
            and t.get("effect", "")
            in (
                "",
                effect,
            )
        ):
            return True
    return False


def _pin_daemon_pod(spec: JSON, node: str) -> None:
    """As the DaemonSet controller: required node affinity to the node by name (the
    template's required terms are replaced) and its default tolerations."""
    affinity = spec.setdefault("affinity", {})
    na = affinity.setdefault("nodeAffinity", {})
    na["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }
    tolerations = list(spec.get("tolerations") or [])
    for key, effect in _daemon_tolerations(spec):
        if not _has_toleration(tolerations, key, effect):
            tolerations.append({"key": key, "operator": "Exists", "effect": effect})
    spec["tolerations"] = tolerations


def _mount_claim(spec: JSON, claim: JSON) -> None:
    tmpl_name = claim.pop("_template")
    volumes = [
        v
        for v in spec.get("volumes") or []
        if not (isinstance(v, dict) and v.get("name") == tmpl_name)
    ]
    volumes.append(
        {"name": tmpl_name, "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
    )
    spec["volumes"] = volumes


def _admit(pod: JSON) -> None:
    """What admission adds that the scheduler reads: DefaultTolerationSeconds'
    tolerations (priority is resolved by the caller, which can read PriorityClasses)."""
    spec = pod["spec"]
    tolerations = list(spec.get("tolerations") or [])
    for key in ADMISSION_TOLERATIONS:
        if not _has_toleration(tolerations, key, "NoExecute"):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    spec["tolerations"] = tolerations


def workload(doc: Document) -> Workload:
    """The Workload of a pod-producing document (check_document has passed)."""
    obj, kind = doc.obj, doc.kind
    spec = obj.get("spec") or {}
    w = Workload(doc, 1, rng=random.Random(f"{doc.source}/{doc.index}"))
    ns, name = doc.namespace, doc.name
    if kind != "Pod":
        w.hash = template_hash(spec["template"])
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        w.replicas = spec.get("replicas", 1) if spec.get("replicas") is not None else 1
    elif kind == "Job":
        if spec.get("suspend"):
            w.replicas = 0
        else:
            parallelism = spec.get("parallelism")
            parallelism = 1 if parallelism is None else parallelism
            completions = spec.get("completions")
            w.replicas = parallelism if completions is None else min(parallelism, completions)
    elif kind == "DaemonSet":
        w.replicas = 0  # per node, decided at placement
    if kind == "Deployment":
        h = w.hash
        sel = copy.deepcopy(spec["selector"])
        sel.setdefault("matchLabels", {})["pod-template-hash"] = h
        rs_name = f"{name}-{h}"
        w.owners.append(
            (
                "replicasets",
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "metadata": {
                        "name": rs_name,
                        "namespace": ns,
                        "uid": fake_uid("ReplicaSet", ns, rs_name),
                        "resourceVersion": "1",
                    },
                    "spec": {"replicas": w.replicas, "selector": sel},
                },
            )
        )
    elif kind in ("ReplicaSet", "StatefulSet"):
        owner = copy.deepcopy(obj)
        owner["metadata"].setdefault("uid", fake_uid(kind, ns, name))
        owner["metadata"].setdefault("resourceVersion", "1")
        w.owners.append(("replicasets" if kind == "ReplicaSet" else "statefulsets", owner))
    if kind == "StatefulSet":
        w.ordered = (spec.get("podManagementPolicy") or "OrderedReady") == "OrderedReady"
    return w


def object_of(doc: Document) -> tuple[str, JSON]:
    """(informer kind, object) of a non-pod document, as the API server would store it."""
    obj = copy.deepcopy(doc.obj)
    meta = obj["metadata"]
    meta.setdefault("uid", fake_uid(doc.kind, doc.namespace, doc.name))
    meta.setdefault("resourceVersion", "1")
    if doc.kind == "PersistentVolumeClaim":
        obj.setdefault("status", {"phase": "Pending"})
    return OBJECT_KINDS[doc.kind], obj


def claim_from_template(pod: JSON, entry_name: str, template: JSON) -> JSON:
    """The ResourceClaim the resourceclaim controller makes for the pod's
    spec.resourceClaims entry ``entry_name`` from ``template``: named
    ``<pod>-<entry>-<5 chars>`` (both parts cut in proportion past 57
    characters), owned by the pod, with the template's labels and annotations plus
    the pod-claim-name annotation, and the template's claim spec."""
    meta = pod["metadata"]
    base = f"{meta['name']}-{entry_name}-"
    if len(base) > 57:
        pod_name, n = meta["name"], len(base)
        base = f"{pod_name[: len(pod_name) * 57 // n]}-{entry_name[: len(entry_name) * 57 // n]}"
    rng = random.Random(f"{meta['namespace']}/{meta['name']}/{entry_name}")
    tmeta = (template.get("spec") or {}).get("metadata") or {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": base + _suffix(rng),
            "namespace": meta["namespace"],
            "uid": fake_uid("ResourceClaim", meta["namespace"], meta["name"], entry_name),
            "resourceVersion": "1",
            "labels": dict(tmeta.get("labels") or {}),
            "annotations": {
                **(tmeta.get("annotations") or {}),
                POD_CLAIM_NAME_ANNOTATION: entry_name,
            },
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {}),
        "status": {},
    }


def pdb_disruptions_allowed(pdb: JSON, matching: int, healthy: int) -> int:
    """status.disruptionsAllowed as the disruption controller computes it, with the
    number of pods the PDB selects standing for the controllers' expected count."""
    spec = pdb.get("spec") or {}
    expected = matching
    if spec.get("maxUnavailable") is not None:
        mu = spec["maxUnavailable"]
        unavailable = _scaled(mu, expected, round_up=True)
        desired = max(0, expected - unavailable)
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected, round_up=True)
    else:
        desired = 0  # neither set: no floor
    return max(0, healthy - desired)


def _scaled(value: int | str, total: int, *, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    pct = int(value[:-1])
    n = pct * total
    return -(-n // 100) if round_up else n // 100


def pdb_selector(pdb: JSON) -> LabelSelector | None:
    raw = (pdb.get("spec") or {}).get("selector")
    if not isinstance(raw, dict):
        return None
    try:
        sel = LabelSelector.parse(raw)
    except SelectorError:
        return None
    return None if sel.is_empty() else sel


__all__ = [
    "OBJECT_KINDS",
    "POD_KINDS",
    "Document",
    "ManifestError",
    "Workload",
    "fake_uid",
    "object_of",
    "pdb_disruptions_allowed",
    "pdb_selector",
    "read_documents",
    "template_hash",
    "workload",
]
