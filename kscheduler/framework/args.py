"""Strict reading of configuration objects: ConfigError and the Fields reader.

Plugins parse their ``pluginConfig`` args with :class:`Fields`; ``kscheduler.config``
uses the same reader for the whole KubeSchedulerConfiguration. Every error names the
field it is about with a dotted path (``scoringStrategy.resources[1].weight``), so a
user can find the line to fix. A plugin's ``parse_args`` reports paths relative to its
args object; the config loader prefixes them with ``profiles[i].pluginConfig[j].args``.

Strictness follows kube-scheduler's decoder: unknown fields are errors, values of the
wrong type are errors, and an explicit ``null`` counts as "not set".
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_NUMBER_CHARS = frozenset("0123456789.")
_NS_PER_UNIT = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek small letter mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}


class ConfigError(Exception):
    """A configuration value is missing, malformed or invalid.

    ``path`` is the dotted path of the offending field (empty for the document
    itself), ``reason`` says what is wrong with it.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason

    def under(self, prefix: str) -> ConfigError:
        """The same error, its path made relative to ``prefix``."""
        return ConfigError(prefix_path(prefix, self.path), self.reason)


def join_path(base: str, child: str | int) -> str:
    """``join_path("a", "b") == "a.b"``, ``join_path("a", 2) == "a[2]"``."""
    if isinstance(child, int):
        return f"{base}[{child}]"
    return f"{base}.{child}" if base else child


def prefix_path(prefix: str, path: str) -> str:
    """Put a relative path (``"x.y"``, ``"[0].z"`` or ``""``) under ``prefix``."""
    if not path:
        return prefix
    if not prefix or path.startswith("["):
        return prefix + path
    return f"{prefix}.{path}"


def describe(value: object) -> str:
    """Name a raw YAML/JSON value's type (and value) for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        return f"string {json.dumps(text, ensure_ascii=False)}"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "list"
    return type(value).__name__


def parse_duration(text: str) -> float:
    """Parse a Go duration string (``"15s"``, ``"1m30s"``, ``"500ms"``) into seconds.

    Accepts what Go's ``time.ParseDuration`` accepts: an optional sign, then one or
    more decimal numbers each followed by a unit (ns, us/µs, ms, s, m, h); a lone
    ``"0"`` needs no unit. Raises ValueError otherwise.
    """
    orig = text
    sign = 1
    if text[:1] in ("+", "-"):
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f"invalid duration {json.dumps(orig)}")
    total_ns = 0.0
    i = 0
    while i < len(text):
        start = i
        while i < len(text) and text[i] in _NUMBER_CHARS:
            i += 1
        number = text[start:i]
        if not number or number == "." or number.count(".") > 1:
            raise ValueError(f"invalid duration {json.dumps(orig)}")
        unit_start = i
        while i < len(text) and text[i] not in _NUMBER_CHARS:
            i += 1
        unit = text[unit_start:i]
        if not unit:
            raise ValueError(f"missing unit in duration {json.dumps(orig)}")
        if unit not in _NS_PER_UNIT:
            raise ValueError(f"unknown unit {json.dumps(unit)} in duration {json.dumps(orig)}")
        total_ns += float(number) * _NS_PER_UNIT[unit]
    return sign * total_ns / 1e9


class Fields:
    """Strict reader over one raw object (a YAML/JSON mapping).

    Each getter takes a field out of the object, checks its type and returns it (or
    the default when the field is absent or null). ``done()`` then rejects whatever
    was not taken: an unknown field is an error, never silently ignored::

        f = Fields(raw, "scoringStrategy")
        kind = f.string("type", "LeastAllocated", choices=("LeastAllocated", "MostAllocated"))
        resources = [parse_resource(r) for r in f.objects("resources")]
        f.done()

    The getters are named after the value kinds of the config (integer, string ...)
    rather than Python's builtins, so that annotations inside this class still mean
    the builtins.
    """

    def __init__(self, raw: object, path: str = "") -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(path, f"expected object, got {describe(raw)}")
        for key in raw:
            if not isinstance(key, str):
                raise ConfigError(path, f"field names must be strings, got {describe(key)}")
        self._raw: Mapping[str, Any] = raw
        self._taken: set[str] = set()
        self.path = path

    # -- generic access -------------------------------------------------------

    def child(self, name: str | int) -> str:
        """The path of a field (or, with an int, a list element) under this object."""
        return join_path(self.path, name)

    def has(self, name: str) -> bool:
        """Whether the field is present and not null (does not take it)."""
        return self._raw.get(name) is not None

    def raw(self, name: str) -> Any:
        """Take a field without checking its type; None when absent or null."""
        self._taken.add(name)
        return self._raw.get(name)

    def keys(self) -> list[str]:
        """All field names, in document order."""
        return list(self._raw)

    def done(self) -> None:
        """Raise ConfigError for the first field that no getter took."""
        for key in self._raw:
            if key not in self._taken:
                raise ConfigError(self.child(key), "unknown field")

    def error(self, name: str | int, reason: str) -> ConfigError:
        """A ConfigError about a field of this object (to raise after validation)."""
        return ConfigError(self.child(name), reason)

    # -- scalars --------------------------------------------------------------

    def optional_integer(
        self, name: str, *, minimum: int = INT64_MIN, maximum: int = INT64_MAX
    ) -> int | None:
        value = self.raw(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(name, f"expected integer, got {describe(value)}")
        _check_range(self, name, value, minimum, maximum)
        return value

    def integer(
        self, name: str, default: int, *, minimum: int = INT64_MIN, maximum: int = INT64_MAX
    ) -> int:
        value = self.optional_integer(name, minimum=minimum, maximum=maximum)
        return default if value is None else value

    def optional_number(
        self, name: str, *, minimum: float | None = None, maximum: float | None = None
    ) -> float | None:
        value = self.raw(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(name, f"expected number, got {describe(value)}")
        _check_range(self, name, value, minimum, maximum)
        return float(value)

    def number(
        self,
        name: str,
        default: float,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float:
        value = self.optional_number(name, minimum=minimum, maximum=maximum)
        return default if value is None else value

    def optional_string(self, name: str, *, choices: Collection[str] | None = None) -> str | None:
        value = self.raw(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(name, f"expected string, got {describe(value)}")
        if choices is not None and value not in choices:
            allowed = ", ".join(json.dumps(c) for c in choices)
            raise self.error(
                name, f"unsupported value {json.dumps(value)}: must be one of {allowed}"
            )
        return value

    def string(
        self, name: str, default: str = "", *, choices: Collection[str] | None = None
    ) -> str:
        value = self.optional_string(name, choices=choices)
        return default if value is None else value

    def required_string(self, name: str) -> str:
        """A string that must be present and non-empty."""
        value = self.optional_string(name)
        if not value:
            raise self.error(name, "required")
        return value

    def optional_boolean(self, name: str) -> bool | None:
        value = self.raw(name)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self.error(name, f"expected boolean, got {describe(value)}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.optional_boolean(name)
        return default if value is None else value

    def optional_duration(self, name: str) -> float | None:
        """A Go duration string (``"1m30s"``) as seconds; None when absent."""
        value = self.raw(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(name, f'expected duration string (e.g. "15s"), got {describe(value)}')
        try:
            return parse_duration(value)
        except ValueError as e:
            raise self.error(name, str(e)) from None

    def duration(self, name: str, default: float) -> float:
        value = self.optional_duration(name)
        return default if value is None else value

    # -- containers -----------------------------------------------------------

    def optional_obj(self, name: str) -> Fields | None:
        """A nested object; None when absent or null."""
        value = self.raw(name)
        if value is None:
            return None
        return Fields(value, self.child(name))

    def obj(self, name: str) -> Fields:
        """A nested object; an empty one when absent or null."""
        return Fields(self.raw(name), self.child(name))

    def items(self, name: str) -> list[tuple[str, Any]]:
        """The elements of a list field, each with its path; [] when absent."""
        value = self.raw(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(name, f"expected list, got {describe(value)}")
        base = self.child(name)
        return [(join_path(base, i), v) for i, v in enumerate(value)]

    def objects(self, name: str) -> list[Fields]:
        """A list of objects, each as a Fields reader."""
        return [Fields(v, p) for p, v in self.items(name)]

    def strings(self, name: str) -> tuple[str, ...]:
        """A list of strings."""
        out: list[str] = []
        for p, v in self.items(name):
            if not isinstance(v, str):
                raise ConfigError(p, f"expected string, got {describe(v)}")
            out.append(v)
        return tuple(out)


def _check_range(
    fields: Fields,
    name: str,
    value: float,
    minimum: float | None,
    maximum: float | None,
) -> None:
    if minimum is not None and value < minimum:
        raise fields.error(name, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise fields.error(name, f"must be at most {maximum}, got {value}")


__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "ConfigError",
    "Fields",
    "describe",
    "join_path",
    "parse_duration",
    "prefix_path",
]
