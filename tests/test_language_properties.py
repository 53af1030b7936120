"""The rule language: Properties of the rule language over generated rule text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cep_gpu.language import parse_rule
from cep_gpu.model import (
    Arith,
    Attr,
    Compare,
    Const,
    Neg,
)

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
