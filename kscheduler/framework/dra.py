"""Structured-parameters device allocation (DRA), as kube-scheduler 1.37 allocates.

Input: the ResourceSlices (parsed once per version into :class:`Slice`), the
DeviceClasses, the devices already taken, one node and the claims to allocate.
Output: one AllocationResult (API JSON) per claim, or None when they do not fit.

The search is kube-scheduler's: pools of the slices that reach the node, sorted
by driver then pool name (pools whose devices have binding conditions last),
slices in a pool by name, devices in slice order; requests in claim order, a
``firstAvailable`` request tries its subrequests in order; depth-first with
backtracking, taking the first complete solution. ``matchAttribute`` and
``distinctAttribute`` constraints are checked as devices are added; a device
with an untolerated NoSchedule/NoExecute taint is skipped; ``adminAccess``
requests may take devices in use. A pool whose slices are not all seen
(resourceSliceCount) is incomplete: its devices are not used, and an ``All``
request over it fails.

Selectors (the class's, then the request's) are compiled once per expression
and evaluated once per device version and expression (the result is kept on
the parsed device); a CEL runtime error is an allocation error
(:class:`AllocationError`), not a non-match.

Partitionable devices: the slices of a pool with ``sharedCounters`` give the
pool its counter sets (validated as upstream: a duplicate counter set name, or a
device consuming a counter set or counter that does not exist, make the pool
invalid); a device with ``consumesCounters`` is taken only while every counter of
the pool still has enough left once the counters of the devices already
allocated (in the cluster and in flight) and of those picked so far in this
search are subtracted. When the node sees only part of a pool, the slices of the
pool it does not see count too (their allocated devices consume counters).

Not implemented (a claim or node that needs them is rejected with
:class:`Unsupported`): consumable capacity (``allowMultipleAllocations`` devices,
request ``capacity``), binding conditions, per-device node selection,
DeviceTaintRules.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import chain
from typing import Any

from kscheduler.framework.cel import (
    CelCompileError,
    CelRuntimeError,
    DeviceInput,
    compile_selector,
    make_device_input,
)
from kscheduler.framework.quantity import QuantityError, parse_decimal
from kscheduler.framework.selectors import NodeSelector, SelectorError

#: resourceapi.AllocationResultsMaxSize
ALLOCATION_RESULTS_MAX_SIZE = 32
#: resourceapi.FirstAvailableDeviceRequestMaxSize
FIRST_AVAILABLE_MAX_SIZE = 8
#: resourceapi.ResourceClaimReservedForMaxSize
RESERVED_FOR_MAX_SIZE = 256


class AllocationError(Exception):
    """Invalid input (a CEL error, a bad request): the attempt fails with an Error."""


class FailedOnNode(Exception):
    """The claims cannot be allocated on this node for a reason worth reporting."""


class AllocationTimeout(Exception):
    """The search passed its deadline (DynamicResourcesArgs.filterTimeout)."""


class Unsupported(Exception):
    """The allocation needs a DRA feature kscheduler does not implement."""


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


@dataclass(frozen=True, slots=True, order=True)
class DeviceID:
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


# ---- parsed slices -------------------------------------------------------------------------
#: counter name -> value
Counters = dict[str, Decimal]


def _counters(raw: Any, where: str) -> Counters:
    """``{name: {value: QUANTITY}}`` as exact values; QuantityError names ``where``."""
    out: Counters = {}
    for name, c in _d(raw).items():
        value = c.get("value") if isinstance(c, dict) else c
        try:
            out[str(name)] = parse_decimal(str(value))
        except QuantityError as exc:
            raise QuantityError(f"{where}, counter {name}: {exc}") from exc
    return out


@dataclass(slots=True, eq=False)
class Device:
    name: str
    attributes: dict[str, dict[str, Any]]
    capacity: dict[str, Any]
    taints: tuple[dict[str, Any], ...]
    binding_conditions: bool
    #: (counter set, counters) per ``consumesCounters`` entry, in order
    consumes_counters: tuple[tuple[str, Counters], ...]
    allow_multiple_allocations: bool
    raw: dict[str, Any]
    _input: DeviceInput | None = None
    _input_error: str = ""
    #: expression -> match (True/False) or the runtime error text
    cel_results: dict[str, bool | str] = field(default_factory=dict)

    def cel_input(self, driver: str) -> DeviceInput:
        if self._input is None and not self._input_error:
            try:
                self._input = make_device_input(
                    driver, self.attributes, self.capacity, self.allow_multiple_allocations
                )
            except ValueError as exc:
                self._input_error = str(exc)
        if self._input is None:
            raise CelRuntimeError(self._input_error)
        return self._input


@dataclass(slots=True, eq=False)
class Slice:
    name: str
    uid: str
    resource_version: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str
    all_nodes: bool
    node_selector: NodeSelector | None
    node_selector_raw: dict[str, Any] | None
    node_selector_error: str
    per_device_node_selection: bool
    #: (counter set name, counters) per ``sharedCounters`` entry, in order
    shared_counters: tuple[tuple[str, Counters], ...]
    devices: tuple[Device, ...]
    #: a counter quantity that does not parse (the pool is then invalid)
    counters_error: str = ""

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Slice:
        meta = _d(raw.get("metadata"))
        spec = _d(raw.get("spec"))
        pool = _d(spec.get("pool"))
        ns_raw = spec.get("nodeSelector")
        selector = None
        err = ""
        if isinstance(ns_raw, dict):
            try:
                selector = NodeSelector.parse(ns_raw, "spec.nodeSelector")
            except SelectorError as exc:
                err = str(exc)
        devices = []
        counters_error = ""
        shared: list[tuple[str, Counters]] = []
        for cs in _l(spec.get("sharedCounters")):
            cs = _d(cs)
            cs_name = str(cs.get("name", ""))
            try:
                shared.append((cs_name, _counters(cs.get("counters"), f"counter set {cs_name}")))
            except QuantityError as exc:
                counters_error = counters_error or str(exc)
        for d in _l(spec.get("devices")):
            d = _d(d)
            consumes: list[tuple[str, Counters]] = []
            for cc in _l(d.get("consumesCounters")):
                cc = _d(cc)
                set_name = str(cc.get("counterSet", ""))
                try:
                    where = f"device {d.get('name', '')}, counter set {set_name}"
                    consumes.append((set_name, _counters(cc.get("counters"), where)))
                except QuantityError as exc:
                    counters_error = counters_error or str(exc)
            devices.append(
                Device(
                    name=str(d.get("name", "")),
                    attributes={str(k): _d(v) for k, v in _d(d.get("attributes")).items()},
                    capacity={str(k): v for k, v in _d(d.get("capacity")).items()},
                    taints=tuple(_d(t) for t in _l(d.get("taints"))),
                    binding_conditions=bool(d.get("bindingConditions")),
                    consumes_counters=tuple(consumes),
                    allow_multiple_allocations=bool(d.get("allowMultipleAllocations")),
                    raw=d,
                )
            )
        return cls(
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            driver=str(spec.get("driver", "")),
            pool=str(pool.get("name", "")),
            generation=int(pool.get("generation") or 0),
            slice_count=int(pool.get("resourceSliceCount") or 0),
            node_name=str(spec.get("nodeName") or ""),
            all_nodes=bool(spec.get("allNodes")),
            node_selector=selector,
            node_selector_raw=ns_raw if isinstance(ns_raw, dict) else None,
            node_selector_error=err,
            per_device_node_selection=bool(spec.get("perDeviceNodeSelection")),
            shared_counters=tuple(shared),
            devices=tuple(devices),
            counters_error=counters_error,
        )


@dataclass(slots=True)
class Pool:
    driver: str
    pool: str
    #: the pool's slices with devices that reach the node, by name
    slices: list[Slice] = field(default_factory=list)
    #: the pool's slices with devices that do not reach the node (known only when
    #: the node's slices alone are not the whole pool): their allocated devices
    #: consume the pool's counters
    other_slices: list[Slice] = field(default_factory=list)
    #: counter set name -> its counters, from the pool's sharedCounters slices
    counter_sets: dict[str, Counters] = field(default_factory=dict)
    incomplete: bool = False
    invalid: str = ""
    binding_conditions: bool = False

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.pool}"


def _slice_matches_node(s: Slice, node_name: str, labels: Mapping[str, str]) -> bool:
    if s.node_name:
        return s.node_name == node_name
    if s.all_nodes:
        return True
    if s.node_selector_raw is not None:
        if s.node_selector_error:
            raise AllocationError(
                f"failed to perform node selection for slice {s.name}: {s.node_selector_error}"
            )
        return s.node_selector is not None and s.node_selector.matches(labels, node_name)
    return False


def _build_pool(pool: Pool, node_slices: list[Slice], whole: list[Slice] | None) -> None:
    """Fill a complete pool: its device slices (those reaching the node sorted by
    name, the others kept apart), its counter sets, and whether it is invalid."""
    node_slices = sorted(node_slices, key=lambda s: s.name)
    counter_slices = [s for s in node_slices if s.shared_counters]
    pool.slices = [s for s in node_slices if not s.shared_counters]
    if whole is not None and len(node_slices) < len(whole):
        seen = {s.name for s in node_slices}
        for s in whole:
            if s.name not in seen:
                (counter_slices if s.shared_counters else pool.other_slices).append(s)
    pool.invalid = _pool_problem(pool, counter_slices)
    pool.binding_conditions = not pool.invalid and any(
        dev.binding_conditions for s in pool.slices for dev in s.devices
    )


def _pool_problem(pool: Pool, counter_slices: list[Slice]) -> str:
    """Why the pool is invalid ("" when it is not), checked in upstream's order."""
    names: set[str] = set()
    for s in pool.slices:
        for dev in s.devices:
            if dev.name in names:
                return f"duplicate device name {dev.name}"
            names.add(dev.name)
    for s in chain(counter_slices, pool.slices, pool.other_slices):
        if s.counters_error:
            return s.counters_error
    for s in counter_slices:
        for set_name, counters in s.shared_counters:
            if set_name in pool.counter_sets:
                return f"duplicate counter set name {set_name}"
            pool.counter_sets[set_name] = counters
    for s in chain(pool.slices, pool.other_slices):
        for dev in s.devices:
            for set_name, consumed in dev.consumes_counters:
                have = pool.counter_sets.get(set_name)
                if have is None:
                    return f"counter set {set_name} not found"
                for counter in consumed:
                    if counter not in have:
                        return f"counter {counter} not found in counter set {set_name}"
    return ""


class SliceIndex:
    """The cluster's slices grouped for the per-node pool lookup.

    A node's pools come from the slices published for it by name and from those
    that reach nodes some other way (allNodes, a node selector, per-device node
    selection); an incomplete pool is checked against its own slices. Grouping
    them once per slice set keeps a Filter call from reading every slice of the
    cluster (at 500 nodes, 500 slices per node and cycle). While no slice reaches
    nodes by labels, a node's pools depend on its name alone and are kept."""

    def __init__(self, slices: Iterable[Slice]) -> None:
        self.slices = list(slices)
        self.by_node: dict[str, list[Slice]] = {}
        #: slices that do not name one node, in the cluster's order
        self.not_by_name: list[Slice] = []
        self.by_pool: dict[tuple[str, str], list[Slice]] = {}
        for s in self.slices:
            if s.node_name and not s.per_device_node_selection:
                self.by_node.setdefault(s.node_name, []).append(s)
            else:
                self.not_by_name.append(s)
            self.by_pool.setdefault((s.driver, s.pool), []).append(s)
        self._pools: dict[str, list[Pool]] = {}

    def candidates(self, node_name: str) -> list[Slice]:
        """The slices that may reach ``node_name``."""
        named = self.by_node.get(node_name)
        return [*named, *self.not_by_name] if named else self.not_by_name

    def pools(self, node_name: str, labels: Mapping[str, str]) -> list[Pool]:
        """:func:`gather_pools` for the node (kept per node while that is exact)."""
        if self.not_by_name:
            return gather_pools(self, node_name, labels)
        hit = self._pools.get(node_name)
        if hit is None:
            hit = self._pools[node_name] = gather_pools(self, node_name, labels)
        return hit


def gather_pools(
    slices: Sequence[Slice] | SliceIndex, node_name: str, labels: Mapping[str, str]
) -> list[Pool]:
    """The pools available to the node, in kube-scheduler's order."""
    index = slices if isinstance(slices, SliceIndex) else SliceIndex(slices)
    by_pool: dict[tuple[str, str], list[Slice]] = {}
    for s in index.candidates(node_name):
        if s.per_device_node_selection:
            if any(True for _ in s.devices):
                raise Unsupported(
                    f"ResourceSlice {s.name} uses perDeviceNodeSelection, which kscheduler "
                    "does not support"
                )
            continue
        if not _slice_matches_node(s, node_name, labels):
            continue
        key = (s.driver, s.pool)
        have = by_pool.get(key)
        if have is None or s.generation > have[0].generation:
            by_pool[key] = [s]
        elif s.generation == have[0].generation:
            have.append(s)
    result: list[Pool] = []
    with_conditions: list[Pool] = []
    for (driver, pool_name), pool_slices in by_pool.items():
        gen = pool_slices[0].generation
        count = pool_slices[0].slice_count
        pool = Pool(driver, pool_name)
        whole: list[Slice] | None = None
        if len(pool_slices) != count:
            newer = False
            whole = []
            for s in index.by_pool.get((driver, pool_name), ()):
                if s.driver == driver and s.pool == pool_name:
                    if s.generation > gen:
                        newer = True
                        break
                    if s.generation == gen:
                        whole.append(s)
            if newer:
                continue  # obsolete: a newer generation is being published
            if len(whole) != count:
                pool.incomplete = True
                result.append(pool)
                continue
        _build_pool(pool, pool_slices, whole)
        (with_conditions if pool.binding_conditions else result).append(pool)
    result.sort(key=lambda p: (p.driver, p.pool))
    with_conditions.sort(key=lambda p: (p.driver, p.pool))
    return result + with_conditions


# ---- requests ------------------------------------------------------------------------------
def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return op == "Exists"


def taint_prevents(device: Device, tolerations: Sequence[Mapping[str, Any]]) -> bool:
    for taint in device.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
            tolerates(t, taint) for t in tolerations
        ):
            return True
    return False


@dataclass(slots=True)
class _Request:
    """One request without subrequests, or one subrequest."""

    name: str
    parent: str  # the request's name for a subrequest, else ""
    raw: dict[str, Any]
    class_: dict[str, Any] | None
    all_mode: bool
    num_devices: int = 0
    admin_access: bool = False
    all_devices: list[tuple[Device, DeviceID, Slice, Pool]] = field(default_factory=list)
    selected_sub: int = 0

    @property
    def full_name(self) -> str:
        return f"{self.parent}/{self.name}" if self.parent else self.name

    @property
    def tolerations(self) -> list[dict[str, Any]]:
        return [_d(t) for t in _l(self.raw.get("tolerations"))]

    @property
    def selectors(self) -> list[dict[str, Any]]:
        return [_d(s) for s in _l(self.raw.get("selectors"))]


def claim_key(claim: Mapping[str, Any]) -> str:
    meta = _d(claim.get("metadata"))
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _attr(device: Device, did: DeviceID, name: str) -> dict[str, Any] | None:
    if name in device.attributes:
        return device.attributes[name]
    domain, sep, ident = name.partition("/")
    if not sep or domain != did.driver:
        return None
    return device.attributes.get(ident)


_ATTR_KINDS = ("string", "int", "bool", "version")


def _kind(attr: Mapping[str, Any]) -> str | None:
    for k in _ATTR_KINDS:
        if k in attr:
            return k
    return None


class _Constraint:
    def __init__(self, requests: Iterable[str], attribute: str, distinct: bool) -> None:
        self.requests = set(requests)
        self.attribute = attribute
        self.distinct = distinct
        self.values: list[tuple[str, Any]] = []

    def _applies(self, request: str, sub: str) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (bool(sub) and f"{request}/{sub}" in self.requests)

    def add(self, request: str, sub: str, device: Device, did: DeviceID) -> bool:
        if not self._applies(request, sub):
            return True
        attr = _attr(device, did, self.attribute)
        if attr is None:
            return False
        kind = _kind(attr)
        if kind is None:
            return False
        value = (kind, attr[kind])
        if self.distinct:
            if value in self.values:
                return False
        elif self.values and self.values[0] != value:
            return False
        self.values.append(value)
        return True

    def remove(self, request: str, sub: str) -> None:
        if self._applies(request, sub):
            self.values.pop()


class _MaxSizeExceeded(Exception):
    pass


@dataclass(slots=True)
class _Result:
    request: _Request
    did: DeviceID
    device: Device
    slice: Slice


class Allocator:
    """Allocates claims per node against one view of slices, classes and taken devices.

    ``allocated`` holds the devices in use (claims allocated in the cluster and in
    flight); ``classes`` maps a DeviceClass name to its JSON."""

    def __init__(
        self,
        slices: Sequence[Slice] | SliceIndex,
        classes: Mapping[str, Mapping[str, Any]],
        allocated: set[DeviceID],
    ) -> None:
        self.index = slices if isinstance(slices, SliceIndex) else SliceIndex(slices)
        self.classes = classes
        self.allocated = allocated

    def allocate(
        self,
        node_name: str,
        labels: Mapping[str, str],
        claims: Sequence[Mapping[str, Any]],
        *,
        deadline: float | None = None,
    ) -> list[dict[str, Any]] | None:
        """The claims' allocation results on the node, or None when they do not fit.

        ``deadline`` (``time.monotonic()``): past it, the search stops with
        :class:`AllocationTimeout` (checked at every step, as upstream checks its
        context)."""
        run = _Run(self, node_name, labels, claims)
        run.deadline = deadline
        return run.run()


class _Run:
    def __init__(
        self,
        alloc: Allocator,
        node_name: str,
        labels: Mapping[str, str],
        claims: Sequence[Mapping[str, Any]],
    ) -> None:
        self.a = alloc
        self.node_name = node_name
        self.labels = labels
        self.claims = claims
        self.pools: list[Pool] = []
        self.requests: dict[tuple[int, int, int], _Request] = {}
        self.subrequests: set[tuple[int, int]] = set()
        self.constraints: list[list[_Constraint]] = []
        self.results: list[list[_Result]] = [[] for _ in claims]
        self.allocating: dict[DeviceID, set[int]] = {}
        self.matches: dict[tuple[DeviceID, tuple[int, int, int]], bool] = {}
        self.deadline: float | None = None
        #: pool id -> counter set -> counters left after the allocated devices
        self.available: dict[str, dict[str, Counters]] = {}
        #: pool id -> counter set -> counters consumed by the devices picked so far
        self.consumed: dict[str, dict[str, Counters]] = {}

    # ---- setup -------------------------------------------------------------------------
    def run(self) -> list[dict[str, Any]] | None:
        self.pools = self.a.index.pools(self.node_name, self.labels)
        for ci, claim in enumerate(self.claims):
            devices = _d(_d(claim.get("spec")).get("devices"))
            min_per_claim = 0
            for ri, req in enumerate(_l(devices.get("requests"))):
                req = _d(req)
                subs = _l(req.get("firstAvailable"))
                if subs:
                    self.subrequests.add((ci, ri))
                    min_req = None
                    for si, sub in enumerate(subs):
                        rd = self._request(ci, _d(sub), str(req.get("name", "")), (ci, ri, si))
                        self.requests[(ci, ri, si)] = rd
                        min_req = (
                            rd.num_devices if min_req is None else min(min_req, rd.num_devices)
                        )
                    min_per_request = min_req or 0
                else:
                    exact = _d(req.get("exactly"))
                    rd = self._request(ci, {**exact, "name": req.get("name", "")}, "", (ci, ri, 0))
                    rd.admin_access = bool(exact.get("adminAccess"))
                    self.requests[(ci, ri, 0)] = rd
                    min_per_request = rd.num_devices
                if min_per_request > ALLOCATION_RESULTS_MAX_SIZE - min_per_claim:
                    raise AllocationError(
                        f"claim {claim_key(claim)}, request {req.get('name', '')}: adding "
                        f"{min_per_request} devices exceeds the claim limit of "
                        f"{ALLOCATION_RESULTS_MAX_SIZE}, with {min_per_claim} already accounted for"
                    )
                min_per_claim += min_per_request
            cons = []
            for i, c in enumerate(_l(devices.get("constraints"))):
                c = _d(c)
                reqs = [str(r) for r in _l(c.get("requests"))]
                if c.get("matchAttribute"):
                    cons.append(_Constraint(reqs, str(c["matchAttribute"]), False))
                elif c.get("distinctAttribute"):
                    cons.append(_Constraint(reqs, str(c["distinctAttribute"]), True))
                else:
                    raise AllocationError(
                        f"claim {claim_key(claim)}, constraint #{i}: empty constraint "
                        "(unsupported constraint type?)"
                    )
            self.constraints.append(cons)
        self.matches = {}
        done = self._one((0, 0, 0, 0), False, (0, 0, 0))
        if not done:
            for pool in self.pools:
                if pool.invalid:
                    raise FailedOnNode("invalid resource pools were encountered")
            return None
        return [self._result(ci) for ci in range(len(self.claims))]

    def _request(
        self, ci: int, raw: dict[str, Any], parent: str, key: tuple[int, int, int]
    ) -> _Request:
        claim = self.claims[ci]
        name = str(raw.get("name", ""))
        if raw.get("capacity"):
            raise Unsupported(
                f"claim {claim_key(claim)}, request {name}: capacity requests (consumable "
                "capacity) are not supported by kscheduler"
            )
        for i, sel in enumerate(_l(raw.get("selectors"))):
            if not _d(_d(sel).get("cel")).get("expression"):
                raise AllocationError(
                    f"claim {claim_key(claim)}, request {name}, selector #{i}: CEL expression "
                    "empty (unsupported selector type?)"
                )
        class_name = str(raw.get("deviceClassName") or "")
        if not class_name:
            raise AllocationError(
                f"claim {claim_key(claim)}, request {name}: missing device class name "
                "(unsupported request type?)"
            )
        cls = self.a.classes.get(class_name)
        if cls is None:
            raise AllocationError(
                f"claim {claim_key(claim)}, request {name}: could not retrieve device class "
                f'{class_name}: deviceclass.resource.k8s.io "{class_name}" not found'
            )
        mode = raw.get("allocationMode") or "ExactCount"
        rd = _Request(name, parent, raw, dict(cls), mode == "All")
        if mode == "ExactCount":
            rd.num_devices = int(raw.get("count") or 1)
        elif mode == "All":
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(
                        f"claim {claim_key(claim)}, request {name}: asks for all devices, but "
                        f"resource pool {pool.id} is currently being updated"
                    )
                if pool.invalid:
                    raise AllocationError(
                        f"claim {claim_key(claim)}, request {name}: asks for all devices, but "
                        f"resource pool {pool.id} is currently invalid"
                    )
                for s in pool.slices:
                    for dev in s.devices:
                        did = DeviceID(s.driver, s.pool, dev.name)
                        if self._selectable(key, rd, dev, did):
                            rd.all_devices.append((dev, did, s, pool))
            rd.num_devices = len(rd.all_devices)
        else:
            raise AllocationError(
                f"claim {claim_key(claim)}, request {name}: unsupported count mode {mode}"
            )
        return rd

    # ---- search ------------------------------------------------------------------------
    def _one(
        self, r: tuple[int, int, int, int], sub_mode: bool, start: tuple[int, int, int]
    ) -> bool:
        ci, ri, si, di = r
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise AllocationTimeout(f"node {self.node_name}: timed out trying to allocate devices")
        if ci >= len(self.claims):
            return True
        requests = _l(_d(_d(self.claims[ci].get("spec")).get("devices")).get("requests"))
        if ri >= len(requests):
            try:
                return self._one((ci + 1, 0, 0, 0), False, (0, 0, 0))
            except _MaxSizeExceeded:
                return False
        if not sub_mode and (ci, ri) in self.subrequests:
            all_exceeded = True
            sub = 0
            while (ci, ri, sub) in self.requests:
                try:
                    ok = self._one((ci, ri, sub, 0), True, (0, 0, 0))
                except _MaxSizeExceeded:
                    sub += 1
                    continue
                all_exceeded = False
                if ok:
                    self.requests[(ci, ri, 0)].selected_sub = sub
                    return True
                sub += 1
            if all_exceeded:
                raise _MaxSizeExceeded
            return False
        rd = self.requests[(ci, ri, si)]
        if rd.all_mode and not rd.all_devices:
            return False
        if di >= rd.num_devices:
            return self._one((ci, ri + 1, 0, 0), False, (0, 0, 0))
        if rd.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE - len(self.results[ci]):
            raise _MaxSizeExceeded
        if rd.all_mode:
            dev, did, s, pool = rd.all_devices[di]
            ok, undo = self._take(r, rd, dev, did, s, pool, must=True)
            if not ok:
                return False
            if self._one((ci, ri, si, di + 1), sub_mode, (0, 0, 0)):
                return True
            undo()
            return False
        key = (ci, ri, si)
        for pi in range(start[0], len(self.pools)):
            pool = self.pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            s_start = start[1] if pi == start[0] else 0
            for sli in range(s_start, len(pool.slices)):
                s = pool.slices[sli]
                d_start = start[2] if pi == start[0] and sli == start[1] else 0
                for dj in range(d_start, len(s.devices)):
                    dev = s.devices[dj]
                    did = DeviceID(pool.driver, pool.pool, dev.name)
                    if rd.admin_access:
                        if ci in self.allocating.get(did, ()):
                            continue
                    elif self._in_use(did):
                        continue
                    if not self._selectable(key, rd, dev, did):
                        continue
                    ok, undo = self._take(r, rd, dev, did, s, pool, must=False)
                    if not ok:
                        continue
                    if self._one((ci, ri, si, di + 1), sub_mode, (pi, sli, dj + 1)):
                        return True
                    undo()
        return False

    def _in_use(self, did: DeviceID) -> bool:
        return did in self.a.allocated or bool(self.allocating.get(did))

    def _selectable(
        self, key: tuple[int, int, int], rd: _Request, dev: Device, did: DeviceID
    ) -> bool:
        mk = (did, key)
        hit = self.matches.get(mk)
        if hit is not None:
            return hit
        claim = self.claims[key[0]]
        ok = True
        if rd.class_ is not None:
            cname = str(_d(rd.class_.get("metadata")).get("name", ""))
            sels = [_d(s) for s in _l(_d(rd.class_.get("spec")).get("selectors"))]
            ok = self._selectors(dev, did, sels, f"class {cname}")
        if ok:
            ok = self._selectors(dev, did, rd.selectors, f"claim {claim_key(claim)}")
        self.matches[mk] = ok
        return ok

    def _selectors(
        self, dev: Device, did: DeviceID, selectors: list[dict[str, Any]], who: str
    ) -> bool:
        for i, sel in enumerate(selectors):
            expr = str(_d(sel.get("cel")).get("expression") or "")
            if not expr:
                raise AllocationError(f"{who}: selector #{i}: CEL expression empty")
            res = dev.cel_results.get(expr)
            if res is None:
                try:
                    prog = compile_selector(expr)
                except CelCompileError as exc:
                    raise AllocationError(
                        f"{who}: selector #{i}: CEL compile error: {exc}"
                    ) from exc
                try:
                    res = prog.matches(dev.cel_input(did.driver))
                except CelRuntimeError as exc:
                    res = str(exc)
                dev.cel_results[expr] = res
            if isinstance(res, str):
                raise AllocationError(
                    f"{who}: selector #{i} on device {did}: CEL runtime error: {res}"
                )
            if not res:
                return False
        return True

    def _take(
        self,
        r: tuple[int, int, int, int],
        rd: _Request,
        dev: Device,
        did: DeviceID,
        s: Slice,
        pool: Pool,
        *,
        must: bool,
    ) -> tuple[bool, Any]:
        ci = r[0]
        if rd.admin_access and ci in self.allocating.get(did, ()):
            return False, None
        if not rd.admin_access and self._in_use(did):
            return False, None
        counters = bool(dev.consumes_counters)
        if counters and not self._reserve_counters(pool, dev):
            return False, None
        if taint_prevents(dev, rd.tolerations):
            if counters:
                self._release_counters(pool, dev)
            return False, None
        base = rd.parent or rd.name
        sub = rd.name if rd.parent else ""
        added: list[_Constraint] = []
        for c in self.constraints[ci]:
            if not c.add(base, sub, dev, did):
                for a in reversed(added):
                    a.remove(base, sub)
                if counters:
                    self._release_counters(pool, dev)
                if must:
                    raise AllocationError(
                        f"claim {claim_key(self.claims[ci])}, request {rd.name}: cannot add "
                        f"device {did} because a claim constraint would not be satisfied"
                    )
                return False, None
            added.append(c)
        if dev.allow_multiple_allocations:
            raise Unsupported(
                f"device {did} allows multiple allocations (consumable capacity), which "
                "kscheduler does not support"
            )
        if dev.binding_conditions:
            raise Unsupported(
                f"device {did} has binding conditions, which kscheduler does not support"
            )
        self.allocating.setdefault(did, set()).add(ci)
        self.results[ci].append(_Result(rd, did, dev, s))

        def undo() -> None:
            self.results[ci].pop()
            self.allocating[did].discard(ci)
            for a in reversed(added):
                a.remove(base, sub)
            if counters:
                self._release_counters(pool, dev)

        return True, undo

    def _available(self, pool: Pool) -> dict[str, Counters]:
        """The pool's counters less those of its allocated devices (computed once)."""
        have = self.available.get(pool.id)
        if have is not None:
            return have
        have = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        for s in chain(pool.slices, pool.other_slices):
            for dev in s.devices:
                if not dev.consumes_counters:
                    continue
                if DeviceID(s.driver, s.pool, dev.name) not in self.a.allocated:
                    continue
                for set_name, consumed in dev.consumes_counters:
                    left = have.get(set_name)
                    if left is None:
                        continue
                    for counter, value in consumed.items():
                        if counter in left:
                            # may go below zero: then nothing is left of it
                            left[counter] -= value
        self.available[pool.id] = have
        return have

    def _reserve_counters(self, pool: Pool, dev: Device) -> bool:
        """Add the device's counters to those picked so far if every counter of the
        pool still has enough left; False (nothing added) when one has not."""
        available = self._available(pool)
        consumed = self.consumed.setdefault(pool.id, {})
        for set_name, counters in dev.consumes_counters:
            used = consumed.setdefault(set_name, {})
            for counter, value in counters.items():
                used[counter] = used.get(counter, Decimal(0)) + value
        for set_name, left in available.items():
            used = consumed.get(set_name, {})
            for counter, value in left.items():
                if value < used.get(counter, 0):
                    self._release_counters(pool, dev)
                    return False
        return True

    def _release_counters(self, pool: Pool, dev: Device) -> None:
        consumed = self.consumed[pool.id]
        for set_name, counters in dev.consumes_counters:
            used = consumed[set_name]
            for counter, value in counters.items():
                used[counter] -= value

    # ---- result --------------------------------------------------------------------------
    def _result(self, ci: int) -> dict[str, Any]:
        claim = self.claims[ci]
        devices = _d(_d(claim.get("spec")).get("devices"))
        requests = _l(devices.get("requests"))
        results = []
        for res in self.results[ci]:
            entry: dict[str, Any] = {
                "request": res.request.full_name,
                "driver": res.did.driver,
                "pool": res.did.pool,
                "device": res.did.device,
            }
            if res.request.admin_access:
                entry["adminAccess"] = True
            if res.request.tolerations:
                entry["tolerations"] = res.request.tolerations
            results.append(entry)
        chosen: list[_Request] = []
        for ri, _req in enumerate(requests):
            if (ci, ri) in self.subrequests:
                sel = self.requests[(ci, ri, 0)].selected_sub
                chosen.append(self.requests[(ci, ri, sel)])
            else:
                chosen.append(self.requests[(ci, ri, 0)])
        config: list[dict[str, Any]] = []
        by_class: dict[str, tuple[int, int]] = {}
        for rd in chosen:
            if rd.class_ is None:
                continue
            cname = str(_d(rd.class_.get("metadata")).get("name", ""))
            if cname in by_class:
                lo, hi = by_class[cname]
                for i in range(lo, hi):
                    config[i]["requests"].append(rd.full_name)
                continue
            lo = len(config)
            for cfg in _l(_d(rd.class_.get("spec")).get("config")):
                config.append({"source": "FromClass", "requests": [rd.full_name], **_cfg(cfg)})
            by_class[cname] = (lo, len(config))
        for cfg in _l(devices.get("config")):
            cfg = _d(cfg)
            creqs = [str(x) for x in _l(cfg.get("requests"))]
            entry = {"source": "FromClaim", **_cfg(cfg)}
            if not creqs:
                config.append(entry)
                continue
            for ri, req in enumerate(requests):
                rname = str(_d(req).get("name", ""))
                if rname in creqs or chosen[ri].full_name in creqs:
                    config.append({"source": "FromClaim", "requests": creqs, **_cfg(cfg)})
                    break
        names = [str(_d(req).get("name", "")) for req in requests]
        for cfg in config:
            reqs = cfg.get("requests")
            if not reqs:
                cfg.pop("requests", None)
                continue
            if all(n in reqs or chosen[i].full_name in reqs for i, n in enumerate(names)):
                cfg.pop("requests", None)
        out: dict[str, Any] = {"devices": {"results": results}}
        if config:
            out["devices"]["config"] = config
        selector = self._node_selector(self.results[ci])
        if selector is not None:
            out["nodeSelector"] = selector
        return out

    def _node_selector(self, results: list[_Result]) -> dict[str, Any] | None:
        fields: list[dict[str, Any]] = []
        exprs: list[dict[str, Any]] = []
        for res in results:
            s = res.slice
            if s.node_name:
                return {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {
                                    "key": "metadata.name",
                                    "operator": "In",
                                    "values": [self.node_name],
                                }
                            ]
                        }
                    ]
                }
            if s.node_selector_raw is not None:
                terms = _l(s.node_selector_raw.get("nodeSelectorTerms"))
                if len(terms) > 1:
                    raise AllocationError(
                        f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms"
                    )
                if terms:
                    for req in _l(_d(terms[0]).get("matchFields")):
                        if req not in fields:
                            fields.append(req)
                    for req in _l(_d(terms[0]).get("matchExpressions")):
                        if req not in exprs:
                            exprs.append(req)
        if not fields and not exprs:
            return None
        term: dict[str, Any] = {}
        if exprs:
            term["matchExpressions"] = exprs
        if fields:
            term["matchFields"] = fields
        return {"nodeSelectorTerms": [term]}


def _cfg(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k not in ("requests", "source")}


def allocated_devices(claims: Iterable[Mapping[str, Any]]) -> set[DeviceID]:
    """Devices taken by allocated claims (admin-access results take none)."""
    out: set[DeviceID] = set()
    for claim in claims:
        alloc = _d(_d(claim.get("status")).get("allocation"))
        for r in _l(_d(alloc.get("devices")).get("results")):
            r = _d(r)
            if r.get("adminAccess"):
                continue
            out.add(
                DeviceID(str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
            )
    return out


# --------------------------------------------------------------------------- explain

#: CycleState key of the :data:`DeviceReport` DynamicResources fills when the state
#: records (``CycleState.record``: ``kscheduler explain``).
DEVICE_REPORT_KEY = "DynamicResourcesDevices"


@dataclass(slots=True)
class ClaimDevices:
    """One claim of the pod on one node: the devices it would get, or why none."""

    claim: str
    """namespace/name of the ResourceClaim."""
    pod_claim: str
    """Its name in the pod's spec.resourceClaims."""
    devices: list[str] = field(default_factory=list)
    """"request: driver/pool/device" (" (admin access)" appended where so)."""
    allocated: bool = False
    """Already allocated before this cycle (the devices are its allocation's)."""
    reason: str = ""
    """Why it gets no devices on this node ("" when it gets them)."""


#: node name -> the pod's claims on that node, in the pod's order
DeviceReport = dict[str, list[ClaimDevices]]


def result_devices(allocation: Mapping[str, Any]) -> list[str]:
    """An AllocationResult's devices as "request: driver/pool/device"."""
    out = []
    for r in _l(_d(allocation.get("devices")).get("results")):
        r = _d(r)
        text = f"{r.get('request', '')}: {r.get('driver', '')}/{r.get('pool', '')}/"
        text += str(r.get("device", ""))
        if r.get("adminAccess"):
            text += " (admin access)"
        out.append(text)
    return out


# --------------------------------------------------------------------------- extended resources

#: A DeviceClass without ``extendedResourceName`` still backs this name + its own name.
DEVICE_CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
#: Marks the ResourceClaim the scheduler makes for a pod's extended resources.
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def is_dra_extended_resource_name(name: str) -> bool:
    """An extended resource name (outside kubernetes.io, e.g. example.com/gpu) or an
    implicit DeviceClass one (``deviceclass.resource.kubernetes.io/CLASS``)."""
    if name.startswith(DEVICE_CLASS_RESOURCE_PREFIX):
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


_class_map_cache: tuple[tuple[tuple[str, str], ...], dict[str, dict[str, Any]]] | None = None


def extended_resource_classes(classes: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Extended resource name -> the DeviceClass whose devices back it.

    Every class backs ``deviceclass.resource.kubernetes.io/<its name>``; a class with
    ``spec.extendedResourceName`` also backs that name. When several classes name the
    same extended resource, the one created last wins (equal creation times: the
    smallest name). The result is kept until a class changes (by resourceVersion)."""
    global _class_map_cache
    items = [c for c in classes if isinstance(c, dict)]
    key = tuple(
        (
            str(_d(c.get("metadata")).get("name", "")),
            str(_d(c.get("metadata")).get("resourceVersion", "")),
        )
        for c in items
    )
    if _class_map_cache is not None and _class_map_cache[0] == key:
        return _class_map_cache[1]
    out: dict[str, dict[str, Any]] = {}
    explicit: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for c in items:
        meta = _d(c.get("metadata"))
        name = str(meta.get("name", ""))
        out[DEVICE_CLASS_RESOURCE_PREFIX + name] = c
        ext = _d(c.get("spec")).get("extendedResourceName")
        if not ext:
            continue
        created = str(meta.get("creationTimestamp") or "")
        have = explicit.get(str(ext))
        if have is None or created > have[0] or (created == have[0] and name < have[1]):
            explicit[str(ext)] = (created, name, c)
    for ext, (_, _, c) in explicit.items():
        out[ext] = c
    _class_map_cache = (key, out)
    return out


def _int_quantity(value: Any) -> int | None:
    """The quantity as a whole number, or None when it is not one (or does not parse)."""
    try:
        q = parse_decimal(str(value))
    except QuantityError:
        return None
    if q != q.to_integral_value():
        return None
    return int(q)


def _container_request(
    index: int,
    container: Mapping[str, Any],
    resource: str,
    class_name: str,
    reusable: Sequence[dict[str, Any] | None],
) -> tuple[dict[str, Any] | None, list[dict[str, str]]]:
    """The device request one container needs for ``resource`` (None when it needs no
    new one: it asks for none, or ``reusable`` requests of later long-lived containers
    cover it) and its container -> request mappings."""
    requests = _d(_d(container.get("resources")).get("requests"))
    if resource not in requests:
        return None, []
    want = _int_quantity(requests[resource])
    if not want:
        return None, []
    cname = str(container.get("name", ""))
    mappings: list[dict[str, str]] = []
    covered = 0
    for r in reusable:
        if r is None:
            continue
        covered += int(r["exactly"]["count"])
        mappings.append(
            {"containerName": cname, "resourceName": resource, "requestName": r["name"]}
        )
        if covered >= want:
            return None, mappings
    position = sorted(str(k) for k in requests).index(resource)
    name = f"container-{index}-request-{position}"
    request = {
        "name": name,
        "exactly": {
            "deviceClassName": class_name,
            "allocationMode": "ExactCount",
            "count": want - covered,
        },
    }
    mappings.append({"containerName": cname, "resourceName": resource, "requestName": name})
    return request, mappings


def extended_resource_requests(
    pod_spec: Mapping[str, Any],
    resources: Iterable[str],
    classes: Mapping[str, Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The device requests of the pod's claim for the extended ``resources`` served
    through DRA on a node, sorted by name, and the pod's container -> request mappings
    (``status.extendedResourceClaimStatus.requestMappings``), as kube-scheduler makes
    them.

    Containers are numbered init containers first. Each long-lived container (regular
    or sidecar) gets its own request ``container-<index>-request-<position of the
    resource among the container's sorted request names>``; an init container that
    runs to completion first reuses the requests of the long-lived containers from its
    own index on and asks only for what they do not cover; of those init requests only
    the largest is kept, and every init container maps to it."""
    init = [_d(c) for c in _l(pod_spec.get("initContainers"))]
    containers = init + [_d(c) for c in _l(pod_spec.get("containers"))]
    long_lived: list[int] = []
    short_lived: list[int] = []
    for i, c in enumerate(containers):
        if i < len(init) and c.get("restartPolicy") != "Always":
            short_lived.append(i)
        else:
            long_lived.append(i)
    out: list[dict[str, Any]] = []
    mappings: list[dict[str, str]] = []
    for resource in sorted(resources):
        cls = classes.get(resource)
        if cls is None:
            continue
        class_name = str(_d(cls.get("metadata")).get("name", ""))
        long_reqs: list[dict[str, Any] | None] = [None] * len(containers)
        long_maps: list[dict[str, str]] = []
        for i in long_lived:
            req, maps = _container_request(i, containers[i], resource, class_name, ())
            long_reqs[i] = req
            long_maps += maps
        largest: dict[str, Any] | None = None
        short_names: set[str] = set()
        short_maps: list[dict[str, str]] = []
        for i in short_lived:
            req, maps = _container_request(i, containers[i], resource, class_name, long_reqs[i:])
            if req is not None:
                short_names.add(req["name"])
                if largest is None or largest["exactly"]["count"] < req["exactly"]["count"]:
                    largest = req
            short_maps += maps
        if largest is not None and len(short_names) > 1:
            short_names.discard(largest["name"])
            for m in short_maps:
                if m["requestName"] in short_names:
                    m["requestName"] = largest["name"]
        if largest is not None:
            out.append(largest)
        out += [r for r in long_reqs if r is not None]
        mappings += long_maps + short_maps
    out.sort(key=lambda r: str(r["name"]))
    return out, mappings
