"""The CEL environment DRA device selectors run in, over cel-expr-python (cel-cpp).

A selector sees one variable, ``device``: ``driver`` (string),
``allowMultipleAllocations`` (bool), ``attributes[domain][id]`` and
``capacity[domain][id]``. An attribute or capacity name without a domain is
filed under the device's driver; a domain the device does not have reads as an
empty map (so ``"x" in device.attributes["other.example.com"]`` is false, and
``device.attributes["other.example.com"].x`` is a "no such key" error, as in
kube-scheduler). Version attributes are semver values, capacities quantities.

Kubernetes' quantity and semver libraries are provided with their member
functions (``isGreaterThan``, ``isLessThan``, ``compareTo``, ``add``, ``sub``,
``asInteger``, ``asApproximateFloat``, ``sign``, ``isInteger``, ``major``,
``minor``, ``patch``) and ``quantity()`` / ``isQuantity()`` / ``semver()`` /
``isSemver()``; ``cel.bind`` and the strings extension come from cel-cpp.

cel-cpp has no opaque host types in its Python binding, so a quantity is a map
``{"__quantity__": "<exact decimal>"}`` and a semver a map ``{"__semver__":
"<canonical>"}``; both are canonical, so ``==`` compares values as Kubernetes'
``Equal`` does (1Gi == 1024Mi; build metadata ignored).

A compiled expression is kept per source text (:func:`compile_selector`); a
device's CEL input is built once per device version (:class:`DeviceInput`).
An evaluation error is reported as :class:`CelRuntimeError`, never as false.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from cel_expr_python import cel  # type: ignore[import-untyped]
from cel_expr_python.ext import ext_bindings, ext_strings  # type: ignore[import-untyped]

from kscheduler.framework.quantity import QuantityError, parse_decimal

QUANTITY_KEY = "__quantity__"
SEMVER_KEY = "__semver__"


class CelCompileError(ValueError):
    """The expression does not compile."""


class CelRuntimeError(RuntimeError):
    """The expression failed while evaluating a device."""


# ---- values ------------------------------------------------------------------------------
def quantity_value(text: str) -> dict[str, str]:
    try:
        dec = parse_decimal(text)
    except QuantityError as exc:
        raise ValueError(f"quantities must match the regular expression: {text!r}") from exc
    return {QUANTITY_KEY: _canon(dec)}


def _canon(dec: Decimal) -> str:
    if dec == 0:
        return "0"
    return format(dec.normalize(), "f")


def _q(v: Any) -> Decimal:
    if not isinstance(v, Mapping) or QUANTITY_KEY not in v:
        raise ValueError("no such overload: argument is not a quantity")
    return Decimal(str(v[QUANTITY_KEY]))


_SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


def parse_semver(text: str) -> tuple[int, int, int, tuple[str, ...]]:
    """Strict semantic version 2.0.0 (what Kubernetes parses version attributes with)."""
    m = _SEMVER_RE.match(text)
    if not m:
        raise ValueError(f"could not parse {text!r} as semver")
    pre = tuple(m.group(4).split(".")) if m.group(4) else ()
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), pre


def semver_value(text: str) -> dict[str, str]:
    major, minor, patch, pre = parse_semver(text)
    canon = f"{major}.{minor}.{patch}" + ("-" + ".".join(pre) if pre else "")
    return {SEMVER_KEY: canon}


def _sv(v: Any) -> tuple[int, int, int, tuple[str, ...]]:
    if not isinstance(v, Mapping) or SEMVER_KEY not in v:
        raise ValueError("no such overload: argument is not a semver")
    return parse_semver(str(v[SEMVER_KEY]))


def compare_semver(a: str, b: str) -> int:
    """-1, 0, 1 as semver 2.0.0 orders versions (pre-releases before the release)."""
    x, y = parse_semver(a), parse_semver(b)
    if x[:3] != y[:3]:
        return -1 if x[:3] < y[:3] else 1
    return _cmp_pre(x[3], y[3])


def _cmp_pre(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    if a == b:
        return 0
    if not a:
        return 1
    if not b:
        return -1
    for p, q in zip(a, b, strict=False):
        if p == q:
            continue
        pd, qd = p.isdigit(), q.isdigit()
        if pd and qd:
            return -1 if int(p) < int(q) else 1
        if pd != qd:
            return -1 if pd else 1
        return -1 if p < q else 1
    return -1 if len(a) < len(b) else 1


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, Mapping) and SEMVER_KEY in a:
        return compare_semver(str(a[SEMVER_KEY]), str(_sv(b) and b[SEMVER_KEY]))
    x, y = _q(a), _q(b)
    return (x > y) - (x < y)


def _as_integer(a: Any) -> int:
    d = _q(a)
    if d != d.to_integral_value() or not (-(2**63) <= d < 2**63):
        raise ValueError("cannot convert value to integer")
    return int(d)


def _is_quantity(s: str) -> bool:
    try:
        parse_decimal(s)
    except QuantityError:
        return False
    return True


def _is_semver(s: str) -> bool:
    try:
        parse_semver(s)
    except ValueError:
        return False
    return True


def _num(v: Any) -> Decimal:
    if isinstance(v, bool):
        raise ValueError("no such overload")
    if isinstance(v, int):
        return Decimal(v)
    return _q(v)


# ---- environment -------------------------------------------------------------------------
def _build_env() -> Any:
    T = cel.Type
    M = T.Map(T.STRING, T.DYN)

    def member(name: str, ret: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
        return cel.FunctionDecl(
            name, [cel.Overload(f"k8s_{name}_{len(params)}", ret, params, True, impl)]
        )

    def glob(name: str, ret: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
        return cel.FunctionDecl(name, [cel.Overload(f"k8s_g_{name}", ret, params, False, impl)])

    fns = [
        glob("quantity", M, [T.STRING], quantity_value),
        glob("isQuantity", T.BOOL, [T.STRING], _is_quantity),
        glob("semver", M, [T.STRING], semver_value),
        glob("isSemver", T.BOOL, [T.STRING], _is_semver),
        member("isGreaterThan", T.BOOL, [M, M], lambda a, b: _compare(a, b) > 0),
        member("isLessThan", T.BOOL, [M, M], lambda a, b: _compare(a, b) < 0),
        member("compareTo", T.INT, [M, M], _compare),
        cel.FunctionDecl(
            "add",
            [
                cel.Overload(
                    "k8s_add_q",
                    M,
                    [M, T.DYN],
                    True,
                    lambda a, b: {QUANTITY_KEY: _canon(_q(a) + _num(b))},
                )
            ],
        ),
        cel.FunctionDecl(
            "sub",
            [
                cel.Overload(
                    "k8s_sub_q",
                    M,
                    [M, T.DYN],
                    True,
                    lambda a, b: {QUANTITY_KEY: _canon(_q(a) - _num(b))},
                )
            ],
        ),
        member("asInteger", T.INT, [M], _as_integer),
        member("asApproximateFloat", T.DOUBLE, [M], lambda a: float(_q(a))),
        member("sign", T.INT, [M], lambda a: (_q(a) > 0) - (_q(a) < 0)),
        member("isInteger", T.BOOL, [M], lambda a: _is_int(_q(a))),
        member("major", T.INT, [M], lambda a: _sv(a)[0]),
        member("minor", T.INT, [M], lambda a: _sv(a)[1]),
        member("patch", T.INT, [M], lambda a: _sv(a)[2]),
    ]
    return cel.NewEnv(
        variables={"device": M},
        extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings()],
        functions=fns,
    )


def _is_int(d: Decimal) -> bool:
    return d == d.to_integral_value(rounding=ROUND_FLOOR) and -(2**63) <= d < 2**63


@functools.cache
def _env() -> Any:
    return _build_env()


_LITERAL_RE = re.compile(r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'')


class Selector:
    """One compiled selector expression."""

    __slots__ = ("domains", "expression", "program")

    def __init__(self, expression: str) -> None:
        self.expression = expression
        try:
            self.program = _env().compile(expression)
        except Exception as exc:  # cel-cpp reports compile errors as exceptions
            raise CelCompileError(f"compilation failed: {exc}") from exc
        #: String literals of the expression: the domains it may index, which read as
        #: empty maps when the device has none of them.
        self.domains = frozenset(a or b for a, b in _LITERAL_RE.findall(expression))

    def matches(self, device: DeviceInput) -> bool:
        """Whether the device matches; CelRuntimeError when the evaluation fails."""
        data = device.data_for(self.domains)
        try:
            value = self.program.eval(data={"device": data})
        except Exception as exc:
            raise CelRuntimeError(str(exc)) from exc
        if value.type() == cel.Type.ERROR:
            raise CelRuntimeError(_error_text(value))
        out = value.value()
        if not isinstance(out, bool):
            raise CelRuntimeError(
                f"CEL result of type {value.type().name()} could not be converted to bool"
            )
        return out


def _error_text(value: Any) -> str:
    text = str(value.value())
    for prefix in ("UNKNOWN: ", "NOT_FOUND: ", "INVALID_ARGUMENT: "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text.strip()


#: resourceapi.CELSelectorExpressionMaxLength (bytes)
SELECTOR_MAX_LENGTH = 10 * 1024
#: resourceapi.CELSelectorExpressionMaxCost: upstream's runtime cost limit per
#: evaluation, in CEL cost units. cel-expr-python does not count cost, so it is not
#: enforced here: the API server refuses a selector whose estimated worst-case cost
#: (over the API's size limits for a device) exceeds it, so a selector it admitted
#: cannot reach it at run time; only the length limit is checked again here.
SELECTOR_MAX_COST = 1_000_000


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Selector:
    """The compiled expression, compiled once per text (raises CelCompileError, also
    for an expression longer than the API allows, :data:`SELECTOR_MAX_LENGTH`)."""
    size = len(expression.encode())
    if size > SELECTOR_MAX_LENGTH:
        raise CelCompileError(
            f"expression too long: {size} bytes, may not be more than {SELECTOR_MAX_LENGTH}"
        )
    return Selector(expression)


class DeviceInput:
    """The ``device`` variable for one device version, built once."""

    __slots__ = ("_base", "_per_domains")

    def __init__(
        self,
        driver: str,
        attributes: Mapping[str, Mapping[str, Any]],
        capacity: Mapping[str, Mapping[str, Any]],
        allow_multiple_allocations: bool = False,
    ) -> None:
        self._base: dict[str, Any] = {
            "driver": driver,
            "allowMultipleAllocations": allow_multiple_allocations,
            "attributes": attributes,
            "capacity": capacity,
        }
        self._per_domains: dict[frozenset[str], dict[str, Any]] = {}

    def data_for(self, domains: frozenset[str]) -> dict[str, Any]:
        out = self._per_domains.get(domains)
        if out is None:
            attrs, caps = self._base["attributes"], self._base["capacity"]
            extra_a: dict[str, Any] = {d: {} for d in domains if d not in attrs}
            extra_c: dict[str, Any] = {d: {} for d in domains if d not in caps}
            out = self._base
            if extra_a or extra_c:
                out = dict(self._base)
                out["attributes"] = {**attrs, **extra_a}
                out["capacity"] = {**caps, **extra_c}
            self._per_domains[domains] = out
        return out


def attribute_value(attr: Mapping[str, Any]) -> Any:
    """A DeviceAttribute (API JSON) as a CEL value; ValueError for a bad version."""
    if "int" in attr:
        return int(attr["int"])
    if "bool" in attr:
        return bool(attr["bool"])
    if "string" in attr:
        return str(attr["string"])
    if "version" in attr:
        try:
            return semver_value(str(attr["version"]))
        except ValueError as exc:
            raise ValueError(f"parse semantic version: {exc}") from exc
    raise ValueError("unsupported attribute value")


def split_qualified(name: str, driver: str) -> tuple[str, str]:
    """(domain, id) of an attribute or capacity name; no domain means the driver's."""
    if "/" in name:
        domain, _, ident = name.partition("/")
        return domain, ident
    return driver, name


def make_device_input(
    driver: str,
    attributes: Mapping[str, Any],
    capacity: Mapping[str, Any],
    allow_multiple_allocations: bool = False,
) -> DeviceInput:
    """Build the CEL input from a device's API attributes/capacity (raw JSON maps).
    Raises ValueError for an attribute that cannot be converted."""
    attrs: dict[str, dict[str, Any]] = {}
    for name, attr in attributes.items():
        try:
            value = attribute_value(attr if isinstance(attr, Mapping) else {})
        except ValueError as exc:
            raise ValueError(f"attribute {name}: {exc}") from exc
        domain, ident = split_qualified(str(name), driver)
        attrs.setdefault(domain, {})[ident] = value
    caps: dict[str, dict[str, Any]] = {}
    for name, cap in capacity.items():
        raw = cap.get("value") if isinstance(cap, Mapping) else cap
        try:
            q = quantity_value(str(raw))
        except ValueError:
            q = {QUANTITY_KEY: "0"}
        domain, ident = split_qualified(str(name), driver)
        caps.setdefault(domain, {})[ident] = q
    return DeviceInput(driver, attrs, caps, allow_multiple_allocations)


__all__ = [
    "CelCompileError",
    "CelRuntimeError",
    "DeviceInput",
    "Selector",
    "compare_semver",
    "compile_selector",
    "make_device_input",
    "parse_semver",
    "quantity_value",
    "semver_value",
]
