"""The event recorder: upstream's Event shape, repeats folded into a series."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from kscheduler.events import MAX_NOTE, SERIES_WINDOW, Broadcaster, micro_time, truncate_note

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"},
}


class Sink:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patched: list[tuple[str, str, dict[str, Any]]] = []

    async def create(self, namespace: str, body: dict[str, Any]) -> None:
        self.created.append(body)

    async def patch(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.patched.append((namespace, name, body))


async def drain(b: Broadcaster) -> None:
    task = asyncio.create_task(b.run())
    await b.drain(2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_event_body_matches_events_v1() -> None:
    sink = Sink()
    b = Broadcaster(sink)
    b.recorder("my-scheduler").event(POD, "Warning", "FailedScheduling", "Scheduling", "0/1 nodes")
    await drain(b)
    (ev,) = sink.created
    assert ev["apiVersion"] == "events.k8s.io/v1" and ev["kind"] == "Event"
    assert ev["reportingController"] == "my-scheduler"
    assert ev["reportingInstance"].startswith("my-scheduler-")
    assert (ev["type"], ev["reason"], ev["action"], ev["note"]) == (
        "Warning",
        "FailedScheduling",
        "Scheduling",
        "0/1 nodes",
    )
    assert ev["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ns",
        "name": "p",
        "uid": "u-1",
        "resourceVersion": "7",
    }
    assert ev["metadata"]["namespace"] == "ns" and ev["metadata"]["name"].startswith("p.")
    assert ev["eventTime"].endswith("Z") and "." in ev["eventTime"]


async def test_repeats_become_a_series_not_new_events() -> None:
    now = [1000.0]
    sink = Sink()
    b = Broadcaster(sink, clock=lambda: now[0])
    rec = b.recorder("s")
    for _ in range(50):
        rec.event(POD, "Warning", "FailedScheduling", "Scheduling", "same message")
        now[0] += 1
    b.flush_series()
    await drain(b)
    assert len(sink.created) == 1
    ((_, name, patch),) = sink.patched
    assert name == sink.created[0]["metadata"]["name"]
    assert patch["series"]["count"] == 50
    # a different message is a different event
    rec.event(POD, "Warning", "FailedScheduling", "Scheduling", "another message")
    await drain(b)
    assert len(sink.created) == 2


async def test_series_window_expires() -> None:
    now = [0.0]
    sink = Sink()
    b = Broadcaster(sink, clock=lambda: now[0])
    rec = b.recorder("s")
    rec.event(POD, "Warning", "FailedScheduling", "Scheduling", "m")
    now[0] += SERIES_WINDOW + 1
    rec.event(POD, "Warning", "FailedScheduling", "Scheduling", "m")
    await drain(b)
    assert len(sink.created) == 2


async def test_queue_full_drops_instead_of_blocking() -> None:
    sink = Sink()
    b = Broadcaster(sink, max_pending=3)
    rec = b.recorder("s")
    for i in range(10):
        rec.event(POD, "Normal", "Scheduled", "Binding", f"m{i}")
    assert b.dropped == 7
    await drain(b)
    assert len(sink.created) == 3


def test_note_truncated_to_1024_bytes() -> None:
    long = "x" * 5000
    out = truncate_note(long)
    assert len(out.encode()) <= MAX_NOTE and out.endswith(" ...")
    assert truncate_note("short") == "short"


class SlowSink(Sink):
    """Holds every write open until released; records how many were open at once."""

    def __init__(self) -> None:
        super().__init__()
        self.open = 0
        self.most_open = 0
        self.release = asyncio.Event()
        self.order: list[str] = []

    async def _hold(self) -> None:
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        await self.release.wait()
        self.open -= 1

    async def create(self, namespace: str, body: dict[str, Any]) -> None:
        await self._hold()
        self.order.append("create " + body["metadata"]["name"])
        await super().create(namespace, body)

    async def patch(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.order.append("patch " + name)
        await super().patch(namespace, name, body)


def pod(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u-{i}"}}


async def test_writes_go_out_concurrently_up_to_the_bound() -> None:
    sink = SlowSink()
    b = Broadcaster(sink, concurrency=4)
    rec = b.recorder("s")
    for i in range(10):
        rec.event(pod(i), "Normal", "Scheduled", "Binding", f"to n{i}")
    task = asyncio.create_task(b.run())
    for _ in range(20):
        await asyncio.sleep(0)
    assert sink.most_open == 4  # four in flight at once, never more
    sink.release.set()
    await b.drain(2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(sink.created) == 10 and sink.most_open == 4 and b.sent == 10


async def test_series_patch_waits_for_its_create() -> None:
    now = [0.0]
    sink = SlowSink()
    b = Broadcaster(sink, concurrency=8, clock=lambda: now[0])
    rec = b.recorder("s")
    for _ in range(3):
        rec.event(POD, "Warning", "FailedScheduling", "Scheduling", "m")
        now[0] += 1
    task = asyncio.create_task(b.run())
    await asyncio.sleep(0)
    b.flush_series()  # the patch is queued while its create is still open
    for _ in range(20):
        await asyncio.sleep(0)
    assert sink.patched == []
    sink.release.set()
    await b.drain(2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    name = sink.created[0]["metadata"]["name"]
    assert sink.order == [f"create {name}", f"patch {name}"]
    assert sink.patched[0][2]["series"]["count"] == 3


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        Broadcaster(Sink(), concurrency=0)


@pytest.mark.parametrize(
    "ts",
    [0.0, 1.0000005, 1.9999995, 1733600000.9999996, 1733600000.9999994, 1765000000.25, 86399.5],
)
def test_micro_time_is_datetimes_rfc3339_with_microseconds(ts: float) -> None:
    expected = datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert micro_time(ts) == expected
    assert micro_time(ts + 1.0) == datetime.fromtimestamp(ts + 1.0, tz=UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )
