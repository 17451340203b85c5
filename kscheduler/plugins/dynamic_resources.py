"""DynamicResources: allocate DRA devices for a pod's ResourceClaims, as kube-scheduler 1.37.

PreEnqueue
    Every claim of ``spec.resourceClaims`` must exist and not be deleted; a claim
    made from a template is found through ``status.resourceClaimStatuses`` (the
    controller-manager's resourceclaim controller creates it) and must be owned
    by the pod. Otherwise the pod waits, gated, with upstream's message.

PreFilter
    No claims -> Skip. An allocated claim limits the pod to its
    ``allocation.nodeSelector``; an unallocated one needs every device class its
    requests name ("request R: device class C does not exist") and no allocation
    in flight for it. The allocator (:mod:`kscheduler.framework.dra`) is built
    over the ResourceSlices, the DeviceClasses and the devices taken by
    allocated claims and by claims reserved in this scheduler but not yet
    written.

Filter
    Allocated claims must match the node ("resourceclaim not available on the
    node"); the unallocated ones are allocated for the node ("cannot allocate
    all claims" when they do not fit; an Error for a CEL runtime error). The
    per-node result is kept for Reserve.

PostFilter
    For a pod without claims: a bare Unschedulable (1.37: nothing of it in the
    message); an Error "not found" when PreFilter did not run, as upstream on its
    missing cycle state. For a pod whose allocated claim does not fit any node:
    the claim is deallocated when it is reserved for nobody else
    ("deallocation of ResourceClaim completed").

Score (with firstAvailable requests only)
    Per allocated subrequest, 8 minus its index; normalized to [0, 100]. PreScore
    skips it for a pod without claims (kube-scheduler scores those 0 everywhere).

Reserve / Unreserve
    The node's allocations are recorded as in flight: the devices count as taken
    for the next pods, and the claim reads as being allocated. Unreserve drops
    them, and removes the pod from a claim's reservedFor if it got that far.

PreBind
    Per claim not yet reserved for the pod, with conflict retries: the
    ``resource.kubernetes.io/delete-protection`` finalizer (update), then
    ``status.allocation`` (with ``allocationTimestamp``) and the pod in
    ``status.reservedFor`` (status update). The written claim overlays the
    informer's copy until the informer catches up. When an allocated device has
    binding conditions, PreBind then waits (every 5s, up to bindingTimeout) until
    the driver has set them all True in the claim's ``status.devices``; a True
    binding failure condition or the timeout is an Error, after which Filter finds
    the claim unavailable and PostFilter deallocates it.

Extended resources backed by DRA (DRAExtendedResource)
    A pod requesting an extended resource that a DeviceClass backs (see
    :func:`kscheduler.framework.dra.extended_resource_classes`) gets one more
    claim, last, kept in memory under the name ``<extended-resources>`` (or the
    pod's claim left over from an earlier attempt: Filter then rejects every node
    with "cannot schedule extended resource claim" and PostFilter deletes it,
    "deletion of ResourceClaim completed"). Per node, the resources the node does
    not advertise in allocatable become its device requests
    (:func:`kscheduler.framework.dra.extended_resource_requests`); a requested
    extended resource neither advertised nor backed is "cannot fit resource".
    Reserve records its allocation like any claim's; PreBind creates the claim
    (generateName ``<pod>-extended-resources-``, the pod as controller owner, the
    ``resource.kubernetes.io/extended-resource-claim`` annotation), writes its
    allocation and reservation, waits until the informer has it, and writes the
    pod's ``status.extendedResourceClaimStatus``. Unreserve deletes a claim it
    created (finalizer removed first).

DeviceTaintRules: their taints are added to the devices they select, for the
allocator's toleration check; a rule change that alters some device's taints
queues pods with claims.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from itertools import chain
from typing import Any, Generic, TypeVar, cast

from kscheduler.framework import (
    MAX_NODE_SCORE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Handle,
    NodeInfo,
    NodeScore,
    NodeToStatus,
    PluginEntry,
    PodInfo,
    PostFilterResult,
    PreBindPreFlightResult,
    PreFilterResult,
    QueueingHint,
    Status,
)
from kscheduler.framework.args import Fields
from kscheduler.framework.dra import (
    DEVICE_REPORT_KEY,
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    FIRST_AVAILABLE_MAX_SIZE,
    AllocationError,
    AllocationTimeout,
    Allocator,
    ClaimDevices,
    DeviceID,
    DeviceReport,
    FailedOnNode,
    Slice,
    SliceIndex,
    TaintRule,
    Unsupported,
    allocated_devices,
    extended_resource_classes,
    extended_resource_requests,
    is_dra_extended_resource_name,
    result_devices,
    shared_capacity,
)
from kscheduler.framework.interface import ObjectChanges
from kscheduler.framework.selectors import NodeSelector, SelectorError
from kscheduler.framework.signing import SignFragment

NAME = "DynamicResources"
STATE_KEY = "PreFilter" + NAME

CLAIMS = "resourceclaims"
SLICES = "resourceslices"
CLASSES = "deviceclasses"
TAINT_RULES = "devicetaintrules"
API = "/apis/resource.k8s.io/v1"
FINALIZER = "resource.kubernetes.io/delete-protection"

#: What upstream's PostFilter reports when its cycle state is missing.
MSG_STATE_NOT_FOUND = "not found"
MSG_CANNOT_ALLOCATE = "cannot allocate all claims"
MSG_NOT_AVAILABLE = "resourceclaim not available on the node"
MSG_DEALLOCATED = "deallocation of ResourceClaim completed"
MSG_DELETED = "deletion of ResourceClaim completed"
MSG_EXTENDED_STALE = "cannot schedule extended resource claim"
MSG_EXTENDED_CANNOT_FIT = "cannot fit resource"
#: The in-memory name of the pod's claim for extended resources until PreBind
#: creates it (not a valid object name, so it names no real claim).
EXTENDED_CLAIM_NAME = "<extended-resources>"
#: What explain shows in place of the pod's claim name for that claim.
EXTENDED_POD_CLAIM = "(extended resources)"
#: How long PreBind waits for the informer to show a claim it created.
EXTENDED_CLAIM_WAIT = 120.0
#: PreBind polls the claims for their binding conditions this often (upstream's 5s).
BINDING_POLL = 5.0
MSG_BINDING_PENDING = "waiting for binding conditions for device on node {node}"
#: client-go's retry.DefaultRetry: 5 steps from 10 ms, x1 factor, 10% jitter.
CONFLICT_RETRIES = 5
CONFLICT_DELAY = 0.01
#: an allocation result kept by DynamicResources._memo: (node object, versions of the
#: node's pools, the results or None when the claims do not fit)
_Kept = tuple[object, tuple[int, ...], list[dict[str, Any]] | None]
#: allocation results kept (DynamicResources._memo) before all are dropped
MEMO_LIMIT = 100_000


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return _d(obj.get("metadata"))


class ClaimError(Exception):
    pass


class BindingFailed(Exception):
    """A binding failure condition of an allocated device is True."""


class BindingTimeout(Exception):
    """The binding conditions were not all True within bindingTimeout."""


def _condition(conditions: Any, type_: str) -> dict[str, Any] | None:
    for c in _l(conditions):
        if _d(c).get("type") == type_:
            return _d(c)
    return None


def claim_ready_for_binding(claim: Mapping[str, Any]) -> bool:
    """Whether every binding condition of the claim's allocated devices is True in
    its ``status.devices`` (True when there are none). BindingFailed when a binding
    failure condition is True. As upstream, a device with binding conditions but no
    status entry yet makes the claim not ready, without looking further."""
    status = _d(claim.get("status"))
    alloc = _d(status.get("allocation"))
    if not alloc:
        return False
    for r in _l(_d(alloc.get("devices")).get("results")):
        r = _d(r)
        if not r.get("bindingConditions"):
            continue
        dev_status = None
        for d in _l(status.get("devices")):
            d = _d(d)
            if (d.get("driver"), d.get("pool"), d.get("device")) == (
                r.get("driver"),
                r.get("pool"),
                r.get("device"),
            ):
                dev_status = d
                break
        if dev_status is None:
            return False
        for cond in _l(r.get("bindingFailureConditions")):
            failed = _condition(dev_status.get("conditions"), str(cond))
            if failed is not None and failed.get("status") == "True":
                raise BindingFailed(
                    f"device binding failed: claim={_meta(claim).get('name', '')}, "
                    f"reason={failed.get('reason', '')}, "
                    f"message={json.dumps(str(failed.get('message', '')), ensure_ascii=False)}"
                )
        for cond in _l(r.get("bindingConditions")):
            c = _condition(dev_status.get("conditions"), str(cond))
            if c is None or c.get("status") != "True":
                return False
    return True


def _has_binding_conditions(claim: Mapping[str, Any]) -> bool:
    alloc = _d(_d(claim.get("status")).get("allocation"))
    return any(_d(r).get("bindingConditions") for r in _l(_d(alloc.get("devices")).get("results")))


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _conflict(exc: BaseException) -> bool:
    """An API 409 Conflict (the plugin sees the client's errors only by their fields)."""
    return getattr(exc, "status", None) == 409


@dataclass(slots=True)
class _ClaimInfo:
    pod_claim: str  # the name in spec.resourceClaims
    claim: dict[str, Any]
    available_on: NodeSelector | None = None
    allocation: dict[str, Any] | None = None  # set at Reserve
    #: the claim for the pod's extended resources backed by DRA (last of the pod's)
    extended: bool = False
    #: the uid under which Reserve recorded the allocation in flight
    reserved_uid: str = ""
    #: extended claim: the node's variant (its device requests) and the pod's
    #: container -> request mappings, set at Reserve
    node_claim: dict[str, Any] | None = None
    mappings: list[dict[str, str]] = field(default_factory=list)

    @property
    def uid(self) -> str:
        return str(_meta(self.claim).get("uid", ""))

    @property
    def allocated(self) -> bool:
        return bool(_d(self.claim.get("status")).get("allocation"))


@dataclass(slots=True)
class _State:
    claims: list[_ClaimInfo] = field(default_factory=list)
    allocator: Allocator | None = None
    #: node -> allocation results of the unallocated claims, in claim order
    node_allocations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    unavailable: set[int] = field(default_factory=set)
    #: extended resources the pod requests (names a DeviceClass may back) -> quantity
    extended_resources: dict[str, int] = field(default_factory=dict)
    #: extended resource name -> DeviceClass, as PreFilter saw them
    classes: Mapping[str, Any] = field(default_factory=dict)
    #: node -> (the extended claim with the node's requests, container mappings);
    #: absent when the node's allocatable serves all the pod's extended resources
    node_extended: dict[str, tuple[dict[str, Any], list[dict[str, str]]]] = field(
        default_factory=dict
    )
    #: the claims to allocate as the allocation memo knows them (their specs), or
    #: "" when this cycle's allocations are not kept (see DynamicResources._memo)
    memo_claims: str = ""
    #: the pools' versions (DynamicResources._pool_versions) as PreFilter saw them
    pool_versions: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def has_claims(self) -> bool:
        return bool(self.claims)

    @property
    def extended(self) -> _ClaimInfo | None:
        return self.claims[-1] if self.claims and self.claims[-1].extended else None

    @property
    def has_user_claims(self) -> bool:
        return any(not c.extended for c in self.claims)

    def to_allocate(self) -> list[_ClaimInfo]:
        return [c for c in self.claims if not c.allocated]

    def node_to_allocate(self, node: str) -> list[_ClaimInfo]:
        """The claims to allocate on the node: the extended claim only when the node
        needs devices for it."""
        return [
            c
            for c in self.claims
            if not c.allocated and (not c.extended or node in self.node_extended)
        ]


def claim_name(pod: PodInfo, entry: Mapping[str, Any]) -> tuple[str | None, bool]:
    """(claim name or None when none was made on purpose, must-check-owner);
    ClaimError when the claim is not created yet or the entry is unsupported."""
    if entry.get("resourceClaimName"):
        return str(entry["resourceClaimName"]), False
    if entry.get("resourceClaimTemplateName"):
        for st in _l(_d(pod.raw.get("status")).get("resourceClaimStatuses")):
            st = _d(st)
            if st.get("name") == entry.get("name"):
                name = st.get("resourceClaimName")
                return (str(name) if name else None), True
        raise ClaimError(f'pod "{pod.namespace}/{pod.name}": ResourceClaim not created yet')
    raise ClaimError(
        f'pod "{pod.namespace}/{pod.name}", spec.resourceClaim "{entry.get("name", "")}": '
        "none of the supported fields are set"
    )


#: PodInfo.ext key of :func:`_claim_refs`
_EXT_CLAIM_REFS = "dynamicresources.claim_refs"


def _claim_refs(pod: PodInfo) -> tuple[bool, frozenset[str]]:
    """(whether the pod uses DRA, the names of the claims its spec.resourceClaims
    refer to: directly, or as the claim made from a template once the pod's status
    names it). A queueing hint asks this of every waiting pod on every claim event:
    worked out once per pod version, and no claim_name (which raises for claims not
    made yet)."""
    cached: tuple[bool, frozenset[str]] | None = pod.ext.get(_EXT_CLAIM_REFS)
    if cached is not None:
        return cached
    names: set[str] = set()
    templated: set[Any] = set()
    for entry in _l(pod.spec.get("resourceClaims")):
        if not isinstance(entry, dict):
            continue
        direct = entry.get("resourceClaimName")
        if direct:
            if isinstance(direct, str):
                names.add(direct)
        elif isinstance(entry.get("name"), str):
            templated.add(entry["name"])
    if templated:
        for st in _l(_d(pod.raw.get("status")).get("resourceClaimStatuses")):
            if isinstance(st, dict) and st.get("name") in templated:
                made = st.get("resourceClaimName")
                if isinstance(made, str):
                    names.add(made)
    refs = (_uses_dra(pod), frozenset(names))
    pod.ext[_EXT_CLAIM_REFS] = refs
    return refs


def _is_extended_claim_of(claim: Mapping[str, Any], pod: PodInfo) -> bool:
    """The claim made for the pod's extended resources: annotated, and the pod its
    controller owner."""
    meta = _meta(claim)
    if _d(meta.get("annotations")).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
        return False
    return any(
        _d(ref).get("name") == pod.name
        and _d(ref).get("controller") is True
        and _d(ref).get("uid") == pod.uid
        for ref in _l(meta.get("ownerReferences"))
    )


def _uses_dra(pod: PodInfo) -> bool:
    """The pod has claims, or requests a resource a DeviceClass may back."""
    if pod.spec.get("resourceClaims"):
        return True
    return any(q and is_dra_extended_resource_name(n) for n, q in pod.fit_requests.scalar.items())


def _owned_by(claim: Mapping[str, Any], pod: PodInfo) -> bool:
    for ref in _l(_meta(claim).get("ownerReferences")):
        ref = _d(ref)
        if ref.get("controller") is True:
            return bool(ref.get("uid") == pod.uid)
    return False


def _reserved_for(claim: Mapping[str, Any], pod: PodInfo) -> bool:
    return any(_d(r).get("uid") == pod.uid for r in _l(_d(claim.get("status")).get("reservedFor")))


def _key(obj: Mapping[str, Any]) -> str:
    """namespace/name, as the informers key a namespaced object."""
    meta = _meta(obj)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int(_meta(obj).get("resourceVersion") or 0)
    except ValueError:
        return 0


#: DynamicResourcesFilterTimeoutDefault (the DRASchedulerFilterTimeout gate is on in 1.37)
DEFAULT_FILTER_TIMEOUT = 10.0
#: DynamicResourcesBindingTimeoutDefault (DRADeviceBindingConditions and
#: DRAResourceClaimDeviceStatus are on in 1.37)
DEFAULT_BINDING_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class DynamicResourcesArgs:
    #: Seconds the allocator may search one node in Filter; 0: no limit.
    filter_timeout: float = DEFAULT_FILTER_TIMEOUT
    #: Seconds PreBind would wait for binding conditions (accepted and validated as
    #: upstream; kscheduler rejects devices with binding conditions, so it never waits).
    binding_timeout: float = DEFAULT_BINDING_TIMEOUT


def _go_duration(seconds: float) -> str:
    """A rough Go-style rendering of a duration for messages ("-1s", "500ms")."""
    if seconds != 0 and abs(seconds) < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def parse_args(raw: Mapping[str, Any]) -> DynamicResourcesArgs:
    """DynamicResourcesArgs: ``filterTimeout`` (a duration >= 0, default 10s; 0 turns
    the limit off) and ``bindingTimeout`` (>= 1s, default 600s), as kube-scheduler
    1.37 validates them with its default feature gates."""
    f = Fields(raw)
    filter_timeout = f.optional_duration("filterTimeout")
    binding_timeout = f.optional_duration("bindingTimeout")
    f.done()
    if filter_timeout is None:
        filter_timeout = DEFAULT_FILTER_TIMEOUT
    elif filter_timeout < 0:
        raise f.error(
            "filterTimeout",
            f'Invalid value: "{_go_duration(filter_timeout)}": must be zero or positive',
        )
    if binding_timeout is None:
        binding_timeout = DEFAULT_BINDING_TIMEOUT
    elif binding_timeout < 1:
        raise f.error(
            "bindingTimeout",
            f'Invalid value: "{_go_duration(binding_timeout)}": must be at least 1 second',
        )
    return DynamicResourcesArgs(filter_timeout, binding_timeout)


P = TypeVar("P")


class _ParsedByVersion(Generic[P]):
    """Objects of one cluster-scoped kind, each version parsed once (by name)."""

    def __init__(self, parse: Callable[[Mapping[str, Any]], P]) -> None:
        self._parse = parse
        #: name -> (resourceVersion, parsed)
        self._by_name: dict[str, tuple[str, P]] = {}

    def update(self, raws: Iterable[Mapping[str, Any]]) -> tuple[list[P], bool]:
        """(every object parsed, in the order given; whether any was added,
        changed or removed since the last update)."""
        out = []
        seen = set()
        changed = False
        for raw in raws:
            meta = _meta(raw)
            name = str(meta.get("name", ""))
            rv = str(meta.get("resourceVersion", ""))
            seen.add(name)
            hit = self._by_name.get(name)
            if hit is None or hit[0] != rv:
                hit = self._by_name[name] = (rv, self._parse(raw))
                changed = True
            out.append(hit[1])
        if len(seen) != len(self._by_name):
            changed = True
            for gone in set(self._by_name) - seen:
                del self._by_name[gone]
        return out, changed


@dataclass(slots=True, frozen=True)
class _ClaimDevices:
    """What one version of an allocated claim takes."""

    resource_version: str
    uid: str
    key: str  # namespace/name
    devices: frozenset[DeviceID]
    #: shared devices (consumable capacity) -> the capacity the claim's shares take
    shares: dict[DeviceID, dict[str, Decimal]]

    def pools(self) -> set[tuple[str, str]]:
        """(driver, pool) of each device the claim takes or shares."""
        return {(did.driver, did.pool) for did in chain(self.devices, self.shares)}


@dataclass(slots=True)
class _ClusterDevices:
    """The devices the cluster's allocated claims take, kept by adding and
    removing one claim's record at a time."""

    #: device -> claim uid -> namespace/name of each claim that has it (one, but
    #: for a device two schedulers gave out at once)
    owners: dict[DeviceID, dict[str, str]] = field(default_factory=dict)
    shares: dict[DeviceID, dict[str, Decimal]] = field(default_factory=dict)

    def add(self, claim: _ClaimDevices) -> None:
        for did in claim.devices:
            self.owners.setdefault(did, {})[claim.uid] = claim.key
        _add_shares(self.shares, claim.shares)

    def remove(self, claim: _ClaimDevices) -> None:
        for did in claim.devices:
            holders = self.owners.get(did)
            if holders is not None:
                holders.pop(claim.uid, None)
                if not holders:
                    del self.owners[did]
        for did, amounts in claim.shares.items():
            have = self.shares.get(did)
            if have is None:
                continue
            for name, amount in amounts.items():
                left = have.get(name, Decimal(0)) - amount
                if left:
                    have[name] = left
                else:
                    have.pop(name, None)
            if not have:
                del self.shares[did]


def _add_shares(
    into: dict[DeviceID, dict[str, Decimal]], part: Mapping[DeviceID, Mapping[str, Decimal]]
) -> None:
    """Add the capacity each shared device's allocations take to ``into``."""
    for did, amounts in part.items():
        have = into.setdefault(did, {})
        for name, amount in amounts.items():
            have[name] = have.get(name, Decimal(0)) + amount


class DynamicResources:
    name = NAME
    required_kinds = (SLICES, CLASSES, CLAIMS, TAINT_RULES)

    def __init__(self, handle: Handle | None, args: DynamicResourcesArgs | None = None) -> None:
        self.handle = handle
        self.args = args or DynamicResourcesArgs()
        self._slices = _ParsedByVersion(Slice.parse)
        #: the slices grouped per node, kept while no slice changes
        self._index: SliceIndex | None = None
        #: the slice lister's cursor (changes_since) when _index was last checked
        self._slices_cursor: int | None = None
        #: the object lister last asked whether it offers changes_since, and its answer
        self._changes_lister: object = None
        self._lister_tells = False
        #: claim namespace/name -> the devices its allocation takes (per version)
        self._claim_devices: dict[str, _ClaimDevices] = {}
        #: the sum of _claim_devices
        self._cluster = _ClusterDevices()
        #: the claim lister's cursor (changes_since) at the last update of the sums
        self._claims_cursor: int | None = None
        #: claims whose assumed version changed since (namespace/name)
        self._dirty_claims: set[str] = set()
        #: claim uid -> (namespace/name, allocation) between Reserve and PreBind
        self._in_flight: dict[str, tuple[str, dict[str, Any]]] = {}
        #: the devices of _in_flight's allocations, per claim uid and summed (many
        #: stay in flight while ``explain --max`` reserves copy after copy)
        self._in_flight_devices: dict[str, _ClaimDevices] = {}
        self._in_flight_sum = _ClusterDevices()
        #: claim uid -> the claim as PreBind wrote it, until the informer has it
        self._assumed: dict[str, dict[str, Any]] = {}
        #: each rule parsed, or None when it selects nothing
        self._rules = _ParsedByVersion(TaintRule.parse)
        #: Filter's allocation results kept across cycles, as the node memo keeps
        #: other plugins' verdicts: node -> the claims' specs (_State.memo_claims) ->
        #: (node object, versions of the node's pools, the results or None when the
        #: claims do not fit). Pods made from one template ask for the same devices,
        #: and a cycle changes the devices taken on one node: the other nodes'
        #: results still hold. Cleared when the slices, classes or taint rules change.
        self._memo: dict[str, dict[str, _Kept]] = {}
        self._memo_size = 0
        #: what the kept results were worked out with: (slice index, classes, rules)
        self._memo_inputs: tuple[object, ...] | None = None
        #: (driver, pool) -> a count bumped whenever a device of the pool is taken or
        #: freed (allocated claims and allocations in flight)
        self._pool_versions: dict[tuple[str, str], int] = {}
        #: whether Filter keeps and reuses allocation results (tests turn it off)
        self.memo_allocations = True
        #: the last DeviceTaintRule event's answer: (old, new, devices' taints changed)
        self._last_rule_event: tuple[Any, Any, bool] | None = None
        #: the last claim event's (old, new, namespace, name, devices freed), which the
        #: claim hint asks about once per waiting pod
        self._last_claim_event: tuple[Any, Any, Any, Any, bool] | None = None

    @classmethod
    def new(cls, args: Any, handle: Handle) -> DynamicResources:
        return cls(handle, args if isinstance(args, DynamicResourcesArgs) else parse_args({}))

    # ---- lookups -----------------------------------------------------------------------
    def _claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        assert self.handle is not None
        claim = self.handle.objects.get(CLAIMS, namespace, name)
        if claim is None:
            return None
        assumed = self._assumed.get(str(_meta(claim).get("uid", "")))
        if assumed is not None:
            if _rv(claim) >= _rv(assumed):
                self._assumed.pop(str(_meta(claim).get("uid", "")), None)
            else:
                return assumed
        return claim

    def _pod_claims(self, pod: PodInfo) -> list[_ClaimInfo]:
        out = []
        for entry in _l(pod.spec.get("resourceClaims")):
            entry = _d(entry)
            name, check_owner = claim_name(pod, entry)
            if name is None:
                continue
            claim = self._claim(pod.namespace, name)
            if claim is None:
                raise ClaimError(f'resourceclaim.resource.k8s.io "{name}" not found')
            if _meta(claim).get("deletionTimestamp"):
                raise ClaimError(f'resourceclaim "{name}" is being deleted')
            if check_owner and not _owned_by(claim, pod):
                raise ClaimError(
                    f"ResourceClaim {pod.namespace}/{name} was not created for Pod "
                    f"{pod.namespace}/{pod.name} (Pod is not owner)"
                )
            out.append(_ClaimInfo(str(entry.get("name", "")), claim))
        return out

    def _tells_changes(self, lister: object) -> bool:
        """Whether the lister offers changes_since (asked once per lister: an
        isinstance check against a Protocol walks its attributes every time)."""
        if self._changes_lister is not lister:
            self._changes_lister = lister
            self._lister_tells = isinstance(lister, ObjectChanges)
        return self._lister_tells

    def _slice_index(self) -> SliceIndex:
        """Every slice parsed once per version, grouped per node once per slice set
        (not even listed again while the lister says no slice changed)."""
        assert self.handle is not None
        lister = self.handle.objects
        if self._tells_changes(lister):
            cursor, keys = cast(ObjectChanges, lister).changes_since(SLICES, self._slices_cursor)
            unchanged = keys is not None and not keys and self._index is not None
            self._slices_cursor = cursor
            if unchanged:
                assert self._index is not None
                return self._index
        slices, changed = self._slices.update(lister.list(SLICES))
        if changed or self._index is None:
            self._index = SliceIndex(slices)
        return self._index

    def _taint_rules(self) -> list[TaintRule]:
        """The DeviceTaintRules (DRADeviceTaintRules), each version parsed once."""
        assert self.handle is not None
        rules, _ = self._rules.update(self.handle.objects.list(TAINT_RULES))
        return [rule for rule in rules if rule is not None]

    def claim_timed_out(self, claim: Mapping[str, Any]) -> bool:
        """Whether bindingTimeout has passed since the allocation of a claim with binding
        conditions (upstream's isClaimTimeout)."""
        if not _has_binding_conditions(claim):
            return False
        at = _parse_time(_d(_d(claim.get("status")).get("allocation")).get("allocationTimestamp"))
        if at is None:
            return False
        return (datetime.now(UTC) - at).total_seconds() > self.args.binding_timeout

    def _cluster_devices(self) -> _ClusterDevices:
        """The devices the cluster's allocated claims take, brought up to date.

        Each claim version is read once and the sums are changed by what changed:
        when the lister tells which claims changed (the informers do), a cycle
        costs the claims changed since the last one, not a pass over every claim
        (the DRA benchmark has thousands)."""
        assert self.handle is not None
        lister = self.handle.objects
        keys: list[str] | None = None
        if self._tells_changes(lister):
            changes = cast(ObjectChanges, lister)
            self._claims_cursor, keys = changes.changes_since(CLAIMS, self._claims_cursor)
        if keys is None:
            self._claim_devices = {}
            self._cluster = _ClusterDevices()
            self._forget_allocations()
            for claim in lister.list(CLAIMS):
                self._claim_changed(_key(claim), claim)
            self._dirty_claims.clear()
            return self._cluster
        for key in {*keys, *self._dirty_claims}:
            ns, _, name = key.rpartition("/")
            self._claim_changed(key, lister.get(CLAIMS, ns, name))
        self._dirty_claims.clear()
        return self._cluster

    def _claim_changed(self, key: str, claim: dict[str, Any] | None) -> None:
        """Bring the record of the claim at ``key`` (None: gone) and the sums up to
        date; the claim as PreBind wrote it counts until the informer has it."""
        if claim is not None:
            assumed = self._assumed.get(str(_meta(claim).get("uid", "")))
            if assumed is not None and _rv(assumed) > _rv(claim):
                claim = assumed
        old = self._claim_devices.get(key)
        rv = str(_meta(claim).get("resourceVersion", "")) if claim is not None else ""
        if old is not None and claim is not None and old.resource_version == rv:
            return
        cluster = self._cluster
        if old is not None:
            del self._claim_devices[key]
            cluster.remove(old)
            self._touch(old)
        if claim is None:
            return
        new = _ClaimDevices(
            rv,
            str(_meta(claim).get("uid", "")),
            key,
            frozenset(allocated_devices((claim,))),
            shared_capacity((claim,)),
        )
        self._claim_devices[key] = new
        cluster.add(new)
        self._touch(new)

    def _taken(self) -> tuple[set[DeviceID], dict[DeviceID, dict[str, Decimal]]]:
        """The devices of every allocated claim and of the allocations in flight, and
        the shared ones (consumable capacity) with the capacity their shares take."""
        cluster = self._cluster_devices()
        taken = set(cluster.owners)
        shared: dict[DeviceID, dict[str, Decimal]] = {}
        _add_shares(shared, cluster.shares)
        if self._in_flight:
            taken.update(self._in_flight_sum.owners)
            _add_shares(shared, self._in_flight_sum.shares)
        return taken, shared

    def _start_in_flight(self, uid: str, key: str, allocation: dict[str, Any]) -> None:
        self._end_in_flight(uid)
        self._in_flight[uid] = (key, allocation)
        claim = ({"status": {"allocation": allocation}},)
        devices = _ClaimDevices(
            "", uid, key, frozenset(allocated_devices(claim)), shared_capacity(claim)
        )
        self._in_flight_devices[uid] = devices
        self._in_flight_sum.add(devices)
        self._touch(devices)

    def _end_in_flight(self, uid: str) -> None:
        self._in_flight.pop(uid, None)
        devices = self._in_flight_devices.pop(uid, None)
        if devices is not None:
            self._in_flight_sum.remove(devices)
            self._touch(devices)

    def _touch(self, record: _ClaimDevices) -> None:
        """A claim's devices were taken or freed: results kept for nodes that see
        their pools no longer hold."""
        versions = self._pool_versions
        for pool in record.pools():
            versions[pool] = versions.get(pool, 0) + 1

    def _forget_allocations(self) -> None:
        self._memo.clear()
        self._memo_size = 0

    def _allocated_to_another_claim(
        self, uid: str, allocation: Mapping[str, Any]
    ) -> tuple[DeviceID, str] | None:
        """A device of ``allocation`` that the informer now shows allocated to another
        claim, and that claim ("ns/name"); None when there is none.

        Not in upstream: the last check before PreBind writes an allocation. Another
        scheduler (kube-scheduler beside kscheduler) may have allocated the device
        since Filter; writing it too would give one device to two claims
        (kubernetes#128980). This narrows that window to the time the other
        scheduler's write takes to reach the informer; it does not close it."""
        mine = allocated_devices(({"status": {"allocation": allocation}},))
        if not mine:
            return None
        owners = self._cluster_devices().owners
        others = {
            did: sorted(key for other, key in owners[did].items() if other != uid)
            for did in mine
            if did in owners
        }
        both = [did for did, keys in others.items() if keys]
        if not both:
            return None
        first = min(both)
        return first, others[first][0]

    # ---- PreEnqueue --------------------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        if not pod.spec.get("resourceClaims"):
            return None
        try:
            self._pod_claims(pod)
        except ClaimError as exc:
            return Status.unresolvable(str(exc))
        return None

    # ---- PreFilter ---------------------------------------------------------------------
    def sign_pod(self, pod: PodInfo) -> tuple[list[SignFragment], Status | None]:
        """Pods with claims have no signature (OpportunisticBatching); others add nothing."""
        if pod.spec.get("resourceClaims"):
            return [], Status.unschedulable("pods with dra resource claims are not signable")
        return [], None

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        s = _State()
        state.write(STATE_KEY, s)
        if state.record:
            report: DeviceReport = {}
            state.write(DEVICE_REPORT_KEY, report)
        claims: list[_ClaimInfo] = []
        if pod.spec.get("resourceClaims"):
            try:
                claims = self._pod_claims(pod)
            except ClaimError as exc:
                return None, Status.unresolvable(str(exc))
        extended = self._extended_claim(pod, s)
        if extended is not None:
            claims.append(extended)
        if not claims:
            return None, Status.skip()
        assert self.handle is not None
        to_allocate = 0
        for info in claims:
            alloc = _d(_d(info.claim.get("status")).get("allocation"))
            if alloc:
                ns = alloc.get("nodeSelector")
                if isinstance(ns, dict):
                    try:
                        info.available_on = NodeSelector.parse(ns, "allocation.nodeSelector")
                    except SelectorError as exc:
                        return None, Status.as_error(str(exc))
                continue
            to_allocate += 1
            if info.uid in self._in_flight:
                key = f"{pod.namespace}/{_meta(info.claim).get('name', '')}"
                return None, Status.unresolvable(
                    f"resource claim {key} is in the process of being allocated"
                )
            if info.extended:  # its requests are made per node, in Filter
                continue
            for req in _l(_d(_d(info.claim.get("spec")).get("devices")).get("requests")):
                req = _d(req)
                rname = str(req.get("name", ""))
                if req.get("exactly") is not None:
                    st = self._check_class(_d(req.get("exactly")).get("deviceClassName"), rname)
                elif req.get("firstAvailable"):
                    st = None
                    for sub in _l(req.get("firstAvailable")):
                        sub = _d(sub)
                        st = self._check_class(
                            sub.get("deviceClassName"), f"{rname}/{sub.get('name', '')}"
                        )
                        if st is not None:
                            break
                else:
                    key = f"{pod.namespace}/{_meta(info.claim).get('name', '')}"
                    st = Status.unresolvable(
                        f"resource claim {key}, request {rname}: unknown request type"
                    )
                if st is not None:
                    return None, st
        if to_allocate:
            classes = {str(_meta(c).get("name", "")): c for c in self.handle.objects.list(CLASSES)}
            taken, shared = self._taken()
            index, rules = self._slice_index(), self._taint_rules()
            s.allocator = Allocator(index, classes, taken, rules, shared=shared)
            if self.memo_allocations and not state.record and extended is None:
                inputs = (index, json.dumps(classes, sort_keys=True, default=str), rules)
                if self._memo_inputs is None or not _same_inputs(self._memo_inputs, inputs):
                    self._forget_allocations()
                    self._memo_inputs = inputs
                s.memo_claims = json.dumps(
                    [c.claim.get("spec") for c in claims if not c.allocated],
                    sort_keys=True,
                    default=str,
                )
                s.pool_versions = dict(self._pool_versions)
        s.claims = claims
        return None, None

    def _extended_claim(self, pod: PodInfo, s: _State) -> _ClaimInfo | None:
        """The claim for the pod's extended resources when a DeviceClass backs one of
        them: the pod's own from an earlier attempt, or a new one in memory."""
        if self.handle is None:
            return None
        wanted = {
            n: q
            for n, q in pod.fit_requests.scalar.items()
            if q and is_dra_extended_resource_name(n)
        }
        if not wanted:
            return None
        classes = extended_resource_classes(self.handle.objects.list(CLASSES))
        if not any(n in classes for n in wanted):
            return None
        s.extended_resources = wanted
        s.classes = classes
        for claim in self.handle.objects.list(CLAIMS, pod.namespace):
            if _is_extended_claim_of(claim, pod):
                meta = _meta(claim)
                current = self._claim(pod.namespace, str(meta.get("name", "")))
                return _ClaimInfo(
                    EXTENDED_POD_CLAIM, current if current is not None else claim, extended=True
                )
        fresh: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "namespace": pod.namespace,
                "name": EXTENDED_CLAIM_NAME,
                # a stand-in uid for the allocation in flight
                "uid": str(uuid.uuid4()),
                "generateName": f"{pod.name}-extended-resources-",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod.name,
                        "uid": pod.uid,
                        "controller": True,
                    }
                ],
                "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            },
            "spec": {},
        }
        return _ClaimInfo(EXTENDED_POD_CLAIM, fresh, extended=True)

    def _filter_extended(
        self, s: _State, info: _ClaimInfo, pod: PodInfo, node_info: NodeInfo
    ) -> Status | None:
        """Which of the pod's extended resources the node leaves to DRA; records the
        extended claim with the node's requests in ``s.node_extended``."""
        if _d(_d(info.claim.get("spec")).get("devices")).get("requests") is not None:
            # a claim of an earlier attempt: PostFilter deletes it, then start anew
            return Status.unresolvable(MSG_EXTENDED_STALE)
        allocatable = node_info.allocatable.scalar
        need: dict[str, int] = {}
        for name, quantity in s.extended_resources.items():
            have = allocatable.get(name)
            if name in s.classes and not have:
                need[name] = quantity
            elif have is None:
                return Status.unresolvable(MSG_EXTENDED_CANNOT_FIT)
        s.node_extended.pop(node_info.name, None)
        if not need or info.allocated:
            return None
        requests, mappings = extended_resource_requests(pod.spec, need, s.classes)
        node_claim = copy.deepcopy(info.claim)
        node_claim.setdefault("spec", {})["devices"] = {"requests": requests}
        s.node_extended[node_info.name] = (node_claim, mappings)
        return None

    def _check_class(self, class_name: Any, request: str) -> Status | None:
        assert self.handle is not None
        if not class_name:
            return Status.as_error(f"request {request}: unsupported request type")
        if self.handle.objects.get(CLASSES, "", str(class_name)) is None:
            return Status.unresolvable(
                f"request {request}: device class {class_name} does not exist"
            )
        return None

    # ---- Filter ------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        s = state.get(STATE_KEY)
        if not isinstance(s, _State) or not s.has_claims:
            return None
        node = node_info.node
        labels = node.labels if node is not None else {}
        extended = s.extended
        if extended is not None:
            st = self._filter_extended(s, extended, pod, node_info)
            # rejected, or nothing left to do: the node's allocatable serves the
            # extended resources and the pod has no claims of its own
            served = node_info.name not in s.node_extended and not s.has_user_claims
            if st is not None or served:
                if state.record:
                    self._record(state, s, node_info.name, labels, [], [], st)
                return st
        unavailable = []
        for i, info in enumerate(s.claims):
            if info.available_on is not None and not info.available_on.matches(
                labels, node_info.name
            ):
                unavailable.append(i)
                continue
            if info.allocated:
                # binding failed or timed out: PostFilter may deallocate the claim
                try:
                    ready = claim_ready_for_binding(info.claim)
                except BindingFailed:
                    unavailable.append(i)
                    continue
                if not ready and self.claim_timed_out(info.claim):
                    unavailable.append(i)
        allocations: list[dict[str, Any]] = []
        if s.allocator is not None:
            node_extended = s.node_extended.get(node_info.name)
            claims = [
                node_extended[0] if c.extended and node_extended is not None else c.claim
                for c in s.node_to_allocate(node_info.name)
            ]
            failure: Status | None = None
            try:
                result = self._allocate(s, s.allocator, node_info, labels, claims)
            except AllocationTimeout as exc:
                # transient: an Error, so that the pod is retried after a backoff
                failure = Status.as_error(str(exc))
            except AllocationError as exc:
                failure = Status.as_error(str(exc))
            except (FailedOnNode, Unsupported) as exc:
                failure = Status.unresolvable(str(exc))
            else:
                if result is None or len(result) != len(claims):
                    failure = Status.unresolvable(MSG_CANNOT_ALLOCATE)
                else:
                    allocations = result
            if state.record:
                self._record(state, s, node_info.name, labels, allocations, unavailable, failure)
            if failure is not None:
                return failure
        elif state.record:
            self._record(state, s, node_info.name, labels, [], unavailable, None)
        if unavailable:
            s.unavailable.update(unavailable)
            return Status.unresolvable(MSG_NOT_AVAILABLE)
        if s.allocator is not None:
            s.node_allocations[node_info.name] = allocations
        return None

    def _allocate(
        self,
        s: _State,
        allocator: Allocator,
        node_info: NodeInfo,
        labels: Mapping[str, str],
        claims: list[dict[str, Any]],
    ) -> list[dict[str, Any]] | None:
        """The claims' allocation on the node: kept from an earlier cycle when the node,
        the devices taken in its pools and the claims' specs are the same, else worked
        out (and kept, unless it holds a share: each share gets its own ID)."""
        node = node_info.node
        versions: tuple[int, ...] = ()
        if s.memo_claims:
            pools = allocator.index.pools(node_info.name, labels)
            versions = tuple(s.pool_versions.get((p.driver, p.pool), 0) for p in pools)
            kept = self._memo.get(node_info.name, {}).get(s.memo_claims)
            if kept is not None and kept[0] is node and kept[1] == versions:
                return kept[2]
        timeout = self.args.filter_timeout
        deadline = time.monotonic() + timeout if timeout > 0 else None
        result = allocator.allocate(node_info.name, labels, claims, deadline=deadline)
        if s.memo_claims and not _has_shares(result):
            if self._memo_size >= MEMO_LIMIT:
                self._forget_allocations()
            per_node = self._memo.setdefault(node_info.name, {})
            if s.memo_claims not in per_node:
                self._memo_size += 1
            per_node[s.memo_claims] = (node, versions, result)
        return result

    def _record(
        self,
        state: CycleState,
        s: _State,
        node: str,
        labels: Mapping[str, str],
        allocations: Sequence[Mapping[str, Any]],
        unavailable: Sequence[int],
        failure: Status | None,
    ) -> None:
        """What each claim would get on the node, for ``kscheduler explain``: the devices,
        or why none (when the claims do not fit together, each is tried alone to tell
        which one cannot be allocated on the node at all)."""
        report: DeviceReport | None = state.get(DEVICE_REPORT_KEY)
        if report is None:  # written by PreFilter, shared by the cycle's clones
            return
        out: list[ClaimDevices] = []
        fresh = iter(allocations)
        node_extended = s.node_extended.get(node)
        for i, info in enumerate(s.claims):
            meta = _meta(info.claim)
            entry = ClaimDevices(
                f"{meta.get('namespace', '')}/{meta.get('name', '')}", info.pod_claim
            )
            out.append(entry)
            claim = info.claim
            if info.extended and not info.allocated:
                if node_extended is None:
                    entry.reason = (
                        failure.message
                        if failure is not None and failure.message != MSG_CANNOT_ALLOCATE
                        else "the node's allocatable serves the pod's extended resources"
                    )
                    continue
                claim = node_extended[0]
            if info.allocated:
                entry.allocated = True
                entry.devices = result_devices(_d(_d(info.claim.get("status")).get("allocation")))
                if i in unavailable:
                    entry.reason = MSG_NOT_AVAILABLE
                continue
            if failure is None:
                entry.devices = result_devices(next(fresh, {}))
                continue
            if failure.code != Code.UNSCHEDULABLE_AND_UNRESOLVABLE or failure.message != (
                MSG_CANNOT_ALLOCATE
            ):
                entry.reason = failure.message
                continue
            assert s.allocator is not None
            try:
                alone = s.allocator.allocate(node, labels, [claim])
            except (AllocationError, FailedOnNode, Unsupported) as exc:
                entry.reason = str(exc)
                continue
            if alone:
                entry.reason = (
                    "fits alone, but not together with the pod's other claims: "
                    + ", ".join(result_devices(alone[0]))
                )
            else:
                entry.reason = (
                    "no free devices on the node satisfy its requests, selectors and constraints"
                )
        report[node] = out

    # ---- PostFilter --------------------------------------------------------------------
    async def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status | None]:
        s = state.get(STATE_KEY)
        if not isinstance(s, _State):
            return None, Status.as_error(MSG_STATE_NOT_FOUND)
        if not s.has_claims:
            return None, Status.unschedulable()
        assert self.handle is not None
        extended = s.extended
        stale = extended is not None and _meta(extended.claim).get("name") != EXTENDED_CLAIM_NAME
        for index in sorted(s.unavailable):
            if s.claims[index].extended:
                if stale:
                    break
                continue
            claim = s.claims[index].claim
            reserved = _l(_d(claim.get("status")).get("reservedFor"))
            if not reserved or (len(reserved) == 1 and _d(reserved[0]).get("uid") == pod.uid):
                body = copy.deepcopy(claim)
                st = body.setdefault("status", {})
                for key in ("reservedFor", "allocation", "devices"):
                    st.pop(key, None)
                meta = _meta(claim)
                try:
                    await self.handle.client.request(
                        "PUT",
                        f"{API}/namespaces/{meta.get('namespace', '')}/resourceclaims/"
                        f"{meta.get('name', '')}/status",
                        body,
                    )
                except Exception as exc:
                    return None, Status.as_error(str(exc) or type(exc).__name__)
                return None, Status.unschedulable(MSG_DEALLOCATED)
        if extended is not None and stale:
            try:
                await self._delete_claim(extended.claim)
            except Exception as exc:
                return None, Status.as_error(str(exc) or type(exc).__name__)
            return None, Status.unschedulable(MSG_DELETED)
        return None, Status.unschedulable()

    async def _delete_claim(self, claim: Mapping[str, Any]) -> None:
        """Remove the delete-protection finalizer (with conflict retries), then delete
        the claim (already gone is fine)."""
        assert self.handle is not None
        client = self.handle.client
        meta = _meta(claim)
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        path = f"{API}/namespaces/{ns}/resourceclaims/{name}"
        body = copy.deepcopy(dict(claim))
        for attempt in range(CONFLICT_RETRIES):
            try:
                if attempt:
                    try:
                        body = await client.request("GET", path)
                    except Exception as exc:
                        raise ClaimError(f"get resourceclaim {ns}/{name}: {exc}") from exc
                finalizers = [f for f in _l(_meta(body).get("finalizers")) if f != FINALIZER]
                body.setdefault("metadata", {})["finalizers"] = finalizers
                try:
                    await client.request("PUT", path, body)
                except Exception as exc:
                    if _conflict(exc):
                        raise
                    raise ClaimError(f"update resourceclaim {ns}/{name}: {exc}") from exc
                break
            except Exception as exc:
                if _conflict(exc) and attempt + 1 < CONFLICT_RETRIES:
                    await asyncio.sleep(CONFLICT_DELAY)
                    continue
                raise
        try:
            await client.request("DELETE", path)
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise

    # ---- Score -------------------------------------------------------------------------
    def pre_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> Status | None:
        """Skip for a pod without claims, or whose claims have no request with
        prioritized alternatives (firstAvailable): Score would be 0 on every node."""
        s = state.get(STATE_KEY)
        if not isinstance(s, _State) or not any(map(_has_alternatives, s.claims)):
            return Status.skip()
        return None

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        s = state.get(STATE_KEY)
        if not isinstance(s, _State) or not s.has_claims:
            return 0, None
        allocations = s.node_allocations.get(node_info.name)
        if allocations is None:
            return 0, None
        score = 0
        it = iter(allocations)
        for info in s.claims:
            alloc = _d(_d(info.claim.get("status")).get("allocation")) or next(it, {})
            used = {
                str(_d(r).get("request", ""))
                for r in _l(_d(alloc.get("devices")).get("results"))
                if "/" in str(_d(r).get("request", ""))
            }
            for req in _l(_d(_d(info.claim.get("spec")).get("devices")).get("requests")):
                req = _d(req)
                for i, sub in enumerate(_l(req.get("firstAvailable"))):
                    if f"{req.get('name', '')}/{_d(sub).get('name', '')}" in used:
                        score += FIRST_AVAILABLE_MAX_SIZE - i
        return score, None

    def normalize_score(
        self, state: CycleState, pod: PodInfo, scores: list[NodeScore]
    ) -> Status | None:
        highest = max((s.score for s in scores), default=0)
        if highest == 0:
            return None
        for s in scores:
            s.score = s.score * MAX_NODE_SCORE // highest
        return None

    # ---- Reserve -----------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        s = state.get(STATE_KEY)
        if not isinstance(s, _State) or not s.has_claims or s.allocator is None:
            return None
        todo = s.node_to_allocate(node_name)
        if not todo:
            return None
        allocations = s.node_allocations.get(node_name)
        if not allocations:
            return Status.as_error("claim allocation not found for node")
        if len(allocations) != len(todo):
            return Status.as_error(
                f"internal error, have {len(allocations)} allocations, {len(todo)} claims "
                f"to allocate, want {len(todo)} claims"
            )
        for info, kept in zip(todo, allocations, strict=True):
            alloc = copy.deepcopy(kept)  # Filter's results may be kept for later cycles
            info.allocation = alloc
            info.reserved_uid = info.uid
            if info.extended:
                info.node_claim, info.mappings = s.node_extended[node_name]
            meta = _meta(info.claim)
            self._start_in_flight(info.uid, f"{meta.get('namespace')}/{meta.get('name')}", alloc)
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        s = state.get(STATE_KEY)
        if not isinstance(s, _State) or not s.has_claims:
            return
        for info in s.claims:
            if info.allocation is not None:
                self._end_in_flight(info.reserved_uid or info.uid)
                if self._assumed.pop(info.uid, None) is not None:
                    self._dirty_claims.add(_key(info.claim))
            if info.extended:
                if _meta(info.claim).get("name") != EXTENDED_CLAIM_NAME:
                    # created in PreBind: delete it, so that no claim is left behind
                    asyncio.get_running_loop().create_task(self._delete_quietly(info.claim))
                continue
            current = self._claim(
                str(_meta(info.claim).get("namespace", "")), str(_meta(info.claim).get("name", ""))
            )
            if (
                current is not None
                and _d(current.get("status")).get("allocation")
                and (_reserved_for(current, pod))
            ):
                asyncio.get_running_loop().create_task(self._unreserve_claim(current, pod))

    async def _delete_quietly(self, claim: Mapping[str, Any]) -> None:
        try:
            await self._delete_claim(claim)
        except Exception:  # as upstream: logged; a later attempt's PostFilter retries
            return

    async def _unreserve_claim(self, claim: Mapping[str, Any], pod: PodInfo) -> None:
        assert self.handle is not None
        meta = _meta(claim)
        patch = {
            "metadata": {"uid": meta.get("uid")},
            "status": {"reservedFor": [{"$patch": "delete", "uid": pod.uid}]},
        }
        try:
            await self.handle.client.request(
                "PATCH",
                f"{API}/namespaces/{meta.get('namespace', '')}/resourceclaims/"
                f"{meta.get('name', '')}/status",
                patch,
                content_type="application/strategic-merge-patch+json",
            )
        except Exception:  # upstream logs and goes on; the controller cleans up later
            return

    # ---- PreBind -----------------------------------------------------------------------
    def pre_bind_pre_flight(
        self, state: CycleState, pod: PodInfo, node_name: str
    ) -> tuple[PreBindPreFlightResult | None, Status | None]:
        s = state.get(STATE_KEY)
        if not isinstance(s, _State):
            return None, Status.as_error(MSG_STATE_NOT_FOUND)
        if not s.has_claims:
            return None, Status.skip()
        return None, None

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        s = state.get(STATE_KEY)
        if not isinstance(s, _State):
            return Status.as_error(MSG_STATE_NOT_FOUND)
        written: list[str] = []
        for info in s.claims:
            if _reserved_for(info.claim, pod):
                continue
            if info.extended and info.allocation is None:
                continue  # the node's allocatable serves the extended resources
            uid = info.reserved_uid or info.uid
            try:
                if info.extended and _meta(info.claim).get("name") == EXTENDED_CLAIM_NAME:
                    info.claim = await self._create_extended_claim(info)
                info.claim = await self._bind_claim(info, pod)
                if info.extended:
                    await self._wait_for_informer(info.claim)
                    await self._write_extended_status(info, pod)
            except Exception as exc:
                return Status.as_error(str(exc) or type(exc).__name__)
            written.append(uid)
        for uid in written:
            self._end_in_flight(uid)
        if not any(_has_binding_conditions(info.claim) for info in s.claims):
            return None
        return await self._wait_for_binding_conditions(s, pod, node_name)

    async def _wait_for_binding_conditions(
        self, s: _State, pod: PodInfo, node_name: str
    ) -> Status | None:
        """DRADeviceBindingConditions: wait until every binding condition of the pod's
        allocated devices is True (the driver sets them in the claims'
        ``status.devices``), checking at once and then every 5s, for at most
        bindingTimeout. A True binding failure condition, or the timeout, is an Error:
        Unreserve runs, and in the next attempt Filter finds the claim unavailable and
        PostFilter deallocates it."""
        assert self.handle is not None
        self.handle.recorder.event(
            pod.raw,
            "Normal",
            "BindingConditionsPending",
            "Scheduling",
            MSG_BINDING_PENDING.format(node=node_name),
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.args.binding_timeout
        while True:
            try:
                if self._pod_ready_for_binding(s):
                    return None
            except (BindingFailed, BindingTimeout, ClaimError) as exc:
                return Status.as_error(str(exc))
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.sleep(min(BINDING_POLL, left))
            if loop.time() >= deadline:
                break
        return Status.as_error("device binding timeout: context deadline exceeded")

    def _pod_ready_for_binding(self, s: _State) -> bool:
        for info in s.claims:
            if info.extended and info.allocation is None:
                continue  # the in-memory claim of extended resources the node serves
            meta = _meta(info.claim)
            name = str(meta.get("name", ""))
            claim = self._claim(str(meta.get("namespace", "")), name)
            if claim is None:
                raise ClaimError(f'resourceclaim.resource.k8s.io "{name}" not found')
            info.claim = claim
            if not claim_ready_for_binding(claim):
                if self.claim_timed_out(claim):
                    raise BindingTimeout(f"device binding timeout: claim={name}")
                return False
        return True

    async def _create_extended_claim(self, info: _ClaimInfo) -> dict[str, Any]:
        """Create the extended claim as Filter made it for the node (no name, uid or
        status: the apiserver generates the name)."""
        assert self.handle is not None and info.node_claim is not None
        body = copy.deepcopy(info.node_claim)
        meta = body.setdefault("metadata", {})
        meta.pop("name", None)
        meta.pop("uid", None)
        body.pop("status", None)
        ns = str(meta.get("namespace", ""))
        try:
            created: dict[str, Any] = await self.handle.client.request(
                "POST", f"{API}/namespaces/{ns}/resourceclaims", body
            )
        except Exception as exc:
            raise ClaimError(f"create claim for extended resources {ns}/: {exc}") from exc
        return created

    async def _wait_for_informer(self, claim: Mapping[str, Any]) -> None:
        """Wait (up to EXTENDED_CLAIM_WAIT) until the informer has the created claim, so
        that its devices stay taken for the next pods once it leaves the in-flight
        allocations; past the limit, go on."""
        assert self.handle is not None
        meta = _meta(claim)
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        deadline = time.monotonic() + EXTENDED_CLAIM_WAIT
        while self.handle.objects.get(CLAIMS, ns, name) is None:
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.05)

    async def _write_extended_status(self, info: _ClaimInfo, pod: PodInfo) -> None:
        """The pod's ``status.extendedResourceClaimStatus``: the claim's name and which
        request serves each container's extended resource."""
        assert self.handle is not None
        if not info.mappings:
            raise ClaimError(
                f"nil or empty request mappings, no update of pod {pod.namespace}/{pod.name} "
                "ExtendedResourceClaimStatus"
            )
        patch = {
            "status": {
                "extendedResourceClaimStatus": {
                    "requestMappings": info.mappings,
                    "resourceClaimName": _meta(info.claim).get("name", ""),
                }
            }
        }
        try:
            await self.handle.client.request(
                "PATCH",
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                patch,
                content_type="application/strategic-merge-patch+json",
            )
        except Exception as exc:
            raise ClaimError(
                f"update pod {pod.namespace}/{pod.name} ExtendedResourceClaimStatus: {exc}"
            ) from exc

    async def _bind_claim(self, info: _ClaimInfo, pod: PodInfo) -> dict[str, Any]:
        assert self.handle is not None
        client = self.handle.client
        meta = _meta(info.claim)
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        path = f"{API}/namespaces/{ns}/resourceclaims/{name}"
        claim = copy.deepcopy(info.claim)
        allocation = info.allocation
        for attempt in range(CONFLICT_RETRIES):
            if attempt:
                claim = await client.request("GET", path)
            if _meta(claim).get("deletionTimestamp"):
                raise ClaimError(f"claim {ns}/{name} got deleted in the meantime")
            try:
                if allocation is not None:
                    if _d(claim.get("status")).get("allocation"):
                        raise ClaimError(
                            f"claim {ns}/{name} got allocated elsewhere in the meantime"
                        )
                    taken_by = self._allocated_to_another_claim(info.uid, allocation)
                    if taken_by is not None:
                        raise ClaimError(
                            f"device {taken_by[0]} for claim {ns}/{name} got allocated to claim "
                            f"{taken_by[1]} in the meantime"
                        )
                    finalizers = _l(_meta(claim).get("finalizers"))
                    if FINALIZER not in finalizers:
                        claim.setdefault("metadata", {})["finalizers"] = [*finalizers, FINALIZER]
                        try:
                            claim = await client.request("PUT", path, claim)
                        except Exception as exc:
                            if _conflict(exc):
                                raise
                            raise ClaimError(f"add finalizer to claim {ns}/{name}: {exc}") from exc
                    claim.setdefault("status", {})["allocation"] = copy.deepcopy(allocation)
                status = claim.setdefault("status", {})
                status["reservedFor"] = [
                    *_l(status.get("reservedFor")),
                    {"resource": "pods", "name": pod.name, "uid": pod.uid},
                ]
                if not status.get("allocation"):
                    raise ClaimError(f"claim {ns}/{name} got deallocated elsewhere in the meantime")
                if not status["allocation"].get("allocationTimestamp"):
                    status["allocation"]["allocationTimestamp"] = datetime.now(UTC).strftime(
                        "%Y-%m-%dT%H:%M:%SZ"
                    )
                try:
                    updated: dict[str, Any] = await client.request("PUT", path + "/status", claim)
                except Exception as exc:
                    if _conflict(exc):
                        raise
                    what = "allocation and reservation" if allocation is not None else "reservation"
                    raise ClaimError(f"add {what} to claim {ns}/{name}: {exc}") from exc
            except Exception as exc:
                if _conflict(exc) and attempt + 1 < CONFLICT_RETRIES:
                    await asyncio.sleep(CONFLICT_DELAY)
                    continue
                raise
            self._assumed[str(_meta(updated).get("uid", ""))] = updated
            self._dirty_claims.add(_key(updated))
            return updated
        raise ClaimError(f"claim {ns}/{name}: too many conflicts")  # pragma: no cover

    # ---- queueing hints ----------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        add_update = ActionType.ADD | ActionType.UPDATE
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM)
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.RESOURCE_CLAIM, add_update | ActionType.DELETE),
                self._after_claim_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.RESOURCE_SLICE, add_update), self._if_pod_has_claims
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.DEVICE_CLASS, add_update), self._if_pod_has_claims
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.DEVICE_TAINT_RULE, ActionType.ALL),
                self._after_taint_rule_change,
            ),
        ]

    def _after_taint_rule_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """A DeviceTaintRule added, changed or deleted: queue a pod with claims when the
        taints of some device in the ResourceSlices changed (upstream sees this as an
        update of those slices)."""
        if not pod.spec.get("resourceClaims"):
            return QueueingHint.SKIP
        last = self._last_rule_event
        if last is not None and last[0] is old and last[1] is new:
            changed = last[2]
        else:
            changed = self._rule_changes_taints(old, new)
            self._last_rule_event = (old, new, changed)
        return QueueingHint.QUEUE if changed else QueueingHint.SKIP

    def _rule_changes_taints(self, old: Any, new: Any) -> bool:
        assert self.handle is not None
        before = TaintRule.parse(_d(old)) if old is not None else None
        after = TaintRule.parse(_d(new)) if new is not None else None
        if before == after:
            return False
        for raw in self.handle.objects.list(SLICES):
            spec = _d(raw.get("spec"))
            driver = str(spec.get("driver", ""))
            pool = str(_d(spec.get("pool")).get("name", ""))
            for dev in _l(spec.get("devices")):
                name = str(_d(dev).get("name", ""))
                had = before.taint if before and before.selects(driver, pool, name) else None
                has = after.taint if after and after.selects(driver, pool, name) else None
                if had != has:
                    return True
        return False

    def _if_pod_has_claims(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Pods with claims, or with extended resources a DeviceClass may back."""
        return QueueingHint.QUEUE if _uses_dra(pod) else QueueingHint.SKIP

    def _after_claim_change(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when the claim is one of the pod's, or when another claim's devices
        were freed (its allocation removed, or the claim deleted while allocated)."""
        uses_dra, names = pod.ext.get(_EXT_CLAIM_REFS) or _claim_refs(pod)
        if not uses_dra:
            return QueueingHint.SKIP
        last = self._last_claim_event
        if last is None or last[0] is not old or last[1] is not new:
            last = (old, new, *_claim_event(old, new))
            self._last_claim_event = last
        _, _, namespace, name, freed = last
        if freed or (name in names and namespace == pod.namespace):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP


def _has_alternatives(info: _ClaimInfo) -> bool:
    """Whether a request of the claim lists alternatives (firstAvailable), the only
    requests Score counts."""
    requests = _l(_d(_d(info.claim.get("spec")).get("devices")).get("requests"))
    return any(_d(req).get("firstAvailable") for req in requests)


def _same_inputs(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """(slice index, classes as JSON, taint rules): the same index object, equal
    classes and rules."""
    return a[0] is b[0] and a[1:] == b[1:]


def _has_shares(result: list[dict[str, Any]] | None) -> bool:
    return result is not None and any(
        "shareID" in entry
        for alloc in result
        for entry in _l(_d(alloc.get("devices")).get("results"))
    )


def _claim_event(old: Any, new: Any) -> tuple[Any, Any, bool]:
    """A claim event's (namespace, name) of the claim still there (None, None when it
    was deleted) and whether it freed devices: the allocation removed, or the claim
    deleted while allocated."""
    was_allocated = old is not None and bool(_d(_d(old).get("status")).get("allocation"))
    if new is None:
        return None, None, was_allocated
    claim = _d(new)
    meta = _meta(claim)
    freed = was_allocated and not _d(claim.get("status")).get("allocation")
    name = meta.get("name")
    return meta.get("namespace"), name if isinstance(name, str) else None, freed


ENTRY = PluginEntry(NAME, DynamicResources, DynamicResources.new, parse_args)
