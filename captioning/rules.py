"""A setting's allowed range, written where the setting is: beside a schema field
(`setting(512, at_least(1))`) or on a constructor's keyword (`attn_dim: Annotated[int,
at_least(1)] = 512`), whose signature the schema is then derived from (schema/fields.py:
`from_signature`). Standard library only, so the models may use it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """An allowed range: `test(value)` and how to say it (">= 1", "stop or skip")."""

    test: Callable[[Any], bool]
    text: str


def at_least(low: float) -> Rule:
    return Rule(lambda v: v >= low, f">= {low}")


def above(low: float) -> Rule:
    return Rule(lambda v: v > low, f"> {low}")


def between(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Rule:
    def test(v) -> bool:
        return (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    return Rule(test, f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}")


def one_of(*values: str) -> Rule:
    text = " or ".join(values) if len(values) == 2 else " | ".join(values)
    return Rule(lambda v: v in values, text)
