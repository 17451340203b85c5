"""The plugin registry: every plugin listed by name, duplicates refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kscheduler.framework.interface import Handle, Plugin

ArgsParser = Callable[[Mapping[str, Any]], Any]
PluginFactory = Callable[[Any, Handle], Plugin]

#: extension point name (as in the config) -> the method that marks a plugin as implementing it
_POINT_METHODS = {
    "preEnqueue": "pre_enqueue",
    "queueSort": "less",
    "preFilter": "pre_filter",
    "filter": "filter",
    "postFilter": "post_filter",
    "preScore": "pre_score",
    "score": "score",
    "reserve": "reserve",
    "permit": "permit",
    "preBind": "pre_bind",
    "bind": "bind",
    "postBind": "post_bind",
}
EXTENSION_POINTS = tuple(_POINT_METHODS)


@dataclass(frozen=True, slots=True)
class PluginEntry:
    name: str
    plugin_type: type
    factory: PluginFactory
    #: Validates pluginConfig args (raising ConfigError); None if the plugin takes none.
    parse_args: ArgsParser | None = None

    @property
    def extension_points(self) -> frozenset[str]:
        return frozenset(
            p for p, m in _POINT_METHODS.items() if callable(getattr(self.plugin_type, m, None))
        )


class Registry(Mapping[str, PluginEntry]):
    def __init__(self) -> None:
        self._entries: dict[str, PluginEntry] = {}

    def register(self, entry: PluginEntry) -> None:
        if entry.name in self._entries:
            raise ValueError(f"a plugin named {entry.name!r} is already registered")
        self._entries[entry.name] = entry

    def merge(self, other: Registry) -> None:
        for e in other.values():
            self.register(e)

    def __getitem__(self, name: str) -> PluginEntry:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
