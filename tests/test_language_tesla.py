"""The rule language: TESLA rules (the museum rules first): every construct compiled to the exact model objects."""

from __future__ import annotations

import pytest
from language_cases import MIN, MS, TOUCH, S, between, bound, within

import cep_gpu
from cep_gpu.language import parse_rule, parse_rules
from cep_gpu.model import (
    SELF,
    Aggregate,
    AggValue,
    Arith,
    Attr,
    Compare,
    Const,
    Neg,
    Negation,
    OutputAttribute,
    Plan,
    Predicate,
    Rule,
    Timestamp,
)
from cep_gpu.museum import MUSEUM_RULES

# ------------------------------------------------------------------------------------ museum


THEFT = Rule(
    name="Theft",
    plans=(
        Plan(
            (
                Predicate("Vibration", "Vibration"),
                Predicate("PeopleNear", "PeopleNear", "each", 5 * MIN, 0, 0),
            ),
            (0, 1),
        ),
    ),
    conditions=(
        bound(0, "room"),
        bound(0, "painting"),
        Compare(">", Attr(0, "value"), Const(3.0)),
        Compare("=", Attr(1, "painting"), Attr(0, "painting")),
    ),
    negations=(
        Negation(
            "StaffAt", within(0, 1 * MIN), (Compare("=", Attr(SELF, "room"), Attr(0, "room")),)
        ),
    ),
    attributes=TOUCH.attributes,
)

ALARM = Rule(
    name="Alarm",
    plans=(Plan((Predicate("Vibration", "Vibration"),), (0,)),),
    conditions=(
        bound(0, "room"),
        bound(0, "painting"),
        Compare(">", Attr(0, "value"), Const(3.0)),
        Compare(">", AggValue(0), Const(3.0)),
    ),
    aggregates=(
        Aggregate(
            "avg",
            "Vibration",
            "value",
            within(0, 5 * MIN),
            (
                Compare("=", Attr(SELF, "room"), Attr(0, "room")),
                Compare("=", Attr(SELF, "painting"), Attr(0, "painting")),
            ),
            "v",
        ),
    ),
    attributes=(
        OutputAttribute("painting", "string", Attr(0, "painting")),
        OutputAttribute("level", "float", AggValue(0)),
    ),
)


def test_museum_rules_compile_exactly():
    rules = parse_rules(MUSEUM_RULES)
    assert rules == [TOUCH, THEFT, ALARM]
    assert [r.syntax for r in rules] == ["tesla"] * 3
    assert rules[0].text.startswith("define Touch(") and rules[0].text.endswith(
        "Vibration.painting"
    )
    assert "define Theft" in rules[1].text and "Touch" not in rules[1].text


def test_public_entry_points():
    assert cep_gpu.parse_rule(MUSEUM_RULES.split("\n\n")[0]) == TOUCH
    assert cep_gpu.parse_rules(MUSEUM_RULES)[2] == ALARM


# ------------------------------------------------------------------------------------ TESLA


def test_policies_aliases_chains_and_timestamps():
    rule = parse_rule(
        """define Chain(t: int, d: float)
        from C(k = $k) as Term
        and last B(k = $k and v > Term.v) as Bee within 1 s from Term
        and first A(k = $k and v < Bee.v + 1) within 500 ms from Bee
        where t = Term.ts, d = Bee.v - A.v"""
    )
    assert rule.plans == (
        Plan(
            (
                Predicate("C", "Term"),
                Predicate("B", "Bee", "last", S, 0, 0),
                Predicate("A", "A", "first", 500 * MS, 1, 1),
            ),
            (0, 1, 2),
        ),
    )
    assert rule.conditions == (
        bound(0, "k"),
        Compare("=", Attr(1, "k"), Attr(0, "k")),
        Compare(">", Attr(1, "v"), Attr(0, "v")),
        Compare("=", Attr(2, "k"), Attr(0, "k")),
        Compare("<", Attr(2, "v"), Arith("+", Attr(1, "v"), Const(1))),
    )
    assert rule.attributes == (
        OutputAttribute("t", "int", Timestamp(0)),
        OutputAttribute("d", "float", Arith("-", Attr(1, "v"), Attr(2, "v"))),
    )


def test_type_name_still_refers_to_an_aliased_predicate():
    rule = parse_rule("define R from X() as T and each Y() within 1 s from X")
    assert rule.predicates[1] == Predicate("Y", "Y", "each", S, 0, 0)


def test_parameters_bind_once_and_constrain_later():
    rule = parse_rule(
        """define R(p: int, q: int)
        from X(a = $p and b = $p and c = $q) and
        each Y(a = $p and b > $q + 1 and c != $p * 2) within 1 s from X
        where p = $p, q = $q"""
    )
    assert rule.conditions == (
        bound(0, "a"),
        Compare("=", Attr(0, "b"), Attr(0, "a")),
        bound(0, "c"),
        Compare("=", Attr(1, "a"), Attr(0, "a")),
        Compare(">", Attr(1, "b"), Arith("+", Attr(0, "c"), Const(1))),
        Compare("!=", Attr(1, "c"), Arith("*", Attr(0, "a"), Const(2))),
    )
    assert rule.attributes == (
        OutputAttribute("p", "int", Attr(0, "a")),
        OutputAttribute("q", "int", Attr(0, "c")),
    )


def test_parameter_first_bound_in_a_later_predicate():
    rule = parse_rule(
        "define R from X() and each Y(a = $p) within 1 s from X and each Z(a = $p) within 1 s from Y"
    )
    assert rule.conditions == (bound(1, "a"), Compare("=", Attr(2, "a"), Attr(1, "a")))


def test_arithmetic_precedence_literals_and_unary_minus():
    rule = parse_rule(
        """define R from X(a > (b + 1) * 2 - c / 4 and d = -3 and e = -2.5 and f = -g
        and s = 'single' and t = "dq \\" \\\\ \\n" and u = true and w = FALSE and x = 1e3
        and y = +7 and z = 1 - 2 - 3)"""
    )
    a = Attr
    assert rule.conditions == (
        Compare(
            ">",
            a(0, "a"),
            Arith(
                "-",
                Arith("*", Arith("+", a(0, "b"), Const(1)), Const(2)),
                Arith("/", a(0, "c"), Const(4)),
            ),
        ),
        Compare("=", a(0, "d"), Const(-3)),
        Compare("=", a(0, "e"), Const(-2.5)),
        Compare("=", a(0, "f"), Neg(a(0, "g"))),
        Compare("=", a(0, "s"), Const("single")),
        Compare("=", a(0, "t"), Const('dq " \\ \n')),
        Compare("=", a(0, "u"), Const(True)),
        Compare("=", a(0, "w"), Const(False)),
        Compare("=", a(0, "x"), Const(1000.0)),
        Compare("=", a(0, "y"), Const(7)),
        Compare("=", a(0, "z"), Arith("-", Arith("-", Const(1), Const(2)), Const(3))),
    )
    assert type(rule.conditions[1].right.value) is int
    assert type(rule.conditions[2].right.value) is float
    assert type(rule.conditions[6].right.value) is bool


@pytest.mark.parametrize(
    "text, ns",
    [
        ("1 ms", MS),
        ("250ms", 250 * MS),
        ("2 s", 2 * S),
        ("3 sec", 3 * S),
        ("3 sec.", 3 * S),
        ("1 min.", MIN),
        ("1 MIN", MIN),
        ("2 h", 2 * 3600 * S),
        ("1.5 s", 1_500_000_000),
        ("0.5 min", 30 * S),
    ],
)
def test_durations(text, ns):
    rule = parse_rule(f"define R from X() and each Y() within {text} from X")
    assert rule.predicates[1].window == ns
    assert isinstance(rule.predicates[1].window, int)


def test_negations_within_and_between():
    rule = parse_rule(
        """define R from C() and each B() within 10 s from C and each A() within 5 s from B
        and not N(k = C.k and v > 2) within 3 s from B
        and not M() between A and C"""
    )
    assert rule.negations == (
        Negation(
            "N",
            within(1, 3 * S),
            (Compare("=", Attr(SELF, "k"), Attr(0, "k")), Compare(">", Attr(SELF, "v"), Const(2))),
        ),
        Negation("M", between(2, 0)),
    )


def test_negation_may_follow_any_positive_and_refer_to_earlier_ones_only():
    rule = parse_rule(
        "define R from C(k = $k) and not N(k = $k) within 1 s from C and each B() within 2 s from C"
    )
    assert rule.negations == (
        Negation("N", within(0, S), (Compare("=", Attr(SELF, "k"), Attr(0, "k")),)),
    )
    assert rule.n_predicates == 2


def test_aggregates_count_sum_between_and_where_only():
    rule = parse_rule(
        """define R(n: int, total: float)
        from C(k = $k) and each B() within 1 min from C
        and n = Count(X(k = $k) within 30 s from C) >= 2
        and s = Sum(Y() between B and C).amount
        and m = Min(Z() within 1 h from B).v < s / n
        where n = n, total = s + m"""
    )
    assert rule.aggregates == (
        Aggregate(
            "count",
            "X",
            None,
            within(0, 30 * S),
            (Compare("=", Attr(SELF, "k"), Attr(0, "k")),),
            "n",
        ),
        Aggregate("sum", "Y", "amount", between(1, 0), (), "s"),
        Aggregate("min", "Z", "v", within(1, 3600 * S), (), "m"),
    )
    assert rule.conditions == (
        bound(0, "k"),
        Compare(">=", AggValue(0), Const(2)),
        Compare("<", AggValue(2), Arith("/", AggValue(1), AggValue(0))),
    )
    assert rule.attributes == (
        OutputAttribute("n", "int", AggValue(0)),
        OutputAttribute("total", "float", Arith("+", AggValue(1), AggValue(2))),
    )


def test_aggregate_comparison_with_parameters_and_attributes():
    rule = parse_rule("define R from C(k = $k) and a = Max(X() within 1 s from C).v > C.limit + $k")
    assert rule.conditions == (
        bound(0, "k"),
        Compare(">", AggValue(0), Arith("+", Attr(0, "limit"), Attr(0, "k"))),
    )
    assert (
        parse_rule("define R from C() and a = avg(X() within 1 s from C).v = 1")
        .aggregates[0]
        .function
        == "avg"
    )


def test_consuming_and_attribute_types():
    rule = parse_rule(
        """define R(b: bool, extra: string)
        from C() and each B() as Bee within 1 s from C
        where extra = Bee.name and b = C.flag and other = C.v * 2
        consuming Bee, C"""
    )
    assert rule.consuming == (1, 0)
    # declared attributes in define order, then the undeclared ones (type unknown)
    assert rule.attributes == (
        OutputAttribute("b", "bool", Attr(0, "flag")),
        OutputAttribute("extra", "string", Attr(1, "name")),
        OutputAttribute("other", None, Arith("*", Attr(0, "v"), Const(2))),
    )


def test_define_without_attributes_and_empty_predicate():
    rule = parse_rule("define R from C()")
    assert rule == Rule("R", (Plan((Predicate("C", "C"),), (0,)),))
    assert parse_rule("define R() from C() where x = C.x").attributes == (
        OutputAttribute("x", None, Attr(0, "x")),
    )


def test_keywords_are_case_insensitive_and_only_reserved_where_expected():
    rule = parse_rule(
        "DEFINE R(min: int) FROM C(min > 1 AND first = 2 AND s = 'x') "
        "AND LAST B(h = 1) WITHIN 2 Min. FROM C WHERE min = C.min"
    )
    assert rule.conditions[:3] == (
        Compare(">", Attr(0, "min"), Const(1)),
        Compare("=", Attr(0, "first"), Const(2)),
        Compare("=", Attr(0, "s"), Const("x")),
    )
    assert rule.predicates[1] == Predicate("B", "B", "last", 2 * MIN, 0, 0)


def test_comments_and_layout():
    rule = parse_rule(
        "# a comment\ndefine R   // another\n  from C(v > 1)  # trailing\n\n  where x = C.v\n"
    )
    assert rule.attributes == (OutputAttribute("x", None, Attr(0, "v")),)
