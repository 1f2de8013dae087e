"""Kubernetes resource quantities ("500m", "1.5Gi", "2e3") as exact numbers.

Requests and capacities are compared as integers: CPU in millicores, every other resource in
its base unit (bytes, devices, pods), rounded up the way Kubernetes' ``Quantity.Value`` does.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]{1,3}))?$"
)
# Kubernetes caps quantities at 2^63-1 of the base unit; anything larger is a typo.
_MAX = 2**63 - 1
# Far more than any quantity needs, and below Python's limit on converting digits to an int
# (4300), which would otherwise raise a bare ValueError past every QuantityError handler.
_MAX_DIGITS = 1000

MILLI_RESOURCES = frozenset({"cpu"})


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity exactly; raise QuantityError with the offending text."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity (expected e.g. 500m, 2, 1.5Gi, 4e3)")
    if len(match["number"]) > _MAX_DIGITS:
        raise QuantityError(f"{value[:40]!r}... has more than {_MAX_DIGITS} digits")
    number = Fraction(match["number"])
    if match["exp"] is not None:
        number *= Fraction(10) ** int(match["exp"])
    else:
        suffix = match["suffix"] or ""
        number *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    return -number if match["sign"] == "-" else number


def to_units(resource: str, value: str | int | float) -> int:
    """A quantity as the integer the cache stores: millicores for CPU, base units otherwise."""
    if type(value) is str:
        return _text_units(resource in MILLI_RESOURCES, value)
    return _units(resource in MILLI_RESOURCES, value)


# The same few texts ("1", "500m", "16Gi") come in every request, admission and node, and
# parsing one exactly (Fractions) cost about 18 us; refusals raise, so they are never kept.
@functools.lru_cache(maxsize=4096)
def _text_units(milli: bool, value: str) -> int:
    return _units(milli, value)


def _units(milli: bool, value: str | int | float) -> int:
    quantity = parse_quantity(value)
    if quantity < 0:
        raise QuantityError(f"{value!r} is negative")
    scaled = quantity * 1000 if milli else quantity
    units = math.ceil(scaled)
    if units > _MAX:
        raise QuantityError(f"{value!r} is too large")
    return units


def format_units(resource: str, units: int) -> str:
    """The inverse of to_units, for people: 1500 cpu millicores -> "1500m", 2**30 -> "1Gi"."""
    if resource in MILLI_RESOURCES:
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if units >= 1024 and ("memory" in resource or "storage" in resource):
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if units % _BINARY[suffix] == 0:
                return f"{units // _BINARY[suffix]}{suffix}"
    return str(units)
