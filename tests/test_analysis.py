"""cep_gpu/analysis.py: the composite-event hierarchy, aggregates in expressions, window facts."""

from __future__ import annotations

import dataclasses

import pytest

import cep_gpu
from cep_gpu.analysis import (
    absent_type_warnings,
    absent_types,
    has_aggregate,
    producers,
    rule_order,
    unbounded_window,
)
from cep_gpu.errors import RuleError
from cep_gpu.model import AggValue, Attr, Compare, Const

AB = "define AB(x: int) pattern SEQ(A a, B b) within 5 s return x := a.x"
ABC = "define ABC pattern SEQ(AB p, C c) within 5 s"


def test_producers_and_order_put_producers_first():
    # two rules may produce one type only when built apart (the language rejects a repeated name)
    rules = cep_gpu.parse_rules(ABC + ";\n" + AB) + [cep_gpu.parse_rule(AB.replace("A a", "D a"))]
    assert producers(rules) == {"ABC": [0], "AB": [1, 2]}
    order = rule_order(rules)
    assert sorted(order) == [0, 1, 2] and order.index(0) > max(order.index(1), order.index(2))


def test_order_is_stable_without_dependencies():
    rules = cep_gpu.parse_rules(AB + ";\n" + AB.replace("AB(", "CD(").replace("SEQ(A a, B b)", "SEQ(C a, D b)"))
    assert rule_order(rules) == [0, 1]


def test_a_cycle_is_named():
    x = cep_gpu.parse_rule("define X pattern SEQ(Y y, A a) within 1 s")
    y = cep_gpu.parse_rule("define Y pattern SEQ(X x, B b) within 1 s")
    with pytest.raises(RuleError, match="cycle in composite-event hierarchy: X -> Y -> X"):
        rule_order([x, y])


def test_has_aggregate_looks_inside_expressions():
    assert has_aggregate(Compare(">", AggValue(0), Const(1.0)))
    assert not has_aggregate(Compare(">", Attr(0, "x"), Const(1.0)))


def test_unbounded_window_only_for_a_windowless_non_terminator():
    rule = cep_gpu.parse_rule(AB)
    assert not unbounded_window(rule)
    plan = rule.plans[0]
    preds = tuple(dataclasses.replace(p, window=None) if p.policy is not None else p for p in plan.predicates)
    open_rule = dataclasses.replace(rule, plans=(dataclasses.replace(plan, predicates=preds),))
    assert unbounded_window(open_rule)


def test_absent_types_are_the_types_read_that_neither_the_input_nor_a_rule_has():
    rules = cep_gpu.parse_rules(
        "define T pattern SEQ(GOGL a, MSFT b) within 10 s;\n"
        "define U pattern SEQ(T t, NOT(Halt h), GOOG g) within 10 s;\n"  # T: made by a rule
        "define V from MSFT() as m and n=Count(Quote() within 5 s from m) > 1"
    )
    got = [(r.name, t) for r, t in absent_types(rules, ["GOOG", "MSFT", "Other"])]
    assert got == [("T", "GOGL"), ("U", "Halt"), ("V", "Quote")]  # negated and counted types too
    assert absent_types(rules, []) == []  # no events: nothing to tell a typo by
    assert absent_types(rules, ["GOGL", "GOOG", "MSFT", "Halt", "Quote"]) == []
    lines = absent_type_warnings(rules[:1], ["GOOG", "MSFT"], "events.csv")
    assert lines == ["rule 'T' reads type 'GOGL', which no event in events.csv has (types: GOOG, MSFT)"]
    many = [f"E{i:02d}" for i in range(12)]
    (line,) = absent_type_warnings(rules[:1], many + ["MSFT"], "ev.parquet", shown=3)
    assert line.endswith("(types: E00, E01, E02, ... (10 more))")
