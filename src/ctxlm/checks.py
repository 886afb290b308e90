"""Allowed values of command-line options and config keys: one rule type for both.

`Allowed` says what a value may be (bounds or choices); `convert(kind, allowed, value)` turns a
string or TOML value into `kind` and checks it, raising ValueError with "must be ..., got ...".
argparse gets `option(kind, allowed)` as `type=`; config fields carry `setting(default, allowed)`.
Floats are always finite and integers always fit in 64 bits (what torch and numpy can hold).
"""
from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, field
from typing import Any

INT64 = (-2**63, 2**63 - 1)


@dataclass(frozen=True)
class Allowed:
    low: float | None = None        # bounds, inclusive unless *_open
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] = ()
    size: bool = False              # a memory size: "" (none), bytes, or a number with K, M, G or T (powers of 1024)

    def describe(self, kind: type) -> str:
        """What is allowed, in words: "an integer ≥ 1", "a number in (0, 1]", "one of a, b"."""
        if self.size:
            return 'a memory size such as "2G", "512M" or "800K" (powers of 1024; a plain number is bytes) or "" for none'
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if kind is bool:
            return "true or false"
        if kind is str:
            return "a string"
        noun = "an integer" if kind is int else "a number"
        low, high = _number(self.low), _number(self.high)
        if low and high:
            return f"{noun} in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if low:
            return f"{noun} {'>' if self.low_open else '≥'} {low}"
        return noun if kind is int else "a finite number"

    def admits(self, value: Any) -> bool:
        """Whether a value already of the right type is allowed (finite, 64-bit, within bounds or choices)."""
        if self.choices:
            return value in self.choices
        if self.size:
            return parse_size(value) is not None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return True
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)


ANY = Allowed()


def _number(x: float | None) -> str:
    return "" if x is None else str(int(x)) if float(x).is_integer() else f"{x:g}"


def at_least(low: float) -> Allowed:
    return Allowed(low=low)


def above(low: float) -> Allowed:
    return Allowed(low=low, low_open=True)


def in_range(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Allowed:
    return Allowed(low, high, low_open, high_open)


def one_of(*choices: str) -> Allowed:
    return Allowed(choices=choices)


MEMORY_SIZE = Allowed(size=True)
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(?:I?B)?", re.IGNORECASE)


def parse_size(text: str) -> int | None:
    """Bytes in a memory size ("2G", "1.5g", "512MB", "800KiB", "4096"; 0 for ""), None if it is none."""
    if not isinstance(text, str):
        return None
    if not text.strip():
        return 0
    match = _SIZE.fullmatch(text.strip())
    if not match:
        return None
    value = float(match.group(1)) * 1024 ** " KMGT".find(match.group(2).upper() or " ")
    return int(value) if 0 < value < 2**63 else None


PROBABILITY = in_range(0, 1, low_open=True)     # (0, 1]
SEED = in_range(0, INT64[1])


def _typed(kind: type, value: Any, strict: bool = False) -> Any:
    """A TOML value of the right type, or (unless `strict`) a string to parse; anything else raises ValueError."""
    if isinstance(value, str) and kind is not str and not strict:
        text = value.strip()
        if kind is bool:
            lowered = text.lower()
            if lowered in ("true", "1", "yes"):
                return True
            if lowered in ("false", "0", "no"):
                return False
            raise ValueError
        return kind(text)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not kind:
        raise ValueError
    return value


def convert(kind: type, allowed: Allowed, value: Any, strict: bool = False) -> Any:
    """`value` as `kind` if `allowed` admits it, else ValueError("must be <what is allowed>, got <value>").
    `strict` (TOML files): a string is no number or truth value."""
    try:
        result = _typed(kind, value, strict)
    except (TypeError, ValueError, OverflowError):
        result = None
    if result is None or not allowed.admits(result):
        too_big = kind is int and isinstance(result, int) and not INT64[0] <= result <= INT64[1]
        quoted = " (a quoted string: write it without quotes)" if strict and isinstance(value, str) and kind is not str else ""
        raise ValueError(f"must be {allowed.describe(kind)}{' that fits in 64 bits' if too_big else ''}, got {value!r}{quoted}")
    return result


def option(kind: type, allowed: Allowed = ANY):
    """argparse `type=`: parse and check one command-line value."""
    def parse(text: str):
        try:
            return convert(kind, allowed, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def setting(default: Any, allowed: Allowed = ANY):
    """A config dataclass field with its allowed values (checked by config.apply and config.validate)."""
    return field(default=default, metadata={"allowed": allowed})


def safe_exp(x: float) -> float:
    """math.exp that gives inf where it would overflow (display and perplexities never raise)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def grid_edges(chosen: dict, axes: dict[str, tuple[list, str, str]]) -> list[str]:
    """Where a value chosen on a grid sits at an end that could be widened: "the largest LM weight", ...
    `axes`: key of `chosen` -> (the values tried, their name, the ends that count: "low", "high" or both)."""
    edges = []
    for key, (values, name, ends) in axes.items():
        if len(set(values)) < 2:
            continue
        if "high" in ends and chosen[key] == max(values):
            edges.append(f"the largest {name}")
        elif "low" in ends and chosen[key] == min(values):
            edges.append(f"the smallest {name}")
    return edges


def edge_note(edges: list[str], options: str) -> str:
    """The note a tuning command prints when its choice sits at an end of its grid ("" when it does not)."""
    return f"note: the choice is at {' and '.join(edges)} of the grid; widen it ({options})" if edges else ""
