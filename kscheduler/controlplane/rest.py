"""A tiny raw-JSON REST client for the Kubernetes API (aiohttp + orjson).

Meant for test setup, fixtures and benchmarks: bulk object creation and
cleanup without the typed-model overhead.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Literal, Protocol

import aiohttp
import orjson

JSON = dict[str, Any]
Params = Mapping[str, str | int | float | bool] | None
PatchType = Literal["merge", "strategic", "json", "apply"]

_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


class ApiError(RuntimeError):
    """A non-2xx response; carries the HTTP status and the server's Status object."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.body = body
        if isinstance(body, dict):
            self.reason: str = str(body.get("reason") or "")
            self.message: str = str(body.get("message") or "")
        else:
            self.reason = ""
            self.message = str(body)[:500]
        super().__init__(
            f"{method} {path} -> HTTP {status} {self.reason}: {self.message}".rstrip(": ")
        )


class ApiClientLike(Protocol):
    """What the bulk builders need (RestClient implements it)."""

    async def get(self, path: str, params: Params = None) -> Any: ...

    async def post(self, path: str, body: Any, params: Params = None) -> Any: ...

    async def put(self, path: str, body: Any, params: Params = None) -> Any: ...

    async def delete(self, path: str, params: Params = None, body: Any = None) -> Any: ...

    async def list(self, path: str, params: Params = None) -> list[JSON]: ...


def _query(params: Params) -> dict[str, str] | None:
    if not params:
        return None
    out: dict[str, str] = {}
    for key, value in params.items():
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


class RestClient:
    """Bearer-token client for one apiserver; one aiohttp session, pooled connections.

    Paths are absolute API paths (``/api/v1/nodes``). Responses are decoded with
    orjson (JSON) or returned as text. Non-2xx responses raise ApiError.
    The session is created lazily on first use inside the running loop; close
    it with ``await client.close()`` or ``async with``.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        ca_file: str | os.PathLike[str] | None = None,
        verify: bool = True,
        max_connections: int = 64,
        timeout: float = 60.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.max_connections = max_connections
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._ssl: ssl.SSLContext | bool
        if not base_url.startswith("https") or not verify:
            self._ssl = False
        elif ca_file is not None:
            self._ssl = ssl.create_default_context(cafile=os.fspath(ca_file))
        else:
            self._ssl = ssl.create_default_context()
        self._session: aiohttp.ClientSession | None = None
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def with_token(self, token: str | None) -> RestClient:
        """A new client for the same server and TLS settings, another identity."""
        other = RestClient(self.base_url, token, max_connections=self.max_connections)
        other._ssl = self._ssl
        other._timeout = self._timeout
        return other

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.max_connections, limit_per_host=self.max_connections, ssl=self._ssl
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                headers=self._headers,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def __aenter__(self) -> RestClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Params = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """Send one request; return decoded JSON (or text for non-JSON responses)."""
        data: bytes | None = None
        headers: dict[str, str] = {}
        if body is not None:
            data = body if isinstance(body, bytes) else orjson.dumps(body)
            headers["Content-Type"] = content_type
        async with self.session.request(
            method, self.base_url + path, params=_query(params), data=data, headers=headers
        ) as resp:
            raw = await resp.read()
            is_json = resp.content_type == "application/json"
            try:
                payload: Any = (
                    orjson.loads(raw) if is_json and raw else raw.decode(errors="replace")
                )
            except orjson.JSONDecodeError:
                payload = raw.decode(errors="replace")
            if resp.status >= 300:
                raise ApiError(method, path, resp.status, payload)
            return payload

    async def get(self, path: str, params: Params = None) -> Any:
        return await self.request("GET", path, params=params)

    async def get_text(self, path: str, params: Params = None) -> str:
        result = await self.request("GET", path, params=params)
        return result if isinstance(result, str) else orjson.dumps(result).decode()

    async def post(self, path: str, body: Any, params: Params = None) -> Any:
        return await self.request("POST", path, params=params, body=body)

    async def put(self, path: str, body: Any, params: Params = None) -> Any:
        return await self.request("PUT", path, params=params, body=body)

    async def patch(
        self, path: str, body: Any, params: Params = None, *, patch_type: PatchType = "merge"
    ) -> Any:
        return await self.request(
            "PATCH", path, params=params, body=body, content_type=_PATCH_CONTENT_TYPES[patch_type]
        )

    async def delete(self, path: str, params: Params = None, body: Any = None) -> Any:
        return await self.request("DELETE", path, params=params, body=body)

    async def list(self, path: str, params: Params = None, *, page_size: int = 500) -> list[JSON]:
        """All items of a collection, following ``continue`` tokens."""
        items: list[JSON] = []
        query: dict[str, str | int | float | bool] = dict(params or {})
        query.setdefault("limit", page_size)
        while True:
            page = await self.get(path, query)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            query["continue"] = token

    async def wait_for(
        self,
        path: str,
        predicate: Callable[[Any], object],
        *,
        within: float = 30.0,
        interval: float = 0.1,
    ) -> Any:
        """Poll GET path until predicate(obj) is truthy and return obj.

        A 404 keeps polling (predicate is not called). Raises TimeoutError
        with the last object seen.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        last: Any = None
        while True:
            try:
                last = await self.get(path)
                if predicate(last):
                    return last
            except ApiError as exc:
                if exc.status != 404:
                    raise
                last = exc.body
            if loop.time() > deadline:
                raise TimeoutError(f"timed out after {within}s waiting on {path}; last: {last}")
            await asyncio.sleep(interval)

    async def wait_deleted(self, path: str, *, within: float = 30.0, interval: float = 0.1) -> None:
        """Poll GET path until it returns 404."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            try:
                await self.get(path)
            except ApiError as exc:
                if exc.status == 404:
                    return
                raise
            if loop.time() > deadline:
                raise TimeoutError(f"timed out after {within}s waiting for {path} to be deleted")
            await asyncio.sleep(interval)
