"""Allowed values of command-line options and config keys: one rule type for both.

`Allowed` says what a value may be (bounds or choices); `convert(kind, allowed, value)` turns a
string or TOML value into `kind` and checks it, raising ValueError with "must be ..., got ...".
argparse gets `option(kind, allowed)` as `type=`; config fields carry `setting(default, allowed)`.
Floats are always finite and integers always fit in 64 bits (what torch and numpy can hold).
`RULES` is the one table of the numbers that options, API arguments and files share (docs/reliability.md).
"""
from __future__ import annotations

import argparse
import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidValue

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
    return int(value) if 1 <= value < 2**63 else None      # under a byte is none: 0 means "no budget"


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


@dataclass(frozen=True)
class Rule:
    """What one number may be, wherever it comes from: an option, an API argument or a key of a file."""
    kind: type
    allowed: Allowed
    names: str          # where it is given, for the docs' table

    def describe(self) -> str:
        return self.allowed.describe(self.kind)


# The numbers shared by options, API arguments and files. Upper bounds sit far above any useful value and below
# what overflows a float32 step or score, so that a typo such as 1e30 is refused before any work.
RULES = {
    "dynamic.lr": Rule(float, in_range(0, 100), "--dynamic-lr, tune-dynamic --lrs, DynamicSetting.lr, dynamic.json best.lr"),
    "dynamic.decay": Rule(float, in_range(0, 1), "--dynamic-decay, --decays, DynamicSetting.decay, dynamic.json best.decay"),
    "dynamic.segment": Rule(int, in_range(1, 100_000), "--dynamic-segment, --segments, DynamicSetting.segment, dynamic.json"),
    "cache.window": Rule(int, in_range(1, 10_000_000), "--cache-window, --windows, CacheSettings.window, cache.json best.window"),
    "cache.theta": Rule(float, in_range(0, 1000), "--cache-theta, --thetas, CacheSettings.theta, cache.json best.theta"),
    "cache.lambda": Rule(float, in_range(0, 1), "--cache-lambda, --lambdas, CacheSettings.lam, cache.json best.lambda"),
    "rescore.lm_weight": Rule(float, in_range(0, 1e6), "rescore --lm-weight, --lm-weights"),
    "rescore.penalty": Rule(float, in_range(-1e6, 1e6), "rescore --penalty, --penalties"),
    "harness.num_fewshot": Rule(int, in_range(0, 1000), "harness --num-fewshot"),
    "reproduce.stop_after": Rule(float, in_range(0, 1e9, low_open=True), "reproduce --stop-after (seconds)"),
    "api.count": Rule(int, at_least(1), "batch_size of Run.score and the like, of evaluate_sentences; batch_size, chunk of evaluate_stream"),
    "table.band": Rule(float, in_range(0, 1), "band of a reproduction table"),
    "table.perplexity": Rule(float, at_least(1), "test_ppl, valid_ppl, train_ppl, below of a table or record"),
    "table.accuracy": Rule(float, in_range(0, 100), "accuracy (percent) of a table or record"),
    "table.seconds": Rule(float, at_least(0), "wall_s of a record"),
}


def argument(rule: str, value: Any, name: str) -> Any:
    """An API argument checked against `RULES[rule]`: the value (an int for an integer rule, a float for a
    number), or InvalidValue (a CtxlmError) saying "<name> must be ..., got ..."."""
    kind = RULES[rule].kind
    typed = isinstance(value, numbers.Integral if kind is int else numbers.Real) and not isinstance(value, bool)
    result = kind(value) if typed else None
    if result is None or not RULES[rule].allowed.admits(result):
        too_big = kind is int and result is not None and not INT64[0] <= result <= INT64[1]
        raise InvalidValue(f"{name} must be {RULES[rule].describe()}{' that fits in 64 bits' if too_big else ''}, got {shown(value)}")
    return result


def rule_option(rule: str):
    """argparse `type=` for an option that follows `RULES[rule]`."""
    return option(RULES[rule].kind, RULES[rule].allowed)


def shown(value) -> str:
    """A value's repr, cut to 40 characters (for messages)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
