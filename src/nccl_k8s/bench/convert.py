"""Converters from an engine flag's text to its value: each error names the flag, the value
and the form expected, in one line. Standard library only: they travel inside pods.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

from nccl_k8s.bench.collectives import ALL_OPS, Op
from nccl_k8s.bench.compat import ConfigError
from nccl_k8s.bench.dtypes import DTYPE_ALIASES, DTYPES, Dtype

_T = TypeVar("_T", bound=str)


def member(value: str, choices: tuple[_T, ...]) -> _T | None:
    """`value` as a member of a Literal's values, or None."""
    for choice in choices:
        if choice == value:
            return choice
    return None


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kKmMgG]?)[bB]?\s*$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str, *, flag: str = "size") -> int:
    """Parse a byte size as nccl-tests does: a number with an optional binary K/M/G suffix."""
    match = _SIZE_RE.match(text)
    if not match:
        raise ConfigError(f"{flag} {text!r}: expected a byte size such as 8, 64K, 1M, 8G")
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit.lower()])


def integer(flag: str, *, minimum: int | None = None) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected an integer") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected an integer >= {minimum}")
        return value

    return convert


def number(flag: str, *, minimum: float = 0.0) -> Callable[[str], float]:
    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected a number") from None
        if not math.isfinite(value) or value < minimum:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected a number >= {minimum:g}")
        return value

    return convert


def size(flag: str) -> Callable[[str], int]:
    return lambda text: parse_size(text, flag=flag)


def one_of(choices: Any, message: str) -> Callable[[Any], Any]:
    """A value among `choices`, else ConfigError(message with {v} the value)."""

    def check(value: Any) -> Any:
        if value not in choices:
            raise ConfigError(message.format(v=value))
        return value

    return check


def literal(flag: str, choices: tuple[_T, ...], expected: str) -> Callable[[str], _T]:
    def convert(text: str) -> _T:
        found = member(text, choices)
        if found is None:
            raise ConfigError(f"{flag} {text!r}: expected {expected}")
        return found

    return convert


def dtypes_of(text: str) -> tuple[Dtype, ...]:
    if text == "all":
        return tuple(DTYPES)
    dtype = DTYPE_ALIASES.get(text) or member(text, tuple(DTYPES))
    if dtype is None:
        raise ConfigError(f"-d {text!r}: expected one of {', '.join(DTYPES)}, or all")
    return (dtype,)


def ops_of(text: str) -> tuple[Op, ...]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise ConfigError(f"--ops {text!r}: expected a collective name or 'all'")
    if names == ["all"]:
        return ALL_OPS
    ops: list[Op] = []
    for name in names:
        canonical = member(name.removesuffix("_perf"), ALL_OPS)
        if canonical is None:
            raise ConfigError(
                f"--ops {name!r}: unknown collective, expected 'all' or {', '.join(ALL_OPS)}"
            )
        if canonical not in ops:
            ops.append(canonical)
    return tuple(ops)


__all__ = [
    "dtypes_of",
    "integer",
    "literal",
    "member",
    "number",
    "one_of",
    "ops_of",
    "parse_size",
    "size",
]
