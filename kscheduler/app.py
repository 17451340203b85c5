"""Lifecycle of the daemon: startup -> (leader election ->) scheduling loop -> shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import gc
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from kscheduler.algorithm import Algorithm
from kscheduler.apiclient import ApiClusterClient
from kscheduler.cache import Cache, Snapshot
from kscheduler.config import KubeSchedulerConfiguration
from kscheduler.eventhandlers import EventHandlers
from kscheduler.events import EVENT_WORKERS, Broadcaster
from kscheduler.extender import (
    build_extenders,
    process_preemption,
    with_extender_ignored_resources,
)
from kscheduler.framework.interface import ActionType, ClusterEvent, ClusterEventWithHint
from kscheduler.framework.interface import Resource as EventResource
from kscheduler.framework.parse import parse_pod, reparse_pod
from kscheduler.framework.registry import EXTENSION_POINTS, Registry
from kscheduler.framework.runtime import Framework, ProfileSpec
from kscheduler.framework.status import Status
from kscheduler.framework.types import PodInfo
from kscheduler.informers import Informer, InformerFactory
from kscheduler.kube import KubeClient, TokenBucketRateLimiter
from kscheduler.leader import LeaderElector, process_identity
from kscheduler.queue import SchedulingQueue
from kscheduler.scheduler import Scheduler, SchedulerObserver

log = structlog.get_logger("kscheduler.app")

#: Informer kinds whose changes may make a pending pod schedulable.
EVENT_RESOURCES = {
    "persistentvolumes": EventResource.PERSISTENT_VOLUME,
    "persistentvolumeclaims": EventResource.PERSISTENT_VOLUME_CLAIM,
    "storageclasses": EventResource.STORAGE_CLASS,
    "csinodes": EventResource.CSI_NODE,
    "csidrivers": EventResource.CSI_DRIVER,
    "csistoragecapacities": EventResource.CSI_STORAGE_CAPACITY,
    "volumeattachments": EventResource.VOLUME_ATTACHMENT,
    "namespaces": EventResource.NAMESPACE,
    "services": EventResource.SERVICE,
    "resourceclaims": EventResource.RESOURCE_CLAIM,
    "resourceslices": EventResource.RESOURCE_SLICE,
    "deviceclasses": EventResource.DEVICE_CLASS,
    "devicetaintrules": EventResource.DEVICE_TAINT_RULE,
}

#: Seconds between two returns of the C heap's free memory to the system.
TRIM_INTERVAL = 60.0


def malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``: free pages of the C heap go back to the system. None
    where the C library has no such call (musl, macOS). Under churn the C heap (the
    buffers of watch events and requests, the tables of large dicts) keeps pages it
    no longer uses, and its resident size creeps up although what Python holds does
    not grow."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return functools.partial(trim, 0)


#: kube-scheduler ignores terminal pods: they hold no resources.
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(slots=True)
class Options:
    """Runtime settings that come from flags rather than the config file."""

    leader_elect: bool | None = None
    shutdown_grace: float = 30.0
    bind_concurrency: int = 64
    identity: str = ""


def profile_specs(cfg: KubeSchedulerConfiguration) -> list[ProfileSpec]:
    out = []
    for p in cfg.profiles:
        points = {pt: p.plugins.names(pt) for pt in EXTENSION_POINTS}
        out.append(
            ProfileSpec(
                scheduler_name=p.scheduler_name,
                points=points,
                score_weights=p.plugins.score_weights(),
                args=dict(p.plugin_args),
                percentage_of_nodes_to_score=p.percentage_of_nodes_to_score,
            )
        )
    return out


def required_kinds(registry: Registry, specs: list[ProfileSpec]) -> set[str]:
    """Object kinds the enabled plugins read through handle.objects."""
    kinds: set[str] = set()
    for spec in specs:
        for names in spec.points.values():
            for n in names:
                kinds.update(getattr(registry[n].plugin_type, "required_kinds", ()))
    return kinds


class SchedulerApp:
    """Wires informers, cache, queue, frameworks and the loop; owns their tasks."""

    def __init__(
        self,
        cfg: KubeSchedulerConfiguration,
        registry: Registry,
        kube: KubeClient,
        options: Options | None = None,
        *,
        observer: SchedulerObserver | None = None,
    ) -> None:
        self.cfg = cfg = with_extender_ignored_resources(cfg)
        self.kube = kube
        self.options = options or Options()
        self.identity = self.options.identity or process_identity()
        self.cache = Cache()
        self.snapshot = Snapshot(self.cache)
        self.informers = InformerFactory(kube)
        self.client = ApiClusterClient(kube)
        # events go through their own client and rate limiter, as kube-scheduler's
        # event client does: a burst of FailedScheduling events never delays binds
        self.events_kube = KubeClient(kube.config, pool_size=EVENT_WORKERS, stream_pool_size=1)
        self.broadcaster = Broadcaster(ApiClusterClient(self.events_kube))
        specs = profile_specs(cfg)
        self.frameworks: dict[str, Framework] = {}
        for spec in specs:
            self.frameworks[spec.scheduler_name] = Framework(
                spec,
                registry,
                snapshot=self.snapshot,
                objects=self.informers.lister,
                client=self.client,
                recorder=self.broadcaster.recorder(spec.scheduler_name),
            )
        first = next(iter(self.frameworks.values()))
        events: dict[str, list[ClusterEventWithHint]] = {}
        for fwk in self.frameworks.values():
            for name, evs in fwk.events_to_register().items():
                events.setdefault(name, evs)
        self.queue = SchedulingQueue(
            sort_key=first.queue_sort_key(),
            pre_enqueue=self._pre_enqueue,
            events=events,
            initial_backoff=float(cfg.pod_initial_backoff_seconds),
            max_backoff=float(cfg.pod_max_backoff_seconds),
        )
        extenders = build_extenders(cfg.extenders)
        for fwk in self.frameworks.values():
            fwk.set_nominator(self.queue)
            fwk.set_activator(self.queue.activate, self.queue.release_gated)
            if any(e.supports_preemption for e in extenders):
                fwk.set_preemption_extenders(
                    functools.partial(process_preemption, extenders, snapshot=self.snapshot)
                )
        self.algorithm = Algorithm(percentage_of_nodes_to_score=cfg.percentage_of_nodes_to_score)
        self.leading = not self._leader_elect()
        self.scheduler = Scheduler(
            cache=self.cache,
            queue=self.queue,
            profiles=self.frameworks,
            algorithm=self.algorithm,
            status_writer=self.client,
            snapshot=self.snapshot,
            bind_concurrency=self.options.bind_concurrency,
            extenders=extenders,
            observer=observer,
            may_bind=self._may_bind,
        )
        self.handlers = EventHandlers(
            cache=self.cache,
            queue=self.queue,
            scheduler_names=list(self.frameworks),
            on_pod_deleted=self._pod_deleted,
        )
        self.pod_informer: Informer[PodInfo] = self.informers.add(
            "pods",
            field_selector=POD_FIELD_SELECTOR,
            transform=parse_pod,
            on_add=self.handlers.pod_added,
            on_update=self.handlers.pod_updated,
            on_delete=self.handlers.pod_deleted,
        )
        self.node_informer = self.informers.add(
            "nodes",
            transform=self.handlers.parse_node_or_none,
            on_add=self.handlers.node_added,
            on_update=self.handlers.node_updated,
            on_delete=self.handlers.node_deleted,
        )
        # a new version is parsed from the last one: what a binding or a status
        # report leaves as it was is not read again
        self.pod_informer.retransform = reparse_pod
        self.node_informer.retransform = self.handlers.reparse_node
        for kind in sorted(required_kinds(registry, specs)):
            self._watch_kind(kind)
        self.scheduler.wait_live = self._wait_live
        self.synced = asyncio.Event()
        self.started_at = time.time()
        self.elector: LeaderElector | None = None
        self._hooks: list[Callable[[], Awaitable[None]]] = []

    def _watch_kind(self, kind: str) -> None:
        """Start the informer for ``kind``; its changes are cluster events for the queue."""
        resource = EVENT_RESOURCES.get(kind)
        if resource is None:
            self.informers.add(kind)
            return
        q = self.queue
        add_ev = ClusterEvent(resource, ActionType.ADD, f"{resource.value}Add")
        upd_ev = ClusterEvent(resource, ActionType.UPDATE, f"{resource.value}Update")
        del_ev = ClusterEvent(resource, ActionType.DELETE, f"{resource.value}Delete")

        def added(new: dict[str, Any]) -> None:
            q.move_all_to_active_or_backoff(add_ev, None, new)

        def updated(old: dict[str, Any], new: dict[str, Any]) -> None:
            q.move_all_to_active_or_backoff(upd_ev, old, new)

        def deleted(old: dict[str, Any]) -> None:
            q.move_all_to_active_or_backoff(del_ev, old, None)

        self.informers.add(kind, on_add=added, on_update=updated, on_delete=deleted)

    async def _wait_live(self) -> None:
        for inf in (self.pod_informer, self.node_informer):
            if not inf.live.is_set():
                log.warning("watch down: scheduling paused until it is back", informer=inf.name)
                await inf.live.wait()
                log.info("watch back: scheduling resumed", informer=inf.name)

    def _may_bind(self) -> bool:
        if not self.leading:
            return False
        return self.elector is None or bool(self.elector.is_leader())

    def _leader_elect(self) -> bool:
        if self.options.leader_elect is not None:
            return self.options.leader_elect
        return self.cfg.leader_election.leader_elect

    def _pre_enqueue(self, pod: PodInfo) -> Status | None:
        fwk = self.frameworks.get(pod.scheduler_name)
        return fwk.run_pre_enqueue(pod) if fwk is not None else None

    def _pod_deleted(self, pod: PodInfo) -> None:
        for fwk in self.frameworks.values():
            wp = fwk.get_waiting_pod(pod.uid)
            if wp is not None:
                wp.reject("", "pod was deleted while waiting on permit")

    # ---- lifecycle -----------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set; returns the process exit status."""
        async with asyncio.TaskGroup() as tg:
            informers = tg.create_task(self.informers.run(), name="informers")
            events = tg.create_task(self.broadcaster.run(), name="events")
            trimmer = tg.create_task(self._trim_loop(), name="malloc-trim")
            try:
                await self._wait_synced(stop)
                if not stop.is_set():
                    if self._leader_elect():
                        await self._run_with_election(stop)
                    else:
                        await self._run_loop(stop)
            finally:
                await self._shutdown()
                trimmer.cancel()
                events.cancel()
                informers.cancel()
        return 0

    async def _trim_loop(self) -> None:
        trim = malloc_trim()
        if trim is None:
            return
        while True:
            await asyncio.sleep(TRIM_INTERVAL)
            trim()

    async def _wait_synced(self, stop: asyncio.Event) -> None:
        waiter = asyncio.create_task(self.informers.wait_synced())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if waiter.done():
            # the synced cache is long-lived: keep it out of every future collection
            gc.collect()
            gc.freeze()
            self.synced.set()
            log.info("caches synced", nodes=len(self.cache.nodes), pending=len(self.queue))
        else:
            waiter.cancel()
        await asyncio.gather(waiter, stopper, return_exceptions=True)

    async def _run_loop(self, stop: asyncio.Event) -> None:
        loop_task = asyncio.create_task(self.scheduler.run(), name="schedule-loop")
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({loop_task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if loop_task.done():
            loop_task.result()  # surface a crash
        else:
            loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)

    async def _run_with_election(self, stop: asyncio.Event) -> None:
        le = self.cfg.leader_election
        # renewals get their own connections and no client-side rate limit, so a
        # burst of binds can never delay them past the renew deadline
        lease_kube = KubeClient(
            self.kube.config,
            pool_size=2,
            stream_pool_size=1,
            max_retries=0,
            timeout=le.renew_deadline,
            rate_limiter=TokenBucketRateLimiter(0, 1),
        )
        try:
            await self._elect_and_lead(stop, lease_kube)
        finally:
            await lease_kube.close()

    async def _elect_and_lead(self, stop: asyncio.Event, lease_kube: KubeClient) -> None:
        le = self.cfg.leader_election
        self.elector = LeaderElector(
            lease_kube,
            namespace=le.resource_namespace,
            name=le.resource_name,
            identity=self.identity,
            lease_duration=le.lease_duration,
            renew_deadline=le.renew_deadline,
            retry_period=le.retry_period,
        )
        while not stop.is_set():
            acquired = await _until(self.elector.acquire(), stop)
            if not acquired:
                return
            self.leading = True
            log.info(
                "became leader",
                lease=f"{le.resource_namespace}/{le.resource_name}",
                identity=self.identity,
            )
            loop_task = asyncio.create_task(self.scheduler.run(), name="schedule-loop")
            hold = asyncio.create_task(self.elector.hold(), name="lease-renew")
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait({loop_task, hold, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if stop.is_set():
                # graceful: stop popping, let binds finish, then release the lease
                loop_task.cancel()
                await asyncio.gather(loop_task, return_exceptions=True)
                await self.scheduler.binds.drain(self.options.shutdown_grace)
                self.leading = False
                hold.cancel()
                await asyncio.gather(hold, return_exceptions=True)
                await self.elector.release()
                return
            # lease lost (or the loop died): stop at once, bind nothing more
            self.leading = False
            log.error("leadership lost; scheduling stopped, standing by")
            loop_task.cancel()
            hold.cancel()
            await asyncio.gather(loop_task, hold, return_exceptions=True)
            await self.scheduler.binds.cancel_all()
            if loop_task.done() and not loop_task.cancelled() and loop_task.exception():
                raise loop_task.exception()  # type: ignore[misc]

    async def _shutdown(self) -> None:
        cut = await self.scheduler.shutdown(self.options.shutdown_grace)
        if cut:
            log.warning("binds cut short by shutdown", count=cut)
        await self.broadcaster.drain(5.0)
        await self.events_kube.close()
        for hook in self._hooks:
            await hook()


async def _until(aw: Awaitable[Any], stop: asyncio.Event) -> bool:
    """Await ``aw`` unless ``stop`` is set first; True if ``aw`` completed."""
    task = asyncio.ensure_future(aw)
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False
