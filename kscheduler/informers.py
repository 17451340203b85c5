"""Raw-JSON informers: list, then watch, keep a store, call handlers.

Watching is three layers of async generators, outermost first:

* ``_infinite``   reconnects after any failure with jittered exponential backoff,
                  keeping the last resourceVersion so that a reconnect only
                  re-watches (a relist happens only when that version is gone);
* ``_continuous`` lists (paginated) when it has no resourceVersion, then watches
                  from it, follows BOOKMARKs, watches again when a stream ends and
                  relists on 410 Gone (an HTTP 410 or an ERROR event with code 410);
* ``_stream``     one watch request (allowWatchBookmarks, a randomised server-side
                  timeoutSeconds, a client-side inactivity timeout) decoded with orjson.

The informer consumes the steps: a list replaces the store (objects missing from
it are deleted, changed ones updated, new ones added) and each watch event
updates it; handlers are plain functions called inline, in order. Objects are
the decoded JSON without ``metadata.managedFields``, optionally passed through a
``transform`` once per object version (e.g. into a slim record); the store and
the handlers see the transformed values.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Generic, Protocol, TypedDict, TypeVar, overload

import aiohttp
import orjson
import structlog

from kscheduler.kube import JSON, ApiError, Backoff, Params, StreamTimeout

__all__ = [
    "RESOURCES",
    "Callbacks",
    "EventHandler",
    "Informer",
    "InformerFactory",
    "InformerObjectLister",
    "InformerSettings",
    "Resource",
    "WatchClient",
    "object_key",
]

log = structlog.get_logger(__name__)

JSONList = list[JSON]

T = TypeVar("T")

#: keys of changed objects (changes_since)
ChangedKeys = list[str]

#: changes an informer remembers for changes_since (half are dropped past it)
CHANGE_LOG_MAX = 8192
T_contra = TypeVar("T_contra", contravariant=True)


class WatchClient(Protocol):
    """What an informer needs of the API client (KubeClient implements it)."""

    async def get_json(self, path: str, params: Params = None) -> Any: ...

    def stream_lines(
        self,
        path: str,
        params: Params = None,
        timeout: float | None = None,
        *,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncGenerator[bytes, None]: ...


class EventHandler(Protocol[T_contra]):
    """Called inline by the informer, in event order; must not block."""

    def on_add(self, obj: T_contra) -> None: ...

    def on_update(self, old: T_contra, new: T_contra) -> None: ...

    def on_delete(self, obj: T_contra) -> None: ...


@dataclass(frozen=True, slots=True)
class Callbacks(Generic[T]):
    """An EventHandler made of optional functions."""

    add: Callable[[T], None] | None = None
    update: Callable[[T, T], None] | None = None
    delete: Callable[[T], None] | None = None

    def on_add(self, obj: T) -> None:
        if self.add is not None:
            self.add(obj)

    def on_update(self, old: T, new: T) -> None:
        if self.update is not None:
            self.update(old, new)

    def on_delete(self, obj: T) -> None:
        if self.delete is not None:
            self.delete(obj)


@dataclass(frozen=True, slots=True)
class InformerSettings:
    """How an informer lists and watches."""

    page_size: int = 500
    """Items per list page (limit/continue), client-go's pager default: bounded
    memory per response without many round trips."""
    watch_timeout_min: float = 300.0
    watch_timeout_max: float = 600.0
    """Server-side timeoutSeconds is drawn from [min, max] per watch, as client-go's
    reflector does (5-10 min), so that many informers do not reconnect in step."""
    inactivity_timeout: float | None = 180.0
    """Reconnect when a watch sends no bytes for this long. The apiserver sends an
    idle watcher a BOOKMARK about every minute or two, so silence beyond that
    means a dead connection; None disables the check."""
    backoff_initial: float = 0.8
    backoff_max: float = 30.0
    """Reconnect backoff, client-go's reflector values (800 ms doubling up to 30 s,
    with jitter)."""
    min_stream_seconds: float = 1.0
    """A watch that ends without a single event sooner than this counts as a
    failure (and backs off) rather than as a normal server timeout."""
    live_grace: float = 0.5
    """After a failed watch comes back, the informer counts as live again at its
    first event, or once the new stream has stayed open this long without an
    error: a resumed watch that is too old gets its 410 ERROR event within
    milliseconds, and must not look live before it has relisted."""


def object_key(obj: Mapping[str, Any]) -> str:
    """ "namespace/name", or "name" for a cluster-scoped object."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name") or ""
    return f"{ns}/{name}" if ns else str(name)


def _strip(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


# --------------------------------------------------------------------------- watch steps


@dataclass(slots=True)
class _Replace:
    """A complete list: the store becomes exactly these objects."""

    items: list[JSON]
    resource_version: str


@dataclass(slots=True)
class _Event:
    type: str  # ADDED / MODIFIED / DELETED
    obj: JSON


@dataclass(slots=True)
class _Position:
    """Where the watch resumes; survives reconnects. None means relist."""

    resource_version: str | None = None


class _Failed:
    """Marks an object whose transform raised."""


_FAILED: Final = _Failed()


class WatchEvent(TypedDict):
    """One line of a watch stream."""

    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK or ERROR
    object: JSON


class WatchEndedEarly(Exception):
    """A watch stream closed at once with no events (no server timeout that quick)."""


#: The longest Retry-After a reconnect honours (as KubeClient's requests do).
MAX_RETRY_AFTER: Final = 60.0

_RECONNECTABLE: Final = (
    ApiError,
    aiohttp.ClientError,
    TimeoutError,
    OSError,
    ValueError,  # undecodable stream (orjson.JSONDecodeError is a ValueError)
    WatchEndedEarly,
)


# --------------------------------------------------------------------------- the informer


class Informer(Generic[T]):
    """One resource path, listed and watched, with a store and handlers.

    ``store`` maps "namespace/name" (or "name") to the transformed object.
    ``has_synced`` is set once the first list has been delivered to the handlers.
    Run with ``await informer.run()`` (until cancelled).
    """

    @overload
    def __init__(
        self: Informer[JSON],
        client: WatchClient,
        path: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        transform: None = None,
        settings: InformerSettings | None = None,
        name: str | None = None,
        rng: random.Random | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: Informer[T],
        client: WatchClient,
        path: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        transform: Callable[[JSON], T],
        settings: InformerSettings | None = None,
        name: str | None = None,
        rng: random.Random | None = None,
    ) -> None: ...

    def __init__(
        self,
        client: WatchClient,
        path: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        transform: Callable[[JSON], Any] | None = None,
        settings: InformerSettings | None = None,
        name: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.path = path
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.transform = transform
        #: Set to transform a new version of a stored object from the stored value
        #: and the new JSON (e.g. reusing what did not change); the transform is
        #: used where none is set, and for objects not stored yet.
        self.retransform: Callable[[T, JSON], T] | None = None
        self.settings = settings or InformerSettings()
        self.name = name or path
        self.has_synced = asyncio.Event()
        #: Set while the informer is current: after a list, or once a watch stream is
        #: open; cleared when the watch fails until it is back. The scheduler does
        #: not place pods while the pod or node informer is not live.
        self.live = asyncio.Event()
        self._stream_gen = 0
        self._rng = rng or random.Random()
        self._items: dict[str, T] = {}
        #: the keys put or removed, in order (see changes_since); _changes[0] is
        #: change number _changes_base. Kept only once changes_since has been asked
        #: for: an informer nobody reads that way (pods, nodes) only counts changes.
        self._changes: ChangedKeys = []
        self._changes_base = 0
        self._log_changes = False
        self._versions: dict[str, tuple[str, str]] = {}  # key -> (resourceVersion, uid)
        self._by_namespace: dict[str, dict[str, T]] = {}
        self._handlers: list[EventHandler[T]] = []
        self._position = _Position()
        self.relists = 0
        """Lists done so far (the first one included)."""
        self.watches = 0
        """Watch requests opened so far."""

    # ----------------------------------------------------------------- store

    @property
    def store(self) -> Mapping[str, T]:
        """Read-only view of the current objects by key (do not mutate the values)."""
        return MappingProxyType(self._items)

    @property
    def resource_version(self) -> str | None:
        """The version the next watch resumes from (None before a list, after a 410)."""
        return self._position.resource_version

    def get(self, namespace: str | None, name: str) -> T | None:
        return self._items.get(f"{namespace}/{name}" if namespace else name)

    def list(self, namespace: str | None = None) -> list[T]:
        if namespace is None:
            return list(self._items.values())
        return list(self._by_namespace.get(namespace, {}).values())

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._items.values()))

    def changes_since(self, cursor: int | None) -> tuple[int, ChangedKeys | None]:
        """(the cursor now, the keys put or removed since ``cursor``, repeats
        included). The keys are None when ``cursor`` is None or older than the
        log keeps (CHANGE_LOG_MAX changes): then read the whole store."""
        end = self._changes_base + len(self._changes)
        if not self._log_changes:
            self._log_changes = True  # from now on; the first reader reads the store
            return end, None
        if cursor is None or not self._changes_base <= cursor <= end:
            return end, None
        return end, self._changes[cursor - self._changes_base :]

    def _changed(self, key: str) -> None:
        if not self._log_changes:
            self._changes_base += 1
            return
        self._changes.append(key)
        if len(self._changes) > CHANGE_LOG_MAX:
            drop = len(self._changes) // 2
            del self._changes[:drop]
            self._changes_base += drop

    def _put(self, key: str, raw: JSON, value: T) -> None:
        self._changed(key)
        self._items[key] = value
        self._versions[key] = (_rv(raw), _uid(raw))
        ns, sep, _ = key.partition("/")
        if sep:
            self._by_namespace.setdefault(ns, {})[key] = value

    def _pop(self, key: str) -> T:
        value = self._items.pop(key)
        self._changed(key)
        self._versions.pop(key, None)
        ns, sep, _ = key.partition("/")
        if sep:
            bucket = self._by_namespace.get(ns)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self._by_namespace[ns]
        return value

    def _convert(self, raw: JSON, old: T | _Failed = _FAILED) -> T | _Failed:
        """The transformed object (by retransform from ``old``, the stored value, when
        both are there), or _FAILED (logged) when the transform raises."""
        retransform = self.retransform
        if self.transform is None and retransform is None:
            value: T = raw  # type: ignore[assignment]
            return value
        try:
            if retransform is not None and not isinstance(old, _Failed):
                converted: T = retransform(old, raw)
            elif self.transform is not None:
                converted = self.transform(raw)
            else:
                converted = raw  # type: ignore[assignment]
        except Exception:
            log.exception(
                "informer transform failed; object left as it was",
                informer=self.name,
                key=object_key(raw),
                resource_version=_rv(raw),
            )
            return _FAILED
        return converted

    # ----------------------------------------------------------------- handlers

    def add_handler(self, handler: EventHandler[T]) -> None:
        """Register a handler; it first receives on_add for every object already stored."""
        self._handlers.append(handler)
        for value in list(self._items.values()):
            self._call(handler.on_add, value)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("informer handler failed", informer=self.name, handler=repr(fn))

    def _emit_add(self, value: T) -> None:
        for h in self._handlers:
            self._call(h.on_add, value)

    def _emit_update(self, old: T, new: T) -> None:
        for h in self._handlers:
            self._call(h.on_update, old, new)

    def _emit_delete(self, value: T) -> None:
        for h in self._handlers:
            self._call(h.on_delete, value)

    # ----------------------------------------------------------------- applying steps

    def replace(self, items: Iterable[JSON]) -> None:
        """Make the store exactly ``items`` (replace semantics).

        Stored objects missing from items get on_delete (first); objects whose
        resourceVersion changed get on_update, or on_delete + on_add when the
        uid changed (deleted and recreated under the same name); new ones get
        on_add. Unchanged objects are neither transformed again nor reported.
        """
        incoming: dict[str, JSON] = {}
        for raw in items:
            incoming[object_key(raw)] = raw
        for key in [k for k in self._items if k not in incoming]:
            self._emit_delete(self._pop(key))
        for key, raw in incoming.items():
            self._upsert(key, raw)

    def apply(self, event_type: str, raw: JSON) -> None:
        """Apply one watch event (ADDED, MODIFIED or DELETED) to the store."""
        key = object_key(raw)
        if event_type == "DELETED":
            if key in self._items:
                old = self._pop(key)
                final = self._convert(raw)
                self._emit_delete(old if isinstance(final, _Failed) else final)
            return
        if event_type in ("ADDED", "MODIFIED"):
            self._upsert(key, raw)
        else:
            log.warning("unknown watch event type", informer=self.name, type=event_type)

    def _upsert(self, key: str, raw: JSON) -> None:
        """Store raw under key and report it. When the transform fails the store
        keeps what it had (nothing, or the previous version) and the next list or
        event for the object tries again."""
        known = self._versions.get(key)
        if known is None:
            value = self._convert(raw)
            if isinstance(value, _Failed):
                return
            self._put(key, raw, value)
            self._emit_add(value)
            return
        rv, uid = known
        new_uid = _uid(raw)
        if rv == _rv(raw) and uid == new_uid:
            return
        old = self._items[key]
        recreated = bool(uid and new_uid and uid != new_uid)
        value = self._convert(raw) if recreated else self._convert(raw, old)
        if isinstance(value, _Failed):
            return
        self._put(key, raw, value)
        if recreated:
            self._emit_delete(old)
            self._emit_add(value)
        else:
            self._emit_update(old, value)

    # ----------------------------------------------------------------- running

    async def run(self) -> None:
        """List and watch until cancelled."""
        async for step in self._infinite():
            if isinstance(step, _Replace):
                self.replace(step.items)
                self.live.set()
                if not self.has_synced.is_set():
                    log.debug("informer synced", informer=self.name, objects=len(self._items))
                    self.has_synced.set()
            else:
                self.apply(step.type, step.obj)

    async def wait_synced(self, timeout: float | None = None) -> None:
        async with asyncio.timeout(timeout):
            await self.has_synced.wait()

    def _params(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        return params

    async def _infinite(self) -> AsyncIterator[_Replace | _Event]:
        """Keep watching forever; back off after failures, resume where we were."""
        s = self.settings
        backoff = Backoff(initial=s.backoff_initial, cap=s.backoff_max, rng=self._rng)
        while True:
            try:
                async for step in self._continuous(self._position):
                    backoff.reset()
                    yield step
            except _RECONNECTABLE as exc:
                self._stream_gen += 1
                self.live.clear()
                delay = backoff.next()
                retry_after = getattr(exc, "retry_after", None)
                if retry_after is not None:  # the server asked for a pause (429, 503)
                    delay = max(delay, min(float(retry_after), MAX_RETRY_AFTER))
                log.warning(
                    "watch failed; reconnecting",
                    informer=self.name,
                    error=f"{type(exc).__name__}: {exc}",
                    resource_version=self._position.resource_version,
                    delay=round(delay, 2),
                )
                await asyncio.sleep(delay)

    async def _continuous(self, pos: _Position) -> AsyncIterator[_Replace | _Event]:
        """List when needed, then watch from the list's version; 410 -> relist."""
        while True:
            fresh_list = False
            if pos.resource_version is None:
                items, rv = await self._list()
                pos.resource_version = rv
                fresh_list = True
                yield _Replace(items, rv)
            started = time.monotonic()
            events = 0
            try:
                async for event in self._stream(pos.resource_version):
                    events += 1
                    if not self.live.is_set():
                        self.live.set()
                    kind = event.get("type")
                    obj = event.get("object")
                    if not isinstance(obj, dict):
                        continue
                    rv = _rv(obj)
                    if kind == "BOOKMARK":
                        if rv:
                            pos.resource_version = rv
                        continue
                    if rv:
                        pos.resource_version = rv
                    yield _Event(str(kind), _strip(obj))
            except ApiError as exc:
                self._stream_gen += 1  # a pending "live" settle must not fire now
                if not exc.is_gone:
                    raise
                if fresh_list and events == 0:
                    pos.resource_version = None
                    raise  # gone straight after a list: back off before listing again
                log.info(
                    "watch resourceVersion expired; relisting",
                    informer=self.name,
                    resource_version=pos.resource_version,
                    message=exc.message,
                )
                pos.resource_version = None
                continue
            except StreamTimeout:
                log.info(
                    "watch inactive; reconnecting",
                    informer=self.name,
                    seconds=self.settings.inactivity_timeout,
                )
                continue
            if events == 0 and time.monotonic() - started < self.settings.min_stream_seconds:
                raise WatchEndedEarly(f"watch on {self.path} closed with no events")

    async def _list(self) -> tuple[JSONList, str]:
        """A consistent, paginated list; a continue token that expires restarts it unpaged."""
        self.relists += 1
        items: JSONList = []
        params: dict[str, str] = self._params()
        limit = self.settings.page_size
        if limit > 0:
            params["limit"] = str(limit)
        while True:
            try:
                page = await self.client.get_json(self.path, params)
            except ApiError as exc:
                if not (exc.is_gone and "continue" in params):
                    raise
                log.info("list continue token expired; listing in one page", informer=self.name)
                items.clear()
                params = self._params()
                continue
            for raw in page.get("items") or ():
                items.append(_strip(raw))
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")
            params["continue"] = token

    def _stream_opened(self) -> None:
        if self.live.is_set():
            return
        self._stream_gen += 1
        gen = self._stream_gen

        def settle() -> None:
            if gen == self._stream_gen:
                self.live.set()

        asyncio.get_running_loop().call_later(self.settings.live_grace, settle)

    async def _stream(self, resource_version: str) -> AsyncIterator[WatchEvent]:
        """One watch request from resource_version; raises ApiError on an ERROR event."""
        s = self.settings
        params: dict[str, str] = self._params()
        params["watch"] = "true"
        params["allowWatchBookmarks"] = "true"
        params["resourceVersion"] = resource_version
        lo, hi = s.watch_timeout_min, max(s.watch_timeout_min, s.watch_timeout_max)
        params["timeoutSeconds"] = str(int(self._rng.uniform(lo, hi)))
        self.watches += 1
        lines = self.client.stream_lines(
            self.path, params, s.inactivity_timeout, on_open=self._stream_opened
        )
        async with contextlib.aclosing(lines):
            async for line in lines:
                event: WatchEvent = orjson.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise ApiError.from_status(status, method="WATCH", path=self.path)
                yield event


# --------------------------------------------------------------------------- the factory


@dataclass(frozen=True, slots=True)
class Resource:
    path: str
    namespaced: bool


RESOURCES: Final[Mapping[str, Resource]] = MappingProxyType(
    {
        "pods": Resource("/api/v1/pods", True),
        "nodes": Resource("/api/v1/nodes", False),
        "namespaces": Resource("/api/v1/namespaces", False),
        "services": Resource("/api/v1/services", True),
        "replicationcontrollers": Resource("/api/v1/replicationcontrollers", True),
        "persistentvolumeclaims": Resource("/api/v1/persistentvolumeclaims", True),
        "persistentvolumes": Resource("/api/v1/persistentvolumes", False),
        "replicasets": Resource("/apis/apps/v1/replicasets", True),
        "statefulsets": Resource("/apis/apps/v1/statefulsets", True),
        "storageclasses": Resource("/apis/storage.k8s.io/v1/storageclasses", False),
        "csinodes": Resource("/apis/storage.k8s.io/v1/csinodes", False),
        "csidrivers": Resource("/apis/storage.k8s.io/v1/csidrivers", False),
        "poddisruptionbudgets": Resource("/apis/policy/v1/poddisruptionbudgets", True),
        "csistoragecapacities": Resource("/apis/storage.k8s.io/v1/csistoragecapacities", True),
        "volumeattachments": Resource("/apis/storage.k8s.io/v1/volumeattachments", False),
        "resourceslices": Resource("/apis/resource.k8s.io/v1/resourceslices", False),
        "deviceclasses": Resource("/apis/resource.k8s.io/v1/deviceclasses", False),
        "devicetaintrules": Resource("/apis/resource.k8s.io/v1/devicetaintrules", False),
        "resourceclaims": Resource("/apis/resource.k8s.io/v1/resourceclaims", True),
    }
)
"""Kinds the factory knows, by lower-case plural name."""

_CACHE_KINDS: Final = frozenset({"pods", "nodes"})


@dataclass(slots=True)
class _Spec:
    field_selector: str | None
    label_selector: str | None
    transform: Callable[[JSON], Any] | None


class InformerFactory:
    """Informers created lazily by kind name, run together, synced together.

    Ask for every informer you need before waiting for sync; an informer asked
    for while :meth:`run` is active starts at once.
    """

    def __init__(
        self,
        client: WatchClient,
        *,
        settings: InformerSettings | None = None,
        resources: Mapping[str, Resource] = RESOURCES,
    ) -> None:
        self.client = client
        self.settings = settings or InformerSettings()
        self.resources = resources
        self._informers: dict[str, Informer[Any]] = {}
        self._specs: dict[str, _Spec] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._group: asyncio.TaskGroup | None = None

    @overload
    def informer(
        self,
        kind: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        transform: None = None,
    ) -> Informer[JSON]: ...

    @overload
    def informer(
        self,
        kind: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        transform: Callable[[JSON], T],
    ) -> Informer[T]: ...

    def informer(
        self,
        kind: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        transform: Callable[[JSON], Any] | None = None,
    ) -> Informer[Any]:
        """The informer for kind, created on first request with these options.

        Asking again with different options is an error: one kind, one watch.
        """
        spec = _Spec(field_selector, label_selector, transform)
        existing = self._informers.get(kind)
        if existing is not None:
            if self._specs[kind] != spec:
                raise ValueError(f"informer for {kind!r} already exists with other options")
            return existing
        resource = self.resources.get(kind)
        if resource is None:
            raise KeyError(f"unknown kind {kind!r}; known: {', '.join(sorted(self.resources))}")
        inf: Informer[Any] = Informer(
            self.client,
            resource.path,
            field_selector=field_selector,
            label_selector=label_selector,
            transform=transform,
            settings=self.settings,
            name=kind,
        )
        self._informers[kind] = inf
        self._specs[kind] = spec
        if self._group is not None:
            self._start(kind, inf)
        return inf

    @overload
    def add(
        self,
        kind: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        transform: None = None,
        on_add: Callable[[JSON], None] | None = None,
        on_update: Callable[[JSON, JSON], None] | None = None,
        on_delete: Callable[[JSON], None] | None = None,
    ) -> Informer[JSON]: ...

    @overload
    def add(
        self,
        kind: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        transform: Callable[[JSON], T],
        on_add: Callable[[T], None] | None = None,
        on_update: Callable[[T, T], None] | None = None,
        on_delete: Callable[[T], None] | None = None,
    ) -> Informer[T]: ...

    def add(
        self,
        kind: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        transform: Callable[[JSON], Any] | None = None,
        on_add: Callable[[Any], None] | None = None,
        on_update: Callable[[Any, Any], None] | None = None,
        on_delete: Callable[[Any], None] | None = None,
    ) -> Informer[Any]:
        """:meth:`informer` plus, when any callback is given, a handler made of them."""
        inf = self.informer(
            kind,
            field_selector=field_selector,
            label_selector=label_selector,
            transform=transform,
        )
        if on_add is not None or on_update is not None or on_delete is not None:
            inf.add_handler(Callbacks(on_add, on_update, on_delete))
        return inf

    def get(self, kind: str) -> Informer[Any] | None:
        """The informer for kind if one was created."""
        return self._informers.get(kind)

    @property
    def informers(self) -> Mapping[str, Informer[Any]]:
        return MappingProxyType(self._informers)

    def _start(self, kind: str, inf: Informer[Any]) -> None:
        assert self._group is not None
        self._tasks[kind] = self._group.create_task(inf.run(), name=f"informer:{kind}")

    async def run(self) -> None:
        """Run every informer (those created later too) until cancelled.

        An informer task that dies with an unexpected error takes the others
        down with it and the error propagates (TaskGroup semantics).
        """
        if self._group is not None:
            raise RuntimeError("InformerFactory.run() is already running")
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                for kind, inf in self._informers.items():
                    self._start(kind, inf)
                await asyncio.get_running_loop().create_future()  # until cancelled
        finally:
            self._group = None
            self._tasks.clear()

    def has_synced(self) -> bool:
        return all(inf.has_synced.is_set() for inf in self._informers.values())

    async def wait_synced(self, timeout: float | None = None) -> None:
        """Wait until every informer created so far has delivered its first list."""
        async with asyncio.timeout(timeout):
            for inf in list(self._informers.values()):
                await inf.has_synced.wait()

    wait_for_sync = wait_synced

    @property
    def lister(self) -> InformerObjectLister:
        """The framework's ObjectLister over this factory's raw informers."""
        return InformerObjectLister(self)


class InformerObjectLister:
    """framework ObjectLister over the factory's raw informers (not pods/nodes:
    the scheduler cache owns those). An informer that does not exist yet is
    created (and started, if the factory runs) on first use and reads empty
    until it syncs; plugins should touch their kinds when built."""

    def __init__(self, factory: InformerFactory) -> None:
        self._factory = factory

    def _informer(self, kind: str) -> Informer[JSON]:
        if kind in _CACHE_KINDS:
            raise ValueError(f"{kind} come from the scheduler cache, not the object lister")
        existing = self._factory.get(kind)
        if existing is not None:
            if existing.transform is not None:
                raise ValueError(f"the {kind} informer holds transformed objects, not JSON")
            return existing
        return self._factory.informer(kind)

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self._informer(kind).list(namespace)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._informer(kind).get(namespace or None, name)

    def changes_since(self, kind: str, cursor: int | None) -> tuple[int, ChangedKeys | None]:
        """The ``kind`` informer's :meth:`Informer.changes_since` (keys are
        ``namespace/name``, or the name of a cluster-scoped object)."""
        return self._informer(kind).changes_since(cursor)
