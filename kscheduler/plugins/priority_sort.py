"""PrioritySort: the default QueueSort; higher priority first, then the earlier enqueue."""

from __future__ import annotations

from typing import Any

from kscheduler.framework import Handle, PluginEntry, QueuedPodInfo

NAME = "PrioritySort"


class PrioritySort:
    name = NAME

    @classmethod
    def new(cls, args: Any, handle: Handle) -> PrioritySort:
        return cls()

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """Whether ``a`` pops before ``b``: by spec.priority (absent is 0), then timestamp."""
        pa = a.pod.priority
        pb = b.pod.priority
        return pa > pb or (pa == pb and a.timestamp < b.timestamp)

    def sort_key(self, qp: QueuedPodInfo) -> tuple[int, float]:
        """Ascending order of this key is the order of :meth:`less`."""
        return (-qp.pod.priority, qp.timestamp)


ENTRY = PluginEntry(NAME, PrioritySort, PrioritySort.new)
