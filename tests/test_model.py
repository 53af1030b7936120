"""cep_gpu/model.py: walking and mapping expressions, inputs, static conditions, lookback."""

from __future__ import annotations

import pytest

import cep_gpu
from cep_gpu.model import (
    SELF,
    Arith,
    Attr,
    Compare,
    Const,
    Timestamp,
    inputs,
    map_expr,
    static_conditions,
    walk,
)


def test_walk_visits_every_node_and_map_rebuilds():
    e = Compare("<", Arith("+", Attr(0, "x"), Const(1)), Timestamp(1))
    assert [type(n).__name__ for n in walk(e)] == ["Compare", "Arith", "Attr", "Const", "Timestamp"]
    doubled = map_expr(e, lambda n: Const(2) if isinstance(n, Const) else n)
    assert doubled.left.right == Const(2) and e.left.right == Const(1)  # frozen: a new tree


def test_inputs_leave_out_self_and_need_the_rule_for_aggregates():
    assert inputs(Compare("=", Attr(0, "x"), Attr(SELF, "x"))) == frozenset({0})
    rule = cep_gpu.parse_rule(
        "define R from B() as b and each A() within 5 s from b and n = Count(C() within 2 s from b) > 1"
    )
    agg = next(c for c in rule.conditions for n in walk(c) if type(n).__name__ == "AggValue")
    with pytest.raises(ValueError, match="needs the rule"):
        inputs(agg)
    assert inputs(agg, rule) == frozenset({0})


def test_static_conditions_and_lookback():
    rule = cep_gpu.parse_rule(
        "define R from C(x > 1) and each B(x = 2) within 3 s from C and each A() within 4 s from B"
    )
    assert [len(static_conditions(rule, p)) for p in range(3)] == [1, 1, 0]
    assert rule.lookback() == 7_000_000_000  # the chain C <- B <- A of windows
    assert rule.input_types == frozenset({"A", "B", "C"})
