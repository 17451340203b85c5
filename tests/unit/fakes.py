"""In-memory fakes for unit tests (never used to claim anything about Kubernetes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kscheduler.cache import Cache, Snapshot
from kscheduler.framework.registry import PluginEntry, Registry
from kscheduler.framework.runtime import Framework, ProfileSpec
from kscheduler.framework.types import PodInfo, QueuedPodInfo


class FakeObjects:
    def __init__(self, objects: Mapping[str, list[dict[str, Any]]] | None = None) -> None:
        self.objects = {k: list(v) for k, v in (objects or {}).items()}

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            o
            for o in self.objects.get(kind, [])
            if namespace is None or o.get("metadata", {}).get("namespace") == namespace
        ]

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        for o in self.objects.get(kind, []):
            m = o.get("metadata", {})
            if m.get("name") == name and (m.get("namespace") or "") == (namespace or ""):
                return o
        return None


class FakeClient:
    def __init__(self, fail_bind: Exception | None = None) -> None:
        self.bound: list[tuple[str, str]] = []
        self.deleted: list[str] = []
        self.requests: list[tuple[str, str, Any]] = []
        self.status_patches: list[tuple[str, dict[str, Any]]] = []
        self.fail_bind = fail_bind

    async def bind(self, pod: PodInfo, node_name: str) -> None:
        if self.fail_bind is not None:
            raise self.fail_bind
        self.bound.append((pod.key, node_name))

    async def delete_pod(self, pod: PodInfo, *, reason: str, message: str) -> None:
        self.deleted.append(pod.key)

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None
    ) -> Any:
        self.requests.append((method, path, body))
        return {}

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.status_patches.append((f"{namespace}/{name}", patch))


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(
        self,
        obj: Mapping[str, Any],
        type_: str,
        reason: str,
        action: str,
        note: str,
        related: Mapping[str, Any] | None = None,
    ) -> None:
        name = f"{obj['metadata'].get('namespace')}/{obj['metadata'].get('name')}"
        self.events.append((name, type_, reason, note))


def framework(
    entries: Sequence[PluginEntry],
    points: Mapping[str, Sequence[str]],
    *,
    cache: Cache | None = None,
    weights: Mapping[str, int] | None = None,
    args: Mapping[str, Any] | None = None,
    client: FakeClient | None = None,
    objects: FakeObjects | None = None,
    name: str = "test-scheduler",
    percentage: int | None = None,
) -> tuple[Framework, Snapshot, FakeClient, FakeRecorder]:
    reg = Registry()
    for e in entries:
        reg.register(e)
    snap = Snapshot(cache or Cache())
    client = client or FakeClient()
    rec = FakeRecorder()
    fwk = Framework(
        ProfileSpec(name, points, dict(weights or {}), dict(args or {}), percentage),
        reg,
        snapshot=snap,
        objects=objects or FakeObjects(),
        client=client,
        recorder=rec,
    )
    return fwk, snap, client, rec


class Sort:
    """A QueueSort plugin: first in, first out."""

    name = "Sort"

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return a.timestamp < b.timestamp
