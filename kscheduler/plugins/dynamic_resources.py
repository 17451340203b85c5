"""DynamicResources: kube-scheduler's DRA plugin, reduced to what pods without claims see.

kube-scheduler (1.34+) enables DynamicResources by default, right before
DefaultPreemption, so its PostFilter speaks first when a pod fits nowhere. For a
pod without ``spec.resourceClaims`` it answers a bare Unschedulable (1.37: no
reason, so nothing of it shows in the FailedScheduling message). This plugin
reproduces exactly that:

* PreFilter records that it ran and returns Skip for a pod without claims.
* PostFilter answers Unschedulable without a reason. When its
  PreFilter did not run (an earlier PreFilter rejected the pod as
  UnschedulableAndUnresolvable) it fails with Error "not found", as upstream does
  on its missing cycle state; the framework then stops PostFilter there, so no
  preemption is attempted for such a pod.

Intentional difference: kscheduler does not allocate DRA ResourceClaims. A pod
with ``spec.resourceClaims`` is rejected at PreFilter as UnschedulableAndUnresolvable
with a message saying so, where kube-scheduler would allocate devices for it. Such
a pod should be left to kube-scheduler (another schedulerName).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kscheduler.framework import (
    CycleState,
    Handle,
    NodeInfo,
    NodeToStatus,
    PluginEntry,
    PodInfo,
    PostFilterResult,
    PreFilterResult,
    Status,
)

NAME = "DynamicResources"
STATE_KEY = "PreFilter" + NAME

#: What upstream's PostFilter reports when its cycle state is missing.
MSG_STATE_NOT_FOUND = "not found"
MSG_CLAIMS_UNSUPPORTED = (
    "pod uses spec.resourceClaims: kscheduler does not allocate DRA ResourceClaims "
    "(schedule this pod with kube-scheduler)"
)


@dataclass(frozen=True, slots=True)
class _State:
    has_claims: bool


class DynamicResources:
    name = NAME

    @classmethod
    def new(cls, args: Any, handle: Handle) -> DynamicResources:
        return cls()

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """Skip without claims; UnschedulableAndUnresolvable with claims (not supported)."""
        claims = pod.spec.get("resourceClaims")
        has_claims = bool(claims)
        state.write(STATE_KEY, _State(has_claims))
        if not has_claims:
            return None, Status.skip()
        return None, Status.unresolvable(MSG_CLAIMS_UNSUPPORTED)

    async def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status | None]:
        """Unschedulable (no claim of this pod is allocated, so none can be freed);
        Error when PreFilter did not run."""
        if state.get(STATE_KEY) is None:
            return None, Status.as_error(MSG_STATE_NOT_FOUND)
        return None, Status.unschedulable()


ENTRY = PluginEntry(NAME, DynamicResources, DynamicResources.new)
