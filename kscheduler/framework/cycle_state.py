"""Per-attempt scratch space shared by the plugins of one scheduling cycle."""

from __future__ import annotations

from typing import Any

#: CycleState key under which plugins leave the UIDs (a set) of pods to move to
#: activeQ when the cycle ends well, e.g. the siblings of a gang member (upstream's
#: "kubernetes.io/pods-to-activate").
PODS_TO_ACTIVATE_KEY = "kubernetes.io/pods-to-activate"


class CycleState:
    """Data a plugin computes in PreFilter/PreScore and reads in Filter/Score.

    Keys are plugin-chosen strings (by convention ``"PreFilter" + plugin name``).
    Preemption clones the state to simulate removing pods; values that change
    under simulation implement ``clone()``.
    """

    __slots__ = ("_data", "record", "skip_filter_plugins", "skip_score_plugins")

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter_plugins: set[str] = set()
        self.skip_score_plugins: set[str] = set()
        #: When True the framework records per-plugin detail (explain, debug).
        self.record = False

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """The value for ``key``; KeyError if the plugin's PreFilter did not run."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def delete(self, key: str) -> None:
        self._data.pop(key, None)

    def clone(self) -> CycleState:
        c = CycleState()
        for k, v in self._data.items():
            cl = getattr(v, "clone", None)
            c._data[k] = cl() if callable(cl) else v
        c.skip_filter_plugins = set(self.skip_filter_plugins)
        c.skip_score_plugins = set(self.skip_score_plugins)
        c.record = self.record
        return c
