"""Helpers of the rule-language tests (tests/test_language_*.py): time units in ns and the spans
that ``within`` and ``between`` compile to."""

from __future__ import annotations

from cep_gpu.model import (
    Attr,
    Compare,
    Const,
    OutputAttribute,
    Plan,
    Predicate,
    Rule,
    Span,
)

MS = 10**6
S = 10**9
MIN = 60 * S


def within(ref: int, window: int) -> Span:
    return Span(ref, -window, True, ref, 0, False)


def between(a: int, b: int) -> Span:
    return Span(a, 0, False, b, 0, False)


def bound(pred: int, attr: str) -> Compare:
    """The condition a parameter's binding ``attr = $p`` adds to its predicate: ``attr = attr``,
    false when the event lacks the attribute (DESIGN 3.3: a named attribute that is missing makes
    the event fail the predicate)."""
    return Compare("=", Attr(pred, attr), Attr(pred, attr))


#: the museum's Touch rule as the language must compile it (used by several files)
TOUCH = Rule(
    name="Touch",
    plans=(
        Plan(
            (
                Predicate("Vibration", "Vibration"),
                Predicate("PeopleNear", "PeopleNear", "each", 2 * MIN, 0, 0),
            ),
            (0, 1),
        ),
    ),
    conditions=(
        bound(0, "painting"),
        Compare(">", Attr(0, "value"), Const(3.0)),
        Compare("=", Attr(1, "painting"), Attr(0, "painting")),
    ),
    attributes=(
        OutputAttribute("room", "string", Attr(0, "room")),
        OutputAttribute("painting", "string", Attr(0, "painting")),
    ),
)
