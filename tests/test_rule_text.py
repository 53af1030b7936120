"""cep_gpu/rule_text.py: the one text form of durations, expressions, spans and rules."""

from __future__ import annotations

import cep_gpu
from cep_gpu.model import SELF, AggValue, Arith, Attr, BoolOp, Compare, Const, Neg, Not, Timestamp
from cep_gpu.rule_text import aliases, duration, expr_text, rule_lines


def test_duration_takes_the_largest_unit_that_divides():
    assert duration(None) == "unbounded"
    assert duration(5_000_000_000) == "5 s"
    assert duration(90_000_000_000) == "90 s"
    assert duration(120_000_000_000) == "2 min"
    assert duration(7_200_000_000_000) == "2 h"
    assert duration(250_000_000) == "250 ms"
    assert duration(1_500) == "1500 ns"
    assert duration(3_000) == "3 us"
    assert duration(0) == "0 ns"


def test_expressions_read_like_the_rule():
    names = ["a", "b"]
    e = BoolOp("and", (Compare(">", Arith("+", Attr(0, "x"), Const(1)), Neg(Attr(1, "y"))),
                       Not(Compare("=", Attr(SELF, "s"), Const("u")))))
    assert expr_text(e, names) == "(((a.x + 1) > -b.y) and not (s = 'u'))"
    assert expr_text(Timestamp(1), names) == "b.ts" and expr_text(AggValue(2), names) == "agg2"


def test_rule_lines_name_columns_windows_negations_and_attributes():
    rule = cep_gpu.parse_rule(
        "define S(v: float) pattern SEQ(A a, B b, NOT(C z)) within 3 s where a.x = b.x return v := a.y"
    )
    assert aliases(rule) == ["a", "b"]
    text = "\n".join(rule_lines(rule))
    assert text.startswith("rule S (seq): 1 plan(s), lookback 3 s")
    assert "column b: B (terminator)" in text and "within 3 s from b" in text
    assert "condition: (a.x = b.x)" in text
    assert "not C() in" in text and "attribute v: float := a.y" in text
