"""Keep-alive HTTP/1.1 for the scheduler's short API requests, on asyncio protocols.

The scheduler writes two small objects per pod (the Binding and the Scheduled
Event) and reads small answers. A general client spends more on each of those
requests than the scheduling cycle spends on the pod: URL objects, header
multidicts, timers, payload wrappers, stream readers. This one sends the request
head and body in one write and parses the answer in the protocol's
``data_received``: the status line, the headers, a body framed by
Content-Length, chunked transfer coding or the connection's close. Watch
streams, proxies and anything long-lived stay on aiohttp (kscheduler.kube).

A pool keeps at most ``limit`` connections open to one server and hands idle
ones out last-in, first-out; a connection the server closed (its idle timeout)
is noticed by ``connection_lost`` and never handed out again, and one idle for
longer than ``keepalive`` seconds is closed by us first.

Errors: :class:`ConnectFailed` when no connection could be opened (the request
never reached the server), :class:`ConnectionDropped` when an open connection
broke before the whole answer came, :class:`ProtocolError` for an answer that
is not HTTP/1.x, :class:`TimeoutError` when an attempt outlived its timeout.
TLS verification failures raise as :class:`ssl.SSLError`.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, cast
from urllib.parse import urlsplit

__all__ = [
    "ConnectFailed",
    "ConnectionDropped",
    "Endpoint",
    "Http1Pool",
    "ProtocolError",
    "Response",
]

MAX_HEAD: Final = 64 * 1024
"""The longest status line plus headers accepted."""
KEEPALIVE: Final = 15.0
"""Seconds an idle connection is kept (the apiserver closes its own after 90)."""


class ConnectFailed(ConnectionError):
    """No connection could be opened: the request never reached the server."""


class ConnectionDropped(ConnectionError):
    """The connection broke before the whole answer arrived."""


class ProtocolError(ConnectionError):
    """The answer was not HTTP/1.x as this client reads it."""


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[str, str]
    """Header names lower-cased; repeated headers joined with ', '."""
    body: bytes

    def get(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go: scheme, host, port and the base URL's path prefix."""

    host: str
    port: int
    tls: bool
    prefix: str
    authority: str
    """The Host header: host[:port] as the URL spells it."""

    @classmethod
    def parse(cls, base_url: str) -> Endpoint:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {parts.scheme!r} in {base_url!r}")
        if not parts.hostname:
            raise ValueError(f"no host in {base_url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        return cls(
            host=parts.hostname,
            port=port,
            tls=tls,
            prefix=parts.path.rstrip("/"),
            authority=parts.netloc.rpartition("@")[2],
        )


_NO_BODY_STATUSES: Final = frozenset({204, 304})
_CHUNKED: Final = -1
_UNTIL_CLOSE: Final = -2


class _Connection(asyncio.Protocol):
    """One connection: one request at a time, its answer parsed as bytes arrive."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.keep_alive = True
        self._buf = bytearray()
        self._waiter: asyncio.Future[Response] | None = None
        self._head_request = False
        # the answer being read
        self._status = 0
        self._headers: dict[str, str] | None = None
        self._length = 0  # bytes of body, or _CHUNKED / _UNTIL_CLOSE
        self._chunks: list[bytes] = []

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio's classes: no isinstance here
        self.transport = cast(asyncio.WriteTransport, transport)

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self.close()  # bytes nobody asked for: the connection cannot be trusted
            return
        self._buf += data
        try:
            response = self._parse()
        except (ProtocolError, ValueError, zlib.error) as exc:
            self.close()
            waiter.set_exception(exc if isinstance(exc, ProtocolError) else ProtocolError(str(exc)))
            return
        if response is not None:
            self._waiter = None
            waiter.set_result(response)

    def eof_received(self) -> bool:
        waiter = self._waiter
        if (
            waiter is not None
            and not waiter.done()
            and self._length == _UNTIL_CLOSE
            and self._headers is not None
        ):
            self._waiter = None
            waiter.set_result(self._finish(bytes(self._buf)))
        self.keep_alive = False
        return False  # let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            why = f": {exc}" if exc else ""
            waiter.set_exception(ConnectionDropped(f"connection closed before the answer{why}"))

    # requests
    def send(self, data: bytes, *, head_request: bool) -> asyncio.Future[Response]:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Response] = loop.create_future()
        self._waiter = waiter
        self._head_request = head_request
        self._status = 0
        self._headers = None
        self._length = 0
        self._chunks = []
        self._buf.clear()
        self.transport.write(data)
        return waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # parsing
    def _parse(self) -> Response | None:
        buf = self._buf
        while self._headers is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise ProtocolError("response head too long")
                return None
            self._read_head(bytes(buf[:end]))
            del buf[: end + 4]
            if 100 <= self._status < 200:  # an interim answer: the real one follows
                self._headers = None
        length = self._length
        if length >= 0:
            if len(buf) < length:
                return None
            if len(buf) > length:
                raise ProtocolError("more bytes than the answer's Content-Length")
            return self._finish(bytes(buf))
        if length == _CHUNKED:
            return self._parse_chunks()
        return None  # until close: eof_received finishes it

    def _read_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        status_line = lines[0].split(b" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self._status = int(status_line[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise ProtocolError(f"malformed header line: {line[:80]!r}")
            key = name.strip().lower().decode("latin-1")
            text = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        self._headers = headers
        connection = headers.get("connection", "").lower()
        if status_line[0] == b"HTTP/1.0":
            self.keep_alive = "keep-alive" in connection
        elif "close" in connection:
            self.keep_alive = False
        if self._head_request or self._status in _NO_BODY_STATUSES or self._status < 200:
            self._length = 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._length = _CHUNKED
        elif "content-length" in headers:
            self._length = int(headers["content-length"])
            if self._length < 0:
                raise ProtocolError("negative Content-Length")
        else:
            self._length = _UNTIL_CLOSE
            self.keep_alive = False

    def _parse_chunks(self) -> Response | None:
        buf = self._buf  # the head is gone: chunks from the start
        pos = 0
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(bytes(buf[pos:eol]).split(b";", 1)[0].strip(), 16)
            if size == 0:
                # trailers (none expected) end with an empty line
                if buf[eol + 2 : eol + 4] == b"\r\n":
                    return self._finish(b"".join(self._chunks))
                trailer_end = buf.find(b"\r\n\r\n", eol + 2)
                if trailer_end < 0:
                    break
                return self._finish(b"".join(self._chunks))
            start = eol + 2
            if len(buf) < start + size + 2:
                break
            self._chunks.append(bytes(buf[start : start + size]))
            pos = start + size + 2
        del buf[:pos]  # keep only the unread part
        return None

    def _finish(self, body: bytes) -> Response:
        headers = self._headers
        assert headers is not None
        encoding = headers.get("content-encoding", "").lower()
        if encoding == "gzip" and body:
            body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
        elif encoding == "deflate" and body:
            body = zlib.decompress(body)
        self._buf.clear()
        return Response(self._status, headers, body)


def _expire(waiter: asyncio.Future[Response]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError("no answer within the request's timeout"))


class Http1Pool:
    """Keep-alive connections to one server, at most ``limit`` of them at once."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        limit: int = 100,
        keepalive: float = KEEPALIVE,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``headers``: sent with every request (Accept, User-Agent ...)."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if endpoint.tls and ssl_context is None:
            raise ValueError("an https endpoint needs an SSL context")
        self.endpoint = endpoint
        self._ssl = ssl_context if endpoint.tls else None
        self._server_hostname = server_hostname
        self._limit = limit
        self._keepalive = keepalive
        self._sem: asyncio.Semaphore | None = None
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self._fixed = f"Host: {endpoint.authority}\r\n" + "".join(
            f"{name}: {value}\r\n" for name, value in (headers or {}).items()
        )
        self.opened = 0
        """Connections opened so far (a test reads it to see reuse)."""

    def __len__(self) -> int:
        """Open connections, idle or busy."""
        return sum(1 for c in self._idle if not c.closed) + len(self._busy)

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        timeout: float | None,
    ) -> Response:
        """One request; ``target`` is the path and query after the base URL's prefix."""
        if self._sem is None:
            self._sem = asyncio.Semaphore(self._limit)
        async with self._sem:
            conn = await self._acquire(timeout)
            lines = [f"{method} {self.endpoint.prefix}{target} HTTP/1.1\r\n", self._fixed]
            for name, value in headers.items():
                lines.append(f"{name}: {value}\r\n")
            if body is not None or method in ("POST", "PUT", "PATCH"):
                lines.append(f"Content-Length: {len(body) if body else 0}\r\n")
            lines.append("\r\n")
            data = "".join(lines).encode("latin-1")
            if body:
                data += body
            self._busy.add(conn)
            expiry: asyncio.TimerHandle | None = None
            try:
                waiter = conn.send(data, head_request=method == "HEAD")
                if timeout is not None:
                    # a plain timer on the answer (asyncio.timeout costs a context
                    # manager and a task cancellation per request)
                    expiry = asyncio.get_running_loop().call_later(timeout, _expire, waiter)
                response = await waiter
            except BaseException:
                conn.abort()
                raise
            finally:
                if expiry is not None:
                    expiry.cancel()
                self._busy.discard(conn)
            if conn.keep_alive and not conn.closed:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            else:
                conn.close()
            return response

    async def _acquire(self, timeout: float | None) -> _Connection:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < self._keepalive:
                return conn
            conn.close()
        return await self._open(timeout)

    async def _open(self, timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    _Connection,
                    ep.host,
                    ep.port,
                    ssl=self._ssl,
                    server_hostname=(self._server_hostname or ep.host) if self._ssl else None,
                )
        except ssl.SSLError:
            raise  # TLS misconfiguration: another try cannot help
        except TimeoutError as exc:
            raise ConnectFailed(f"connecting to {ep.host}:{ep.port} timed out") from exc
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {ep.host}:{ep.port}: {exc}") from exc
        self.opened += 1
        return conn

    async def close(self) -> None:
        for conn in [*self._idle, *self._busy]:
            conn.close()
        self._idle.clear()
        self._busy.clear()
        # let the transports run their close callbacks
        await asyncio.sleep(0)
