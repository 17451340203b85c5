"""schedule_one, the binding cycle and the failure handler.

One coroutine pops pods and runs the scheduling cycle synchronously from
snapshot to assume; the binding cycle of each placed pod runs as a tracked
background task. Every failure path unreserves, forgets and requeues.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import structlog

from kscheduler.algorithm import Algorithm, FilterRecord, FitError, ScheduleError, ScheduleResult
from kscheduler.annotations import SimulatorAnnotations
from kscheduler.binder import TaskTracker
from kscheduler.cache import Cache, Snapshot
from kscheduler.events import micro_time
from kscheduler.extender import HTTPExtender, bind_with_extenders, close_extenders
from kscheduler.framework.cycle_state import PODS_TO_ACTIVATE_KEY, CycleState
from kscheduler.framework.features import GATES
from kscheduler.framework.runtime import Framework
from kscheduler.framework.status import Code, Status
from kscheduler.framework.types import PodInfo, QueuedPodInfo, StatusWrite
from kscheduler.queue import EVENT_ASSIGNED_POD_DELETE, PARSE_ERROR_PLUGIN, SchedulingQueue

log = structlog.get_logger("kscheduler.scheduler")

SCHEDULED = "scheduled"
UNSCHEDULABLE = "unschedulable"
ERROR = "error"


#: the last attempts kept for /debug/explain, one per pod (see AttemptRecord)
ATTEMPT_RECORDS = 10000

REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"


class PodStatusWriter(Protocol):
    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...


class SchedulerObserver:
    """Metrics hook for the scheduling loop; the default does nothing."""

    def attempt(self, result: str, profile: str, seconds: float) -> None:
        pass

    def scheduled(self, qp: QueuedPodInfo, sli_seconds: float) -> None:
        pass

    def unschedulable_plugins(self, plugins: set[str], profile: str) -> None:
        pass

    def preemption(self, victims: int) -> None:
        pass


class AttemptRecord:
    """The last attempt's outcome per pod, kept for /debug/explain.

    ``detail`` is what the cycle already computed, summarised: on success the
    node counts and the chosen node's weighted score per plugin; when nothing
    fits, the rejections grouped by plugin and reason (see :func:`fit_detail`).
    """

    __slots__ = ("at", "detail", "message", "node", "result", "seconds", "status")

    def __init__(
        self,
        result: str,
        node: str,
        message: str,
        seconds: float,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self.result = result
        self.node = node
        self.message = message
        self.seconds = seconds
        self.at = time.time()
        self.status: dict[str, Any] = {}
        self.detail = detail


def result_detail(result: ScheduleResult) -> dict[str, Any]:
    """The chosen node's scores, from the totals the cycle summed (O(feasible nodes))."""
    out: dict[str, Any] = {
        "evaluatedNodes": result.evaluated_nodes,
        "feasibleNodes": result.feasible_nodes,
    }
    totals = result.total_list
    if totals is None or result.index < 0:
        return out  # one feasible node, or the nominated node: placed without scoring
    total = totals[result.index]
    out["score"] = total
    out["nodesWithThisScore"] = totals.count(total)
    scores = result.host_scores()
    if scores:
        out["scores"] = scores
    return out


def fit_detail(fe: FitError) -> dict[str, Any]:
    """Why no node fits: node counts per (plugin, code, reasons), largest first."""
    d = fe.diagnosis
    statuses = d.node_to_status.statuses
    groups: dict[tuple[str, str, tuple[str, ...]], int] = {}
    for st, n in d.node_to_status.grouped():
        k = (st.plugin, st.code.label, tuple(st.reasons))
        groups[k] = groups.get(k, 0) + n
    absent = d.node_to_status.absent
    rest = fe.num_all_nodes - len(statuses)
    if absent is not None and rest > 0:
        k = (absent.plugin, absent.code.label, tuple(absent.reasons))
        groups[k] = groups.get(k, 0) + rest
    rejections = [
        {"plugin": plugin, "code": code, "reasons": list(reasons), "nodes": n}
        for (plugin, code, reasons), n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return {
        "nodes": fe.num_all_nodes,
        "unschedulablePlugins": sorted(d.unschedulable_plugins),
        "rejections": rejections,
    }


class Scheduler:
    def __init__(
        self,
        *,
        cache: Cache,
        queue: SchedulingQueue,
        profiles: Mapping[str, Framework],
        algorithm: Algorithm,
        status_writer: PodStatusWriter,
        snapshot: Snapshot,
        bind_concurrency: int = 64,
        observer: SchedulerObserver | None = None,
        may_bind: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        extenders: Sequence[HTTPExtender] = (),
    ) -> None:
        self.cache = cache
        #: HTTP extenders, shared by all profiles (see kscheduler.extender).
        self.extenders = list(extenders)
        #: scheduling cycles started (OpportunisticBatching compares neighbours)
        self.cycle = 0
        self.queue = queue
        self.profiles = dict(profiles)
        self.algorithm = algorithm
        self.snapshot = snapshot
        self._writer = status_writer
        self.binds = TaskTracker(limit=bind_concurrency, name="bind")
        self.writes = TaskTracker(limit=32, name="status")
        self.observer = observer or SchedulerObserver()
        self.may_bind = may_bind
        #: Awaited before each cycle: returns once the cluster view is current (the
        #: pod and node watches are up), so no pod is placed on a stale cache.
        self.wait_live: Callable[[], Awaitable[None]] | None = None
        self._clock = clock
        self.last_attempts: dict[str, AttemptRecord] = {}
        #: kube-scheduler-simulator annotations for the profiles that opt in (None: off)
        self.annotations: SimulatorAnnotations | None = None
        #: attempts kept for /debug/explain, the oldest dropped first
        self.attempt_records_limit = ATTEMPT_RECORDS

    # ---- loop ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Pop and schedule until cancelled (or the queue is closed)."""
        flusher = asyncio.create_task(self._flush_loop(), name="queue-flush")
        try:
            while True:
                qp = await self.queue.pop()
                if qp is None:
                    return
                try:
                    if self.wait_live is not None:
                        await self.wait_live()
                    await self.schedule_one(qp)
                except asyncio.CancelledError:
                    # stopped mid-cycle (shutdown, lost lease): the pod must not be lost
                    self._requeue_cancelled(qp)
                    raise
                except Exception:  # a bug must cost one attempt, not the loop
                    log.exception("scheduling cycle crashed", pod=qp.pod.key)
                    self.queue.add_unschedulable_if_not_present(qp, error=True)
                # one turn of the event loop between cycles: bind tasks, informer
                # events and timers run while pods are queued, not only once it drains
                await asyncio.sleep(0)
        finally:
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)

    async def _flush_loop(self) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(self.queue.flush_interval())
            self.queue.flush_backoff_completed()
            ticks += 1
            if ticks % 30 == 0:
                self.queue.flush_unschedulable_left_over()
                self.cache.expire_assumed()

    # ---- scheduling cycle --------------------------------------------------------------------
    async def schedule_one(self, qp: QueuedPodInfo) -> None:
        pod = qp.pod
        # every popped pod is a cycle (the batch reuses results only between neighbours)
        self.cycle += 1
        fwk = self.profiles.get(pod.scheduler_name)
        if fwk is None:
            self.queue.done(pod.uid)
            return
        if pod.deleting:
            fwk.recorder.event(
                pod.raw,
                "Warning",
                "FailedScheduling",
                "Scheduling",
                f"skip schedule deleting pod: {pod.key}",
            )
            self.queue.done(pod.uid)
            return
        if self.cache.is_assumed(pod.uid):
            self.queue.done(pod.uid)
            return
        start = self._clock()
        if pod.parse_error is not None:
            qp.unschedulable_plugins = {PARSE_ERROR_PLUGIN}
            self._fail(
                fwk,
                qp,
                Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [f"invalid pod: {pod.parse_error}"]),
                REASON_SCHEDULER_ERROR,
                f"failed to parse pod: {pod.parse_error}",
                start,
                result=ERROR,
                requeue_error=False,
            )
            return
        state = CycleState()
        self.snapshot.update()
        record = None
        if self.annotations is not None:
            record = self.annotations.begin(fwk, state, pod)
        try:
            if self.extenders:
                result = await self.algorithm.schedule_pod_with_extenders(
                    fwk,
                    state,
                    pod,
                    self.snapshot,
                    self.extenders,
                    refresh=self.snapshot.update,
                    record=record,
                )
            else:
                result = self.algorithm.schedule_pod(
                    fwk, state, pod, self.snapshot, record=record, cycle=self.cycle
                )
        except FitError as fe:
            if record is not None:
                self._annotate(fwk, state, pod, record, fit_error=fe)
            await self._handle_fit_error(fwk, state, qp, fe, start)
            return
        except ScheduleError as se:
            self._fail(
                fwk, qp, se.status, REASON_SCHEDULER_ERROR, se.status.message, start, result=ERROR
            )
            return
        if record is not None:
            self._annotate(fwk, state, pod, record, selected=result.suggested_host)
        self._assume_and_bind(fwk, state, qp, result, start)

    def _annotate(
        self,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        record: FilterRecord,
        *,
        selected: str = "",
        fit_error: FitError | None = None,
    ) -> None:
        assert self.annotations is not None
        patch = self.annotations.patch(
            fwk, state, pod, record, selected=selected, fit_error=fit_error
        )
        if patch is not None:
            self.writes.spawn(self._write_status(pod, patch), name=f"annotate {pod.key}")

    async def _handle_fit_error(
        self, fwk: Framework, state: CycleState, qp: QueuedPodInfo, fe: FitError, start: float
    ) -> None:
        pod = qp.pod
        nominated: str | None = None  # None: leave the nomination as it is
        if fwk.post_filter_plugins and fe.num_all_nodes > 0:
            res, st = await fwk.run_post_filter(state, pod, fe.diagnosis.node_to_status)
            if st is not None and st.code == Code.ERROR:
                log.warning("post filter failed", pod=pod.key, plugin=st.plugin, error=st.message)
            if st is not None and st.message:
                fe.diagnosis.post_filter_msg = st.message
            if res is not None:
                nominated = res.nominated_node_name  # "" clears a previous nomination
            self.observer.preemption(res.victims if res is not None else 0)
        qp.unschedulable_plugins = set(fe.diagnosis.unschedulable_plugins)
        qp.pending_plugins = set(fe.diagnosis.pending_plugins)
        self.observer.unschedulable_plugins(qp.unschedulable_plugins, fwk.profile_name)
        message = str(fe)
        self._fail(
            fwk,
            qp,
            Status.unschedulable(message),
            REASON_UNSCHEDULABLE,
            message,
            start,
            result=UNSCHEDULABLE,
            nominated=nominated,
            detail=fit_detail(fe),
        )

    def _assume_and_bind(
        self,
        fwk: Framework,
        state: CycleState,
        qp: QueuedPodInfo,
        result: ScheduleResult,
        start: float,
    ) -> None:
        pod = qp.pod
        node = result.suggested_host
        assumed = pod.with_node(node)
        try:
            self.cache.assume(assumed)
        except ValueError as exc:
            self._fail(
                fwk, qp, Status.as_error(exc), REASON_SCHEDULER_ERROR, str(exc), start, result=ERROR
            )
            return
        self.queue.nominate(pod, "")
        st = fwk.run_reserve(state, assumed, node)
        if st is not None:
            fwk.run_unreserve(state, assumed, node)
            self.cache.forget(pod.uid)
            self._fail_status(fwk, qp, st, start)
            return
        st = fwk.run_permit(state, assumed, node)
        if st is not None and st.code != Code.WAIT:
            fwk.run_unreserve(state, assumed, node)
            self.cache.forget(pod.uid)
            self._fail_status(fwk, qp, st, start)
            return
        self.observer.attempt(SCHEDULED, fwk.profile_name, self._clock() - start)
        detail = result_detail(result)
        self.binds.spawn(
            self._binding_cycle(fwk, state, qp, assumed, node, start, detail),
            name=f"bind {pod.key}",
        )
        self._activate_pods(state)

    def _activate_pods(self, state: CycleState) -> None:
        uids = state.get(PODS_TO_ACTIVATE_KEY)
        if uids:
            self.queue.activate(list(uids))
            uids.clear()

    def _fail_status(
        self,
        fwk: Framework,
        qp: QueuedPodInfo,
        st: Status,
        start: float,
        *,
        nominated: str | None = None,
    ) -> None:
        if st.is_rejection():
            if st.plugin:
                qp.unschedulable_plugins = {st.plugin}
            self._fail(
                fwk,
                qp,
                st,
                REASON_UNSCHEDULABLE,
                st.message,
                start,
                result=UNSCHEDULABLE,
                nominated=nominated,
            )
        else:
            self._fail(
                fwk,
                qp,
                st,
                REASON_SCHEDULER_ERROR,
                st.message,
                start,
                result=ERROR,
                nominated=nominated,
            )

    # ---- binding cycle ---------------------------------------------------------------------------
    async def _binding_cycle(
        self,
        fwk: Framework,
        state: CycleState,
        qp: QueuedPodInfo,
        assumed: PodInfo,
        node: str,
        start: float,
        detail: dict[str, Any] | None = None,
    ) -> None:
        st: Status | None
        try:
            st = None
            if GATES.nominated_node_name_for_expectation:
                st = await self._expect_node(fwk, state, qp, assumed, node)
            if st is None:
                st = await fwk.wait_on_permit(assumed)
            if st is None:
                st = await fwk.run_pre_bind(state, assumed, node)
            if st is None and not self.may_bind():
                st = Status.as_error("not binding: this replica is no longer the leader")
            if st is None:
                st = await self._bind(fwk, state, assumed, node)
        except asyncio.CancelledError:
            fwk.run_unreserve(state, assumed, node)
            self.cache.forget(assumed.uid)
            self._requeue_cancelled(qp)
            raise
        if st is not None:
            fwk.run_unreserve(state, assumed, node)
            self.cache.forget(assumed.uid)
            # the freed room may help others
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, assumed, None)
            # a failed binding cycle clears the pod's nomination, as kube-scheduler does
            if st.is_rejection():
                self._fail_status(fwk, qp, st, start, nominated="")
            else:
                self._fail(
                    fwk,
                    qp,
                    st,
                    REASON_SCHEDULER_ERROR,
                    st.message,
                    start,
                    result=ERROR,
                    bind_failure=True,
                    nominated="",
                )
            return
        self.cache.finish_binding(assumed.uid)
        self.queue.done(assumed.uid)
        self._activate_pods(state)
        now = self._clock()
        fwk.recorder.event(
            qp.pod.raw,
            "Normal",
            "Scheduled",
            "Binding",
            f"Successfully assigned {assumed.key} to {node}",
        )
        fwk.run_post_bind(state, assumed, node)
        initial = qp.initial_attempt_timestamp or start
        self.observer.scheduled(qp, now - initial)
        self._record(assumed, SCHEDULED, node, "", now - start, detail=detail)
        log.info(
            "bound",
            pod=assumed.key,
            node=node,
            attempts=qp.attempts,
            duration_ms=round((now - start) * 1000, 2),
        )

    async def _expect_node(
        self,
        fwk: Framework,
        state: CycleState,
        qp: QueuedPodInfo,
        assumed: PodInfo,
        node: str,
    ) -> Status | None:
        """NominatedNodeNameForExpectation: run the PreBind pre-flights; when a PreBind
        plugin will work on the pod, or a Permit plugin makes it wait, write the chosen
        node into status.nominatedNodeName so that other components (an autoscaler)
        know where the pod is about to go. A pre-flight error (or rejection, which
        pre-flights may not give) fails the binding cycle; a failed write does not."""
        pre_flight = fwk.run_pre_bind_pre_flights(state, assumed, node)
        if pre_flight is not None and (pre_flight.code == Code.ERROR or pre_flight.is_rejection()):
            return pre_flight
        if pre_flight is not None and not fwk.will_wait_on_permit(assumed):
            return None  # bound right away: nothing to announce
        if qp.pod.nominated_node_name == node:
            return None
        try:
            await self._writer.patch_pod_status(
                assumed.namespace, assumed.name, {"status": {"nominatedNodeName": node}}
            )
        except Exception as exc:
            log.warning(
                "nominated node name update failed", pod=assumed.key, node=node, error=str(exc)
            )
            return None
        # what the server now holds: a failure later clears it (see _binding_cycle)
        qp.pod.nominated_node_name = node
        written = qp.status_written
        if written is not None:
            qp.status_written = dataclasses.replace(written, nominated_node_name=node)
        return None

    async def _bind(
        self, fwk: Framework, state: CycleState, pod: PodInfo, node: str
    ) -> Status | None:
        """An interested binding extender binds instead of the bind plugins."""
        if self.extenders:
            taken, st = await bind_with_extenders(self.extenders, pod, node)
            if taken:
                return st
        return await fwk.run_bind(state, pod, node)

    def _requeue_cancelled(self, qp: QueuedPodInfo) -> None:
        if self.queue.is_in_flight(qp.pod.uid):
            qp.attempts = max(qp.attempts - 1, 0)  # not the pod's fault
            self.queue.add_unschedulable_if_not_present(qp, error=True)

    # ---- failures ----------------------------------------------------------------------------
    def _fail(
        self,
        fwk: Framework,
        qp: QueuedPodInfo,
        status: Status,
        reason: str,
        message: str,
        start: float,
        *,
        result: str,
        nominated: str | None = None,
        requeue_error: bool = True,
        bind_failure: bool = False,
        detail: dict[str, Any] | None = None,
    ) -> None:
        pod = qp.pod
        seconds = self._clock() - start
        if not bind_failure:
            self.observer.attempt(result, fwk.profile_name, seconds)
        self._record(pod, result, "", message, seconds, status, detail=detail)
        log.info(
            "unschedulable" if result == UNSCHEDULABLE else "attempt failed",
            pod=pod.key,
            result=result,
            attempts=qp.attempts,
            message=message,
            duration_ms=round(seconds * 1000, 2),
        )
        if not self.queue.is_in_flight(pod.uid):
            return  # deleted or bound meanwhile: nothing to report
        if nominated is not None:
            self.queue.nominate(pod, nominated)
        self.queue.add_unschedulable_if_not_present(qp, error=(result == ERROR and requeue_error))
        fwk.recorder.event(pod.raw, "Warning", "FailedScheduling", "Scheduling", message)
        self._patch_condition(qp, reason, message, nominated)

    def _patch_condition(
        self, qp: QueuedPodInfo, reason: str, message: str, nominated: str | None
    ) -> None:
        """Write PodScheduled=False (and the nomination) unless the pod holds them already,
        as kube-scheduler does: a retry that fails for the same reason writes nothing."""
        pod = qp.pod
        current = _pod_scheduled_condition(pod.raw)
        holds_nominated = pod.nominated_node_name
        written = qp.status_written
        if written is not None and written.resource_version == pod.resource_version:
            # our last write has not come back through the informer yet
            current, holds_nominated = written.condition, written.nominated_node_name
        status_patch: dict[str, Any] = {}
        condition = current
        if (
            current is None
            or current.get("status") != "False"
            or current.get("reason") != reason
            or current.get("message") != message
        ):
            transition = (
                current.get("lastTransitionTime")
                if current is not None and current.get("status") == "False"
                else None
            )
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": transition or micro_time()[:19] + "Z",
            }
            status_patch["conditions"] = [condition]
        if nominated is not None and nominated != holds_nominated:
            status_patch["nominatedNodeName"] = nominated or None
            holds_nominated = nominated
        if not status_patch:
            return
        write = StatusWrite(pod.resource_version, condition, holds_nominated)
        qp.status_written = write
        self.writes.spawn(
            self._write_condition(qp, write, {"status": status_patch}), name=f"status {pod.key}"
        )

    async def _write_condition(
        self, qp: QueuedPodInfo, write: StatusWrite, patch: dict[str, Any]
    ) -> None:
        pod = qp.pod
        try:
            await self._writer.patch_pod_status(pod.namespace, pod.name, patch)
        except Exception as exc:
            if qp.status_written is write:
                qp.status_written = None  # the server holds what the informer says
            log.warning("pod status update failed", pod=pod.key, error=str(exc))

    async def _write_status(self, pod: PodInfo, patch: dict[str, Any]) -> None:
        try:
            await self._writer.patch_pod_status(pod.namespace, pod.name, patch)
        except Exception as exc:
            log.warning("pod status update failed", pod=pod.key, error=str(exc))

    def _record(
        self,
        pod: PodInfo,
        result: str,
        node: str,
        message: str,
        seconds: float,
        status: Status | None = None,
        *,
        detail: dict[str, Any] | None = None,
    ) -> None:
        rec = AttemptRecord(result, node, message, seconds, detail)
        if status is not None:
            rec.status = {
                "code": status.code.label,
                "plugin": status.plugin,
                "reasons": status.reasons,
            }
        recs = self.last_attempts
        recs.pop(pod.key, None)
        recs[pod.key] = rec
        if len(recs) > self.attempt_records_limit:
            del recs[next(iter(recs))]

    async def shutdown(self, timeout: float) -> int:
        """Stop popping; let in-flight binds finish within ``timeout``.

        Returns how many binds were cut short.
        """
        self.queue.close()
        cut = await self.binds.drain(timeout)
        with contextlib.suppress(TimeoutError):  # evictions preemption started
            async with asyncio.timeout(min(timeout, 5.0)):
                await asyncio.gather(*(fwk.wait_background() for fwk in self.profiles.values()))
        await self.writes.drain(min(timeout, 5.0))
        await close_extenders(self.extenders)
        return cut


def _pod_scheduled_condition(raw: Mapping[str, Any]) -> Mapping[str, Any] | None:
    status = raw.get("status")
    if not isinstance(status, dict):
        return None
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "PodScheduled":
            return c
    return None
