"""Expressions of the rule model over plain NumPy columns, for the shedder's utilities: no
engine internals, one vectorised pass per expression (``env[pred]`` maps attribute -> column)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import (
    AggValue,
    Arith,
    Attr,
    BoolOp,
    Compare,
    Const,
    Expr,
    Neg,
    Not,
    Rule,
    Timestamp,
    static_conditions,
    walk,
)


def plain(expr: Expr) -> bool:
    """Whether ``expr`` reads only attributes (no timestamp, no aggregate): only those have a
    per-event value to evaluate here."""
    return not any(isinstance(n, (AggValue, Timestamp)) for n in walk(expr))


def passes_static(rule: Rule, role: int, frame: pd.DataFrame) -> np.ndarray:
    """Rows of ``frame`` that pass ``role``'s own filters."""
    keep = np.ones(len(frame), bool)
    for ci in static_conditions(rule, role):
        vals, valid = evaluate(rule.conditions[ci], {role: frame}, len(frame))
        keep &= valid & vals.astype(bool)
    return keep


def attr_names(expr: Expr) -> dict[int, set[str]]:
    """The attributes ``expr`` reads, per predicate."""
    out: dict[int, set[str]] = {}
    for node in walk(expr):
        if isinstance(node, Attr):
            out.setdefault(node.pred, set()).add(node.name)
    return out


def evaluate(expr: Expr, env: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, valid) of ``expr`` over ``n`` rows; ``env[pred]`` maps attribute -> column."""
    if isinstance(expr, Const):
        return np.full(n, expr.value, dtype=object if isinstance(expr.value, str) else None), np.ones(n, bool)
    if isinstance(expr, Attr):
        cols = env.get(expr.pred)
        if cols is None or expr.name not in cols:
            return np.zeros(n), np.zeros(n, bool)
        v = cols[expr.name]
        v = v.to_numpy() if isinstance(v, pd.Series) else np.asarray(v)
        valid = ~pd.isna(v)
        return v, np.asarray(valid, bool)
    if isinstance(expr, Neg):
        v, ok = evaluate(expr.arg, env, n)
        return -as_numbers(v), ok
    if isinstance(expr, Arith):
        a, oa = evaluate(expr.left, env, n)
        b, ob = evaluate(expr.right, env, n)
        a, b = as_numbers(a), as_numbers(b)
        with np.errstate(all="ignore"):
            if expr.op == "/":
                return a / b, oa & ob & (b != 0)
            out = a + b if expr.op == "+" else a - b if expr.op == "-" else a * b
        return out, oa & ob
    if isinstance(expr, Compare):
        a, oa = evaluate(expr.left, env, n)
        b, ob = evaluate(expr.right, env, n)
        ok = oa & ob
        if a.dtype.kind in "iufb" and b.dtype.kind in "iufb":
            a, b = as_numbers(a), as_numbers(b)
        fn = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
              ">": np.greater, ">=": np.greater_equal}[expr.op]
        out = np.zeros(n, bool)
        out[ok] = fn(a[ok], b[ok]).astype(bool)
        return out, ok
    if isinstance(expr, BoolOp):
        parts = [evaluate(a, env, n) for a in expr.args]
        vals = [v.astype(bool) & ok for v, ok in parts]
        out = np.logical_and.reduce(vals) if expr.op == "and" else np.logical_or.reduce(vals)
        return out, np.ones(n, bool)
    if isinstance(expr, Not):
        v, ok = evaluate(expr.arg, env, n)
        return ~v.astype(bool), ok
    # timestamps and aggregates have no per-event value here
    return np.zeros(n), np.zeros(n, bool)


def as_numbers(v: np.ndarray) -> np.ndarray:
    if v.dtype.kind in "iufb":
        return v.astype(np.float64)
    return pd.to_numeric(pd.Series(v), errors="coerce").to_numpy(np.float64)
