"""Client construction and raw REST for the Kubernetes API.

kubernetes_asyncio reads the kubeconfig (exec plugins, token files, client
certificates, auth providers) or the in-cluster service account; everything
after that is ours, with orjson on both sides: the typed client is slower on
the hot path and its binding call chokes on the Status the server returns.
Ordinary requests (binds, events, status patches, lists) go over the lean
keep-alive HTTP/1.1 pool of kscheduler.http1; watch streams, and every request
when a proxy is configured, go through aiohttp.

Every request passes a client-side token bucket (``qps``/``burst``, as
client-go's), carries ``User-Agent: kscheduler/<version>`` and raises
:class:`ApiError` on a non-2xx answer. 429 and 5xx answers are retried with
jittered exponential backoff that honours ``Retry-After``; see
:meth:`KubeClient.request` for which requests qualify.

Both speak HTTP/1.1 only: one request per connection at a time. ``pool_size``
bounds the connections used for ordinary requests (and so the number of binds
in flight); watch streams get their own connection pool so that they never
starve binds, nor binds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypedDict
from urllib.parse import urlencode

import aiohttp
import orjson
import structlog

from kscheduler import __version__
from kscheduler.http1 import ConnectFailed, ConnectionDropped, Endpoint, Http1Pool, ProtocolError

__all__ = [
    "JSON",
    "USER_AGENT",
    "ApiError",
    "Backoff",
    "ConfigError",
    "Credentials",
    "KubeClient",
    "KubeConfig",
    "Params",
    "StreamTimeout",
    "TokenBucketRateLimiter",
    "load_client_config",
]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
Params = Mapping[str, str | int | float | bool | None] | None

USER_AGENT: Final = f"kscheduler/{__version__}"

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")

_IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
_TOKEN_RELOAD_PERIOD: Final = 60.0
"""client-go re-reads token files once a minute; so do we."""
_TOKEN_RETRY_AFTER_FAILURE: Final = 10.0
# aiohttp >= 3.10 tells a connect timeout from a read timeout; older ones raise
# ServerTimeoutError for both.
_CONNECT_TIMEOUT: Final[type[Exception]] = getattr(
    aiohttp, "ConnectionTimeoutError", aiohttp.ServerTimeoutError
)


class ConfigError(Exception):
    """No usable client configuration (missing kubeconfig, bad context, no in-cluster env)."""


class StreamTimeout(TimeoutError):
    """A streamed response sent no bytes (not even a bookmark) for the inactivity timeout."""


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """A non-2xx answer (or a watch ERROR event) with the server's Status parsed out.

    ``status`` is the HTTP status (for a watch ERROR event, the Status's code);
    ``reason`` is the Status reason (``NotFound``, ``AlreadyExists``, ``Conflict``,
    ``Expired``, ``TooManyRequests`` ...), ``message`` the human text.
    """

    def __init__(
        self,
        status: int,
        *,
        reason: str = "",
        message: str = "",
        details: Mapping[str, Any] | None = None,
        method: str = "",
        path: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.details: Mapping[str, Any] = details or {}
        self.method = method
        self.path = path
        self.retry_after = retry_after
        where = f"{method} {path}: ".lstrip() if method or path else ""
        super().__init__(f"{where}HTTP {status} {reason}: {message}".rstrip(": "))

    @classmethod
    def from_response(
        cls,
        status: int,
        body: bytes,
        *,
        method: str = "",
        path: str = "",
        retry_after: float | None = None,
    ) -> ApiError:
        """Parse a Status body when there is one, else keep the start of the text."""
        parsed: Any = None
        if body:
            with contextlib.suppress(orjson.JSONDecodeError):
                parsed = orjson.loads(body)
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            return cls.from_status(
                parsed, method=method, path=path, status=status, retry_after=retry_after
            )
        text = body[:500].decode(errors="replace").strip()
        return cls(status, message=text, method=method, path=path, retry_after=retry_after)

    @classmethod
    def from_status(
        cls,
        body: Mapping[str, Any],
        *,
        method: str = "",
        path: str = "",
        status: int | None = None,
        retry_after: float | None = None,
    ) -> ApiError:
        """Build from a metav1.Status (HTTP body or the object of a watch ERROR event)."""
        code = body.get("code")
        details = body.get("details")
        if retry_after is None and isinstance(details, Mapping):
            seconds = details.get("retryAfterSeconds")
            if isinstance(seconds, int | float) and seconds > 0:
                retry_after = float(seconds)
        return cls(
            status if status is not None else (code if isinstance(code, int) else 500),
            reason=str(body.get("reason") or ""),
            message=str(body.get("message") or ""),
            details=details if isinstance(details, Mapping) else None,
            method=method,
            path=path,
            retry_after=retry_after,
        )

    @property
    def is_not_found(self) -> bool:
        return self.status == 404

    @property
    def is_conflict(self) -> bool:
        """409: an update lost a resourceVersion race, or the object already exists."""
        return self.status == 409

    @property
    def is_already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def is_gone(self) -> bool:
        """410: the resourceVersion (or continue token) is too old; relist."""
        return self.status == 410 or self.reason in ("Expired", "Gone")

    @property
    def is_too_many_requests(self) -> bool:
        return self.status == 429

    @property
    def is_server_error(self) -> bool:
        return self.status >= 500

    @property
    def is_unauthorized(self) -> bool:
        return self.status == 401

    @property
    def is_forbidden(self) -> bool:
        return self.status == 403

    # Short spellings of the checks above.
    not_found = is_not_found
    conflict = is_conflict
    already_exists = is_already_exists
    gone = is_gone
    too_many_requests = is_too_many_requests


# --------------------------------------------------------------------------- backoff, rate limit


class Backoff:
    """Jittered exponential backoff, as client-go's wait.Backoff: step n waits
    ``min(cap, initial * factor**n)`` stretched by a random factor in
    ``[1, 1 + jitter]`` (jitter after the cap, so that clients that all reached
    the cap still spread out).

    Never returns less than ``initial``, so a loop that sleeps ``next()`` cannot spin.
    """

    def __init__(
        self,
        *,
        initial: float = 0.8,
        cap: float = 30.0,
        factor: float = 2.0,
        jitter: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        if initial <= 0 or cap < initial or factor < 1 or jitter < 0:
            raise ValueError("backoff needs 0 < initial <= cap, factor >= 1, jitter >= 0")
        self.initial = initial
        self.cap = cap
        self.factor = factor
        self.jitter = jitter
        self.attempts = 0
        # seeded on first use: most requests never back off, and seeding reads the OS
        self._rng = rng

    def next(self) -> float:
        base = min(self.cap, self.initial * self.factor ** min(self.attempts, 64))
        self.attempts += 1
        if self._rng is None:
            self._rng = random.Random()
        return base * (1.0 + self.jitter * self._rng.random())

    def reset(self) -> None:
        self.attempts = 0


class TokenBucketRateLimiter:
    """client-go's token bucket: ``burst`` requests at once, then ``qps`` per second.

    Callers reserve a token (the count may go negative) and sleep until it is
    theirs, so waiters are served in arrival order. ``qps <= 0`` disables the
    limit, like scheduler_perf's unthrottled client.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()

    @property
    def unlimited(self) -> bool:
        return self.qps <= 0

    def reserve(self) -> float:
        """Take one token; return how long to wait before using it (0 when one was free)."""
        if self.unlimited:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def cancel(self) -> None:
        """Give back a reserved token (the waiter was cancelled)."""
        if not self.unlimited:
            self._tokens = min(float(self.burst), self._tokens + 1.0)

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay <= 0:
            return
        try:
            await self._sleep(delay)
        except asyncio.CancelledError:
            self.cancel()
            raise


# --------------------------------------------------------------------------- configuration

Reload = Callable[[bool], Awaitable[tuple[str | None, float | None]]]
"""reload(force) -> (Authorization header, seconds until the next reload or None)."""


class Credentials:
    """The ``Authorization`` header value, reloaded from its source when due.

    Static tokens never reload. Token files (in-cluster service-account tokens,
    kubeconfig ``tokenFile``) reload every minute; exec plugins when their
    credential nears expiry. After a 401 the client calls :meth:`invalidate`
    and retries once with a forced reload.
    """

    def __init__(
        self,
        header: str | None,
        *,
        reload: Reload | None = None,
        refresh_in: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._header = header
        self._reload = reload
        self._clock = clock
        self._due: float | None = None if refresh_in is None else clock() + refresh_in
        self._force = False
        self._lock = asyncio.Lock()

    @classmethod
    def static(cls, header: str | None) -> Credentials:
        return cls(header)

    @classmethod
    def bearer(cls, token: str) -> Credentials:
        return cls(f"Bearer {token}")

    @property
    def refreshable(self) -> bool:
        return self._reload is not None

    def _is_due(self) -> bool:
        return self._force or (self._due is not None and self._clock() >= self._due)

    async def header(self) -> str | None:
        if self._reload is None or not self._is_due():
            return self._header
        async with self._lock:
            if self._is_due():
                force, self._force = self._force, False
                try:
                    header, refresh_in = await self._reload(force)
                except Exception as exc:
                    log.warning("credentials reload failed; keeping the old ones", error=str(exc))
                    self._due = self._clock() + _TOKEN_RETRY_AFTER_FAILURE
                else:
                    self._header = header
                    self._due = None if refresh_in is None else self._clock() + refresh_in
        return self._header

    def invalidate(self) -> None:
        """Reload (forcing exec plugins to run again) before the next request."""
        if self._reload is not None:
            self._force = True


@dataclass(slots=True)
class KubeConfig:
    """Where the apiserver is and how to talk to it; built by :func:`load_client_config`."""

    host: str
    """Base URL, e.g. ``https://127.0.0.1:6443`` (a path prefix is kept)."""
    credentials: Credentials = field(default_factory=lambda: Credentials(None))
    ca_file: str | None = None
    """PEM bundle that verifies the server; None means the system trust store."""
    cert_file: str | None = None
    """Client certificate (PEM) for mTLS authentication."""
    key_file: str | None = None
    verify_tls: bool = True
    """False for ``insecure-skip-tls-verify``."""
    tls_server_name: str | None = None
    """SNI / verification name when it differs from the host in the URL."""
    proxy: str | None = None
    qps: float = 50.0
    """kube-scheduler's default clientConnection.qps; <= 0 means unlimited."""
    burst: int = 100
    """kube-scheduler's default clientConnection.burst."""

    def ssl_context(self) -> ssl.SSLContext | bool:
        """The TLS settings for aiohttp (False for plain http)."""
        if not self.host.startswith("https"):
            return False
        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        if not self.verify_tls:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


def _kubeconfig_paths(kubeconfig: str | None) -> str:
    if kubeconfig:
        return kubeconfig
    env = os.environ.get("KUBECONFIG")
    if env:
        return env
    return str(Path.home() / ".kube" / "config")


def _any_exists(paths: str) -> bool:
    return any(os.path.exists(os.path.expanduser(p)) for p in paths.split(os.pathsep) if p)


async def load_client_config(
    kubeconfig: str | None,
    *,
    qps: float,
    burst: int,
    context: str | None = None,
) -> KubeConfig:
    """Read the client configuration the way kube-scheduler does.

    An explicit ``kubeconfig`` wins. Without one, a process inside a pod
    (``KUBERNETES_SERVICE_HOST`` set) uses its service account; otherwise
    ``$KUBECONFIG`` (colon-separated files are merged) or ``~/.kube/config``.
    """
    from kubernetes_asyncio.client import Configuration

    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return _in_cluster_config(Configuration(), qps=qps, burst=burst)

    from kubernetes_asyncio.config import ConfigException
    from kubernetes_asyncio.config.kube_config import load_kube_config

    paths = _kubeconfig_paths(kubeconfig)
    if not _any_exists(paths):
        raise ConfigError(
            f"no kubeconfig at {paths!r} and not running in a cluster "
            "(KUBERNETES_SERVICE_HOST is unset)"
        )
    cfg = Configuration()
    try:
        loader = await load_kube_config(
            config_file=paths, context=context, client_configuration=cfg, persist_config=False
        )
    except (ConfigException, KeyError, AssertionError, OSError) as exc:
        raise ConfigError(f"cannot load kubeconfig {paths!r}: {exc}") from exc

    # What kind of credential the user entry holds decides how often to reload it.
    user = getattr(loader, "_user", None)
    uses_exec = user is not None and "exec" in user
    uses_file = user is not None and "tokenFile" in user and "token" not in user
    uses_provider = getattr(loader, "provider", None) is not None

    def refresh_period() -> float | None:
        if uses_exec:
            # kubernetes_asyncio reruns the plugin only once the credential is within
            # five minutes of its expirationTimestamp; without one, only after a 401.
            return _TOKEN_RELOAD_PERIOD if hasattr(loader, "exec_plugin_expiry") else None
        if uses_file or uses_provider:
            return _TOKEN_RELOAD_PERIOD
        return None

    async def reload(force: bool) -> tuple[str | None, float | None]:
        if force and hasattr(loader, "exec_plugin_expiry"):
            del loader.exec_plugin_expiry
        await loader.load_and_set(cfg)
        return _header_of(cfg), refresh_period()

    refresh_in = refresh_period()
    credentials = Credentials(
        _header_of(cfg),
        reload=reload if (uses_exec or uses_file or uses_provider) else None,
        refresh_in=refresh_in,
    )
    return _from_configuration(cfg, credentials, qps=qps, burst=burst)


def _in_cluster_config(cfg: Any, *, qps: float, burst: int) -> KubeConfig:
    from kubernetes_asyncio.config import ConfigException
    from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

    token_file = SERVICE_ACCOUNT_DIR / "token"
    loader = InClusterConfigLoader(
        token_filename=str(token_file),
        cert_filename=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
        try_refresh_token=True,
    )
    try:
        loader.load_and_set(cfg)
    except ConfigException as exc:
        raise ConfigError(f"in-cluster configuration: {exc}") from exc

    async def reload(force: bool) -> tuple[str | None, float | None]:
        # Projected service-account tokens rotate on disk; read the file again.
        token = await asyncio.to_thread(token_file.read_text)
        return f"Bearer {token.strip()}", _TOKEN_RELOAD_PERIOD

    credentials = Credentials(_header_of(cfg), reload=reload, refresh_in=_TOKEN_RELOAD_PERIOD)
    return _from_configuration(cfg, credentials, qps=qps, burst=burst)


def _header_of(cfg: Any) -> str | None:
    value = cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization")
    if not value:
        return None
    value = str(value).strip()
    prefix = cfg.api_key_prefix.get("BearerToken")
    if prefix and not value.startswith(f"{prefix} "):
        value = f"{prefix} {value}"
    if " " not in value:
        value = f"Bearer {value}"
    return value


def _from_configuration(
    cfg: Any, credentials: Credentials, *, qps: float, burst: int
) -> KubeConfig:
    host = str(cfg.host).rstrip("/")
    if not host:
        raise ConfigError("the client configuration has no server address")
    return KubeConfig(
        host=host,
        credentials=credentials,
        ca_file=cfg.ssl_ca_cert or None,
        cert_file=cfg.cert_file or None,
        key_file=cfg.key_file or None,
        verify_tls=bool(cfg.verify_ssl),
        tls_server_name=getattr(cfg, "tls_server_name", None) or None,
        proxy=getattr(cfg, "proxy", None) or None,
        qps=qps,
        burst=burst,
    )


# --------------------------------------------------------------------------- the client


def _query(params: Params) -> dict[str, str] | None:
    if not params:
        return None
    out: dict[str, str] = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header's value."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date; the apiserver only sends seconds
    return seconds if seconds >= 0 else None


def _encode(body: Any) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return orjson.dumps(body)


def _decode(data: bytes, content_type: str) -> Any:
    if not data:
        return None
    if "json" in content_type or not content_type:
        return orjson.loads(data)
    return data.decode(errors="replace")


class BindingMetadata(TypedDict):
    name: str
    namespace: str
    uid: str


class BindingTarget(TypedDict):
    kind: str
    name: str


class BindingBody(TypedDict):
    apiVersion: str
    kind: str
    metadata: BindingMetadata
    target: BindingTarget


def binding_body(pod_namespace: str, pod_name: str, pod_uid: str, node_name: str) -> BindingBody:
    """The v1 Binding that assigns a pod (guarded by its uid) to a node."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod_name, "namespace": pod_namespace, "uid": pod_uid},
        "target": {"kind": "Node", "name": node_name},
    }


class KubeClient:
    """Raw-JSON client for one apiserver over an aiohttp session.

    Paths are absolute API paths (``/api/v1/nodes``). Sessions are created on
    first use inside the running loop; close with :meth:`close` or ``async with``.
    """

    def __init__(
        self,
        config: KubeConfig,
        *,
        pool_size: int = 100,
        stream_pool_size: int = 64,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff_initial: float = 0.2,
        backoff_cap: float = 10.0,
        max_retry_after: float = 60.0,
        rate_limiter: TokenBucketRateLimiter | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        """pool_size: connections for ordinary requests (one request each, HTTP/1.1);
        stream_pool_size: connections for watch streams, kept apart;
        timeout: total seconds per non-streaming request attempt;
        max_retries: retries after the first attempt for a retryable answer."""
        if pool_size < 1 or stream_pool_size < 1:
            raise ValueError("pool sizes must be at least 1")
        self.config = config
        self.pool_size = pool_size
        self.stream_pool_size = stream_pool_size
        self.max_retries = max_retries
        self.backoff_initial = backoff_initial
        self.backoff_cap = backoff_cap
        self.max_retry_after = max_retry_after
        self.rate_limiter = rate_limiter or TokenBucketRateLimiter(config.qps, config.burst)
        self._base = config.host.rstrip("/")
        self._ssl = config.ssl_context()
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._headers = {"Accept": "application/json", "User-Agent": user_agent}
        self._session: aiohttp.ClientSession | None = None
        self._stream_session: aiohttp.ClientSession | None = None
        self._http1: Http1Pool | None = None
        self._extra: dict[str, Any] = {}
        if config.tls_server_name:
            self._extra["server_hostname"] = config.tls_server_name
        if config.proxy:
            self._extra["proxy"] = config.proxy

    @classmethod
    async def from_kubeconfig(
        cls,
        kubeconfig: str | None,
        *,
        qps: float = 50.0,
        burst: int = 100,
        context: str | None = None,
        **kwargs: Any,
    ) -> KubeClient:
        config = await load_client_config(kubeconfig, qps=qps, burst=burst, context=context)
        return cls(config, **kwargs)

    # ----------------------------------------------------------------- sessions

    def _new_session(self, limit: int) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, ssl=self._ssl)
        return aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            headers=self._headers,
            auto_decompress=True,
        )

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = self._new_session(self.pool_size)
        return self._session

    @property
    def stream_session(self) -> aiohttp.ClientSession:
        if self._stream_session is None or self._stream_session.closed:
            self._stream_session = self._new_session(self.stream_pool_size)
        return self._stream_session

    def _pool(self) -> Http1Pool | None:
        """The keep-alive pool for ordinary requests (None with a proxy: aiohttp's)."""
        if self.config.proxy:
            return None
        if self._http1 is None:
            self._http1 = Http1Pool(
                Endpoint.parse(self._base),
                ssl_context=self._ssl if isinstance(self._ssl, ssl.SSLContext) else None,
                server_hostname=self.config.tls_server_name,
                limit=self.pool_size,
                headers={**self._headers, "Accept-Encoding": "gzip"},
            )
        return self._http1

    async def close(self) -> None:
        if self._http1 is not None:
            await self._http1.close()
            self._http1 = None
        for session in (self._session, self._stream_session):
            if session is not None and not session.closed:
                await session.close()
        self._session = self._stream_session = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ----------------------------------------------------------------- requests

    async def _headers_for(self, content_type: str | None) -> dict[str, str]:
        headers: dict[str, str] = {}
        auth = await self.config.credentials.header()
        if auth:
            headers["Authorization"] = auth
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _retry_delay(self, backoff: Backoff, retry_after: float | None) -> float:
        delay = backoff.next()
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after))
        return delay

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Params = None,
        content_type: str | None = None,
        retry: bool | None = None,
    ) -> Any:
        """Send one request and return the decoded answer (None for an empty body).

        Retries, each after a jittered exponential delay of at least Retry-After:
        429 for every method (the server refused before doing anything); 5xx and
        dropped connections only when ``retry`` is true, which defaults to the
        method being idempotent (GET, HEAD, PUT, DELETE). A connection that could
        not be opened is retried for every method. A 401 reloads refreshable
        credentials and retries once.
        """
        method = method.upper()
        idempotent = method in _IDEMPOTENT_METHODS if retry is None else retry
        data = None if body is None else _encode(body)
        if data is not None and content_type is None:
            content_type = "application/json"
        url = self._base + path
        query = _query(params)
        backoff = Backoff(
            initial=self.backoff_initial, cap=max(self.backoff_cap, self.backoff_initial)
        )
        reauthorized = False
        attempt = 0
        pool = self._pool()
        target = f"{path}?{urlencode(query)}" if pool is not None and query else path
        while True:
            await self.rate_limiter.acquire()
            headers = await self._headers_for(content_type)
            try:
                if pool is not None:
                    answer = await pool.request(
                        method, target, headers, data, timeout=self._timeout.total
                    )
                    if answer.status < 300:
                        return _decode(answer.body, answer.get("content-type"))
                    error = ApiError.from_response(
                        answer.status,
                        answer.body,
                        method=method,
                        path=path,
                        retry_after=_retry_after(answer.get("retry-after")),
                    )
                else:
                    async with self.session.request(
                        method, url, params=query, data=data, headers=headers, **self._extra
                    ) as resp:
                        payload = await resp.read()
                        if resp.status < 300:
                            return _decode(payload, resp.headers.get("Content-Type", ""))
                        error = ApiError.from_response(
                            resp.status,
                            payload,
                            method=method,
                            path=path,
                            retry_after=_retry_after(resp.headers.get("Retry-After")),
                        )
            except (
                aiohttp.ClientSSLError,
                aiohttp.ClientConnectorCertificateError,
                ssl.SSLError,
            ):
                raise  # TLS misconfiguration: retrying cannot help
            except (aiohttp.ClientConnectorError, _CONNECT_TIMEOUT, ConnectFailed) as exc:
                # Never reached the server: safe to retry whatever the method.
                if attempt >= self.max_retries:
                    raise
                delay = self._retry_delay(backoff, None)
                log.debug("apiserver unreachable; retrying", path=path, error=str(exc), delay=delay)
            except (
                aiohttp.ClientConnectionError,
                aiohttp.ClientPayloadError,
                ConnectionDropped,
                ProtocolError,
            ) as exc:
                if not idempotent or attempt >= self.max_retries:
                    raise
                delay = self._retry_delay(backoff, None)
                log.debug("connection lost; retrying", path=path, error=str(exc), delay=delay)
            else:
                if (
                    error.is_unauthorized
                    and self.config.credentials.refreshable
                    and not reauthorized
                ):
                    reauthorized = True
                    self.config.credentials.invalidate()
                    continue
                retryable = error.is_too_many_requests or (idempotent and error.is_server_error)
                if not retryable or attempt >= self.max_retries:
                    raise error
                delay = self._retry_delay(backoff, error.retry_after)
                log.debug(
                    "retrying request",
                    method=method,
                    path=path,
                    status=error.status,
                    reason=error.reason,
                    delay=round(delay, 3),
                )
            attempt += 1
            await asyncio.sleep(delay)

    async def get_json(self, path: str, params: Params = None) -> Any:
        return await self.request("GET", path, params=params)

    async def post_json(
        self,
        path: str,
        body: Any,
        content_type: str = "application/json",
        *,
        params: Params = None,
    ) -> Any:
        return await self.request("POST", path, body, params=params, content_type=content_type)

    async def put_json(
        self,
        path: str,
        body: Any,
        content_type: str = "application/json",
        *,
        params: Params = None,
    ) -> Any:
        return await self.request("PUT", path, body, params=params, content_type=content_type)

    async def patch_json(
        self,
        path: str,
        body: Any,
        content_type: str = "application/merge-patch+json",
        *,
        params: Params = None,
    ) -> Any:
        """PATCH; content_type picks the kind: merge-patch (default),
        strategic-merge-patch, json-patch or apply-patch+yaml (server-side apply)."""
        return await self.request("PATCH", path, body, params=params, content_type=content_type)

    async def delete(self, path: str, body: Any = None, *, params: Params = None) -> Any:
        """DELETE, optionally with DeleteOptions (preconditions, gracePeriodSeconds ...)."""
        return await self.request("DELETE", path, body, params=params)

    async def bind(self, pod_namespace: str, pod_name: str, pod_uid: str, node_name: str) -> None:
        """POST a v1 Binding for the pod. A 409 means it is already bound (or was
        recreated under the same name: the uid guards that); 404 means it is gone."""
        await self.request(
            "POST",
            f"/api/v1/namespaces/{pod_namespace}/pods/{pod_name}/binding",
            binding_body(pod_namespace, pod_name, pod_uid, node_name),
        )

    async def stream_lines(
        self,
        path: str,
        params: Params = None,
        timeout: float | None = None,
        *,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """GET a streamed answer (a watch) and yield its lines without the newline.

        ``on_open`` is called once the server has answered 2xx (the stream is live).

        ``timeout`` is an inactivity timeout: no bytes for that many seconds raises
        :class:`StreamTimeout`. A non-2xx answer raises :class:`ApiError` before
        the first line. Close the generator (``contextlib.aclosing``) when leaving
        early so that the connection is released at once.
        """
        await self.rate_limiter.acquire()
        headers = await self._headers_for(None)
        stream_timeout = aiohttp.ClientTimeout(
            total=None, connect=None, sock_connect=30.0, sock_read=timeout
        )
        session = self.stream_session
        try:
            async with session.get(
                self._base + path,
                params=_query(params),
                headers=headers,
                timeout=stream_timeout,
                **self._extra,
            ) as resp:
                if resp.status >= 300:
                    payload = await resp.read()
                    error = ApiError.from_response(
                        resp.status,
                        payload,
                        method="GET",
                        path=path,
                        retry_after=_retry_after(resp.headers.get("Retry-After")),
                    )
                    if error.is_unauthorized:
                        self.config.credentials.invalidate()
                    raise error
                if on_open is not None:
                    on_open()
                async for line in _split_lines(resp.content):
                    yield line
        except TimeoutError as exc:
            if isinstance(exc, StreamTimeout) or _is_connect_timeout(exc):
                raise
            raise StreamTimeout(f"no bytes from GET {path} for {timeout} seconds") from exc


def _is_connect_timeout(exc: BaseException) -> bool:
    return _CONNECT_TIMEOUT is not aiohttp.ServerTimeoutError and isinstance(exc, _CONNECT_TIMEOUT)


async def _split_lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Lines of a byte stream, split on b"\\n" (no length limit, no quadratic joins)."""
    pending: list[bytes] = []
    async for chunk in content.iter_any():
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if pending:
                pending.append(chunk[start:end])
                line = b"".join(pending)
                pending.clear()
            else:
                line = chunk[start:end]
            start = end + 1
            if line:
                yield line
        if start < len(chunk):
            pending.append(chunk[start:] if start else chunk)
    if pending:
        tail = b"".join(pending)
        if tail.strip():
            yield tail
