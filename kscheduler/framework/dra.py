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
with an untolerated NoSchedule/NoExecute taint (its slice's, or one a
DeviceTaintRule gives it: :class:`TaintRule`) is skipped; ``adminAccess``
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

Per-device node selection: a slice with ``perDeviceNodeSelection`` reaches the
node when one of its devices does (:class:`DeviceNode`); the others are passed
over after the selectors, and the allocation's node selector comes from the
chosen devices' own fields.

Consumable capacity: an ``allowMultipleAllocations`` device is shared; each result
on it is a share with a random ``shareID`` and what it takes of every capacity
(:class:`Capacity`: the request rounded up to the capacity's request policy),
checked against what allocated shares (``shared``), and shares picked earlier in
the search, already take (:func:`capacity_fits`). A shared device consumes its
counters once. Devices and requests that use none of this skip the checks.

Devices with binding conditions (DRADeviceBindingConditions) are allocated like
any other; the result carries their ``bindingConditions`` and
``bindingFailureConditions``, and a device with ``bindsToNode`` limits the
allocation's node selector to the node, as a node-local slice does.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from itertools import chain
from typing import Any

from kscheduler.framework.cel import (
    CelCompileError,
    CelRuntimeError,
    DeviceInput,
    compile_selector,
    make_device_input,
)
from kscheduler.framework.features import GATES
from kscheduler.framework.quantity import (
    QuantityError,
    format_quantity,
    parse_decimal,
    quantity_format,
)
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


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A device's own node selection (``nodeName``, ``allNodes`` or ``nodeSelector``),
    used when its slice sets ``perDeviceNodeSelection``."""

    node_name: str = ""
    all_nodes: bool = False
    selector: NodeSelector | None = None
    selector_raw: dict[str, Any] | None = None
    selector_error: str = ""

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> DeviceNode:
        raw = d.get("nodeSelector")
        selector = None
        err = ""
        if isinstance(raw, dict):
            try:
                selector = NodeSelector.parse(raw, "nodeSelector")
            except SelectorError as exc:
                err = str(exc)
        return cls(
            str(d.get("nodeName") or ""),
            d.get("allNodes") is True,
            selector,
            raw if isinstance(raw, dict) else None,
            err,
        )

    def matches(self, device: str, slice_name: str, node: str, labels: Mapping[str, str]) -> bool:
        if self.node_name:
            return self.node_name == node
        if self.all_nodes:
            return True
        if self.selector_raw is not None:
            if self.selector_error:
                raise AllocationError(
                    f"failed to perform node selection for device {device} in slice "
                    f"{slice_name}: {self.selector_error}"
                )
            return self.selector is not None and self.selector.matches(labels, node)
        return False


#: a quantity: its exact value and its text (the API's canonical form)
Quantity = tuple[Decimal, str]

_MAX_INT64 = 2**63 - 1


def _quantity(raw: Any, where: str) -> Quantity:
    text = str(raw)
    try:
        return parse_decimal(text), text
    except QuantityError as exc:
        raise QuantityError(f"{where}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Capacity:
    """One capacity of a device with its ``requestPolicy`` (DRAConsumableCapacity)."""

    value: Quantity
    policy: bool = False
    default: Quantity | None = None
    #: ``validValues`` (None when the policy has none)
    valid_values: tuple[Quantity, ...] | None = None
    #: whether the policy has a ``validRange``, and its bounds
    valid_range: bool = False
    min: Quantity | None = None
    max: Quantity | None = None
    step: Quantity | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any], where: str) -> Capacity:
        value = _quantity(raw.get("value", "0"), where)
        policy = raw.get("requestPolicy")
        if not isinstance(policy, dict):
            return cls(value)

        def opt(v: Any, what: str) -> Quantity | None:
            return None if v is None else _quantity(v, f"{where}, {what}")

        values = policy.get("validValues")
        rng = policy.get("validRange")
        rng_d = _d(rng)
        return cls(
            value,
            True,
            opt(policy.get("default"), "default"),
            None
            if not isinstance(values, list)
            else tuple(_quantity(v, f"{where}, validValues") for v in values),
            isinstance(rng, dict),
            opt(rng_d.get("min"), "validRange.min"),
            opt(rng_d.get("max"), "validRange.max"),
            opt(rng_d.get("step"), "validRange.step"),
        )

    # ---- upstream's consumable-capacity arithmetic ---------------------------------------
    def consumed(self, request: Quantity | None, fractional: bool) -> Quantity:
        """What a request (None: the request names no amount of this capacity) takes of
        the capacity: the policy's default or the whole value when none is named;
        else the request rounded up to the policy (validRange: to min, then to the
        next step from min; validValues: to the first value not below it).
        ``fractional`` (DRAFractionalCapacityRange): a range whose bounds are exact in
        milli-units is stepped in milli-units; otherwise, as without the gate, in
        whole units (each bound and the request rounded up to an integer first).
        :class:`CapacityError` when the rounding cannot be represented."""
        if request is None:
            return self.default if self.default is not None else self.value
        if not self.policy:
            return request
        if self.valid_range and self.min is not None:
            return self._round_up_range(request, self.min, fractional)
        if self.valid_values is not None:
            for v in self.valid_values:
                if request[0] <= v[0]:
                    return v
        return request

    def _use_milli(self, fractional: bool) -> bool:
        if not fractional:
            return False
        for q in (self.min, self.max, self.step):
            if q is not None and _milli(q[0]) is None:
                return False
        return self.step is None or (_milli(self.step[0]) or 0) >= 1

    def _round_up_range(self, request: Quantity, low: Quantity, fractional: bool) -> Quantity:
        if request[0] < low[0]:
            return low
        if self.step is None:
            return request
        fmt = quantity_format(self.step[1])
        if self._use_milli(fractional):
            req = _milli(request[0])
            if req is None:
                raise CapacityError(
                    f"{_NOT_REPRESENTABLE}: request {request[1]} is not a representable milli value"
                )
            step = _milli(self.step[0]) or 1
            lo = _milli(low[0]) or 0
            added = req - lo
            n = -(-added // step)
            if n > (_MAX_INT64 - lo) // step:
                raise CapacityError(
                    f"{_NOT_REPRESENTABLE}: rounding request {request[1]} up to the next step "
                    "passes the milli-value range"
                )
            val = lo + step * n
            dec = Decimal(val // 1000) if val % 1000 == 0 else Decimal(val).scaleb(-3)
            return dec, format_quantity(dec, fmt)
        if request[0] > _MAX_INT64:
            raise CapacityError(f"{_NOT_REPRESENTABLE}: request {request[1]} exceeds MaxInt64")
        req_i, step_i, lo_i = _ceil(request[0]), _ceil(self.step[0]), _ceil(low[0])
        added = req_i - lo_i
        n = -(-added // step_i)
        if lo_i >= 0 and n > (_MAX_INT64 - lo_i) // step_i:
            raise CapacityError(
                f"{_NOT_REPRESENTABLE}: rounding request {request[1]} up to the next step "
                "passes MaxInt64"
            )
        dec = Decimal(lo_i + step_i * n)
        return dec, format_quantity(dec, fmt)

    def violates(self, amount: Decimal, fractional: bool) -> bool:
        """Whether an amount taken is not one the request policy allows."""
        if not self.policy:
            return False
        if self.default is not None and amount == self.default[0]:
            return False
        if self.valid_range:
            if self.max is not None and amount > self.max[0]:
                return True
            if self.step is not None:
                low = self.min[0] if self.min is not None else Decimal(0)
                if self._use_milli(fractional):
                    req = _milli(amount)
                    if req is None:
                        return True
                    return (req - (_milli(low) or 0)) % (_milli(self.step[0]) or 1) != 0
                return (_ceil(amount) - _ceil(low)) % _ceil(self.step[0]) != 0
            return False
        if self.valid_values:
            return all(amount != v[0] for v in self.valid_values)
        return False


_NOT_REPRESENTABLE = "capacity request cannot be represented in the device's range arithmetic"


class CapacityError(Exception):
    """A capacity request that upstream's range arithmetic cannot represent (fatal)."""


def _ceil(v: Decimal) -> int:
    """resource.Quantity.Value(): the value rounded up to an integer."""
    return int(v.to_integral_value(rounding=ROUND_CEILING))


def _milli(v: Decimal) -> int | None:
    """The value in milli-units when exact and within int64, else None."""
    m = v * 1000
    if m != m.to_integral_value() or abs(m) > _MAX_INT64:
        return None
    return int(m)


def capacity_fits(
    requests: Mapping[str, Quantity] | None,
    capacities: Mapping[str, Capacity],
    allocated: Mapping[str, Decimal],
    allocating: Mapping[str, Decimal],
    fractional: bool,
) -> bool:
    """Whether a request fits the device's capacities (upstream's CmpRequestOverCapacity).

    False when the request names a capacity the device does not have, when what it
    takes of a capacity breaks the capacity's request policy, or when that plus what
    allocated shares (``allocated``) and shares picked in this search
    (``allocating``) take passes the capacity's value. :class:`CapacityError` when
    a request cannot be represented or an amount taken is negative (checked for every
    capacity before the rest)."""
    if requests:
        for name in requests:
            if name not in capacities:
                return False
    taken: dict[str, Decimal] = {}
    for name, cap in capacities.items():
        try:
            amount = cap.consumed(requests.get(name) if requests else None, fractional)[0]
        except CapacityError as exc:
            raise CapacityError(f'capacity "{name}": {exc}') from exc
        if amount < 0:
            raise CapacityError(f'capacity "{name}": capacity value is negative')
        taken[name] = amount
    for name, cap in capacities.items():
        amount = taken[name]
        if cap.violates(amount, fractional):
            return False
        total = amount + allocated.get(name, 0) + allocating.get(name, 0)
        if total > cap.value[0]:
            return False
    return True


@dataclass(slots=True, eq=False)
class Device:
    name: str
    attributes: dict[str, dict[str, Any]]
    capacity: dict[str, Any]
    taints: tuple[dict[str, Any], ...]
    #: ``bindingConditions`` / ``bindingFailureConditions`` (DRADeviceBindingConditions)
    binding_conditions: tuple[str, ...]
    #: (counter set, counters) per ``consumesCounters`` entry, in order
    consumes_counters: tuple[tuple[str, Counters], ...]
    allow_multiple_allocations: bool
    raw: dict[str, Any]
    #: the device's own node selection (set in a slice with perDeviceNodeSelection)
    node: DeviceNode | None = None
    #: whether every request checks the device's capacities (a shared device, or a
    #: negative capacity, which upstream's check turns into an error); the others are
    #: checked only by requests with ``capacity.requests``
    capacity_check: bool = False
    binding_failure_conditions: tuple[str, ...] = ()
    #: ``bindsToNode``: an allocation with this device is limited to the node
    binds_to_node: bool = False
    _input: DeviceInput | None = None
    _input_error: str = ""
    #: expression -> match (True/False) or the runtime error text
    cel_results: dict[str, bool | str] = field(default_factory=dict)
    #: the capacities with their request policies, parsed on first use
    _capacities: dict[str, Capacity] | None = None

    def capacities(self) -> dict[str, Capacity]:
        """``capacity`` parsed (QuantityError for a quantity that does not parse)."""
        if self._capacities is None:
            self._capacities = {
                name: Capacity.parse(_d(raw), f"device {self.name}, capacity {name}")
                for name, raw in self.capacity.items()
            }
        return self._capacities

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
        per_device = spec.get("perDeviceNodeSelection") is True
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
                    binding_conditions=tuple(str(c) for c in _l(d.get("bindingConditions"))),
                    binding_failure_conditions=tuple(
                        str(c) for c in _l(d.get("bindingFailureConditions"))
                    ),
                    binds_to_node=d.get("bindsToNode") is True,
                    consumes_counters=tuple(consumes),
                    allow_multiple_allocations=bool(d.get("allowMultipleAllocations")),
                    raw=d,
                    node=DeviceNode.parse(d) if per_device else None,
                    capacity_check=bool(d.get("allowMultipleAllocations"))
                    or any(
                        str(_d(c).get("value", "")).lstrip().startswith("-")
                        for c in _d(d.get("capacity")).values()
                    ),
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
            per_device_node_selection=per_device,
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
    nodes by labels (each names its node or reaches all of them), a node's pools
    depend on its name alone and are kept."""

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
        #: whether a node's pools depend on its name alone: every slice that does not
        #: name a node reaches all nodes
        self._by_name_only = all(
            s.all_nodes and s.node_selector_raw is None and not s.per_device_node_selection
            for s in self.not_by_name
        )

    def candidates(self, node_name: str) -> list[Slice]:
        """The slices that may reach ``node_name``."""
        named = self.by_node.get(node_name)
        return [*named, *self.not_by_name] if named else self.not_by_name

    def pools(self, node_name: str, labels: Mapping[str, str]) -> list[Pool]:
        """:func:`gather_pools` for the node (kept per node while that is exact)."""
        if not self._by_name_only:
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
        if s.node_name or s.all_nodes or s.node_selector_raw is not None:
            if not _slice_matches_node(s, node_name, labels):
                continue
        elif s.per_device_node_selection:
            # the slice counts when one of its devices reaches the node; the others
            # are turned down per device (after the selectors, as upstream)
            if not any(
                dev.node is not None and dev.node.matches(dev.name, s.name, node_name, labels)
                for dev in s.devices
            ):
                continue
        else:
            continue  # no node selection known: not for this node
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


@dataclass(frozen=True, slots=True)
class TaintRule:
    """A DeviceTaintRule: its taint applies to every device its ``deviceSelector``
    selects (driver, pool and device name, each when set; no selector selects
    nothing)."""

    name: str
    driver: str | None
    pool: str | None
    device: str | None
    taint: dict[str, Any]

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> TaintRule | None:
        """None for a rule without ``deviceSelector`` (it selects no device)."""
        spec = _d(raw.get("spec"))
        sel = spec.get("deviceSelector")
        if not isinstance(sel, dict):
            return None

        def opt(key: str) -> str | None:
            v = sel.get(key)
            return None if v is None else str(v)

        return cls(
            str(_d(raw.get("metadata")).get("name", "")),
            opt("driver"),
            opt("pool"),
            opt("device"),
            _d(spec.get("taint")),
        )

    def selects(self, driver: str, pool: str, device: str) -> bool:
        return (
            (self.driver is None or self.driver == driver)
            and (self.pool is None or self.pool == pool)
            and (self.device is None or self.device == device)
        )


def rule_taints(rules: Sequence[TaintRule], did: DeviceID) -> list[dict[str, Any]]:
    """The taints the DeviceTaintRules add to the device, in the rules' order."""
    return [r.taint for r in rules if r.selects(did.driver, did.pool, did.device)]


def taint_prevents(
    device: Device,
    tolerations: Sequence[Mapping[str, Any]],
    extra: Sequence[Mapping[str, Any]] = (),
) -> bool:
    """Whether a NoSchedule/NoExecute taint of the device (its slice's, then
    ``extra``: those of DeviceTaintRules) is not tolerated."""
    for taint in chain(device.taints, extra):
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
    #: ``capacity.requests`` (None when it names none)
    capacity: dict[str, Quantity] | None = None

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
    #: a share of an allowMultipleAllocations device (the result gets a shareID)
    shared: bool = False
    #: what the share takes of the device's capacities (quantity text by name)
    consumed: dict[str, str] | None = None


class Allocator:
    """Allocates claims per node against one view of slices, classes and taken devices.

    ``allocated`` holds the devices in use (claims allocated in the cluster and in
    flight); ``shared`` the devices shared by such claims (consumable capacity) with
    the capacity they take; ``classes`` maps a DeviceClass name to its JSON."""

    def __init__(
        self,
        slices: Sequence[Slice] | SliceIndex,
        classes: Mapping[str, Mapping[str, Any]],
        allocated: set[DeviceID],
        taint_rules: Sequence[TaintRule] = (),
        *,
        shared: Mapping[DeviceID, Counters] | None = None,
        fractional_capacity: bool | None = None,
    ) -> None:
        self.index = slices if isinstance(slices, SliceIndex) else SliceIndex(slices)
        self.classes = classes
        self.allocated = allocated
        #: allowMultipleAllocations devices with allocated shares -> the capacity the
        #: shares take together (:func:`shared_capacity`)
        self.shared: Mapping[DeviceID, Counters] = shared or {}
        #: DRAFractionalCapacityRange (default: the gate in force)
        self.fractional = (
            GATES.dra_fractional_capacity_range
            if fractional_capacity is None
            else fractional_capacity
        )
        self.taint_rules = list(taint_rules)

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
        #: shared device -> (shares picked so far, the capacity they take)
        self.sharing: dict[DeviceID, tuple[int, Counters]] = {}

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
        capacity = None
        cap_requests = _d(_d(raw.get("capacity")).get("requests"))
        if cap_requests:
            try:
                capacity = {
                    str(k): _quantity(v, f"capacity request {k}") for k, v in cap_requests.items()
                }
            except QuantityError as exc:
                raise AllocationError(f"claim {claim_key(claim)}, request {name}: {exc}") from exc
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
        rd = _Request(name, parent, raw, dict(cls), mode == "All", capacity=capacity)
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
                        if not self._selectable(key, rd, dev, did, s):
                            continue
                        # the device's capacity alone (what is taken counts later)
                        if (
                            rd.capacity is not None or dev.capacity_check
                        ) and not self._capacity_fits(
                            ci, rd, dev, did, "checking", static=True, shown=dev.name
                        ):
                            continue
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
                    if not self._selectable(key, rd, dev, did, s):
                        continue
                    if (
                        rd.capacity is not None
                        or dev.capacity_check
                        or (bool(self.a.shared) and did in self.a.shared)
                    ) and not self._capacity_fits(ci, rd, dev, did, "checking"):
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
        self, key: tuple[int, int, int], rd: _Request, dev: Device, did: DeviceID, s: Slice
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
        if ok and s.per_device_node_selection:
            ok = dev.node is not None and dev.node.matches(
                dev.name, s.name, self.node_name, self.labels
            )
        self.matches[mk] = ok
        return ok

    def _capacity_fits(
        self,
        ci: int,
        rd: _Request,
        dev: Device,
        did: DeviceID,
        verb: str,
        *,
        static: bool = False,
        shown: str = "",
    ) -> bool:
        """Whether the request fits what is left of the device's capacities (``static``:
        of the capacities alone); an AllocationError when it cannot be represented."""
        try:
            caps = dev.capacities()
            if static:
                return capacity_fits(rd.capacity, caps, {}, {}, self.a.fractional)
            sharing = self.sharing.get(did)
            return capacity_fits(
                rd.capacity,
                caps,
                self.a.shared.get(did, {}),
                sharing[1] if sharing else {},
                self.a.fractional,
            )
        except (CapacityError, QuantityError) as exc:
            raise AllocationError(
                f"claim {claim_key(self.claims[ci])}, request {rd.name}: {verb} capacity "
                f"for device {shown or did}: {exc}"
            ) from exc

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
        multi = dev.allow_multiple_allocations
        # a shared device already in use has its counters accounted for
        counters = bool(dev.consumes_counters) and not (multi and self._shares_in_use(did))
        if counters and not self._reserve_counters(pool, dev):
            return False, None
        extra = rule_taints(self.a.taint_rules, did) if self.a.taint_rules else ()
        if taint_prevents(dev, rd.tolerations, extra):
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
        if (
            must
            and (rd.capacity is not None or dev.capacity_check or did in self.a.shared)
            and not self._capacity_fits(ci, rd, dev, did, "rechecking")
        ):
            for a in reversed(added):
                a.remove(base, sub)
            if counters:
                self._release_counters(pool, dev)
            return False, None
        consumed: dict[str, Quantity] | None = None
        if multi:
            consumed = self._share(ci, rd, dev, did)
        else:
            self.allocating.setdefault(did, set()).add(ci)
        self.results[ci].append(
            _Result(
                rd,
                did,
                dev,
                s,
                shared=multi,
                consumed={k: q[1] for k, q in consumed.items()} if consumed else None,
            )
        )

        def undo() -> None:
            self.results[ci].pop()
            if consumed is not None:
                self._unshare(did, consumed)
            else:
                self.allocating[did].discard(ci)
            for a in reversed(added):
                a.remove(base, sub)
            if counters:
                self._release_counters(pool, dev)

        return True, undo

    def _shares_in_use(self, did: DeviceID) -> bool:
        return did in self.a.shared or did in self.sharing

    def _share(self, ci: int, rd: _Request, dev: Device, did: DeviceID) -> dict[str, Quantity]:
        """Record a share of the device; what it takes of each capacity."""
        try:
            consumed = {
                name: cap.consumed(
                    rd.capacity.get(name) if rd.capacity else None, self.a.fractional
                )
                for name, cap in dev.capacities().items()
            }
        except (CapacityError, QuantityError) as exc:
            raise AllocationError(
                f"claim {claim_key(self.claims[ci])}, request {rd.name}: computing consumed "
                f"capacity for device {did}: {exc}"
            ) from exc
        count, taken = self.sharing.get(did, (0, {}))
        taken = dict(taken)
        for name, q in consumed.items():
            taken[name] = taken.get(name, Decimal(0)) + q[0]
        self.sharing[did] = (count + 1, taken)
        return consumed

    def _unshare(self, did: DeviceID, consumed: Mapping[str, Quantity]) -> None:
        count, taken = self.sharing[did]
        if count <= 1:
            del self.sharing[did]
            return
        taken = dict(taken)
        for name, q in consumed.items():
            taken[name] -= q[0]
        self.sharing[did] = (count - 1, taken)

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
                did = DeviceID(s.driver, s.pool, dev.name)
                if did not in self.a.allocated and did not in self.a.shared:
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
            if res.shared:
                entry["shareID"] = str(uuid.uuid4())
            if res.consumed:
                entry["consumedCapacity"] = dict(res.consumed)
            if res.device.binding_conditions:
                entry["bindingConditions"] = list(res.device.binding_conditions)
            if res.device.binding_failure_conditions:
                entry["bindingFailureConditions"] = list(res.device.binding_failure_conditions)
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
            node_name, selector_raw = s.node_name, s.node_selector_raw
            if s.per_device_node_selection:
                dn = res.device.node
                node_name = dn.node_name if dn is not None else ""
                selector_raw = dn.selector_raw if dn is not None else None
            if node_name or res.device.binds_to_node:
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
            if selector_raw is not None:
                terms = _l(selector_raw.get("nodeSelectorTerms"))
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
    """Devices taken by allocated claims (admin-access results take none; a result
    with a ``shareID`` is a share of a device: :func:`shared_capacity`)."""
    out: set[DeviceID] = set()
    for claim in claims:
        alloc = _d(_d(claim.get("status")).get("allocation"))
        for r in _l(_d(alloc.get("devices")).get("results")):
            r = _d(r)
            if r.get("adminAccess") or r.get("shareID") is not None:
                continue
            out.add(
                DeviceID(str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
            )
    return out


def shared_capacity(claims: Iterable[Mapping[str, Any]]) -> dict[DeviceID, Counters]:
    """Devices shared by allocated claims (results with a ``shareID``; admin-access
    results take nothing) -> the capacity their shares take together (from each
    result's ``consumedCapacity``; an unparsable quantity counts as nothing)."""
    out: dict[DeviceID, Counters] = {}
    for claim in claims:
        alloc = _d(_d(claim.get("status")).get("allocation"))
        for r in _l(_d(alloc.get("devices")).get("results")):
            r = _d(r)
            if r.get("adminAccess") or r.get("shareID") is None:
                continue
            did = DeviceID(
                str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", ""))
            )
            taken = out.setdefault(did, {})
            for name, value in _d(r.get("consumedCapacity")).items():
                try:
                    amount = parse_decimal(str(value))
                except QuantityError:
                    continue
                taken[str(name)] = taken.get(str(name), Decimal(0)) + amount
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
    """An AllocationResult's devices as "request: driver/pool/device" (a share of a
    device adds " (shared: name=quantity, ...)")."""
    out = []
    for r in _l(_d(allocation.get("devices")).get("results")):
        r = _d(r)
        text = f"{r.get('request', '')}: {r.get('driver', '')}/{r.get('pool', '')}/"
        text += str(r.get("device", ""))
        if r.get("adminAccess"):
            text += " (admin access)"
        if r.get("shareID") is not None:
            consumed = _d(r.get("consumedCapacity"))
            amounts = ", ".join(f"{k}={consumed[k]}" for k in sorted(consumed))
            text += f" (shared: {amounts})" if amounts else " (shared)"
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


_parsed_slices: dict[str, tuple[str, Slice]] = {}


def parse_slices(raws: Iterable[Mapping[str, Any]]) -> list[Slice]:
    """The slices parsed, each (name, resourceVersion) once; gone ones are forgotten."""
    out: list[Slice] = []
    seen: set[str] = set()
    for raw in raws:
        meta = _d(raw.get("metadata"))
        name, rv = str(meta.get("name", "")), str(meta.get("resourceVersion", ""))
        seen.add(name)
        hit = _parsed_slices.get(name)
        if hit is None or hit[0] != rv:
            hit = _parsed_slices[name] = (rv, Slice.parse(raw))
        out.append(hit[1])
    for gone in set(_parsed_slices) - seen:
        del _parsed_slices[gone]
    return out


class ExtendedResourceDevices:
    """The devices backing extended resources on a node, as kube-scheduler's
    resource scorers (NodeResourcesFit, NodeResourcesBalancedAllocation) count them
    for a resource a node does not advertise: every device of every slice reaching
    the node (all generations, as upstream lists them) that the backing class's CEL
    selectors accept is allocatable, and those allocated to claims are in use.
    Counts are kept per (resource, node) for the cycle."""

    def __init__(
        self, classes: Mapping[str, Mapping[str, Any]], slices: list[Slice], taken: set[DeviceID]
    ) -> None:
        self.classes = classes
        self.slices = slices
        self.taken = taken
        self._totals: dict[tuple[str, str], tuple[int, int]] = {}

    def totals(self, resource: str, node_name: str, labels: Mapping[str, str]) -> tuple[int, int]:
        """(devices, devices in use) for the resource on the node; (0, 0) when no class
        backs it, or when a node selector or a selector cannot be evaluated."""
        key = (resource, node_name)
        hit = self._totals.get(key)
        if hit is None:
            try:
                hit = self._count(resource, node_name, labels)
            except (AllocationError, CelCompileError, CelRuntimeError, SelectorError):
                hit = (0, 0)
            self._totals[key] = hit
        return hit

    def _count(self, resource: str, node_name: str, labels: Mapping[str, str]) -> tuple[int, int]:
        cls = self.classes.get(resource)
        if cls is None:
            return 0, 0
        expressions = [
            str(_d(_d(sel).get("cel")).get("expression") or "")
            for sel in _l(_d(cls.get("spec")).get("selectors"))
            if _d(sel).get("cel") is not None
        ]
        total = used = 0
        for s in self.slices:
            if s.per_device_node_selection:
                devices: Iterable[Device] = [
                    d
                    for d in s.devices
                    if d.node is not None and d.node.matches(d.name, s.name, node_name, labels)
                ]
            elif not s.all_nodes and s.node_name != node_name and s.node_selector_raw is not None:
                if s.node_selector is None:
                    raise SelectorError(s.node_selector_error)
                if not s.node_selector.matches(labels, node_name):
                    continue
                devices = s.devices
            elif not s.all_nodes and s.node_name and s.node_name != node_name:
                continue
            else:
                devices = s.devices
            for dev in devices:
                if not self._matches(dev, s.driver, expressions):
                    continue
                total += 1
                if DeviceID(s.driver, s.pool, dev.name) in self.taken:
                    used += 1
        return total, used

    @staticmethod
    def _matches(dev: Device, driver: str, expressions: Sequence[str]) -> bool:
        for expr in expressions:
            res = dev.cel_results.get(expr)
            if res is None:
                try:
                    res = compile_selector(expr).matches(dev.cel_input(driver))
                except CelRuntimeError as exc:
                    res = str(exc)
                dev.cel_results[expr] = res
            if isinstance(res, str):
                raise CelRuntimeError(res)
            if not res:
                return False
        return True


def extended_resource_devices(
    names: Iterable[str], list_kind: Callable[[str], Iterable[Mapping[str, Any]]]
) -> ExtendedResourceDevices | None:
    """For scoring ``names``: the device counts of the classes backing those of them a
    DeviceClass backs, or None when none is (``list_kind`` lists the informer's
    objects of a kind: deviceclasses, resourceslices, resourceclaims)."""
    candidates = [n for n in names if is_dra_extended_resource_name(n)]
    if not candidates:
        return None
    classes = extended_resource_classes(list_kind("deviceclasses"))
    if not any(n in classes for n in candidates):
        return None
    return ExtendedResourceDevices(
        classes,
        parse_slices(list_kind("resourceslices")),
        allocated_devices(list_kind("resourceclaims")),
    )
