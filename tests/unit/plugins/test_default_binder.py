from __future__ import annotations

from typing import Any

from kscheduler.framework import Code, CycleState, PodInfo
from kscheduler.plugins.default_binder import ENTRY, DefaultBinder

from ..builders import pod


class FakeClient:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail

    async def bind(self, p: PodInfo, node_name: str) -> None:
        self.calls.append((p.key, node_name))
        if self.fail is not None:
            raise self.fail


class FakeHandle:
    def __init__(self, client: FakeClient) -> None:
        self.client = client


def _binder(client: FakeClient) -> DefaultBinder:
    handle: Any = FakeHandle(client)
    return DefaultBinder.new(None, handle)


async def test_bind_calls_client() -> None:
    client = FakeClient()
    st = await _binder(client).bind(CycleState(), pod("p", "ns").build(), "n1")
    assert st is None
    assert client.calls == [("ns/p", "n1")]


async def test_bind_failure_is_error() -> None:
    client = FakeClient(RuntimeError('pods "p" not found'))
    st = await _binder(client).bind(CycleState(), pod("p").build(), "n1")
    assert st is not None
    assert st.code == Code.ERROR
    assert 'pods "p" not found' in st.message
    assert isinstance(st.error, RuntimeError)


def test_entry() -> None:
    assert ENTRY.name == "DefaultBinder"
    assert "bind" in ENTRY.extension_points
