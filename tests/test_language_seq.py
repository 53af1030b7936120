"""The rule language: SEQ / AND patterns: every construct compiled to the exact model objects."""

from __future__ import annotations

from language_cases import MIN, S

from cep_gpu.language import parse_rule
from cep_gpu.model import (
    SELF,
    Arith,
    Attr,
    BoolOp,
    Compare,
    Const,
    Negation,
    Not,
    OutputAttribute,
    Plan,
    Predicate,
    Rule,
    Span,
    Timestamp,
)

# ------------------------------------------------------------------------------------ SEQ / AND


def test_seq_pattern_of_the_design():
    rule = parse_rule(
        """define Ascend
        pattern SEQ(GOOG a, GOOG b, GOOG c)
        where a.peak < b.peak and b.peak < c.peak
        within 3 min"""
    )
    assert rule == Rule(
        name="Ascend",
        plans=(
            Plan(
                (
                    Predicate("GOOG", "a", "each", 3 * MIN, 2, 1),
                    Predicate("GOOG", "b", "each", 3 * MIN, 2, 2),
                    Predicate("GOOG", "c"),
                ),
                (2, 1, 0),
            ),
        ),
        conditions=(
            Compare("<", Attr(0, "peak"), Attr(1, "peak")),
            Compare("<", Attr(1, "peak"), Attr(2, "peak")),
        ),
        syntax="seq",
    )


def test_seq_where_boolean_structure_select_and_return():
    rule = parse_rule(
        """define P(gain: float)
        pattern SEQ(A a, B b)
        where (a.x > 1 or not b.y = 'q') and (a.x + 1) * 2 <= b.x and not (a.z = 1 and b.z = 2)
        within 10 s
        select last
        return gain := b.x - a.x, at := a.ts"""
    )
    assert rule.predicates == (Predicate("A", "a", "last", 10 * S, 1, 1), Predicate("B", "b"))
    assert rule.conditions == (
        BoolOp(
            "or",
            (Compare(">", Attr(0, "x"), Const(1)), Not(Compare("=", Attr(1, "y"), Const("q")))),
        ),
        Compare("<=", Arith("*", Arith("+", Attr(0, "x"), Const(1)), Const(2)), Attr(1, "x")),
        Not(
            BoolOp(
                "and",
                (Compare("=", Attr(0, "z"), Const(1)), Compare("=", Attr(1, "z"), Const(2))),
            )
        ),
    )
    assert rule.attributes == (
        OutputAttribute("gain", "float", Arith("-", Attr(1, "x"), Attr(0, "x"))),
        OutputAttribute("at", None, Timestamp(0)),
    )


def test_seq_nested_top_level_ands_are_split():
    rule = parse_rule(
        "define P pattern SEQ(A a, B b) where (a.x = 1 and (b.x = 2)) and a.y = 3 within 1 s"
    )
    assert len(rule.conditions) == 3


def test_seq_not_between_leading_and_trailing():
    rule = parse_rule(
        """define P
        pattern SEQ(NOT(L l), A a, NOT(M m), B b, C c, NOT(T t))
        where m.k = a.k and a.v > 1 and t.k = c.k and l.v < 0 and m.ts > a.ts + 1
        within 5 s
        select first"""
    )
    w = 5 * S
    assert rule.plans == (
        Plan(
            (
                Predicate("A", "a", "first", w, 2, 1),
                Predicate("B", "b", "first", w, 2, 2),
                Predicate("C", "c"),
            ),
            (2, 1, 0),
        ),
    )
    assert rule.conditions == (Compare(">", Attr(0, "v"), Const(1)),)
    assert rule.negations == (
        Negation(
            "L", Span(2, -w, True, 0, 0, False), (Compare("<", Attr(SELF, "v"), Const(0)),), "l"
        ),
        Negation(
            "M",
            Span(0, 0, False, 1, 0, False),
            (
                Compare("=", Attr(SELF, "k"), Attr(0, "k")),
                Compare(">", Timestamp(SELF), Arith("+", Timestamp(0), Const(1))),
            ),
            "m",
        ),
        Negation(
            "T", Span(2, 0, False, 0, w, True), (Compare("=", Attr(SELF, "k"), Attr(2, "k")),), "t"
        ),
    )
    assert rule.trailing_horizon() == w


def test_single_event_seq_needs_no_window():
    rule = parse_rule("define One pattern SEQ(A a) where a.v > 1")
    assert rule.plans == (Plan((Predicate("A", "a"),), (0,)),)
    assert rule.conditions == (Compare(">", Attr(0, "v"), Const(1)),)


def test_seq_alias_defaults_to_type_and_clauses_in_any_order():
    rule = parse_rule("define P pattern SEQ(A, B) within 1 s where A.x = B.x select last")
    assert rule.predicates == (Predicate("A", "A", "last", S, 1, 1), Predicate("B", "B"))


def test_and_pattern_has_one_plan_per_last_event():
    rule = parse_rule(
        "define Both pattern AND(A a, B b, C c) where a.k = b.k within 2 s select last"
    )
    w = 2 * S
    assert rule.plans == (
        Plan(
            (
                Predicate("A", "a"),
                Predicate("B", "b", "last", w, 0, 0, ties=True),
                Predicate("C", "c", "last", w, 0, 0, ties=True),
            ),
            (0, 2, 1),
        ),
        Plan(
            (
                Predicate("A", "a", "last", w, 1, 1, ties=True),
                Predicate("B", "b"),
                Predicate("C", "c", "last", w, 1, 1, ties=True),
            ),
            (1, 2, 0),
        ),
        Plan(
            (
                Predicate("A", "a", "last", w, 2, 2, ties=True),
                Predicate("B", "b", "last", w, 2, 2, ties=True),
                Predicate("C", "c"),
            ),
            (2, 1, 0),
        ),
    )
    assert rule.conditions == (Compare("=", Attr(0, "k"), Attr(1, "k")),)
    assert rule.syntax == "seq"


def test_seq_keywords_case_insensitive():
    a = parse_rule(
        "DEFINE P PATTERN Seq(A a, B b) WHERE a.x = 1 AND NOT b.y = 2 WITHIN 1 S SELECT Each RETURN z = a.x"
    )
    b = parse_rule(
        "define P pattern seq(A a, B b) where a.x = 1 and not b.y = 2 within 1 s select each return z := a.x"
    )
    assert a == b
