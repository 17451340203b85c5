"""The scheduling queue: activeQ, backoffQ and the unschedulable pool.

* activeQ: a heap ordered by the QueueSort plugin; ``pop`` waits on it.
* backoffQ: pods that failed and wait out ``initial * 2**(attempts-1)`` (capped);
  pods that failed with an error wait in a backoff heap of their own.
* unschedulable: pods rejected by plugins, waiting for a cluster event one of
  those plugins registered for (with its queueing hint), or for the 5-minute
  flush. PreEnqueue-gated pods also live here.

With SchedulerPopFromBackoffQ (on by default, as in kube-scheduler 1.33+):
backoff expiries are truncated to whole-second windows and ordered within a
window as activeQ orders pods; PreEnqueue runs when a pod enters backoffQ, not
again when it leaves it; and when activeQ is empty, ``pop`` takes the head of
backoffQ (never of the error backoff) without waiting for its expiry.

Events that arrive while a pod is being scheduled ("in flight") are kept and
replayed against it if its attempt fails, so a wake-up is never lost.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from kscheduler.framework.features import GATES
from kscheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    QueueingHint,
)
from kscheduler.framework.interface import Resource as R
from kscheduler.framework.status import Status
from kscheduler.framework.types import PodInfo, QueuedPodInfo

ACTIVE = "active"
BACKOFF = "backoff"
UNSCHEDULABLE = "unschedulable"
GATED = "gated"

#: Events the queue itself raises.
EVENT_POD_ADD = ClusterEvent(R.UNSCHEDULED_POD, ActionType.ADD, "PodAdd")
EVENT_POD_UPDATE = ClusterEvent(R.UNSCHEDULED_POD, ActionType.UPDATE, "PodUpdate")
EVENT_ASSIGNED_POD_DELETE = ClusterEvent(R.POD, ActionType.DELETE, "AssignedPodDelete")
EVENT_UNSCHEDULABLE_TIMEOUT = ClusterEvent(R.WILDCARD, ActionType.ALL, "UnschedulableTimeout")
EVENT_FORCE_ACTIVATE = ClusterEvent(R.WILDCARD, ActionType.ALL, "ForceActivate")

_SEQ = itemgetter(0)

#: A pod whose last attempt failed with an error (not a rejection): any event may help.
_ERROR_MARK = "<error>"
#: Plugin name used for pods the scheduler could not parse: only their own update helps.
PARSE_ERROR_PLUGIN = "<parse>"


_IGNORED_META = frozenset({"resourceVersion", "generation", "managedFields", "finalizers"})


def _is_error(qp: QueuedPodInfo) -> bool:
    """Whether the pod's last attempt ended in an error rather than a rejection."""
    plugins = qp.unschedulable_plugins
    return _ERROR_MARK in plugins or not (plugins or qp.pending_plugins)


def pod_spec_changed(old: PodInfo, new: PodInfo) -> bool:
    """Whether an update changed the pod beyond its status and bookkeeping fields;
    only such updates give an unschedulable pod a new chance."""
    if old.raw is new.raw:
        return False
    if old.raw.get("spec") != new.raw.get("spec"):
        return True
    # the one status field kube-scheduler counts: claims made for the pod (DRA)
    if (old.raw.get("status") or {}).get("resourceClaimStatuses") != (
        new.raw.get("status") or {}
    ).get("resourceClaimStatuses"):
        return True
    om = old.raw.get("metadata") or {}
    nm = new.raw.get("metadata") or {}
    keys = (om.keys() | nm.keys()) - _IGNORED_META
    return any(om.get(k) != nm.get(k) for k in keys)


@dataclass(slots=True)
class _InFlight:
    qp: QueuedPodInfo
    since_seq: int
    #: activate() was asked for it during its attempt: requeue it at once after
    activated: bool = False


class QueueObserver:
    """Metrics hook; the default does nothing."""

    def incoming(self, queue: str, event: str) -> None:
        pass


def _queued_by(
    registrations: Iterable[ClusterEventWithHint], pod: PodInfo, old: Any, new: Any
) -> bool:
    """Whether one of the registrations (each covering the event) queues the pod: it
    has no hint, or its hint says Queue, or its hint fails (a failing hint must not
    strand the pod)."""
    for reg in registrations:
        if reg.hint is None:
            return True
        try:
            if reg.hint(pod, old, new) is QueueingHint.QUEUE:
                return True
        except Exception:
            return True
    return False


#: Index key of the pods any event may wake (no rejecting plugin named, or an error).
_ANY_EVENT = "<any>"


def _wake_keys(qp: QueuedPodInfo) -> tuple[str, ...]:
    """The plugins whose events may wake a pod waiting in the pool: its gating
    plugin, else those that rejected it (or :data:`_ANY_EVENT`)."""
    if qp.gated:
        return (qp.gated,)
    names = qp.unschedulable_plugins | qp.pending_plugins
    if not names or _ERROR_MARK in names:
        return (_ANY_EVENT,)
    return tuple(names)


class _UnschedulablePool:
    """The unschedulable pool, indexed by the plugins whose events may wake each pod.

    A cluster event looks only at the pods a plugin it concerns rejected or
    gated (and at those any event wakes), not at the whole pool: a crowd of
    pods that fit no node costs nothing to the events of other plugins."""

    def __init__(self) -> None:
        self.pods: dict[str, QueuedPodInfo] = {}
        #: when each pod entered the pool
        self.since: dict[str, float] = {}
        self._gated: set[str] = set()
        self._keys: dict[str, tuple[str, ...]] = {}
        self._number: dict[str, int] = {}  # entry order, to merge index buckets
        self._by_key: dict[str, dict[str, QueuedPodInfo]] = {}
        self._counter = itertools.count()

    def __len__(self) -> int:
        return len(self.pods)

    @property
    def gated(self) -> int:
        """How many of the pods wait on a PreEnqueue plugin."""
        return len(self._gated)

    def __contains__(self, uid: str) -> bool:
        return uid in self.pods

    def get(self, uid: str) -> QueuedPodInfo | None:
        return self.pods.get(uid)

    def add(self, qp: QueuedPodInfo, now: float) -> None:
        uid = qp.pod.uid
        self.remove(uid)
        keys = _wake_keys(qp)
        self.pods[uid] = qp
        self.since[uid] = now
        self._keys[uid] = keys
        self._number[uid] = next(self._counter)
        for key in keys:
            self._by_key.setdefault(key, {})[uid] = qp
        if qp.gated:
            self._gated.add(uid)

    def remove(self, uid: str) -> QueuedPodInfo | None:
        qp = self.pods.pop(uid, None)
        if qp is None:
            return None
        del self.since[uid], self._number[uid]
        for key in self._keys.pop(uid):
            bucket = self._by_key[key]
            del bucket[uid]
            if not bucket:
                del self._by_key[key]
        self._gated.discard(uid)
        return qp

    def woken_by(self, plugins: Iterable[str]) -> list[QueuedPodInfo]:
        """The pods an event concerning ``plugins`` may wake, in the order they came."""
        buckets = [b for b in map(self._by_key.get, (*plugins, _ANY_EVENT)) if b]
        if not buckets:
            return []
        if len(buckets) == 1:
            return list(buckets[0].values())
        merged: dict[str, QueuedPodInfo] = {}
        for bucket in buckets:
            merged.update(bucket)
        number = self._number
        return sorted(merged.values(), key=lambda qp: number[qp.pod.uid])


class SchedulingQueue:
    def __init__(
        self,
        *,
        sort_key: Callable[[QueuedPodInfo], Any],
        pre_enqueue: Callable[[PodInfo], Status | None],
        events: Mapping[str, Iterable[ClusterEventWithHint]],
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        unschedulable_timeout: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        observer: QueueObserver | None = None,
        pop_from_backoff: bool | None = None,
    ) -> None:
        self._sort_key = sort_key
        self._pre_enqueue = pre_enqueue
        self._events: dict[str, list[ClusterEventWithHint]] = {
            k: list(v) for k, v in events.items()
        }
        #: (resource, action) of an incoming event -> plugin -> its registrations that
        #: cover such an event (the registrations never change after construction)
        self._covering: dict[tuple[R, ActionType], dict[str, tuple[ClusterEventWithHint, ...]]] = {}
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.unschedulable_timeout = unschedulable_timeout
        self._clock = clock
        self.observer = observer or QueueObserver()
        self._seq = itertools.count()
        self._active: list[tuple[Any, int, QueuedPodInfo]] = []
        self._active_uids: dict[str, QueuedPodInfo] = {}
        #: SchedulerPopFromBackoffQ (None: the gate in force)
        self.pop_from_backoff = (
            GATES.pop_from_backoff_q if pop_from_backoff is None else pop_from_backoff
        )
        #: (expiry, activeQ order within the window or (), seq, pod): rejected pods
        self._backoff: list[tuple[float, Any, int, QueuedPodInfo]] = []
        #: (expiry, (), seq, pod): pods whose attempt ended in an error
        self._error_backoff: list[tuple[float, Any, int, QueuedPodInfo]] = []
        self._backoff_uids: dict[str, QueuedPodInfo] = {}
        self._unschedulable = _UnschedulablePool()
        self._in_flight: dict[str, _InFlight] = {}
        self._event_log: list[tuple[int, ClusterEvent, Any, Any]] = []
        self._event_seq = 0
        self._wakeup = asyncio.Event()
        self._closed = False
        #: nominated node -> {uid: pod}
        self._nominated: dict[str, dict[str, PodInfo]] = {}
        self._nominated_by_uid: dict[str, str] = {}

    # ---- sizes ---------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        gated = self._unschedulable.gated
        return {
            ACTIVE: len(self._active_uids),
            BACKOFF: len(self._backoff_uids),
            UNSCHEDULABLE: len(self._unschedulable) - gated,
            GATED: gated,
        }

    def __len__(self) -> int:
        return len(self._active_uids) + len(self._backoff_uids) + len(self._unschedulable)

    def in_flight(self) -> int:
        return len(self._in_flight)

    def where(self, uid: str) -> str | None:
        if uid in self._active_uids:
            return ACTIVE
        if uid in self._backoff_uids:
            return BACKOFF
        q = self._unschedulable.get(uid)
        if q is not None:
            return GATED if q.gated else UNSCHEDULABLE
        if uid in self._in_flight:
            return "in-flight"
        return None

    def pending(self) -> list[tuple[str, QueuedPodInfo]]:
        out: list[tuple[str, QueuedPodInfo]] = [(ACTIVE, q) for q in self._active_uids.values()]
        out += [(BACKOFF, q) for q in self._backoff_uids.values()]
        out += [(GATED if q.gated else UNSCHEDULABLE, q) for q in self._unschedulable.pods.values()]
        out += [("in-flight", f.qp) for f in self._in_flight.values()]
        return out

    # ---- adding ----------------------------------------------------------------------------
    def _push_active(self, qp: QueuedPodInfo, event: str) -> None:
        heapq.heappush(self._active, (self._sort_key(qp), next(self._seq), qp))
        self._active_uids[qp.pod.uid] = qp
        self.observer.incoming(ACTIVE, event)
        self._wakeup.set()

    def _push_backoff(self, qp: QueuedPodInfo, event: str) -> None:
        if self.pop_from_backoff:
            # PreEnqueue runs on the way in, since the pod may be popped from here
            st = self._pre_enqueue(qp.pod)
            if st is not None:
                qp.gated = st.plugin or "PreEnqueue"
                self._to_unschedulable(qp, event)
                return
            qp.gated = ""
        expiry = self._backoff_time(qp)
        if _is_error(qp):
            heapq.heappush(self._error_backoff, (expiry, (), next(self._seq), qp))
        elif self.pop_from_backoff:
            heapq.heappush(self._backoff, (expiry, self._sort_key(qp), next(self._seq), qp))
            self._wakeup.set()
        else:
            heapq.heappush(self._backoff, (expiry, (), next(self._seq), qp))
        self._backoff_uids[qp.pod.uid] = qp
        self.observer.incoming(BACKOFF, event)

    def _to_unschedulable(self, qp: QueuedPodInfo, event: str) -> None:
        self._unschedulable.add(qp, self._clock())
        self.observer.incoming(GATED if qp.gated else UNSCHEDULABLE, event)

    def _gate_or_activate(self, qp: QueuedPodInfo, event: str) -> None:
        """Run PreEnqueue; a gated pod waits in the unschedulable pool."""
        st = self._pre_enqueue(qp.pod)
        if st is not None:
            qp.gated = st.plugin or "PreEnqueue"
            self._to_unschedulable(qp, event)
            return
        qp.gated = ""
        self._push_active(qp, event)

    def add(self, pod: PodInfo) -> None:
        """A new unscheduled pod from the informer."""
        uid = pod.uid
        if uid in self._active_uids or uid in self._backoff_uids or uid in self._unschedulable:
            self.update(pod)
            return
        if uid in self._in_flight:
            self._in_flight[uid].qp.pod = pod
            return
        qp = QueuedPodInfo(pod, self._clock())
        self._add_nominated(pod)
        self._gate_or_activate(qp, EVENT_POD_ADD.label)

    def _current(self, uid: str) -> PodInfo | None:
        qp = (
            self._active_uids.get(uid)
            or self._backoff_uids.get(uid)
            or self._unschedulable.get(uid)
        )
        if qp is None and uid in self._in_flight:
            qp = self._in_flight[uid].qp
        return qp.pod if qp is not None else None

    def update(self, pod: PodInfo) -> None:
        """An update of an unscheduled pod."""
        uid = pod.uid
        self._update_nominated(self._current(uid), pod)
        if uid in self._in_flight:
            self._in_flight[uid].qp.pod = pod
            self._record_event(EVENT_POD_UPDATE, None, pod)
            return
        qp = self._active_uids.get(uid)
        if qp is not None:
            qp.pod = pod
            # the sort key may depend on the pod: re-push, the stale entry is skipped on pop
            heapq.heappush(self._active, (self._sort_key(qp), next(self._seq), qp))
            return
        qp = self._backoff_uids.get(uid)
        if qp is not None:
            qp.pod = pod
            return
        qp = self._unschedulable.get(uid)
        if qp is not None:
            old = qp.pod
            qp.pod = pod
            if not pod_spec_changed(old, pod):
                return  # a status-only write (e.g. our own PodScheduled condition)
            # the pod itself changed: any rejection may no longer hold
            self._unschedulable.remove(uid)
            qp.unschedulable_plugins.clear()
            if qp.gated or not self._is_backing_off(qp):
                self._gate_or_activate(qp, EVENT_POD_UPDATE.label)
            else:
                self._push_backoff(qp, EVENT_POD_UPDATE.label)
            return
        self.add(pod)

    def delete(self, uid: str) -> None:
        self._active_uids.pop(uid, None)  # heap entry skipped lazily
        self._backoff_uids.pop(uid, None)
        self._unschedulable.remove(uid)
        self._in_flight.pop(uid, None)
        self._delete_nominated(uid)

    def activate(self, uids: Iterable[str]) -> None:
        """Move the given pods to activeQ now (used by Permit-based plugins)."""
        for uid in uids:
            fl = self._in_flight.get(uid)
            if fl is not None:
                fl.activated = True
                continue
            qp = self._unschedulable.remove(uid) or self._backoff_uids.pop(uid, None)
            if qp is not None:
                self._gate_or_activate(qp, EVENT_FORCE_ACTIVATE.label)

    def release_gated(self, uids: Iterable[str]) -> None:
        """Run PreEnqueue again for these pods if they wait gated in the unschedulable
        pool (cluster events pass gated pods by): to activeQ when it lets them in."""
        for uid in uids:
            qp = self._unschedulable.get(uid)
            if qp is not None and qp.gated:
                self._unschedulable.remove(uid)
                self._gate_or_activate(qp, EVENT_FORCE_ACTIVATE.label)

    # ---- popping ---------------------------------------------------------------------------
    async def pop(self) -> QueuedPodInfo | None:
        """The next pod to schedule; None once the queue is closed."""
        while True:
            while self._active:
                _, _, qp = heapq.heappop(self._active)
                uid = qp.pod.uid
                if self._active_uids.get(uid) is not qp:
                    continue  # deleted or re-pushed
                del self._active_uids[uid]
                return self._start(qp)
            if self.pop_from_backoff:
                while self._backoff:
                    qp = heapq.heappop(self._backoff)[3]
                    uid = qp.pod.uid
                    if self._backoff_uids.get(uid) is not qp:
                        continue
                    del self._backoff_uids[uid]
                    self.observer.incoming(ACTIVE, "PopFromBackoffQ")
                    return self._start(qp)
            if self._closed:
                return None
            self._wakeup.clear()
            await self._wakeup.wait()

    def _start(self, qp: QueuedPodInfo) -> QueuedPodInfo:
        qp.attempts += 1
        if qp.initial_attempt_timestamp is None:
            qp.initial_attempt_timestamp = self._clock()
        self._in_flight[qp.pod.uid] = _InFlight(qp, self._event_seq)
        return qp

    def close(self) -> None:
        self._closed = True
        self._wakeup.set()

    def done(self, uid: str) -> None:
        """The pod's scheduling cycle ended (bound, or being bound)."""
        self._in_flight.pop(uid, None)
        self._trim_events()

    def is_in_flight(self, uid: str) -> bool:
        return uid in self._in_flight

    def add_unschedulable_if_not_present(self, qp: QueuedPodInfo, *, error: bool = False) -> None:
        """Requeue a pod whose attempt failed.

        Rejected pods go to the unschedulable pool unless an event seen during
        their attempt could help them; errors go to backoff.
        """
        uid = qp.pod.uid
        fl = self._in_flight.pop(uid, None)
        if fl is None:
            return  # deleted (or bound) while in flight: drop it
        if uid in self._active_uids or uid in self._backoff_uids or uid in self._unschedulable:
            return
        qp.backoff_expiry = self._clock() + self._backoff_duration(qp)
        qp.timestamp = self._clock()
        if error:
            qp.unschedulable_plugins = {_ERROR_MARK}
            self._push_backoff(qp, "ScheduleAttemptFailure")
            self._trim_events()
            return
        log = self._event_log
        helped = fl.activated or any(
            self._worth_requeue(qp, ev, old, new)
            for _, ev, old, new in itertools.islice(
                log, bisect.bisect_right(log, fl.since_seq, key=_SEQ), None
            )
        )
        self._trim_events()
        if helped:
            self._push_backoff(qp, "ScheduleAttemptFailure")
        else:
            self._to_unschedulable(qp, "ScheduleAttemptFailure")

    # ---- backoff -----------------------------------------------------------------------------
    def _backoff_duration(self, qp: QueuedPodInfo) -> float:
        d = self.initial_backoff * float(1 << min(max(qp.attempts - 1, 0), 30))
        return min(d, self.max_backoff)

    def _backoff_time(self, qp: QueuedPodInfo) -> float:
        """When the pod's backoff ends; the start of its 1-second window when backoffQ
        is popped from (pods of one window then leave it together, in activeQ order)."""
        if self.pop_from_backoff:
            return float(math.floor(qp.backoff_expiry))
        return float(qp.backoff_expiry)

    def _is_backing_off(self, qp: QueuedPodInfo) -> bool:
        if self.pop_from_backoff:
            # a backoff ending inside the current window is not over yet
            return self._backoff_time(qp) >= math.floor(self._clock())
        return bool(qp.backoff_expiry > self._clock())

    def flush_backoff_completed(self) -> int:
        """Move the pods whose backoff is over to activeQ (PreEnqueue ran already when
        backoffQ is popped from)."""
        moved = 0
        for heap in (self._backoff, self._error_backoff):
            while heap:
                qp = heap[0][3]
                if self._backoff_uids.get(qp.pod.uid) is not qp:
                    heapq.heappop(heap)
                    continue
                if self._is_backing_off(qp):
                    break
                heapq.heappop(heap)
                del self._backoff_uids[qp.pod.uid]
                if self.pop_from_backoff:
                    self._push_active(qp, "BackoffComplete")
                else:
                    self._gate_or_activate(qp, "BackoffComplete")
                moved += 1
        return moved

    def flush_interval(self) -> float:
        """Seconds until the next backoff flush: to the next whole second of the clock
        when backoff windows are in use (whole windows leave together), else 1."""
        if not self.pop_from_backoff:
            return 1.0
        return 1.0 - math.fmod(self._clock(), 1.0)

    def flush_unschedulable_left_over(self) -> int:
        now = self._clock()
        pool = self._unschedulable
        stale = [
            pool.pods[uid]
            for uid, since in pool.since.items()
            if now - since > self.unschedulable_timeout and not pool.pods[uid].gated
        ]
        for qp in stale:
            pool.remove(qp.pod.uid)
            self._requeue(qp, EVENT_UNSCHEDULABLE_TIMEOUT.label)
        return len(stale)

    def next_backoff_expiry(self) -> float | None:
        heads = [h[0][0] for h in (self._backoff, self._error_backoff) if h]
        return min(heads) if heads else None

    # ---- cluster events ------------------------------------------------------------------------
    def _record_event(self, event: ClusterEvent, old: Any, new: Any) -> None:
        if self._in_flight:
            self._event_seq += 1
            self._event_log.append((self._event_seq, event, old, new))

    def _trim_events(self) -> None:
        log = self._event_log
        if not self._in_flight:
            log.clear()
            return
        if not log:
            return
        # in-flight entries are inserted as pods are popped, so the first is the oldest
        oldest = next(iter(self._in_flight.values())).since_seq
        if log[0][0] <= oldest:
            del log[: bisect.bisect_right(log, oldest, key=_SEQ)]

    def _covering_registrations(
        self, event: ClusterEvent
    ) -> dict[str, tuple[ClusterEventWithHint, ...]]:
        """Per plugin, its registrations that cover the event (only plugins with some),
        worked out once per kind of event instead of once per waiting pod."""
        kind = (event.resource, event.action)
        found = self._covering.get(kind)
        if found is None:
            found = {}
            for name, regs in self._events.items():
                covering = tuple(reg for reg in regs if reg.event.matches(event))
                if covering:
                    found[name] = covering
            self._covering[kind] = found
        return found

    def _worth_requeue(
        self,
        qp: QueuedPodInfo,
        event: ClusterEvent,
        old: Any,
        new: Any,
        covering: Mapping[str, tuple[ClusterEventWithHint, ...]] | None = None,
    ) -> bool:
        unschedulable, pending = qp.unschedulable_plugins, qp.pending_plugins
        if not unschedulable and not pending:
            return True
        if _ERROR_MARK in unschedulable or _ERROR_MARK in pending:
            return True
        if event.resource is R.WILDCARD:
            return True
        if covering is None:
            covering = self._covering_registrations(event)
        for plugins in (unschedulable, pending):
            for name in plugins:
                if _queued_by(covering.get(name, ()), qp.pod, old, new):
                    return True
        return False

    def _requeue(self, qp: QueuedPodInfo, event: str) -> None:
        if self._is_backing_off(qp):
            self._push_backoff(qp, event)
        else:
            self._gate_or_activate(qp, event)

    def move_all_to_active_or_backoff(
        self,
        event: ClusterEvent,
        old: Any = None,
        new: Any = None,
        precheck: Callable[[PodInfo], bool] | None = None,
    ) -> int:
        """A cluster event: wake the unschedulable pods it may help."""
        self._record_event(event, old, new)
        if not self._unschedulable:
            return 0
        moved = []
        covering = self._covering_registrations(event)
        pool = self._unschedulable
        if event.resource is R.WILDCARD:
            waiting: Iterable[QueuedPodInfo] = pool.pods.values()
        else:
            # pods whose rejecting or gating plugins none of ``covering`` names stay
            waiting = pool.woken_by(covering)
        for qp in waiting:
            if qp.gated:
                # as upstream: only events the gating plugin registered for, and its hint
                gating = covering.get(qp.gated)
                if gating and _queued_by(gating, qp.pod, old, new):
                    moved.append(qp)
                continue
            if precheck is not None and not precheck(qp.pod):
                continue
            if self._worth_requeue(qp, event, old, new, covering):
                moved.append(qp)
        for qp in moved:
            pool.remove(qp.pod.uid)
            self._requeue(qp, event.label or str(event))
        return len(moved)

    # ---- nominated pods ------------------------------------------------------------------------
    def _add_nominated(self, pod: PodInfo, node: str | None = None) -> None:
        node = node if node is not None else pod.nominated_node_name
        if not node:
            return
        self._delete_nominated(pod.uid)
        self._nominated.setdefault(node, {})[pod.uid] = pod
        self._nominated_by_uid[pod.uid] = node

    def _update_nominated(self, old: PodInfo | None, pod: PodInfo) -> None:
        if pod.nominated_node_name:
            self._add_nominated(pod)
        elif pod.uid in self._nominated_by_uid:
            if old is not None and old.nominated_node_name:
                self._delete_nominated(pod.uid)  # the server's nomination was cleared
            else:
                # a nomination this scheduler made, not yet written back: keep it
                node = self._nominated_by_uid[pod.uid]
                self._nominated[node][pod.uid] = pod

    def _delete_nominated(self, uid: str) -> None:
        node = self._nominated_by_uid.pop(uid, None)
        if node is not None:
            pods = self._nominated.get(node)
            if pods is not None:
                pods.pop(uid, None)
                if not pods:
                    del self._nominated[node]

    def nominate(self, pod: PodInfo, node: str) -> None:
        if node:
            self._add_nominated(pod, node)
        else:
            self._delete_nominated(pod.uid)

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        pods = self._nominated.get(node_name)
        return list(pods.values()) if pods else []

    def nodes_with_nominated_pods(self) -> Collection[str]:
        return self._nominated.keys()

    def nominated_node(self, uid: str) -> str:
        return self._nominated_by_uid.get(uid, "")
