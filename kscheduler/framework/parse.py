"""Raw JSON (as decoded from the API server) -> PodInfo / NodeRecord.

Parsing never raises for a pod: a pod with a field the scheduler cannot
understand becomes a PodInfo with ``parse_error`` set, which the scheduler
reports on the pod as a FailedScheduling event while the rest keep flowing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kscheduler.framework.features import GATES
from kscheduler.framework.quantity import parse_quantity
from kscheduler.framework.selectors import (
    LabelSelector,
    NodeSelector,
    Requirement,
    SelectorError,
    parse_preferred_terms,
)
from kscheduler.framework.types import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    DEFAULT_SCHEDULER_NAME,
    AffinityTerm,
    HostPort,
    NodeRecord,
    ParseError,
    PodInfo,
    Resource,
    Taint,
    Toleration,
)


def _dict(v: Any, where: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ParseError(f"{where}: expected an object, got {type(v).__name__}")
    return v


def _list(v: Any, where: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ParseError(f"{where}: expected a list, got {type(v).__name__}")
    return v


def _str_map(v: Any, where: str) -> dict[str, str]:
    d = _dict(v, where)
    for k, x in d.items():
        if not isinstance(x, str):
            raise ParseError(f"{where}.{k}: expected a string")
    return d


def _container_requests(
    c: Mapping[str, Any], where: str
) -> tuple[Resource, int, int, dict[str, Any]]:
    """A container's requests, its CPU/memory for scoring (requests that are missing,
    not ones set to zero, count as 100m / 200Mi), and the raw request map."""
    res = _dict(c.get("resources"), f"{where}.resources")
    raw = _dict(res.get("requests"), f"{where}.resources.requests")
    r = Resource.from_list(raw, f"{where}.resources.requests")
    return (
        r,
        r.milli_cpu if "cpu" in raw else DEFAULT_MILLI_CPU_REQUEST,
        r.memory if "memory" in raw else DEFAULT_MEMORY_REQUEST,
        raw,
    )


def _is_pod_level_resource(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def pod_requests(spec: Mapping[str, Any]) -> tuple[Resource, int, int]:
    """The pod's effective request and its non-zero CPU/memory as a node's totals
    count them (see :func:`pod_resources`)."""
    total, node_cpu, node_mem, _, _ = pod_resources(spec)
    return total, node_cpu, node_mem


def pod_resources(spec: Mapping[str, Any]) -> tuple[Resource, int, int, int, int]:
    """The pod's effective request, its non-zero CPU/memory for a node's totals, and
    its non-zero CPU/memory as the incoming pod of a score.

    Regular containers and restartable init containers (sidecars) add up; each
    ordinary init container needs its own request plus the sidecars started
    before it; the pod needs the larger of the two, plus its overhead.

    Pod-level requests (``spec.resources.requests``: cpu, memory, hugepages-*),
    where any is given and the PodLevelResources gate is on, replace the
    container sum for those resources. The non-zero values then follow two rules,
    as kube-scheduler's: the incoming pod's score (NodeResourcesFit) ignores the
    pod level and counts 100m / 200Mi for each container missing a request; a node's
    totals count the defaults only for a resource that neither the containers,
    the pod level nor the overhead mention, and the real request otherwise.
    Without pod-level requests both are the per-container defaults.
    """
    total = Resource()
    nz_cpu = nz_mem = 0
    has_cpu = has_mem = False
    for i, c in enumerate(_list(spec.get("containers"), "spec.containers")):
        r, a, b, raw = _container_requests(
            _dict(c, f"spec.containers[{i}]"), f"spec.containers[{i}]"
        )
        total.add(r)
        nz_cpu += a
        nz_mem += b
        has_cpu = has_cpu or "cpu" in raw
        has_mem = has_mem or "memory" in raw
    sidecars = Resource()
    sc_cpu = sc_mem = 0
    init_max = Resource()
    init_nz_cpu = init_nz_mem = 0
    for i, c in enumerate(_list(spec.get("initContainers"), "spec.initContainers")):
        c = _dict(c, f"spec.initContainers[{i}]")
        r, a, b, raw = _container_requests(c, f"spec.initContainers[{i}]")
        has_cpu = has_cpu or "cpu" in raw
        has_mem = has_mem or "memory" in raw
        if c.get("restartPolicy") == "Always":
            total.add(r)
            nz_cpu += a
            nz_mem += b
            sidecars.add(r)
            sc_cpu += a
            sc_mem += b
            need, need_cpu, need_mem = sidecars.copy(), sc_cpu, sc_mem
        else:
            need = r.copy()
            need.add(sidecars)
            need_cpu, need_mem = a + sc_cpu, b + sc_mem
        init_max.set_max(need)
        init_nz_cpu = max(init_nz_cpu, need_cpu)
        init_nz_mem = max(init_nz_mem, need_mem)
    total.set_max(init_max)
    nz_cpu = max(nz_cpu, init_nz_cpu)
    nz_mem = max(nz_mem, init_nz_mem)
    pod_level = _dict(
        _dict(spec.get("resources"), "spec.resources").get("requests"), "spec.resources.requests"
    )
    pod_level_set = (
        bool(pod_level)
        and GATES.pod_level_resources
        and any(_is_pod_level_resource(k) for k in pod_level)
    )
    # the incoming pod's score never sees the pod level (NodeResourcesFit's scorer
    # leaves it out), only the containers with their defaults
    score_cpu, score_mem = nz_cpu, nz_mem
    if pod_level_set:
        pl = Resource.from_list(pod_level, "spec.resources.requests")
        if "cpu" in pod_level:
            total.milli_cpu = nz_cpu = pl.milli_cpu
            has_cpu = True
        if "memory" in pod_level:
            total.memory = nz_mem = pl.memory
            has_mem = True
        for k, v in pl.scalar.items():
            if k.startswith("hugepages-"):
                total.scalar[k] = v
    overhead = spec.get("overhead")
    if overhead:
        raw_overhead = _dict(overhead, "spec.overhead")
        o = Resource.from_list(raw_overhead, "spec.overhead")
        total.add(o)
        nz_cpu += o.milli_cpu
        nz_mem += o.memory
        score_cpu += o.milli_cpu
        score_mem += o.memory
        has_cpu = has_cpu or "cpu" in raw_overhead
        has_mem = has_mem or "memory" in raw_overhead
    if not pod_level_set:
        return total, nz_cpu, nz_mem, nz_cpu, nz_mem
    return (
        total,
        total.milli_cpu if has_cpu else nz_cpu,
        total.memory if has_mem else nz_mem,
        score_cpu,
        score_mem,
    )


# ---- in-place resize: what an assigned pod counts ---------------------------------------------
#
# With InPlacePodVerticalScaling a running pod's resources can change without a new
# pod. While a resize is in progress the spec (desired), the allocation the kubelet
# admitted (status ...allocatedResources) and what the runtime applied (status
# ...resources.requests) may differ; the pod counts the largest of the three per
# resource. A resize the kubelet marked Infeasible (condition PodResizePending,
# reason Infeasible) will never happen, so its spec is left out. The same holds for
# the pod level (InPlacePodLevelResourcesVerticalScaling: status.resources and
# status.allocatedResources), whose status maps, when both are given, replace the
# per-container statuses as the aggregate.
#
# Resource lists here keep which names are present (a missing request gets the
# non-zero default, one set to zero does not): name -> amount (CPU in millicores).

_RList = dict[str, int]
_NO_LIST: _RList = {}


def _rlist(raw: Any, where: str) -> _RList:
    out: _RList = {}
    for name, q in _dict(raw, where).items():
        try:
            out[name] = parse_quantity(q, milli=name == "cpu")
        except ValueError as exc:
            raise ParseError(f"{where}.{name}: {exc}") from exc
    return out


def _add_into(acc: _RList, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        acc[k] = acc.get(k, 0) + v


def _max_into(acc: _RList, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if k not in acc or v > acc[k]:
            acc[k] = v


def _max_of(*lists: Mapping[str, int] | None) -> _RList:
    out: _RList = {}
    for lst in lists:
        if lst:
            _max_into(out, lst)
    return out


def pod_resize_infeasible(status: Mapping[str, Any]) -> bool:
    """The kubelet reported the pod's resize as Infeasible (the first PodResizePending
    condition decides)."""
    for c in _list(status.get("conditions"), "status.conditions"):
        if isinstance(c, dict) and c.get("type") == "PodResizePending":
            return bool(c.get("reason") == "Infeasible")
    return False


def _status_matters(spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether the status can make the pod count other than its spec: pod-level status
    resources, a container status whose allocated or actuated requests differ from
    the container's spec requests (as the API server writes quantities, canonical), or
    an Infeasible resize. Kubelet reports both for every running container; they
    equal the spec unless a resize is under way."""
    if not status:
        return False
    if status.get("allocatedResources") or "resources" in status:
        return True
    spec_reqs: dict[str, Any] | None = None
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in _list(status.get(key), f"status.{key}"):
            if not isinstance(cs, dict):
                return True  # let counted_resources report it
            allocated = cs.get("allocatedResources")
            resources = cs.get("resources")
            if not allocated and not resources:
                continue
            if spec_reqs is None:
                spec_reqs = {}
                for ck in ("initContainers", "containers"):
                    for c in _list(spec.get(ck), f"spec.{ck}"):
                        if isinstance(c, dict):
                            res = c.get("resources")
                            req = res.get("requests") if isinstance(res, dict) else None
                            spec_reqs[str(c.get("name", ""))] = req or {}
            name = str(cs.get("name", ""))
            if name not in spec_reqs:
                continue  # no container of the pod: never looked up
            want = spec_reqs[name]
            if allocated and allocated != want:
                return True
            actuated = resources.get("requests") if isinstance(resources, dict) else resources
            if actuated and actuated != want:
                return True
    return pod_resize_infeasible(status)


def counted_resources(
    spec: Mapping[str, Any], status: Mapping[str, Any]
) -> tuple[Resource, int, int] | None:
    """What the pod counts on a node (and in BalancedAllocation's score of it): its
    request and non-zero CPU/memory, as :func:`pod_resources` computes them but from
    the largest of spec, allocated and actuated resources per resource (see above).

    None when the status cannot change the result (no statuses with resources, no
    Infeasible resize) or InPlacePodVerticalScaling is off: :func:`pod_resources`
    applies. Computed once per pod version."""
    if not GATES.in_place_pod_vertical_scaling or not _status_matters(spec, status):
        return None
    pod_level_status = GATES.in_place_pod_level_resources_vertical_scaling
    pod_level_raw = _dict(
        _dict(spec.get("resources"), "spec.resources").get("requests"), "spec.resources.requests"
    )
    pod_level_set = GATES.pod_level_resources and any(
        _is_pod_level_resource(k) for k in pod_level_raw
    )
    infeasible = pod_resize_infeasible(status)
    containers = [
        _dict(c, f"spec.containers[{i}]")
        for i, c in enumerate(_list(spec.get("containers"), "spec.containers"))
    ]
    inits = [
        _dict(c, f"spec.initContainers[{i}]")
        for i, c in enumerate(_list(spec.get("initContainers"), "spec.initContainers"))
    ]
    # a container's status by name: regular containers' statuses first
    by_name: dict[str, Mapping[str, Any]] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for i, cs in enumerate(_list(status.get(key), f"status.{key}")):
            cs = _dict(cs, f"status.{key}[{i}]")
            by_name.setdefault(str(cs.get("name", "")), cs)

    # per container: (spec, allocated, actuated) requests; None where nothing counts
    def lists(c: Mapping[str, Any], where: str) -> tuple[_RList, _RList | None, _RList | None]:
        spec_req = _rlist(
            _dict(c.get("resources"), f"{where}.resources").get("requests"),
            f"{where}.resources.requests",
        )
        fallback = None if infeasible else spec_req
        name = str(c.get("name", ""))
        cs = by_name.get(name)
        if cs is None:
            return spec_req, fallback, fallback
        # the status of container "name" (regular or init)
        sw = f"status.containerStatuses[{name}]"
        allocated_raw = cs.get("allocatedResources")
        allocated = _rlist(allocated_raw, f"{sw}.allocatedResources") if allocated_raw else fallback
        actuated_raw = _dict(cs.get("resources"), f"{sw}.resources").get("requests")
        actuated = (
            _rlist(actuated_raw, f"{sw}.resources.requests")
            if actuated_raw
            else (allocated if allocated_raw else fallback)
        )
        return spec_req, allocated, actuated

    per_c = [lists(c, f"spec.containers[{i}]") for i, c in enumerate(containers)]
    per_i = [lists(c, f"spec.initContainers[{i}]") for i, c in enumerate(inits)]
    sidecar_flags = [c.get("restartPolicy") == "Always" for c in inits]

    def aggregate(which: int, non_missing: Mapping[str, int]) -> _RList:
        def one(ls: tuple[_RList, _RList | None, _RList | None]) -> _RList:
            lst = dict(ls[which] or _NO_LIST)
            for k, v in non_missing.items():
                if k not in lst:
                    lst[k] = v
            return lst

        total: _RList = {}
        for ls in per_c:
            _add_into(total, one(ls))
        sidecars: _RList = {}
        init_max: _RList = {}
        for ls, sidecar in zip(per_i, sidecar_flags, strict=True):
            r = one(ls)
            if sidecar:
                _add_into(total, r)
                _add_into(sidecars, r)
                _max_into(init_max, sidecars)
            else:
                _add_into(r, sidecars)
                _max_into(init_max, r)
        _max_into(total, init_max)
        return total

    status_res = status.get("resources")
    status_res_req = (
        _rlist(_dict(status_res, "status.resources").get("requests"), "status.resources.requests")
        if status_res is not None
        else None
    )
    status_alloc_raw = status.get("allocatedResources")
    status_alloc = (
        _rlist(status_alloc_raw, "status.allocatedResources") if status_alloc_raw else None
    )
    use_pod_status = pod_level_status and bool(status_alloc) and bool(status_res_req)

    def requests(non_missing: Mapping[str, int]) -> _RList:
        spec_sum = aggregate(0, non_missing)
        if use_pod_status:
            allocated, actuated = status_alloc, status_res_req
        else:
            allocated, actuated = aggregate(1, non_missing), aggregate(2, non_missing)
        out = _max_of(actuated, allocated) if infeasible else _max_of(spec_sum, actuated, allocated)
        if pod_level_set:
            effective: Mapping[str, int] = _rlist(pod_level_raw, "spec.resources.requests")
            if pod_level_status and status_res is not None:
                effective = _max_of(None if infeasible else effective, status_res_req, status_alloc)
            for k, v in effective.items():
                if _is_pod_level_resource(k):
                    out[k] = v
        overhead = spec.get("overhead")
        if overhead:
            _add_into(out, _rlist(overhead, "spec.overhead"))
        return out

    reqs = requests(_NO_LIST)
    defaults = {"cpu": DEFAULT_MILLI_CPU_REQUEST, "memory": DEFAULT_MEMORY_REQUEST}
    if pod_level_set:
        defaults = {k: v for k, v in defaults.items() if k not in reqs}
    non_zero = requests(defaults) if defaults else reqs
    total = Resource()
    for k, v in reqs.items():
        if k == "cpu":
            total.milli_cpu = v
        elif k == "memory":
            total.memory = v
        elif k == "ephemeral-storage":
            total.ephemeral_storage = v
        elif k == "pods":
            total.allowed_pods = v
        else:
            total.scalar[k] = v
    return total, non_zero.get("cpu", 0), non_zero.get("memory", 0)


def _tolerations(raw: Any) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(_list(raw, "spec.tolerations")):
        t = _dict(t, f"spec.tolerations[{i}]")
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise ParseError(f"spec.tolerations[{i}].operator: unsupported operator {op!r}")
        out.append(
            Toleration(
                str(t.get("key") or ""), op, str(t.get("value") or ""), str(t.get("effect") or "")
            )
        )
    return tuple(out)


def _affinity_terms(
    raw: Any, namespace: str, where: str, weighted: bool
) -> tuple[AffinityTerm, ...]:
    out = []
    for i, item in enumerate(_list(raw, where)):
        item = _dict(item, f"{where}[{i}]")
        weight = 0
        term = item
        w = f"{where}[{i}]"
        if weighted:
            weight = item.get("weight", 0)
            if not isinstance(weight, int):
                raise ParseError(f"{w}.weight: expected an integer")
            term = _dict(item.get("podAffinityTerm"), f"{w}.podAffinityTerm")
            w += ".podAffinityTerm"
        key = term.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ParseError(f"{w}.topologyKey: must be a non-empty string")
        ls = term.get("labelSelector")
        # A nil label selector matches no pods; represent it with an impossible requirement.
        selector = LabelSelector.parse(ls, f"{w}.labelSelector") if ls is not None else _NOTHING
        nss = _list(term.get("namespaces"), f"{w}.namespaces")
        ns_sel_raw = term.get("namespaceSelector")
        ns_sel = (
            LabelSelector.parse(ns_sel_raw, f"{w}.namespaceSelector")
            if ns_sel_raw is not None
            else None
        )
        namespaces = frozenset(str(n) for n in nss)
        if not namespaces and ns_sel is None:
            namespaces = frozenset({namespace})
        out.append(AffinityTerm(selector, namespaces, ns_sel, key, weight))
    return tuple(out)


#: A nil label selector matches no pods: one key required both present and absent.
_NOTHING = LabelSelector(
    (),
    (
        Requirement("\x00", "Exists", frozenset()),
        Requirement("\x00", "DoesNotExist", frozenset()),
    ),
)


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    out = []
    containers = _list(spec.get("containers"), "spec.containers")
    inits = [
        c
        for c in _list(spec.get("initContainers"), "spec.initContainers")
        if isinstance(c, dict) and c.get("restartPolicy") == "Always"
    ]
    for i, c in enumerate(containers + inits):
        for j, p in enumerate(
            _list(_dict(c, "spec.containers").get("ports"), f"spec.containers[{i}].ports")
        ):
            p = _dict(p, f"spec.containers[{i}].ports[{j}]")
            hp = p.get("hostPort") or 0
            if not isinstance(hp, int):
                raise ParseError(f"spec.containers[{i}].ports[{j}].hostPort: expected an integer")
            if hp <= 0:
                continue
            ip = p.get("hostIP") or "0.0.0.0"
            out.append(HostPort(str(ip), str(p.get("protocol") or "TCP"), hp))
    return tuple(out)


def reparse_pod(old: PodInfo, raw: dict[str, Any]) -> PodInfo:
    """:func:`parse_pod` of a later version of the pod ``old`` was parsed from.

    When the new version changes only what a binding and a kubelet's status reports
    change (spec.nodeName, and status fields but those of an in-place resize), the
    fields parsed from metadata and spec are taken from ``old`` and the node name,
    phase, start time and nominated node are read again; otherwise the pod is parsed
    whole. Either way the result equals ``parse_pod(raw)``."""
    meta, spec, status = raw.get("metadata"), raw.get("spec"), raw.get("status")
    old_meta, old_spec = old.raw.get("metadata"), old.raw.get("spec")
    old_status = old.raw.get("status")
    if (
        old.parse_error is not None
        or not isinstance(meta, dict)
        or not isinstance(spec, dict)
        or not isinstance(old_meta, dict)
        or not isinstance(old_spec, dict)
    ):
        return parse_pod(raw)
    status = {} if status is None else status
    old_status = {} if old_status is None else old_status
    if not isinstance(status, dict) or not isinstance(old_status, dict):
        return parse_pod(raw)
    meta.pop("managedFields", None)
    if (
        not equal_except(old_meta, meta, VOLATILE_METADATA)
        or not equal_except(old_spec, spec, ("nodeName",))
        or _resize_reported(status)
        or _resize_reported(old_status)
    ):
        return parse_pod(raw)
    return old.evolve(
        resource_version=str(meta.get("resourceVersion", "")),
        node_name=str(spec.get("nodeName") or ""),
        start_time=str(status.get("startTime") or ""),
        nominated_node_name=str(status.get("nominatedNodeName") or ""),
        phase=str(status.get("phase") or ""),
        raw=raw,
    )


#: metadata a new version of any object may change without changing the object
VOLATILE_METADATA = ("resourceVersion", "managedFields")


def equal_except(old: Mapping[str, Any], new: Mapping[str, Any], skip: tuple[str, ...]) -> bool:
    """old and new are equal but for the keys in skip (present or not)."""
    if any(k not in skip and k not in new for k in old):
        return False
    return all(k in skip or old.get(k, _MISSING) == v for k, v in new.items())


_MISSING = object()


def _resize_reported(status: Mapping[str, Any]) -> bool:
    """Whether the status has anything :func:`counted_resources` reads (allocated or
    actuated resources, a PodResizePending condition), or a malformed list of it."""
    if "allocatedResources" in status or "resources" in status:
        return True
    for key in ("containerStatuses", "initContainerStatuses"):
        statuses = status.get(key)
        if statuses is None:
            continue
        if not isinstance(statuses, list):
            return True
        for cs in statuses:
            if not isinstance(cs, dict) or "allocatedResources" in cs or "resources" in cs:
                return True
    conditions = status.get("conditions")
    if conditions is None:
        return False
    if not isinstance(conditions, list):
        return True
    return any(not isinstance(c, dict) or c.get("type") == "PodResizePending" for c in conditions)


def parse_pod(raw: dict[str, Any]) -> PodInfo:
    """Build a PodInfo; on bad input the result carries ``parse_error``."""
    meta = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    meta.pop("managedFields", None)
    uid = str(meta.get("uid", ""))
    ns = str(meta.get("namespace", ""))
    name = str(meta.get("name", ""))
    try:
        return _parse_pod(raw, meta, uid, ns, name)
    except (ParseError, SelectorError, ValueError, TypeError, AttributeError) as exc:
        spec = raw.get("spec") if isinstance(raw.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        return PodInfo(
            uid=uid,
            namespace=ns,
            name=name,
            resource_version=str(meta.get("resourceVersion", "")),
            node_name=str(spec.get("nodeName") or ""),
            scheduler_name=str(spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME),
            deleting=bool(meta.get("deletionTimestamp")),
            creation_timestamp=str(meta.get("creationTimestamp", "")),
            raw=raw,
            parse_error=str(exc),
        )


def _parse_pod(raw: dict[str, Any], meta: dict[str, Any], uid: str, ns: str, name: str) -> PodInfo:
    spec = _dict(raw.get("spec"), "spec")
    status = _dict(raw.get("status"), "status")
    labels = _str_map(meta.get("labels"), "metadata.labels")
    affinity = _dict(spec.get("affinity"), "spec.affinity")
    na = _dict(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    req_raw = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = (
        NodeSelector.parse(
            _dict(req_raw, "nodeAffinity.required"),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        )
        if req_raw is not None
        else None
    )
    preferred = parse_preferred_terms(
        _list(na.get("preferredDuringSchedulingIgnoredDuringExecution"), "nodeAffinity.preferred"),
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
    )
    pa = _dict(affinity.get("podAffinity"), "spec.affinity.podAffinity")
    paa = _dict(affinity.get("podAntiAffinity"), "spec.affinity.podAntiAffinity")
    req_key = "requiredDuringSchedulingIgnoredDuringExecution"
    pref_key = "preferredDuringSchedulingIgnoredDuringExecution"

    def terms(
        src: dict[str, Any], key: str, where: str, weighted: bool
    ) -> tuple[AffinityTerm, ...]:
        # matchLabelKeys / mismatchLabelKeys were merged into labelSelector by the
        # API server when the pod was created; nothing to add here.
        return _affinity_terms(src.get(key), ns, where, weighted)

    priority = spec.get("priority") or 0
    if not isinstance(priority, int):
        raise ParseError("spec.priority: expected an integer")
    requests, nz_cpu, nz_mem, score_cpu, score_mem = pod_resources(spec)
    spec_requests = None
    counted = counted_resources(spec, status)
    if counted is not None:
        spec_requests = requests
        requests, nz_cpu, nz_mem = counted
    images = []
    for key in ("containers", "initContainers"):
        for c in _list(spec.get(key), f"spec.{key}"):
            if isinstance(c, dict) and isinstance(c.get("image"), str):
                images.append(c["image"])
    gates = tuple(
        str(_dict(g, "spec.schedulingGates").get("name", ""))
        for g in _list(spec.get("schedulingGates"), "spec.schedulingGates")
    )
    return PodInfo(
        uid=uid,
        namespace=ns,
        name=name,
        resource_version=str(meta.get("resourceVersion", "")),
        labels=labels,
        annotations=_str_map(meta.get("annotations"), "metadata.annotations"),
        node_name=str(spec.get("nodeName") or ""),
        scheduler_name=str(spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME),
        priority=priority,
        preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
        node_selector=_str_map(spec.get("nodeSelector"), "spec.nodeSelector"),
        required_node_affinity=required,
        preferred_node_affinity=preferred,
        required_affinity=terms(pa, req_key, f"spec.affinity.podAffinity.{req_key}", False),
        required_anti_affinity=terms(
            paa, req_key, f"spec.affinity.podAntiAffinity.{req_key}", False
        ),
        preferred_affinity=terms(pa, pref_key, f"spec.affinity.podAffinity.{pref_key}", True),
        preferred_anti_affinity=terms(
            paa, pref_key, f"spec.affinity.podAntiAffinity.{pref_key}", True
        ),
        tolerations=_tolerations(spec.get("tolerations")),
        host_ports=_host_ports(spec),
        requests=requests,
        spec_requests=spec_requests,
        non_zero_cpu=nz_cpu,
        non_zero_memory=nz_mem,
        score_cpu=score_cpu,
        score_memory=score_mem,
        scheduling_gates=gates,
        images=tuple(images),
        deleting=bool(meta.get("deletionTimestamp")),
        creation_timestamp=str(meta.get("creationTimestamp", "")),
        start_time=str(status.get("startTime") or ""),
        nominated_node_name=str(status.get("nominatedNodeName") or ""),
        phase=str(status.get("phase") or ""),
        raw=raw,
    )


def parse_node(raw: dict[str, Any]) -> NodeRecord:
    """Build a NodeRecord; raises ParseError naming the field on bad input."""
    meta = _dict(raw.get("metadata"), "metadata")
    meta.pop("managedFields", None)
    spec = _dict(raw.get("spec"), "spec")
    status = _dict(raw.get("status"), "status")
    taints = []
    for i, t in enumerate(_list(spec.get("taints"), "spec.taints")):
        t = _dict(t, f"spec.taints[{i}]")
        taints.append(
            Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
        )
    images: dict[str, int] = {}
    for img in _list(status.get("images"), "status.images"):
        if not isinstance(img, dict):
            continue
        size = img.get("sizeBytes") or 0
        for n in img.get("names") or []:
            if isinstance(n, str):
                images[n] = int(size)
    return NodeRecord(
        name=str(meta.get("name", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        labels=_str_map(meta.get("labels"), "metadata.labels"),
        taints=tuple(taints),
        allocatable=Resource.from_list(
            _dict(status.get("allocatable"), "status.allocatable"), "status.allocatable"
        ),
        unschedulable=bool(spec.get("unschedulable")),
        images=images,
        raw=raw,
    )
