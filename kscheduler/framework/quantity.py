"""Kubernetes resource.Quantity parsing into integers.

CPU is kept in millicores, everything else in base units (bytes, counts),
rounded up the way the API server's ``Quantity.Value()`` / ``MilliValue()`` do.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_RE = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|)$")
_cache: dict[tuple[str, bool], int] = {}


class QuantityError(ValueError):
    pass


def _parse(text: str) -> Decimal:
    m = _RE.match(text.strip())
    if not m:
        raise QuantityError(f"quantities must match the regular expression '{_RE.pattern}'")
    number, suffix = m.groups()
    try:
        value = Decimal(number)
    except InvalidOperation as exc:
        raise QuantityError(f"invalid number {number!r}") from exc
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix and suffix[0] in "eE":
        return value * (Decimal(10) ** int(suffix[1:]))
    return value * _DECIMAL[suffix]


def parse_decimal(text: str) -> Decimal:
    """The exact value of a quantity string (no rounding)."""
    return _parse(text)


def parse_quantity(value: object, *, milli: bool = False) -> int:
    """Parse a quantity (string or number) to an int, in milli-units when ``milli``."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        return value * 1000 if milli else value
    if isinstance(value, float):
        value = repr(value)
    if not isinstance(value, str):
        raise QuantityError(f"invalid quantity {value!r}")
    key = (value, milli)
    cached = _cache.get(key)
    if cached is not None:
        return cached
    dec = _parse(value)
    if milli:
        dec *= 1000
    result = int(dec.to_integral_value(rounding=ROUND_CEILING))
    if len(_cache) < 65536:
        _cache[key] = result
    return result


#: resource.Quantity formats, as the suffix of a quantity string decides them
BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"
DECIMAL_EXPONENT = "DecimalExponent"

_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P"}
_DECIMAL_SUFFIXES[18] = "E"
_BINARY_SUFFIXES = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}


def quantity_format(text: str) -> str:
    """The format a quantity string parses to (BinarySI, DecimalExponent, DecimalSI)."""
    m = _RE.match(text.strip())
    suffix = m.group(2) if m else ""
    if suffix in _BINARY:
        return BINARY_SI
    if suffix and suffix[0] in "eE":
        return DECIMAL_EXPONENT
    return DECIMAL_SI


def format_quantity(value: Decimal, fmt: str) -> str:
    """``value`` as resource.Quantity.String() writes a quantity of that value and
    format (its canonical form): BinarySI with a power-of-1024 suffix when the value is
    a whole number outside (-1024, 1024), else a power-of-1000 suffix (or an ``e``
    exponent for DecimalExponent) with an integer mantissa."""
    if value == 0:
        return "0"
    if fmt == BINARY_SI and abs(value) >= 1024 and value == value.to_integral_value():
        amount = int(value)
        exp = 0
        while amount % 1024 == 0 and exp < 6:
            amount //= 1024
            exp += 1
        return f"{amount}{_BINARY_SUFFIXES[exp]}"
    sign, digits, exponent = value.normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)))
    shift = exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    text = f"{'-' if sign else ''}{mantissa}"
    if fmt == DECIMAL_EXPONENT:
        return text + (f"e{exponent}" if exponent else "")
    suffix = _DECIMAL_SUFFIXES.get(exponent)
    if suffix is None:
        return text + f"e{exponent}"
    return text + suffix
