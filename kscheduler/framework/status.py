"""Status codes returned by plugins and the framework.

Expected outcomes are values, not exceptions: ``None`` is success, a
:class:`Status` carries any other code, the reasons shown to the user and the
plugin that produced it. Unexpected exceptions raised inside a plugin are
wrapped by the framework into a :attr:`Code.ERROR` status naming the plugin.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Code(enum.IntEnum):
    SUCCESS = 0
    #: An internal error: the attempt fails and the pod is retried after backoff.
    ERROR = 1
    #: The pod does not fit now; preemption may help.
    UNSCHEDULABLE = 2
    #: The pod does not fit and removing pods would not change that.
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    #: Permit only: hold the pod until allowed, rejected or timed out.
    WAIT = 4
    #: PreFilter/PreScore: this plugin has nothing to do for the pod.
    SKIP = 5
    #: The pod waits for something outside the scheduler (e.g. a PVC).
    PENDING = 6

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.WAIT: "Wait",
    Code.SKIP: "Skip",
    Code.PENDING: "Pending",
}


@dataclass(slots=True)
class Status:
    code: Code
    reasons: list[str] = field(default_factory=list)
    #: Name of the plugin that returned this status (set by the framework).
    plugin: str = ""
    error: BaseException | None = None

    @classmethod
    def unschedulable(cls, *reasons: str) -> Status:
        return cls(Code.UNSCHEDULABLE, list(reasons))

    @classmethod
    def unresolvable(cls, *reasons: str) -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, list(reasons))

    @classmethod
    def as_error(cls, err: BaseException | str, plugin: str = "") -> Status:
        if isinstance(err, BaseException):
            return cls(Code.ERROR, [f"{type(err).__name__}: {err}"], plugin, err)
        return cls(Code.ERROR, [err], plugin)

    @classmethod
    def skip(cls) -> Status:
        return cls(Code.SKIP)

    @classmethod
    def wait(cls, reason: str = "") -> Status:
        return cls(Code.WAIT, [reason] if reason else [])

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def is_rejection(self) -> bool:
        """Unschedulable or UnschedulableAndUnresolvable (or Pending)."""
        return self.code in _REJECTIONS

    def with_plugin(self, plugin: str) -> Status:
        if not self.plugin:
            self.plugin = plugin
        return self

    def __str__(self) -> str:
        return f"{self.code.label}: {self.message}" if self.reasons else self.code.label


_REJECTIONS = frozenset({Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING})


def is_success(status: Status | None) -> bool:
    return status is None or status.code == Code.SUCCESS
