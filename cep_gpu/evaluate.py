"""Vectorised evaluation of model expressions over many matches at once (NumPy, no Python per row).

Used for the composite events' attributes (``where``/``return``) and by host-side checks.
Null rules: any attribute that is null (missing, NaN) makes the expression null; a condition whose
value is null is false (the event fails it). Division by zero gives null. Strings are compared by
dictionary code (only ``=`` and ``!=``; the schema check rejects ordering on strings).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .events import EventTable, Kind
from .model import (
    SELF,
    AggValue,
    Arith,
    Attr,
    BoolOp,
    Compare,
    Const,
    Expr,
    Neg,
    Not,
    Timestamp,
)


@dataclass
class Values:
    """A vector of values with validity and kind."""

    kind: Kind
    values: np.ndarray
    valid: np.ndarray


def evaluate(
    expr: Expr,
    table: EventTable,
    rows: np.ndarray,
    aggs: np.ndarray | None = None,
    self_rows: np.ndarray | None = None,
) -> Values:
    """Evaluate ``expr`` for each match.

    ``rows`` is an int64 array (n, n_predicates) of table rows in declaration order; ``aggs`` the
    (n, n_aggregates) float64 aggregate values (NaN = null); ``self_rows`` the rows of ``SELF``.
    """
    n = rows.shape[0]
    return _eval(expr, table, rows, aggs, self_rows, n)


def condition_mask(expr: Expr, table: EventTable, rows: np.ndarray, aggs=None, self_rows=None) -> np.ndarray:
    """Boolean mask of the matches for which the condition holds (null counts as false)."""
    v = evaluate(expr, table, rows, aggs, self_rows)
    return v.valid & v.values.astype(bool)


def _eval(expr, table, rows, aggs, self_rows, n) -> Values:
    if isinstance(expr, Const):
        val = expr.value
        if isinstance(val, bool):
            return Values("bool", np.full(n, val), np.ones(n, bool))
        if isinstance(val, str):
            # interned (not looked up): a literal that no event holds is still a value of the
            # output (`where w = 'hi'`); its new code equals no attribute's, so comparisons hold
            code = table.strings.encode_one(val)
            return Values("string", np.full(n, code, np.int32), np.ones(n, bool))
        if isinstance(val, int):
            return Values("int", np.full(n, val, np.int64), np.ones(n, bool))
        return Values("float", np.full(n, float(val)), np.ones(n, bool))
    if isinstance(expr, Attr):
        r = self_rows if expr.pred == SELF else rows[:, expr.pred]
        col = table.columns.get(expr.name)
        if col is None:
            return Values("float", np.zeros(n), np.zeros(n, bool))
        return Values(col.kind, col.values[r], col.valid[r])
    if isinstance(expr, Timestamp):
        r = self_rows if expr.pred == SELF else rows[:, expr.pred]
        return Values("int", table.ts[r], np.ones(n, bool))
    if isinstance(expr, AggValue):
        v = aggs[:, expr.index] if aggs is not None else np.full(n, np.nan)
        return Values("float", v, ~np.isnan(v))
    if isinstance(expr, Neg):
        a = _eval(expr.arg, table, rows, aggs, self_rows, n)
        return Values(a.kind, -a.values, a.valid)
    if isinstance(expr, Arith):
        a = _eval(expr.left, table, rows, aggs, self_rows, n)
        b = _eval(expr.right, table, rows, aggs, self_rows, n)
        valid = a.valid & b.valid
        if expr.op == "/":
            with np.errstate(divide="ignore", invalid="ignore"):
                out = a.values.astype(np.float64) / b.values.astype(np.float64)
            return Values("float", out, valid & (b.values != 0))
        kind = "int" if a.kind == b.kind == "int" else "float"
        dtype = np.int64 if kind == "int" else np.float64
        x, y = a.values.astype(dtype), b.values.astype(dtype)
        out = x + y if expr.op == "+" else x - y if expr.op == "-" else x * y
        return Values(kind, out, valid)
    if isinstance(expr, Compare):
        a = _eval(expr.left, table, rows, aggs, self_rows, n)
        b = _eval(expr.right, table, rows, aggs, self_rows, n)
        x, y = a.values, b.values
        if a.kind in ("int", "float") and b.kind in ("int", "float") and a.kind != b.kind:
            x, y = x.astype(np.float64), y.astype(np.float64)
        op = expr.op
        out = {
            "=": np.equal, "!=": np.not_equal, "<": np.less,
            "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
        }[op](x, y)
        return Values("bool", out, a.valid & b.valid)
    if isinstance(expr, BoolOp):
        parts = [_eval(a, table, rows, aggs, self_rows, n) for a in expr.args]
        valid = np.logical_and.reduce([p.valid for p in parts])
        vals = [p.values.astype(bool) for p in parts]
        out = np.logical_and.reduce(vals) if expr.op == "and" else np.logical_or.reduce(vals)
        return Values("bool", out, valid)
    if isinstance(expr, Not):
        a = _eval(expr.arg, table, rows, aggs, self_rows, n)
        return Values("bool", ~a.values.astype(bool), a.valid)
    raise TypeError(f"not an expression: {expr!r}")
