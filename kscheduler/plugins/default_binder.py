"""DefaultBinder: binds the pod with a pods/binding subresource POST."""

from __future__ import annotations

from typing import Any

from kscheduler.framework import CycleState, Handle, PluginEntry, PodInfo, Status

NAME = "DefaultBinder"


class DefaultBinder:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    @classmethod
    def new(cls, args: Any, handle: Handle) -> DefaultBinder:
        return cls(handle)

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        """Success, or Error carrying the API failure (the binding cycle then fails)."""
        try:
            await self._handle.client.bind(pod, node_name)
        except Exception as exc:
            return Status.as_error(exc, NAME)
        return None


ENTRY = PluginEntry(NAME, DefaultBinder, DefaultBinder.new)
