"""kscheduler.http1 against raw asyncio servers that write exactly the bytes a test gives."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import uvloop

from kscheduler.http1 import (
    ConnectFailed,
    ConnectionDropped,
    Endpoint,
    Http1Pool,
    ProtocolError,
)

#: reads one request (head and Content-Length body) and writes an answer
Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return lines[0], headers, body


@contextlib.asynccontextmanager
async def raw_server(serve: Serve) -> AsyncIterator[tuple[str, list[str]]]:
    """A server on a free port; yields its base URL and the request lines it saw."""
    seen: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await serve(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/prefix/", seen
    finally:
        server.close()
        await server.wait_closed()


def pool_for(url: str, **kwargs: float | int) -> Http1Pool:
    return Http1Pool(  # type: ignore[arg-type]
        Endpoint.parse(url), ssl_context=None, headers={"User-Agent": "test/1"}, **kwargs
    )


def answer(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def answering(body: bytes) -> Serve:
    """A server that answers every request on a connection 200 with ``body``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer("200 OK", body))
            await writer.drain()

    return serve


def test_endpoint_keeps_the_path_prefix_and_the_authority() -> None:
    ep = Endpoint.parse("https://user@[::1]:6443/k8s/clusters/c-1/")
    assert (ep.host, ep.port, ep.tls, ep.prefix, ep.authority) == (
        "::1",
        6443,
        True,
        "/k8s/clusters/c-1",
        "[::1]:6443",
    )
    assert Endpoint.parse("http://h").port == 80
    with pytest.raises(ValueError, match="scheme"):
        Endpoint.parse("ftp://h")


async def test_keep_alive_reuses_one_connection_and_sends_the_head() -> None:
    connections = 0
    requests: list[tuple[str, dict[str, str], bytes]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            requests.append(await read_request(reader))
            writer.write(answer("201 Created", b'{"ok":true}', "Content-Type: application/json"))
            await writer.drain()

    async with raw_server(serve) as (url, _):
        pool = pool_for(url)
        for i in range(3):
            r = await pool.request(
                "POST", f"/api/v1/x?i={i}", {"Accept": "application/json"}, b'{"a":1}', timeout=5
            )
            assert (r.status, r.body, r.get("Content-Type")) == (
                201,
                b'{"ok":true}',
                "application/json",
            )
        await pool.close()
    assert connections == 1 and pool.opened == 1
    line, headers, body = requests[2]
    assert line == "POST /prefix/api/v1/x?i=2 HTTP/1.1"
    assert headers["host"] == url.split("/")[2]
    assert headers["user-agent"] == "test/1" and headers["content-length"] == "7"
    assert body == b'{"a":1}'


async def test_chunked_and_gzip_bodies_and_an_interim_answer() -> None:
    payload = b'{"items":[' + b",".join(b'{"n":%d}' % i for i in range(2000)) + b"]}"
    packed = gzip.compress(payload)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n"
        )
        # chunks written a few bytes at a time, split anywhere
        data = b"".join(
            b"%x;ext=1\r\n" % len(packed[i : i + 700]) + packed[i : i + 700] + b"\r\n"
            for i in range(0, len(packed), 700)
        )
        data += b"0\r\n\r\n"
        for i in range(0, len(data), 333):
            writer.write(data[i : i + 333])
            await writer.drain()
            await asyncio.sleep(0)
        await read_request(reader)  # the connection is reused for the next request
        writer.write(answer("204 No Content", b""))
        await writer.drain()
        await reader.read()

    async with raw_server(serve) as (url, _):
        pool = pool_for(url)
        r = await pool.request("GET", "/big", {}, None, timeout=5)
        assert r.status == 200 and r.body == payload
        r = await pool.request("DELETE", "/x", {}, None, timeout=5)
        assert r.status == 204 and r.body == b""
        assert pool.opened == 1
        await pool.close()


async def test_a_body_until_close_and_connection_close_open_a_new_connection() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line, _, _ = await read_request(reader)
        if line.startswith("GET /prefix/a "):
            writer.write(b"HTTP/1.1 200 OK\r\n\r\nuntil-close")
        else:
            writer.write(answer("200 OK", b"closing", "Connection: close"))
        await writer.drain()
        writer.close()

    async with raw_server(serve) as (url, _):
        pool = pool_for(url)
        assert (await pool.request("GET", "/a", {}, None, timeout=5)).body == b"until-close"
        assert (await pool.request("GET", "/b", {}, None, timeout=5)).body == b"closing"
        assert (await pool.request("GET", "/a", {}, None, timeout=5)).body == b"until-close"
        assert pool.opened == 3
        assert len(pool) == 0
        await pool.close()


async def test_a_connection_the_server_closed_while_idle_is_not_handed_out() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer("200 OK", b"one"))
        await writer.drain()
        # closes the kept-alive connection as an idle timeout would

    async with raw_server(serve) as (url, _):
        pool = pool_for(url)
        assert (await pool.request("POST", "/b", {}, b"{}", timeout=5)).body == b"one"
        await asyncio.sleep(0.1)  # the close reaches the client
        assert (await pool.request("POST", "/b", {}, b"{}", timeout=5)).body == b"one"
        assert pool.opened == 2
        await pool.close()


async def test_idle_connections_older_than_keepalive_are_closed_by_the_client() -> None:
    async with raw_server(answering(b"x")) as (url, _):
        pool = pool_for(url, keepalive=0.05)
        await pool.request("GET", "/", {}, None, timeout=5)
        await pool.request("GET", "/", {}, None, timeout=5)
        assert pool.opened == 1
        await asyncio.sleep(0.1)
        await pool.request("GET", "/", {}, None, timeout=5)
        assert pool.opened == 2
        await pool.close()


async def test_errors_name_what_went_wrong() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(ConnectFailed, match="cannot connect"):
        await pool_for(f"http://127.0.0.1:{free}").request("GET", "/", {}, None, timeout=5)

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line, _, _ = await read_request(reader)
        if "half" in line:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        elif "junk" in line:
            writer.write(b"SMTP ready\r\n\r\n")
        elif "slow" in line:
            await asyncio.sleep(1)
        await writer.drain()
        writer.transport.abort()

    async with raw_server(cut) as (url, _):
        pool = pool_for(url)
        with pytest.raises(ConnectionDropped):
            await pool.request("POST", "/half", {}, b"{}", timeout=5)
        with pytest.raises(ConnectionDropped):
            await pool.request("POST", "/nothing", {}, b"{}", timeout=5)
        with pytest.raises(ProtocolError, match="status line"):
            await pool.request("GET", "/junk", {}, None, timeout=5)
        with pytest.raises(TimeoutError):
            await pool.request("GET", "/slow", {}, None, timeout=0.1)
        assert len(pool) == 0  # every broken connection was dropped
        await pool.close()


async def test_the_limit_bounds_connections_in_flight() -> None:
    in_flight = 0
    most = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal in_flight, most
        while True:
            await read_request(reader)
            in_flight += 1
            most = max(most, in_flight)
            await asyncio.sleep(0.01)
            in_flight -= 1
            writer.write(answer("200 OK", b"x"))
            await writer.drain()

    async with raw_server(serve) as (url, _):
        pool = pool_for(url, limit=3)
        await asyncio.gather(*(pool.request("GET", "/", {}, None, timeout=5) for _ in range(20)))
        assert most == 3 and pool.opened == 3
        await pool.close()


def test_on_uvloop_whose_transports_are_not_asyncio_classes() -> None:
    async def scenario() -> None:
        async with raw_server(answering(b"uv")) as (url, _):
            pool = pool_for(url)
            for _ in range(3):
                assert (await pool.request("POST", "/", {}, b"{}", timeout=5)).body == b"uv"
            assert pool.opened == 1
            await pool.close()

    uvloop.run(scenario())
