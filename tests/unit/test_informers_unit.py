"""Informer store logic, the watch layers and the REST client's rules, with in-memory fakes.

Nothing here claims anything about a real apiserver: the fakes script what a
server would send (list pages, watch lines, errors) and the tests check what
the informer and the client do with it. tests/integration/test_informers.py
runs the same paths against a real kube-apiserver.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import textwrap
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from kscheduler.informers import (
    Callbacks,
    Informer,
    InformerFactory,
    InformerSettings,
    object_key,
)
from kscheduler.kube import (
    USER_AGENT,
    ApiError,
    Backoff,
    ConfigError,
    Credentials,
    KubeClient,
    KubeConfig,
    Params,
    StreamTimeout,
    TokenBucketRateLimiter,
    load_client_config,
)

JSON = dict[str, Any]

FAST = InformerSettings(backoff_initial=0.001, backoff_max=0.01, inactivity_timeout=5.0)


# --------------------------------------------------------------------------- builders


def obj(
    name: str,
    rv: int | str,
    *,
    ns: str | None = "default",
    uid: str | None = None,
    **extra: Any,
) -> JSON:
    meta: JSON = {"name": name, "resourceVersion": str(rv), "uid": uid or f"uid-{name}"}
    if ns is not None:
        meta["namespace"] = ns
    meta.update(extra.pop("meta", {}))
    return {"metadata": meta, **extra}


def event(kind: str, o: JSON) -> bytes:
    return orjson.dumps({"type": kind, "object": o})


def bookmark(rv: int) -> bytes:
    return event("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": str(rv)}})


def gone_event() -> bytes:
    status = {
        "kind": "Status",
        "status": "Failure",
        "reason": "Expired",
        "message": "too old resource version: 1 (5)",
        "code": 410,
    }
    return event("ERROR", status)


def page(items: list[JSON], rv: int, cont: str | None = None) -> JSON:
    meta: JSON = {"resourceVersion": str(rv)}
    if cont:
        meta["continue"] = cont
    return {"kind": "PodList", "metadata": meta, "items": items}


class Recorder:
    """An EventHandler that writes down what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def on_add(self, o: JSON) -> None:
        self.calls.append(("add", object_key(o), o["metadata"]["resourceVersion"]))

    def on_update(self, old: JSON, new: JSON) -> None:
        self.calls.append(
            (
                "update",
                object_key(new),
                old["metadata"]["resourceVersion"],
                new["metadata"]["resourceVersion"],
            )
        )

    def on_delete(self, o: JSON) -> None:
        self.calls.append(("delete", object_key(o)))

    def take(self) -> list[tuple[str, ...]]:
        out, self.calls = self.calls, []
        return out


BLOCK = object()
"""In a watch script: hang (like an idle watch) until cancelled."""


class FakeWatchClient:
    """Scripted list answers and watch streams.

    ``lists``: answers to successive GETs (a page dict or an exception to raise).
    ``watches``: successive streams, each a list of lines (bytes), exceptions
    (raised at that point) or BLOCK. A call waits while its script list is empty.
    """

    def __init__(self) -> None:
        self.lists: list[JSON | BaseException] = []
        self.watches: list[list[Any]] = []
        self.list_calls: list[dict[str, str]] = []
        self.watch_calls: list[dict[str, str]] = []
        self.timeouts: list[float | None] = []

    async def get_json(self, path: str, params: Params = None) -> Any:
        self.list_calls.append({k: str(v) for k, v in (params or {}).items()})
        await wait_until(lambda: bool(self.lists), timeout=3600)
        answer = self.lists.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return orjson.loads(orjson.dumps(answer))  # a fresh copy, as from the wire

    async def stream_lines(
        self,
        path: str,
        params: Params = None,
        timeout: float | None = None,
        *,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncGenerator[bytes, None]:
        self.watch_calls.append({k: str(v) for k, v in (params or {}).items()})
        self.timeouts.append(timeout)
        await wait_until(lambda: bool(self.watches), timeout=3600)
        if on_open is not None:
            on_open()
        for item in self.watches.pop(0):
            if item is BLOCK:
                await asyncio.Event().wait()
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item


async def wait_until(cond: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)


@contextlib.asynccontextmanager
async def running(inf: Informer[Any] | InformerFactory) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(inf.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def informer(client: FakeWatchClient, **kwargs: Any) -> tuple[Informer[JSON], Recorder]:
    inf: Informer[JSON] = Informer(
        client, "/api/v1/pods", settings=kwargs.pop("settings", FAST), **kwargs
    )
    rec = Recorder()
    inf.add_handler(rec)
    return inf, rec


# --------------------------------------------------------------------------- store logic


def test_object_key() -> None:
    assert object_key(obj("a", 1, ns="ns1")) == "ns1/a"
    assert object_key(obj("node-1", 1, ns=None)) == "node-1"


def test_replace_semantics() -> None:
    inf, rec = informer(FakeWatchClient())
    inf.replace([obj("keep", 1), obj("change", 1), obj("gone", 1), obj("recreate", 1)])
    assert sorted(rec.take()) == sorted(
        [
            ("add", "default/keep", "1"),
            ("add", "default/change", "1"),
            ("add", "default/gone", "1"),
            ("add", "default/recreate", "1"),
        ]
    )

    inf.replace(
        [
            obj("keep", 1),
            obj("change", 2),
            obj("recreate", 3, uid="another-uid"),
            obj("new", 4),
        ]
    )
    calls = rec.take()
    assert calls[0] == ("delete", "default/gone")  # deletions come first
    assert sorted(calls[1:]) == sorted(
        [
            ("update", "default/change", "1", "2"),
            ("delete", "default/recreate"),  # same name, new uid: delete + add
            ("add", "default/recreate", "3"),
            ("add", "default/new", "4"),
        ]
    )
    assert calls.index(("delete", "default/recreate")) < calls.index(
        ("add", "default/recreate", "3")
    )
    assert set(inf.store) == {"default/keep", "default/change", "default/recreate", "default/new"}


def test_apply_events() -> None:
    inf, rec = informer(FakeWatchClient())
    inf.apply("ADDED", obj("a", 1))
    inf.apply("ADDED", obj("a", 1))  # duplicate delivery: nothing new
    inf.apply("MODIFIED", obj("a", 2))
    inf.apply("MODIFIED", obj("b", 3))  # never seen: an add
    inf.apply("DELETED", obj("a", 4))
    inf.apply("DELETED", obj("zzz", 5))  # unknown: nothing to delete
    assert rec.take() == [
        ("add", "default/a", "1"),
        ("update", "default/a", "1", "2"),
        ("add", "default/b", "3"),
        ("delete", "default/a"),
    ]
    assert list(inf.store) == ["default/b"]


def test_changes_since_names_each_put_and_removal(monkeypatch: pytest.MonkeyPatch) -> None:
    inf, _ = informer(FakeWatchClient())
    start, keys = inf.changes_since(None)
    assert keys is None  # no cursor yet: read the whole store
    inf.apply("ADDED", obj("a", 1))
    inf.apply("ADDED", obj("a", 1))  # duplicate delivery: no change
    inf.apply("MODIFIED", obj("b", 2))
    inf.apply("DELETED", obj("a", 3))
    cursor, keys = inf.changes_since(start)
    assert keys == ["default/a", "default/b", "default/a"]
    assert inf.changes_since(cursor) == (cursor, [])
    # a log trimmed past the cursor: the whole store must be read again
    monkeypatch.setattr("kscheduler.informers.CHANGE_LOG_MAX", 4)
    for rv in range(10, 16):
        inf.apply("MODIFIED", obj("b", rv))
    assert inf.changes_since(cursor)[1] is None
    now, _ = inf.changes_since(None)
    inf.apply("MODIFIED", obj("b", 20))
    assert inf.changes_since(now) == (now + 1, ["default/b"])


def test_changes_are_only_counted_until_someone_reads_them() -> None:
    """An informer read only through its store (pods, nodes) keeps no log of keys;
    its first changes_since reader starts from the store and is followed from then on."""
    inf, _ = informer(FakeWatchClient())
    for rv in range(1, 2001):
        inf.apply("ADDED" if rv == 1 else "MODIFIED", obj(f"p{rv % 50}", rv))
    assert inf._changes == []
    cursor, keys = inf.changes_since(1)
    assert keys is None and cursor == 2000  # counted, not kept: read the store
    inf.apply("MODIFIED", obj("p7", 3000))
    assert inf.changes_since(cursor) == (cursor + 1, ["default/p7"])


def test_transform_runs_once_per_version() -> None:
    seen: list[str] = []

    def slim(raw: JSON) -> tuple[str, str]:
        seen.append(raw["metadata"]["resourceVersion"])
        return (raw["metadata"]["name"], raw["metadata"]["resourceVersion"])

    inf = Informer(FakeWatchClient(), "/api/v1/pods", transform=slim)
    updates: list[tuple[tuple[str, str], tuple[str, str]]] = []
    inf.add_handler(Callbacks(update=lambda old, new: updates.append((old, new))))
    inf.replace([obj("a", 1), obj("b", 1)])
    inf.replace([obj("a", 1), obj("b", 2)])
    inf.apply("MODIFIED", obj("b", 2))
    inf.apply("MODIFIED", obj("b", 3))
    assert seen == ["1", "1", "2", "3"]
    assert updates == [(("b", "1"), ("b", "2")), (("b", "2"), ("b", "3"))]
    assert inf.get("default", "b") == ("b", "3")


def test_a_failing_transform_leaves_the_store_as_it_was() -> None:
    def strict(raw: JSON) -> str | None:
        if raw.get("bad"):
            raise ValueError("cannot parse")
        return None if raw.get("skip") else str(raw["metadata"]["resourceVersion"])

    inf = Informer(FakeWatchClient(), "/api/v1/nodes", transform=strict)
    calls: list[tuple[str, Any]] = []
    inf.add_handler(
        Callbacks(
            add=lambda v: calls.append(("add", v)),
            update=lambda o, n: calls.append(("update", (o, n))),
            delete=lambda v: calls.append(("delete", v)),
        )
    )
    inf.replace([obj("a", 1, ns=None), obj("b", 1, ns=None, bad=True), obj("c", 1, ns=None)])
    assert calls == [("add", "1"), ("add", "1")] and "b" not in inf.store
    calls.clear()
    inf.apply("MODIFIED", obj("a", 2, ns=None, bad=True))  # kept at version 1
    inf.apply("MODIFIED", obj("a", 3, ns=None))  # parses again: an update from 1
    inf.apply("MODIFIED", obj("c", 4, ns=None, skip=True))  # None is a value like any other
    inf.replace([obj("a", 3, ns=None), obj("b", 5, ns=None)])  # c gone, b parses now
    inf.apply("DELETED", obj("a", 6, ns=None, bad=True))  # gone: reported with the last good value
    assert calls == [
        ("update", ("1", "3")),
        ("update", ("1", None)),
        ("delete", None),
        ("add", "5"),
        ("delete", "3"),
    ]
    assert dict(inf.store) == {"b": "5"}


def test_handler_errors_do_not_stop_other_handlers() -> None:
    inf, rec = informer(FakeWatchClient())

    def boom(o: JSON) -> None:
        raise RuntimeError("handler bug")

    inf._handlers.insert(0, Callbacks(add=boom))
    inf.apply("ADDED", obj("a", 1))
    assert rec.take() == [("add", "default/a", "1")]
    assert "default/a" in inf.store


def test_late_handler_gets_existing_objects() -> None:
    inf, _ = informer(FakeWatchClient())
    inf.replace([obj("a", 1), obj("b", 1)])
    late = Recorder()
    inf.add_handler(late)
    assert sorted(late.take()) == [("add", "default/a", "1"), ("add", "default/b", "1")]


def test_namespace_index() -> None:
    inf, _ = informer(FakeWatchClient())
    inf.replace([obj("a", 1, ns="x"), obj("b", 1, ns="x"), obj("c", 1, ns="y")])
    assert {o["metadata"]["name"] for o in inf.list("x")} == {"a", "b"}
    assert len(inf.list()) == 3
    inf.apply("DELETED", obj("c", 2, ns="y"))
    assert inf.list("y") == []
    assert inf.get("x", "a") is not None
    assert inf.get("y", "c") is None
    nodes, _ = informer(FakeWatchClient())
    nodes.replace([obj("n1", 1, ns=None)])
    assert nodes.get(None, "n1") is not None
    assert nodes.get("", "n1") is not None


# --------------------------------------------------------------------------- list + watch


async def test_paginated_list_then_watch_from_its_version() -> None:
    client = FakeWatchClient()
    first = obj("a", 1, meta={"managedFields": [{"manager": "x"}]})
    client.lists = [page([first], 10, cont="tok"), page([obj("b", 2)], 10)]
    client.watches = [
        [event("ADDED", obj("c", 11, meta={"managedFields": []})), event("MODIFIED", obj("a", 12))]
    ]
    inf, rec = informer(client, field_selector="spec.nodeName=", label_selector="app=x")
    async with running(inf):
        await wait_until(lambda: len(rec.calls) == 4)
        assert inf.has_synced.is_set()
    assert client.list_calls == [
        {"fieldSelector": "spec.nodeName=", "labelSelector": "app=x", "limit": "500"},
        {
            "fieldSelector": "spec.nodeName=",
            "labelSelector": "app=x",
            "limit": "500",
            "continue": "tok",
        },
    ]
    watch = client.watch_calls[0]
    assert watch["resourceVersion"] == "10"
    assert watch["watch"] == "true"
    assert watch["allowWatchBookmarks"] == "true"
    assert watch["fieldSelector"] == "spec.nodeName="
    assert 300 <= int(watch["timeoutSeconds"]) <= 600
    assert client.timeouts[0] == FAST.inactivity_timeout
    assert rec.calls[:2] == [("add", "default/a", "1"), ("add", "default/b", "2")]
    assert all("managedFields" not in o["metadata"] for o in inf.store.values())
    assert inf.resource_version == "12"


async def test_has_synced_waits_for_the_first_list() -> None:
    client = FakeWatchClient()
    inf, _ = informer(client)
    async with running(inf):
        await asyncio.sleep(0.02)
        assert not inf.has_synced.is_set()
        client.lists.append(page([], 5))
        await asyncio.wait_for(inf.has_synced.wait(), 2)


async def test_bookmarks_and_server_timeout_resume_from_the_latest_version() -> None:
    client = FakeWatchClient()
    client.lists = [page([obj("a", 1)], 10)]
    client.watches = [[bookmark(20), bookmark(30)], [event("ADDED", obj("b", 31))]]
    inf, rec = informer(client)
    async with running(inf):
        await wait_until(lambda: len(client.watch_calls) >= 3)
    assert [w["resourceVersion"] for w in client.watch_calls[:3]] == ["10", "30", "31"]
    assert inf.relists == 1
    assert rec.calls == [("add", "default/a", "1"), ("add", "default/b", "31")]


@pytest.mark.parametrize("how", ["error-event", "http-410"])
async def test_gone_relists_with_replace_semantics(how: str) -> None:
    client = FakeWatchClient()
    client.lists = [
        page([obj("stays", 1), obj("removed", 2), obj("edited", 3)], 10),
        page([obj("stays", 1), obj("edited", 40), obj("created", 41)], 42),
    ]
    gone: Any = (
        gone_event() if how == "error-event" else ApiError(410, reason="Expired", message="old")
    )
    client.watches = [[event("MODIFIED", obj("stays", 1)), gone]]
    inf, rec = informer(client)
    async with running(inf):
        await wait_until(lambda: len(client.watch_calls) >= 2)
    assert inf.relists == 2
    assert client.watch_calls[1]["resourceVersion"] == "42"
    calls = rec.calls[3:]
    assert calls[0] == ("delete", "default/removed")
    assert sorted(calls[1:]) == [
        ("add", "default/created", "41"),
        ("update", "default/edited", "3", "40"),
    ]


async def test_connection_errors_rewatch_without_relisting() -> None:
    client = FakeWatchClient()
    client.lists = [page([obj("a", 1)], 10)]
    client.watches = [
        [event("ADDED", obj("b", 11)), aiohttp.ServerDisconnectedError()],
        [aiohttp.ClientConnectionError("refused")],
        [ApiError(500, reason="InternalError")],
        [event("ADDED", obj("c", 12))],
    ]
    inf, rec = informer(client)
    async with running(inf):
        await wait_until(lambda: len(client.watch_calls) >= 5)
    assert inf.relists == 1
    assert [w["resourceVersion"] for w in client.watch_calls[:5]] == ["10", "11", "11", "11", "12"]
    assert [c[1] for c in rec.calls] == ["default/a", "default/b", "default/c"]


async def test_inactivity_timeout_reconnects_from_the_same_version() -> None:
    client = FakeWatchClient()
    client.lists = [page([], 10)]
    client.watches = [[bookmark(15), StreamTimeout("silent")], [event("ADDED", obj("a", 16))]]
    inf, rec = informer(client)
    async with running(inf):
        await wait_until(lambda: len(rec.calls) == 1)
    assert [w["resourceVersion"] for w in client.watch_calls[:2]] == ["10", "15"]
    assert inf.relists == 1


async def test_list_failures_back_off_and_retry() -> None:
    client = FakeWatchClient()
    client.lists = [
        ApiError(503, reason="ServiceUnavailable"),
        aiohttp.ClientConnectionError("down"),
        page([obj("a", 1)], 10),
    ]
    inf, _ = informer(client)
    async with running(inf):
        await asyncio.wait_for(inf.has_synced.wait(), 2)
    assert inf.relists == 3


async def test_reconnects_wait_as_long_as_retry_after_asks() -> None:
    client = FakeWatchClient()
    client.lists = [
        ApiError(429, reason="TooManyRequests", retry_after=0.3),
        page([obj("a", 1)], 10),
    ]
    inf, _ = informer(client)  # its own backoff is at most 10 ms
    began = time.monotonic()
    async with running(inf):
        await asyncio.wait_for(inf.has_synced.wait(), 2)
    assert time.monotonic() - began >= 0.3
    assert inf.relists == 2


async def test_expired_continue_token_restarts_the_list_in_one_page() -> None:
    client = FakeWatchClient()
    client.lists = [
        page([obj("a", 1)], 10, cont="tok"),
        ApiError(410, reason="Expired", message="continue token too old"),
        page([obj("a", 1), obj("b", 2)], 12),
    ]
    inf, rec = informer(client)
    async with running(inf):
        await asyncio.wait_for(inf.has_synced.wait(), 2)
    assert "limit" not in client.list_calls[2] and "continue" not in client.list_calls[2]
    assert sorted(c[1] for c in rec.calls) == ["default/a", "default/b"]
    assert inf.resource_version == "12"


async def test_streams_that_end_at_once_are_not_a_tight_loop() -> None:
    client = FakeWatchClient()
    client.lists = [page([], 10)]
    client.watches = [[] for _ in range(10_000)]
    settings = InformerSettings(backoff_initial=0.02, backoff_max=0.05)
    inf, _ = informer(client, settings=settings)
    async with running(inf):
        await asyncio.sleep(0.3)
    assert 2 <= len(client.watch_calls) < 25
    assert inf.relists == 1


async def test_gone_straight_after_a_list_backs_off() -> None:
    client = FakeWatchClient()
    client.lists = [page([], i) for i in range(1, 10_000)]
    client.watches = [[gone_event()] for _ in range(10_000)]
    settings = InformerSettings(backoff_initial=0.02, backoff_max=0.05)
    inf, _ = informer(client, settings=settings)
    async with running(inf):
        await asyncio.sleep(0.3)
    assert 2 <= inf.relists < 25


# --------------------------------------------------------------------------- the factory


async def test_factory_creates_lazily_runs_and_lists() -> None:
    client = FakeWatchClient()
    factory = InformerFactory(client, settings=FAST)
    svc = factory.informer("services")
    assert factory.informer("services") is svc
    with pytest.raises(ValueError):
        factory.informer("services", label_selector="a=b")
    with pytest.raises(KeyError):
        factory.informer("widgets")
    pods = factory.add("pods", transform=lambda raw: raw["metadata"]["name"])
    assert pods.transform is not None
    assert svc.path == "/api/v1/services"
    client.lists = [
        page([obj("s1", 1, ns="a"), obj("s2", 1, ns="b")], 5),
        page([obj("p", 1)], 5),
    ]
    async with running(factory):
        await factory.wait_synced(timeout=2)
        assert factory.has_synced()
        lister = factory.lister
        assert [o["metadata"]["name"] for o in lister.list("services", "a")] == ["s1"]
        assert len(lister.list("services")) == 2
        assert lister.get("services", "b", "s2") is not None
        assert lister.get("services", "b", "nope") is None
        with pytest.raises(ValueError):
            lister.list("pods")
        # first use of a kind creates its informer, which starts at once
        assert lister.list("storageclasses") == []
        client.lists.append(page([obj("fast", 1, ns=None)], 6))
        await wait_until(lambda: lister.get("storageclasses", "", "fast") is not None)
        assert client.watch_calls  # the running informers watch
    assert set(factory.informers) == {"services", "pods", "storageclasses"}


async def test_factory_add_wires_callbacks() -> None:
    client = FakeWatchClient()
    client.lists = [page([obj("n1", 1, ns=None)], 3)]
    factory = InformerFactory(client, settings=FAST)
    added: list[str] = []
    factory.add("nodes", on_add=lambda o: added.append(o["metadata"]["name"]))
    async with running(factory):
        await factory.wait_synced(timeout=2)
    assert added == ["n1"]


# --------------------------------------------------------------------------- rate limiter, backoff


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def test_token_bucket_burst_then_qps() -> None:
    t = FakeTime()
    limiter = TokenBucketRateLimiter(10, 3, clock=t.clock, sleep=t.sleep)
    delays = [limiter.reserve() for _ in range(5)]
    assert delays[:3] == [0, 0, 0]
    assert delays[3] == pytest.approx(0.1)
    assert delays[4] == pytest.approx(0.2)
    t.now += 1.0  # refills, but never past the burst
    assert [limiter.reserve() for _ in range(3)] == pytest.approx([0, 0, 0])
    assert limiter.reserve() == pytest.approx(0.1)


async def test_token_bucket_acquire_sleeps_and_unlimited_never_does() -> None:
    t = FakeTime()
    limiter = TokenBucketRateLimiter(2, 1, clock=t.clock, sleep=t.sleep)
    for _ in range(3):
        await limiter.acquire()
    assert t.slept == pytest.approx([0.5, 1.0])
    unlimited = TokenBucketRateLimiter(0, 1, clock=t.clock, sleep=t.sleep)
    for _ in range(1000):
        await unlimited.acquire()
    assert t.slept == pytest.approx([0.5, 1.0])


async def test_token_bucket_cancelled_waiter_returns_its_token() -> None:
    limiter = TokenBucketRateLimiter(1, 1)
    await limiter.acquire()
    waiter = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0.01)
    waiter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiter
    # the cancelled reservation was handed back: the next caller waits ~1s, not ~2s
    assert 0.5 < limiter.reserve() < 1.5


def test_backoff_grows_is_capped_and_never_zero() -> None:
    b = Backoff(initial=0.5, cap=4.0, factor=2.0, jitter=1.0, rng=random.Random(1))
    delays = [b.next() for _ in range(100)]
    for step, delay in enumerate(delays):
        base = min(4.0, 0.5 * 2**step)
        assert base <= delay <= 2 * base
    assert len({round(d, 6) for d in delays[10:]}) > 1  # still jittered at the cap
    b.reset()
    assert b.next() <= 1.0
    assert Backoff(initial=0.1, jitter=0).next() == 0.1
    with pytest.raises(ValueError):
        Backoff(initial=0)


# --------------------------------------------------------------------------- ApiError


def test_api_error_parses_the_status_body() -> None:
    body = orjson.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": 'pods "p" not found',
            "reason": "NotFound",
            "details": {"name": "p", "kind": "pods"},
            "code": 404,
        }
    )
    err = ApiError.from_response(404, body, method="GET", path="/api/v1/namespaces/d/pods/p")
    assert (err.status, err.reason, err.message) == (404, "NotFound", 'pods "p" not found')
    assert err.is_not_found and err.not_found and not err.is_conflict
    assert err.details["name"] == "p"
    assert "HTTP 404 NotFound" in str(err)

    exists = ApiError.from_response(
        409, orjson.dumps({"kind": "Status", "reason": "AlreadyExists", "code": 409})
    )
    assert exists.is_conflict and exists.is_already_exists
    assert ApiError(409, reason="Conflict").is_conflict
    assert not ApiError(409, reason="Conflict").is_already_exists
    assert ApiError(410).is_gone and ApiError(200, reason="Expired").is_gone
    assert ApiError(429).is_too_many_requests and ApiError(503).is_server_error

    plain = ApiError.from_response(502, b"<html>bad gateway</html>")
    assert plain.status == 502 and "bad gateway" in plain.message

    throttled = ApiError.from_status(
        {
            "kind": "Status",
            "code": 429,
            "reason": "TooManyRequests",
            "details": {"retryAfterSeconds": 3},
        }
    )
    assert throttled.is_too_many_requests and throttled.retry_after == 3.0


# ------------------------------------------------------------------------- KubeClient, local server


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def http_server(handler: Handler) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def fast_client(url: str, **kwargs: Any) -> KubeClient:
    config = KubeConfig(host=url, credentials=kwargs.pop("credentials", Credentials.bearer("tok")))
    config.qps = kwargs.pop("qps", 0)
    return KubeClient(config, backoff_initial=0.001, backoff_cap=0.01, **kwargs)


def status(code: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {
        "kind": "Status",
        "status": "Failure",
        "reason": reason,
        "message": reason,
        "code": code,
    }
    return web.Response(
        status=code, body=orjson.dumps(body), content_type="application/json", headers=headers
    )


async def test_client_headers_params_and_decoding() -> None:
    seen: list[web.Request] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request)
        return web.json_response({"kind": "PodList", "items": [], "path": request.path})

    async with http_server(handler) as url, fast_client(url) as client:
        out = await client.get_json("/api/v1/pods", {"limit": 5, "watch": False, "x": None})
    assert out["path"] == "/api/v1/pods"
    req = seen[0]
    assert req.headers["User-Agent"] == USER_AGENT
    assert req.headers["Authorization"] == "Bearer tok"
    assert dict(req.query) == {"limit": "5", "watch": "false"}


async def test_client_retries_idempotent_5xx_and_any_429_honouring_retry_after() -> None:
    hits: dict[str, int] = {}

    async def handler(request: web.Request) -> web.Response:
        key = f"{request.method} {request.path}"
        hits[key] = hits.get(key, 0) + 1
        if request.path == "/flaky" and hits[key] < 3:
            return status(503, "ServiceUnavailable", {"Retry-After": "0"})
        if request.path == "/throttled" and hits[key] < 2:
            return status(429, "TooManyRequests", {"Retry-After": "0.05"})
        if request.path == "/broken":
            return status(500, "InternalError")
        return web.json_response({"ok": True})

    async with http_server(handler) as url, fast_client(url, max_retries=3) as client:
        assert await client.get_json("/flaky") == {"ok": True}
        began = time.monotonic()
        assert await client.post_json("/throttled", {"a": 1}) == {"ok": True}
        assert time.monotonic() - began >= 0.05  # Retry-After honoured
        with pytest.raises(ApiError) as post_err:
            await client.post_json("/broken", {})
        with pytest.raises(ApiError) as get_err:
            await client.get_json("/broken")
    assert hits["GET /flaky"] == 3
    assert hits["POST /throttled"] == 2
    assert hits["POST /broken"] == 1  # not idempotent: no retry on 5xx
    assert hits["GET /broken"] == 4  # 1 + max_retries
    assert post_err.value.status == 500 and get_err.value.reason == "InternalError"


async def test_client_maps_404_and_409_and_sends_bodies() -> None:
    bodies: list[tuple[str, str, str, JSON | None]] = []

    async def handler(request: web.Request) -> web.Response:
        raw = await request.read()
        bodies.append(
            (request.method, request.path, request.content_type, orjson.loads(raw) if raw else None)
        )
        if request.path.endswith("/missing"):
            return status(404, "NotFound")
        if request.path.endswith("/binding"):
            return status(409, "Conflict")
        return web.json_response({"kind": "Status", "status": "Success", "code": 201}, status=201)

    async with http_server(handler) as url, fast_client(url) as client:
        with pytest.raises(ApiError) as nf:
            await client.delete(
                "/api/v1/namespaces/d/pods/missing", {"preconditions": {"uid": "u"}}
            )
        with pytest.raises(ApiError) as conflict:
            await client.bind("d", "p", "uid-1", "node-a")
        await client.patch_json("/api/v1/nodes/n", {"metadata": {"labels": {"a": "b"}}})
        await client.put_json("/api/v1/nodes/n", {"metadata": {"name": "n"}})
    assert nf.value.is_not_found and conflict.value.is_conflict
    assert bodies[1] == (
        "POST",
        "/api/v1/namespaces/d/pods/p/binding",
        "application/json",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p", "namespace": "d", "uid": "uid-1"},
            "target": {"kind": "Node", "name": "node-a"},
        },
    )
    assert bodies[0][3] == {"preconditions": {"uid": "u"}}
    assert bodies[2][2] == "application/merge-patch+json"
    assert bodies[3][0] == "PUT"


async def test_client_reloads_credentials_after_401() -> None:
    reloads: list[bool] = []

    async def reload(force: bool) -> tuple[str | None, float | None]:
        reloads.append(force)
        return "Bearer fresh", None

    async def handler(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer fresh":
            return status(401, "Unauthorized")
        return web.json_response({"ok": True})

    creds = Credentials("Bearer stale", reload=reload)
    async with http_server(handler) as url, fast_client(url, credentials=creds) as client:
        assert await client.get_json("/x") == {"ok": True}
    assert reloads == [True]


async def test_client_rate_limits_every_request() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({})

    async with http_server(handler) as url, fast_client(url, qps=20) as client:
        client.rate_limiter.burst = 1
        client.rate_limiter.reserve()  # spend the initial token
        began = time.monotonic()
        await asyncio.gather(*(client.get_json("/x") for _ in range(4)))
        elapsed = time.monotonic() - began
    assert elapsed >= 0.18  # 4 requests at 20/s after the burst


async def test_stream_lines_splits_chunks_and_times_out_when_silent() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        if request.path == "/silent":
            await resp.write(b'{"type":"BOOKMARK"}\n')
            await asyncio.sleep(0.6)
            return resp
        big = b"x" * 300_000
        for chunk in (b'{"a":1}\n{"b"', b":2}\n", b'{"big":"' + big[:1000], big[1000:] + b'"}\n\n'):
            await resp.write(chunk)
            await asyncio.sleep(0.01)
        await resp.write(b'{"tail":true}')
        return resp

    async with http_server(handler) as url, fast_client(url) as client:
        lines = [line async for line in client.stream_lines("/watch", {"watch": "true"}, 5.0)]
        got: list[bytes] = []
        with pytest.raises(StreamTimeout):
            async for line in client.stream_lines("/silent", None, timeout=0.2):
                got.append(line)
    assert lines[:2] == [b'{"a":1}', b'{"b":2}']
    assert orjson.loads(lines[2])["big"] == "x" * 300_000
    assert lines[3] == b'{"tail":true}'
    assert got == [b'{"type":"BOOKMARK"}']


async def test_stream_lines_raises_api_error_before_any_line() -> None:
    async def handler(request: web.Request) -> web.Response:
        return status(410, "Expired")

    async with http_server(handler) as url, fast_client(url) as client:
        with pytest.raises(ApiError) as err:
            async for _ in client.stream_lines("/watch"):
                pass
    assert err.value.is_gone


# --------------------------------------------------------------------------- configuration loading


@pytest.fixture
def no_cluster_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    yield


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


async def test_load_kubeconfig_with_a_static_token(tmp_path: Path, no_cluster_env: None) -> None:
    kubeconfig = write(
        tmp_path / "config",
        """
        apiVersion: v1
        kind: Config
        clusters:
        - name: c
          cluster: {server: "https://10.1.2.3:6443/", insecure-skip-tls-verify: true}
        users:
        - name: u
          user: {token: abc}
        contexts:
        - name: ctx
          context: {cluster: c, user: u}
        current-context: ctx
        """,
    )
    cfg = await load_client_config(str(kubeconfig), qps=5, burst=7)
    assert cfg.host == "https://10.1.2.3:6443"
    assert (cfg.qps, cfg.burst, cfg.verify_tls) == (5, 7, False)
    assert await cfg.credentials.header() == "Bearer abc"
    assert not cfg.credentials.refreshable
    ctx = cfg.ssl_context()
    assert not isinstance(ctx, bool) and not ctx.check_hostname


async def test_load_kubeconfig_from_env_with_token_file_and_exec(
    tmp_path: Path, no_cluster_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("one\n")
    plugin = write(
        tmp_path / "plugin.py",
        """
        import json
        print(json.dumps({
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "kind": "ExecCredential",
            "status": {"token": "from-exec", "expirationTimestamp": "2999-01-01T00:00:00Z"},
        }))
        """,
    )
    kubeconfig = write(
        tmp_path / "config",
        f"""
        apiVersion: v1
        kind: Config
        clusters:
        - name: c
          cluster: {{server: "http://127.0.0.1:1"}}
        users:
        - name: file
          user: {{tokenFile: {token_file}}}
        - name: exec
          user:
            exec:
              apiVersion: client.authentication.k8s.io/v1beta1
              command: {sys.executable}
              args: ["{plugin}"]
              interactiveMode: Never
        contexts:
        - name: file
          context: {{cluster: c, user: file}}
        - name: exec
          context: {{cluster: c, user: exec}}
        current-context: file
        """,
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    cfg = await load_client_config(None, qps=50, burst=100)
    assert await cfg.credentials.header() == "Bearer one"
    assert cfg.credentials.refreshable
    token_file.write_text("two\n")
    cfg.credentials.invalidate()
    assert await cfg.credentials.header() == "Bearer two"
    assert cfg.ssl_context() is False

    exec_cfg = await load_client_config(None, qps=50, burst=100, context="exec")
    assert await exec_cfg.credentials.header() == "Bearer from-exec"
    assert exec_cfg.credentials.refreshable


async def test_load_in_cluster_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_cluster_env: None
) -> None:
    import kscheduler.kube as kube

    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(kube, "SERVICE_ACCOUNT_DIR", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = await load_client_config(None, qps=1, burst=1)
    assert cfg.host == "https://10.0.0.1:443"
    assert cfg.ca_file == str(tmp_path / "ca.crt")
    assert await cfg.credentials.header() == "Bearer sa-token"
    (tmp_path / "token").write_text("rotated")
    cfg.credentials.invalidate()
    assert await cfg.credentials.header() == "Bearer rotated"


async def test_missing_kubeconfig_is_a_config_error(tmp_path: Path, no_cluster_env: None) -> None:
    with pytest.raises(ConfigError):
        await load_client_config(str(tmp_path / "nope"), qps=1, burst=1)
