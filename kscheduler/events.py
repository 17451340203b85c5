"""events.k8s.io/v1 recorder, one per profile, with repeats folded into a series.

A pod that stays pending fails the same way again and again; instead of a new
Event each time, a repeat of the same (pod, type, reason, action, note) within
``SERIES_WINDOW`` bumps a local count, and the Event's ``series`` is patched at
most once per ``SERIES_FLUSH`` seconds.

Writes go out through ``concurrency`` workers at once (as the writes of
kube-scheduler's broadcaster do not wait for one another), so a burst of
Scheduled events lands while the pods are being bound rather than one round
trip at a time afterwards. A series patch waits for its Event's create.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

log = structlog.get_logger("kscheduler.events")

SERIES_WINDOW = 6 * 60.0
SERIES_FLUSH = 30.0
MAX_NOTE = 1024


class EventSink(Protocol):
    async def create(self, namespace: str, body: dict[str, Any]) -> None: ...

    async def patch(self, namespace: str, name: str, body: dict[str, Any]) -> None: ...


_second: tuple[int, str] = (0, datetime.fromtimestamp(0, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S"))


def micro_time(ts: float | None = None) -> str:
    """RFC 3339 UTC with microseconds (a MicroTime), as datetime would write it;
    the date and time of day are formatted once per second."""
    global _second
    frac, whole = math.modf(ts if ts is not None else time.time())
    micros = round(frac * 1e6)  # half to even, as datetime.fromtimestamp rounds
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    elif micros < 0:
        whole, micros = whole - 1, micros + 1_000_000
    second = int(whole)
    if _second[0] != second:
        _second = (second, datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{_second[1]}.{micros:06d}Z"


def truncate_note(note: str, limit: int = MAX_NOTE) -> str:
    data = note.encode()
    if len(data) <= limit:
        return note
    return data[: limit - 4].decode(errors="ignore") + " ..."


@dataclass(slots=True)
class _Series:
    name: str
    namespace: str
    count: int
    last_observed: float
    last_sent_count: int


#: event writes in flight at once: as many as binds (--bind-concurrency's default),
#: so that at an apiserver short of CPU the Scheduled events keep pace with the binds
#: (kube-scheduler's broadcaster writes each event in a goroutine of its own; with 16
#: here, 10,000 pods at 5000 nodes were bound ~30 s before their last event was)
EVENT_WORKERS = 64


class Broadcaster:
    """Sends events for every profile's recorder through one bounded queue and
    ``concurrency`` workers."""

    def __init__(
        self,
        sink: EventSink,
        *,
        max_pending: int = 10000,
        concurrency: int = EVENT_WORKERS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._sink = sink
        self._concurrency = concurrency
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(max_pending)
        #: Event name -> set once its create has been answered (patches wait for it)
        self._creating: dict[str, asyncio.Event] = {}
        self._series: dict[tuple[str, ...], _Series] = {}
        self._clock = clock
        self.dropped = 0
        self.sent = 0
        self.instance = f"{socket.gethostname()}-{os.getpid()}"

    def recorder(self, controller: str) -> Recorder:
        return Recorder(self, controller)

    def _submit(self, key: tuple[str, ...], body: dict[str, Any]) -> None:
        now = self._clock()
        s = self._series.get(key)
        if s is not None and now - s.last_observed <= SERIES_WINDOW:
            s.count += 1
            s.last_observed = now
            return
        try:
            self._queue.put_nowait(("create", (key, body, now)))
        except asyncio.QueueFull:
            self.dropped += 1
            return
        name = body["metadata"]["name"]
        self._creating[name] = asyncio.Event()
        self._series[key] = _Series(name, body["metadata"]["namespace"], 1, now, 1)

    async def run(self) -> None:
        tasks = [asyncio.create_task(self._flush_loop(), name="events-series-flush")]
        tasks += [
            asyncio.create_task(self._worker(), name=f"events-{i}")
            for i in range(self._concurrency)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _worker(self) -> None:
        while True:
            op, arg = await self._queue.get()
            try:
                await self._send(op, arg)
            finally:
                self._queue.task_done()

    async def _send(self, op: str, arg: Any) -> None:
        created = ""
        try:
            if op == "create":
                _, body, _ = arg
                created = body["metadata"]["name"]
                await self._sink.create(body["metadata"]["namespace"], body)
            else:
                ns, name, patch = arg
                pending = self._creating.get(name)
                if pending is not None:
                    await pending.wait()
                await self._sink.patch(ns, name, patch)
            self.sent += 1
        except Exception as exc:  # an event is best effort; never stop the scheduler for it
            log.warning("event write failed", op=op, error=str(exc))
        finally:
            if created:
                done = self._creating.pop(created, None)
                if done is not None:
                    done.set()

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(SERIES_FLUSH)
            self.flush_series()

    def flush_series(self) -> None:
        now = self._clock()
        for key, s in list(self._series.items()):
            if s.count > s.last_sent_count:
                s.last_sent_count = s.count
                patch = {
                    "series": {"count": s.count, "lastObservedTime": micro_time(s.last_observed)}
                }
                try:
                    self._queue.put_nowait(("patch", (s.namespace, s.name, patch)))
                except asyncio.QueueFull:
                    self.dropped += 1
            elif now - s.last_observed > SERIES_WINDOW:
                del self._series[key]

    async def drain(self, timeout: float) -> None:
        self.flush_series()
        try:
            async with asyncio.timeout(timeout):
                await self._queue.join()
        except TimeoutError:
            log.warning("events not sent before shutdown", pending=self._queue.qsize())


def _reference(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", "Pod"),
        "namespace": meta.get("namespace") or "default",
        "name": meta.get("name") or "",
        "uid": meta.get("uid") or "",
        "resourceVersion": meta.get("resourceVersion", ""),
    }


class Recorder:
    """EventRecorder for one profile: reportingController is the scheduler name."""

    def __init__(self, broadcaster: Broadcaster, controller: str) -> None:
        self._b = broadcaster
        self.controller = controller

    def event(
        self,
        obj: Mapping[str, Any],
        type_: str,
        reason: str,
        action: str,
        note: str,
        related: Mapping[str, Any] | None = None,
    ) -> None:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        name = meta.get("name") or ""
        uid = meta.get("uid") or ""
        note = truncate_note(note)
        now = self._b._clock()
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": ns},
            "eventTime": micro_time(now),
            "reportingController": self.controller,
            "reportingInstance": f"{self.controller}-{self._b.instance}"[:128],
            "action": action,
            "reason": reason,
            "note": note,
            "type": type_,
            "regarding": _reference(obj),
        }
        if related is not None:
            body["related"] = _reference(related)
        key = (uid, ns, name, type_, reason, action, note, self.controller)
        self._b._submit(key, body)
