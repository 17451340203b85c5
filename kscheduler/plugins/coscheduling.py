"""Coscheduling: gang scheduling, a pod group binds all its minimum members or none.

Not in the default profile; enable it in a profile, e.g.::

    profiles:
    - schedulerName: kscheduler
      plugins:
        multiPoint:
          enabled:
          - name: Coscheduling
      pluginConfig:
      - name: Coscheduling
        args:
          permitWaitingTimeSeconds: 60

A pod joins a group with two labels, which every member carries alike::

    scheduling.x-k8s.io/pod-group: training-job-7      # the group, within the namespace
    scheduling.x-k8s.io/min-available: "4"             # members that must run together

Labels (rather than a PodGroup object) keep the plugin free of custom resources:
a group is the set of pods of one namespace with the same group label.

* PreEnqueue notes every group member that enters the queue (it never gates).
* PreFilter rejects a member (UnschedulableAndUnresolvable) while fewer than
  min-available members are known: the members the queue has seen and not yet
  placed, plus those assumed, waiting or bound. A member whose min-available
  label is missing or not a positive integer is rejected the same way.
* Permit holds each member (Wait) until min-available members of its group are
  assumed, waiting or bound, then allows the waiting ones all at once. A waiting
  member moves its pending siblings to activeQ, so that members rejected before
  the group was complete are tried again at once.
* A member that waits longer than ``permitWaitingTimeSeconds`` is rejected; its
  Unreserve rejects every waiting member of the group, so all of them release
  what they reserved and go back to the queue: no member binds.

Limitation: pending members are known from the queue's side only; one deleted
before it was placed is still counted until it has not been seen for
``STALE_MEMBER_SECONDS`` (a stale count only means that Permit waits for it
and times out).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kscheduler.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Handle,
    NodeInfo,
    PluginEntry,
    PodInfo,
    PreFilterResult,
    QueueingHint,
    Status,
)
from kscheduler.framework.args import Fields
from kscheduler.framework.cycle_state import PODS_TO_ACTIVATE_KEY

NAME = "Coscheduling"
LABEL_POD_GROUP = "scheduling.x-k8s.io/pod-group"
LABEL_MIN_AVAILABLE = "scheduling.x-k8s.io/min-available"
DEFAULT_PERMIT_WAITING_TIME_SECONDS = 60
#: A pending member not seen by the queue for this long is forgotten. Pending pods
#: pass PreEnqueue again at least every five minutes (the unschedulable flush).
STALE_MEMBER_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class CoschedulingArgs:
    #: How long a member waits at Permit for the rest of its group.
    permit_waiting_time_seconds: int = DEFAULT_PERMIT_WAITING_TIME_SECONDS


def parse_args(raw: Mapping[str, Any]) -> CoschedulingArgs:
    f = Fields(raw)
    wait = f.integer("permitWaitingTimeSeconds", DEFAULT_PERMIT_WAITING_TIME_SECONDS)
    f.done()
    if wait <= 0:
        raise f.error("permitWaitingTimeSeconds", f"must be greater than 0, got {wait}")
    return CoschedulingArgs(wait)


def group_of(pod: PodInfo) -> str | None:
    """The pod's group key, "namespace/group", or None when it is in no group."""
    name = pod.labels.get(LABEL_POD_GROUP)
    return f"{pod.namespace}/{name}" if name else None


def min_available(pod: PodInfo) -> int | None:
    """The pod's min-available label as a positive integer, else None."""
    text = pod.labels.get(LABEL_MIN_AVAILABLE, "")
    if not text.isdigit():
        return None
    n = int(text)
    return n if n > 0 else None


class Coscheduling:
    name = NAME

    def __init__(
        self,
        args: CoschedulingArgs,
        handle: Handle,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.args = args
        self._handle = handle
        self._clock = clock
        #: group -> {uid: (pod, last seen)} of members the queue handed over
        self._pending: dict[str, dict[str, tuple[PodInfo, float]]] = {}
        self._last_sweep = clock()

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Coscheduling:
        return cls(args if isinstance(args, CoschedulingArgs) else parse_args({}), handle)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        # A new member may complete the group. (Members rejected at Permit are
        # activated by the next member that waits.)
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.ADD), self._is_sibling
            )
        ]

    def _is_sibling(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        group = group_of(new) if isinstance(new, PodInfo) else None
        if group is not None and group == group_of(pod):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    # ---- PreEnqueue -------------------------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        """Never gates: notes the member so that its group can be counted."""
        now = self._clock()
        if now - self._last_sweep > STALE_MEMBER_SECONDS / 10:
            self._sweep(now)
        group = group_of(pod)
        if group is not None:
            self._pending.setdefault(group, {})[pod.uid] = (pod, now)
        return None

    def _sweep(self, now: float) -> None:
        self._last_sweep = now
        for group in list(self._pending):
            members = self._pending[group]
            for uid in [u for u, (_, seen) in members.items() if now - seen > STALE_MEMBER_SECONDS]:
                del members[uid]
            if not members:
                del self._pending[group]

    # ---- PreFilter ---------------------------------------------------------------------------
    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status | None]:
        """UnschedulableAndUnresolvable while the group has fewer members than it needs."""
        group = group_of(pod)
        if group is None:
            return None, None
        need = min_available(pod)
        if need is None:
            return None, Status.unresolvable(
                f'pod group "{group}": label {LABEL_MIN_AVAILABLE} must be a positive integer, '
                f"got {pod.labels.get(LABEL_MIN_AVAILABLE, '(none)')!r}"
            )
        if need == 1:
            return None, None
        placed = self._placed_members(group)
        known = set(placed) | set(self._pending.get(group, ())) | {pod.uid}
        if len(known) < need:
            return None, Status.unresolvable(
                f'pod group "{group}" has {len(known)} of the {need} members it needs'
            )
        return None, None

    # ---- Reserve -----------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """The member failed after Reserve: the waiting members of its group fail too."""
        group = group_of(pod)
        if group is None:
            return
        for wp in self._handle.iterate_waiting_pods():
            other = wp.pod
            if other.uid != pod.uid and group_of(other) == group:
                wp.reject(
                    NAME,
                    f'pod group "{group}" is rejected: member {pod.key} failed to be scheduled',
                )

    # ---- Permit ------------------------------------------------------------------------------
    def permit(
        self, state: CycleState, pod: PodInfo, node_name: str
    ) -> tuple[Status | None, float]:
        """Wait until min-available members are assumed, waiting or bound; the member
        that completes the group allows the waiting ones."""
        group = group_of(pod)
        need = min_available(pod) if group is not None else None
        if group is None or need is None or need == 1:
            return None, 0.0
        placed = self._placed_members(group)
        placed.add(pod.uid)  # assumed before Permit; counted even if the lister lags
        if len(placed) >= need:
            for wp in self._handle.iterate_waiting_pods():
                if group_of(wp.pod) == group:
                    wp.allow(NAME)
            return None, 0.0
        siblings = [uid for uid in self._pending.get(group, ()) if uid not in placed]
        if siblings:
            to_activate = state.get(PODS_TO_ACTIVATE_KEY)
            if to_activate is None:
                to_activate = set()
                state.write(PODS_TO_ACTIVATE_KEY, to_activate)
            to_activate.update(siblings)
        return (
            Status.wait(f'pod group "{group}" has {len(placed)} of {need} members placed'),
            float(self.args.permit_waiting_time_seconds),
        )

    # ---- PostBind ----------------------------------------------------------------------------
    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """A bound member is counted from the cluster from now on."""
        group = group_of(pod)
        members = self._pending.get(group) if group is not None else None
        if group is not None and members is not None:
            members.pop(pod.uid, None)
            if not members:
                del self._pending[group]

    # ---- helpers -----------------------------------------------------------------------------
    def _placed_members(self, group: str) -> set[str]:
        """UIDs of the group's members that are assumed, waiting or bound."""
        ns, _, name = group.partition("/")
        out: set[str] = set()
        for ni in self._handle.snapshot.node_infos():
            for p in ni.pods.values():
                if p.labels.get(LABEL_POD_GROUP) == name and p.namespace == ns and not p.deleting:
                    out.add(p.uid)
        return out


ENTRY = PluginEntry(NAME, Coscheduling, Coscheduling.new, parse_args)
