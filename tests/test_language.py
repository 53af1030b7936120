"""The rule language: every construct compiled to the exact model objects, and every error path."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cep_gpu
from cep_gpu.errors import RuleError, RuleSyntaxError
from cep_gpu.language import parse_rule, parse_rules
from cep_gpu.language import parser as parser_module
from cep_gpu.model import (
    SELF,
    Aggregate,
    AggValue,
    Arith,
    Attr,
    BoolOp,
    Compare,
    Const,
    Neg,
    Negation,
    Not,
    OutputAttribute,
    Plan,
    Predicate,
    Rule,
    Span,
    Timestamp,
)
from cep_gpu.museum import MUSEUM_RULES

MS = 10**6
S = 10**9
MIN = 60 * S


def within(ref: int, window: int) -> Span:
    return Span(ref, -window, True, ref, 0, False)


def between(a: int, b: int) -> Span:
    return Span(a, 0, False, b, 0, False)


# ------------------------------------------------------------------------------------ museum

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
        Compare(">", Attr(0, "value"), Const(3.0)),
        Compare("=", Attr(1, "painting"), Attr(0, "painting")),
    ),
    attributes=(
        OutputAttribute("room", "string", Attr(0, "room")),
        OutputAttribute("painting", "string", Attr(0, "painting")),
    ),
)

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
        Compare("=", Attr(0, "b"), Attr(0, "a")),
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
    assert rule.conditions == (Compare("=", Attr(2, "a"), Attr(1, "a")),)


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


# ------------------------------------------------------------------------------------ several rules


def test_parse_rules_separators_and_hierarchy():
    text = """
    define Hot from T(v > 30) where room = T.room;define Cold from T(v < 0) where room = T.room ;;

    define Swing
    from Cold(room = $r)

      and each Hot(room = $r) within 1 h from Cold
    ; define Seq pattern SEQ(Swing s, Hot h) within 2 h
    """
    rules = parse_rules(text)
    assert [r.name for r in rules] == ["Hot", "Cold", "Swing", "Seq"]
    assert rules[0].text == "define Hot from T(v > 30) where room = T.room"
    assert rules[2].predicates[1] == Predicate("Hot", "Hot", "each", 3600 * S, 0, 0)
    assert parse_rules("") == [] and parse_rules(" ;\n; ") == []


def test_cycle_in_hierarchy_names_the_rules():
    with pytest.raises(RuleError) as err:
        parse_rules("define A from B()\n\ndefine B from C() and each A() within 1 s from C")
    assert "cycle" in err.value.message and "A -> B -> A" in err.value.message
    assert (err.value.line, err.value.column) == (1, 8)
    with pytest.raises(RuleError, match="B -> B"):
        parse_rule("define B from X() and each B() within 1 s from X")


def test_parse_rule_wants_exactly_one():
    with pytest.raises(RuleError, match="found 2; use parse_rules"):
        parse_rule("define A from X() define B from Y()")
    with pytest.raises(RuleError, match="found 0"):
        parse_rule("  # nothing\n")


# ------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "text, kind, fragment, line, column",
    [
        # syntax
        (
            "define A from X(a = 1",
            RuleSyntaxError,
            "unexpected end of rule text; expected ')' or 'and'",
            1,
            22,
        ),
        (
            "define A from X() and each Y() within 5 minutes from X",
            RuleSyntaxError,
            "unexpected 'minutes'; expected a time unit",
            1,
            41,
        ),
        (
            "define A from X() and each Y() within 2 min\nfrom",
            RuleSyntaxError,
            "expected a name",
            2,
            5,
        ),
        ("define A\nfrom X(a == 1)", RuleSyntaxError, "unexpected '='", 2, 11),
        ("define A from X(a = 1) where b = X.c q", RuleSyntaxError, "unexpected 'q'", 1, 38),
        ("define A from X(a = 'x\ny')", RuleSyntaxError, "unexpected character", 1, 21),
        ("define A from X(a = 1) @", RuleSyntaxError, "unexpected character '@'", 1, 24),
        ("define A pattern SEQ() within 1 s", RuleSyntaxError, "unexpected ')'", 1, 22),
        ("define A from X() X()", RuleSyntaxError, "unexpected 'X'; expected", 1, 19),
        # references
        (
            "define A from X() and each Y() within 1 s from Z",
            RuleError,
            "from 'Z' is not a predicate of this rule (known: X, Y)",
            1,
            48,
        ),
        (
            "define A from X()\n and not N() between X and Q",
            RuleError,
            "between 'Q' is not a predicate",
            2,
            28,
        ),
        ("define A from X(v > Q.v)", RuleError, "reference 'Q' is not a predicate", 1, 21),
        (
            "define A from X() and each Y() within 1 s from Z and each Z() within 1 s from X",
            RuleError,
            "declared later",
            1,
            48,
        ),
        (
            "define A from X() and each Y() as B within 1 s from B",
            RuleError,
            "refers to itself",
            1,
            53,
        ),
        ("define A from X(v > X.v)", RuleError, "refers to itself", 1, 21),
        (
            "define A from X() and each Y(v > Z.v) within 1 s from X and each Z() within 1 s from X",
            RuleError,
            "declared later",
            1,
            34,
        ),
        (
            "define A from X() and each Y() within 1 s from X\n and each Y() within 1 s from X and each Z() within 1 s from Y",
            RuleError,
            "'Y' is ambiguous: 2 predicates",
            2,
            62,
        ),
        (
            "define A from X() as T and each Y() as T within 1 s from X",
            RuleError,
            "duplicate alias 'T'",
            1,
            40,
        ),
        (
            "define A from X() as Y and each Y() within 1 s from X",
            RuleError,
            "alias 'Y' is also the event type",
            1,
            19,
        ),
        ("define A from X() consuming Q", RuleError, "consuming 'Q' is not a predicate", 1, 29),
        ("define A from X() consuming X, X", RuleError, "consumed twice", 1, 32),
        # parameters
        ("define A from X(a > $p)", RuleError, "parameter $p is used before it is bound", 1, 21),
        (
            "define A from X() and not N(a = $p) within 1 s from X",
            RuleError,
            "parameter $p is used before it is bound",
            1,
            33,
        ),
        (
            "define A from X() and c = Count(N(a = $p) within 1 s from X) > 1",
            RuleError,
            "parameter $p is used before",
            1,
            39,
        ),
        ("define A from X() where b = $q", RuleError, "parameter $q is used before", 1, 29),
        ("define A from X(a = $__p__)", RuleError, "reserved", 1, 21),
        # windows
        (
            "define A from X() and each Y() within 0 s from X",
            RuleError,
            "window must be positive",
            1,
            39,
        ),
        (
            "define A from X() and not Y() within 0.0 min from X",
            RuleError,
            "window must be positive",
            1,
            38,
        ),
        (
            "define A from X() and each Y() within 0.0000000001 s from X",
            RuleError,
            "not a whole number of nanoseconds",
            1,
            39,
        ),
        ("define A pattern SEQ(X a, Y b) within 0 ms", RuleError, "window must be positive", 1, 39),
        ("define A pattern SEQ(X a, Y b) where a.v = b.v", RuleError, "needs a window", 1, 8),
        ("define A pattern SEQ(X a, NOT(Y n))", RuleError, "needs a window", 1, 8),
        # aggregates
        (
            "define A from X() and v = Median(Y() within 1 s from X).a > 1",
            RuleError,
            "unknown aggregate function 'Median'",
            1,
            27,
        ),
        (
            "define A from X() and v = Count(Y() within 1 s from X).a > 1",
            RuleError,
            "Count takes no attribute",
            1,
            56,
        ),
        (
            "define A from X() and v = Avg(Y() within 1 s from X) > 1",
            RuleError,
            "Avg needs the attribute",
            1,
            27,
        ),
        (
            "define A from X() and v = Sum(Y() within 1 s from X).a\n and v = Sum(Y() within 1 s from X).a",
            RuleError,
            "aggregate name 'v' used twice",
            2,
            6,
        ),
        ("define A from X() where b = w", RuleError, "unknown name 'w'", 1, 29),
        (
            "define A from X() and v = Sum(Y() within 1 s from X).a > v2",
            RuleError,
            "unknown name 'v2'",
            1,
            58,
        ),
        # define / where
        ("define A(x: text) from X()", RuleError, "unknown attribute type 'text'", 1, 13),
        ("define A(x: int, x: int) from X() where x = X.x", RuleError, "declared twice", 1, 18),
        (
            "define A(x: int)\nfrom X()",
            RuleError,
            "'x' is declared in define but not assigned in where",
            1,
            10,
        ),
        ("define A from X() where b = X.a, b = X.c", RuleError, "assigned twice", 1, 34),
        ("define A pattern SEQ(X a) return b := a.v, b := a.w", RuleError, "assigned twice", 1, 44),
        (
            "define A(z: int) pattern SEQ(X a) return b := a.v",
            RuleError,
            "'z' is declared in define but not assigned in return",
            1,
            10,
        ),
        # SEQ
        (
            "define A pattern AND(X a, NOT(Y b), Z c) within 1 s",
            RuleError,
            "NOT is not allowed inside AND",
            1,
            27,
        ),
        ("define A pattern SEQ(X a, X a) within 1 s", RuleError, "duplicate alias 'a'", 1, 29),
        (
            "define A pattern SEQ(X, X) within 1 s",
            RuleError,
            "duplicate alias 'X'; give each position its own alias",
            1,
            25,
        ),
        (
            "define A pattern SEQ(NOT(X n)) within 1 s",
            RuleError,
            "at least one event that is not negated",
            1,
            18,
        ),
        (
            "define A pattern SEQ(X a, NOT(Y n), NOT(Y m), X b) where n.a = m.a within 1 s",
            RuleError,
            "only one NOT alias (m, n)",
            1,
            58,
        ),
        (
            "define A pattern SEQ(X a, X b) where q.a = 1 within 1 s",
            RuleError,
            "unknown alias 'q' (aliases: a, b)",
            1,
            38,
        ),
        (
            "define A pattern SEQ(X a, X b) where a = 1 within 1 s",
            RuleError,
            "unknown name 'a'",
            1,
            38,
        ),
        (
            "define A pattern SEQ(X a, X b) where a.v = $p within 1 s",
            RuleError,
            "parameters ($name) are not part",
            1,
            44,
        ),
        (
            "define A pattern SEQ(X a, NOT(Y n), X b) within 1 s return v := n.v",
            RuleError,
            "unknown alias 'n'",
            1,
            65,
        ),
        ("define A pattern SEQ(X a) within 1 s within 2 s", RuleError, "within given twice", 1, 38),
        # hostile / limits
        ("define __import__ from X()", RuleError, "rule name '__import__' is reserved", 1, 8),
        ("define A from __class__()", RuleError, "event type '__class__' is reserved", 1, 15),
        (
            "define A from X(__import__ = 1)",
            RuleError,
            "attribute name '__import__' is reserved",
            1,
            17,
        ),
        ("define A from X() as __x__", RuleError, "alias '__x__' is reserved", 1, 22),
        (
            "define A from X() where __dict__ = X.a",
            RuleError,
            "attribute name '__dict__' is reserved",
            1,
            25,
        ),
        (
            "define A from X() where b = X.__class__",
            RuleError,
            "attribute name '__class__' is reserved",
            1,
            31,
        ),
        ("define A pattern SEQ(X __a__) within 1 s", RuleError, "alias '__a__' is reserved", 1, 24),
        ("define A from X(a = 99999999999999999999)", RuleError, "does not fit in 64 bits", 1, 21),
        ("define A from X(a = 1e999)", RuleError, "out of range", 1, 21),
        ("define A from X(a = 'x\\q')", RuleError, "unknown escape", 1, 21),
        ("define Bé from X()", RuleSyntaxError, "unexpected character", 1, 9),
        ("define A from X(a = 1)\x00", RuleSyntaxError, "unexpected character '\\x00'", 1, 23),
    ],
)
def test_errors(text, kind, fragment, line, column):
    with pytest.raises(kind) as err:
        parse_rules(text)
    assert type(err.value) is kind
    assert fragment in err.value.message, err.value.message
    assert (err.value.line, err.value.column) == (line, column), str(err.value)
    # the message shows the rule line with a caret under the spot
    assert f"(line {line}, column {column})" in str(err.value)
    assert "^" in str(err.value)


def test_syntax_error_lists_expected_tokens_in_human_terms():
    with pytest.raises(RuleSyntaxError) as err:
        parse_rule("define A from X() and each Y() within 2")
    assert err.value.expected == ("a time unit (ms, s, sec, min, h)",)
    with pytest.raises(RuleSyntaxError) as err:
        parse_rule("define A from X() and")
    assert err.value.expected == ("'not'", "a name", "each, last or first")
    assert isinstance(err.value, SyntaxError)  # a RuleSyntaxError is a SyntaxError too


def test_very_long_names_are_rejected():
    long = "A" * 129
    with pytest.raises(RuleError, match="event type too long"):
        parse_rule(f"define R from {long}()")
    with pytest.raises(RuleError, match="attribute name too long"):
        parse_rule(f"define R from X({long.lower()} = 1)")
    ok = "A" * 128
    assert parse_rule(f"define R from {ok}()").predicates[0].event_type == ok


def test_hostile_strings_are_data():
    payload = "'); __import__('os').system('echo pwned'); ('"
    text = 'define R from X(name = "' + payload.replace('"', '\\"') + '")'
    rule = parse_rule(text)
    assert rule.conditions == (Compare("=", Attr(0, "name"), Const(payload)),)
    rule = parse_rule("define R from X(q = \"a'b\" and r = 'c\"d' and s = '\\\\n')")
    assert [c.right.value for c in rule.conditions] == ["a'b", 'c"d', "\\n"]


def test_hostile_structure_is_rejected():
    with pytest.raises(RuleSyntaxError, match="nested too deeply"):
        parse_rule("define R from X(a = " + "(" * 100 + "1" + ")" * 100 + ")")
    # deep but allowed nesting compiles
    rule = parse_rule("define R from X(a = " + "(" * 50 + "1" + ")" * 50 + ")")
    assert rule.conditions == (Compare("=", Attr(0, "a"), Const(1)),)
    # parentheses inside strings do not count
    parse_rule("define R from X(a = '" + "(" * 100 + "')")
    with pytest.raises(RuleSyntaxError, match="unexpected"):
        parse_rule("define R from X(a = 1) where b = X.a; import os")
    with pytest.raises(TypeError):
        parse_rule(b"define R from X()")  # type: ignore[arg-type]


def test_text_size_limit(monkeypatch):
    monkeypatch.setattr(parser_module, "MAX_TEXT_CHARS", 100)
    with pytest.raises(RuleSyntaxError, match="rule text too long"):
        parse_rule("define R from X()" + " " * 100)


def test_many_rules_parse_quickly():
    text = "\n\n".join(
        f"define R{i} from C{i}(k = $k) and each B{i}(k = $k) within 15 s from C{i} "
        f"and each A{i}(k = $k) within 15 s from B{i}"
        for i in range(1000)
    )
    rules = parse_rules(text)
    assert len(rules) == 1000 and rules[999].predicates[2] == Predicate(
        "A999", "A999", "each", 15 * S, 1, 1
    )


def test_every_rule_block_of_the_language_doc_parses():
    import re
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "language.md").read_text()
    blocks = re.findall(r"```(tesla|seq)\n(.*?)```", doc, re.S)
    assert len(blocks) >= 7
    for kind, text in blocks:
        rule = parse_rule(text)
        assert rule.syntax == ("tesla" if kind == "tesla" else "seq")
    # the museum rules of the doc are the ones of the examples
    assert parse_rule(blocks[0][1]) == TOUCH


# ------------------------------------------------------------------------------------ property

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


def _exprs():
    leaves = st.one_of(
        st.integers(0, 10**6).map(Const),
        st.sampled_from(["a", "b", "min", "first"]).map(lambda n: Attr(0, n)),
        st.sampled_from(["x", "y"]).map(lambda n: Attr(1, n)),
    )
    return st.recursive(
        leaves,
        lambda kids: st.one_of(
            st.builds(Arith, st.sampled_from("+-*/"), kids, kids),
            st.builds(Neg, kids),
        ),
        max_leaves=12,
    )


def _render(e) -> tuple[str, int]:
    """Text with the fewest parentheses, and its precedence (3 for atoms and unary minus)."""
    if isinstance(e, Const):
        return str(e.value), 3
    if isinstance(e, Attr):
        return (e.name if e.pred == 1 else f"X.{e.name}"), 3
    if isinstance(e, Neg):
        text, prec = _render(e.arg)
        return "-" + (text if prec == 3 else f"({text})"), 3
    p = _PREC[e.op]
    lt, lp = _render(e.left)
    rt, rp = _render(e.right)
    lt = lt if lp >= p else f"({lt})"
    rt = rt if rp > p else f"({rt})"
    return f"{lt} {e.op} {rt}", p


def _fold(e):
    """Unary minus on a number literal is the negative literal."""
    if isinstance(e, Neg):
        arg = _fold(e.arg)
        return Const(-arg.value) if isinstance(arg, Const) else Neg(arg)
    if isinstance(e, Arith):
        return Arith(e.op, _fold(e.left), _fold(e.right))
    return e


@settings(max_examples=150, deadline=None)
@given(_exprs())
def test_arithmetic_round_trips_through_text(expr):
    text, _ = _render(expr)
    rule = parse_rule(f"define R from X() and each Y(v >= {text}) within 1 s from X")
    assert rule.conditions == (Compare(">=", Attr(1, "v"), _fold(expr)),)
