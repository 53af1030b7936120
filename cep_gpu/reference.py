"""The reference matcher (``backend="reference"``): the executable definition of the semantics.

Written for obviousness, not speed. For every terminator (in row order) and every plan, it binds
the predicates one step at a time in the plan's binding order, trying every candidate in the
predicate's window; at each step a candidate is *valid* when every condition and negation whose
inputs are bound at that step holds (:func:`cep_gpu.model.step_checks`); ``each`` keeps every valid
candidate, ``last`` the latest one and ``first`` the earliest one (row order, i.e. ``(ts, id)``).

It has its own small scalar evaluator of model expressions (one binding at a time, plain Python
values) so that it shares no code with :mod:`cep_gpu.evaluate` and can catch bugs there. Null rules
are those of docs/language.md: a missing or null attribute makes the whole expression null, a
division by zero is null, and a condition whose value is null is false.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .backends import Matches, register
from .events import EventTable
from .model import (
    NEXT,
    SELF,
    Aggregate,
    AggValue,
    Arith,
    Attr,
    BoolOp,
    Compare,
    Const,
    Expr,
    Neg,
    Negation,
    Not,
    Plan,
    Rule,
    Span,
    Timestamp,
    step_checks,
)

_MIN_TS = np.iinfo(np.int64).min

#: A partial or complete match: declaration index -> table row (a tuple of rows, in row order,
#: for a Kleene position).
Binding = dict[int, "int | tuple[int, ...]"]


class ReferenceBackend:
    """Brute-force matcher implementing :class:`cep_gpu.backends.Backend`."""

    name = "reference"

    def explain(self, rule: Rule, sample=None) -> str:
        """What the reference does for ``rule`` (the same for every input)."""
        return ("reference: for each terminator and plan, every candidate of every window, one "
                "binding at a time (the definition of the semantics; not fast)")

    def match(
        self,
        rule: Rule,
        table: EventTable,
        lo: int = 0,
        hi: int | None = None,
        excluded: np.ndarray | None = None,
    ) -> Matches:
        """Matches of ``rule`` whose terminator is a row in ``[lo, hi)`` (see the backend contract)."""
        hi = len(table) if hi is None else hi
        # consumption adds to this mask as terminators are processed, so work on a copy
        excluded = np.zeros(len(table), bool) if excluded is None else np.array(excluded, bool)
        ctx = _Context(rule, table, excluded)
        rows: list[list[int]] = []
        aggs: list[list[float]] = []
        sets: dict[int, list[tuple[int, ...]]] = {k: [] for k in rule.kleene_positions}
        for term_row in range(lo, hi):
            found: list[Binding] = []
            for plan in rule.plans:
                found.extend(ctx.matches_at(plan, term_row))
            for binding in found:
                rows.append([_first(binding[i]) for i in range(rule.n_predicates)])
                aggs.append([_as_float(ctx.aggregate(a, binding)) for a in rule.aggregates])
                for k in sets:
                    sets[k].append(binding[k])
            # all composite events of this terminator exist before its consumption applies
            for binding in found:
                for pred in rule.consuming:
                    excluded[binding[pred]] = True
        if not rows:
            return Matches.empty(rule)
        return Matches(
            np.array(rows, dtype=np.int64).reshape(len(rows), rule.n_predicates),
            np.array(aggs, dtype=np.float64).reshape(len(rows), len(rule.aggregates)),
            {
                k: (
                    np.array([0] + [len(s) for s in got], np.int64).cumsum(),
                    np.array([r for s in got for r in s], np.int64),
                )
                for k, got in sets.items()
            } or None,
        )


def _first(bound) -> int:
    return bound[0] if isinstance(bound, tuple) else bound


def _as_float(v) -> float:
    return float("nan") if v is None else float(v)


@dataclass
class _Context:
    """One rule over one table: candidate look-up, checks and the scalar evaluator."""

    rule: Rule
    table: EventTable
    excluded: np.ndarray

    def __post_init__(self) -> None:
        self._rows_by_type: dict[str, np.ndarray] = {}
        self._checks = {id(p): step_checks(self.rule, p) for p in self.rule.plans}
        # code -> string, decoded once per call (the dictionary does not change during a match)
        self._strings = self.table.strings.decode(np.arange(len(self.table.strings)))
        #: the estimated matches so far (Kleene sets), checked against max_matches
        self.estimate = 0

    # -- binding ----------------------------------------------------------------------------------

    def matches_at(self, plan: Plan, term_row: int) -> list[Binding]:
        """Every complete binding of ``plan`` with ``term_row`` as its terminator."""
        term = plan.predicates[plan.terminator]
        if self.excluded[term_row] or self._type(term_row) != term.event_type:
            return []
        return list(self._extend(plan, self._checks[id(plan)], {}, 0, term_row))

    def _extend(self, plan: Plan, checks, binding: Binding, step: int, term_row: int) -> Iterator[Binding]:
        if step == len(plan.order):
            yield binding
            return
        pred_index = plan.order[step]
        pred = plan.predicates[pred_index]
        if step == 0:
            candidates = [term_row]
        else:
            lo_ts = _MIN_TS if pred.window is None else self._ts(binding[pred.anchor]) - pred.window
            hi_ts = self._ts(binding[pred.before])
            # ts(anchor) - window <= ts(X) < ts(before), not consumed; with `ties` (AND), X only
            # has to precede `before` in (ts, id) order, which is row order
            b_row = binding[pred.before]
            candidates = [
                r for r in self.rows_in(pred.event_type, lo_ts, True, hi_ts, pred.ties)
                if not self.excluded[r] and (not pred.ties or r < b_row)
            ]
        check = checks[step]
        if step > 0 and pred.kleene is not None:
            yield from self._extend_kleene(plan, checks, binding, step, term_row, pred_index, candidates)
            return
        valid = []
        for r in candidates:
            trial = {**binding, pred_index: r}
            if all(self.holds(self.rule.conditions[c], trial) for c in check.conditions) and all(
                self.negation_holds(self.rule.negations[n], trial) for n in check.negations
            ):
                valid.append(r)
        if step > 0 and pred.policy == "last":
            valid = valid[-1:]
        elif step > 0 and pred.policy == "first":
            valid = valid[:1]
        for r in valid:
            yield from self._extend(plan, checks, {**binding, pred_index: r}, step + 1, term_row)

    def _extend_kleene(self, plan, checks, binding, step, term_row, k, candidates) -> Iterator[Binding]:
        """A Kleene step: the candidate sets of position ``k`` (docs/language.md, Kleene closure)."""
        kl = plan.predicates[k].kleene
        if kl.after is not None:  # strictly after the previous position
            after_ts = self._ts(binding[kl.after])
            candidates = [r for r in candidates if self._ts(r) > after_ts]
        # elements: the candidates that pass every per-element condition
        elems = [
            r for r in candidates if all(self.holds(c, binding, self_row=r) for c in kl.conditions)
        ]
        n = len(elems)
        hi_size = n if kl.max_size is None else min(kl.max_size, n)
        if kl.greedy:
            estimate = 1 if n else 0
        else:
            # subsets of n elements with an allowed size (2^n minus the small ones when unbounded)
            if hi_size == n:
                estimate = 2**n - sum(math.comb(n, s) for s in range(min(kl.min_size, n + 1)))
            else:
                estimate = sum(math.comb(n, s) for s in range(kl.min_size, hi_size + 1))
        self.estimate += estimate
        from .kleene import check_estimate

        check_estimate(self.rule, k, self.estimate)
        if kl.greedy:
            sizes = [n] if n and kl.min_size <= n <= hi_size else []
        else:
            sizes = range(kl.min_size, hi_size + 1)
        check = checks[step]
        for size in sizes:
            for chosen in itertools.combinations(elems, size):
                if not all(
                    self.holds(c, binding, self_row=x, next_row=y)
                    for x, y in zip(chosen, chosen[1:])
                    for c in kl.consecutive
                ):
                    continue
                trial = {**binding, k: chosen}
                if all(self.holds(self.rule.conditions[c], trial) for c in check.conditions) and all(
                    self.negation_holds(self.rule.negations[n_], trial) for n_ in check.negations
                ):
                    yield from self._extend(plan, checks, trial, step + 1, term_row)

    # -- rows and spans ---------------------------------------------------------------------------

    def _type(self, row: int) -> str:
        return self.table.type_names[self.table.types[row]]

    def _ts(self, row: int) -> int:
        return int(self.table.ts[row])

    def rows_of_type(self, event_type: str) -> np.ndarray:
        if event_type not in self._rows_by_type:
            self._rows_by_type[event_type] = self.table.rows_of_type(event_type)
        return self._rows_by_type[event_type]

    def rows_in(self, event_type: str, lo: int, lo_incl: bool, hi: int, hi_incl: bool) -> list[int]:
        """Rows of ``event_type`` with a timestamp inside the given bounds, in row order."""
        rows = self.rows_of_type(event_type)
        ts = self.table.ts[rows]
        # narrow by binary search (rows are time-sorted), then apply the exact bounds below
        first, last = np.searchsorted(ts, lo, "left"), np.searchsorted(ts, hi, "right")
        out = []
        for r in rows[first:last]:
            t = self._ts(int(r))
            if (lo <= t if lo_incl else lo < t) and (t <= hi if hi_incl else t < hi):
                out.append(int(r))
        return out

    def span_rows(self, event_type: str, span: Span, binding: Binding) -> list[int]:
        """Rows of ``event_type`` inside ``span`` as fixed by ``binding`` (consumed rows included)."""
        # a span that starts at a Kleene set starts after its last element; one that ends there
        # ends before its first
        lo_row, hi_row = binding[span.lo_ref], binding[span.hi_ref]
        lo_row = lo_row[-1] if isinstance(lo_row, tuple) else lo_row
        hi_row = hi_row[0] if isinstance(hi_row, tuple) else hi_row
        lo = self._ts(lo_row) + span.lo_offset
        hi = self._ts(hi_row) + span.hi_offset
        lo_incl, hi_incl = span.lo_inclusive, span.hi_inclusive
        if lo > hi:  # only for `between Y and Z` with Z before Y; both ends are exclusive there
            lo, hi = hi, lo
        return self.rows_in(event_type, lo, lo_incl, hi, hi_incl)

    def negation_holds(self, neg: Negation, binding: Binding) -> bool:
        """True when no event in the negation's span satisfies all its conditions."""
        for r in self.span_rows(neg.event_type, neg.span, binding):
            if all(self.holds(c, binding, self_row=r) for c in neg.conditions):
                return False
        return True

    def aggregate(self, agg: Aggregate, binding: Binding):
        """The aggregate's value for ``binding`` (None for avg/min/max over nothing)."""
        values = []
        count = 0
        if agg.kleene is not None:  # over the elements of a Kleene set
            span_rows = list(binding[agg.kleene])
        else:
            span_rows = self.span_rows(agg.event_type, agg.span, binding)
        for r in span_rows:
            if not all(self.holds(c, binding, self_row=r) for c in agg.conditions):
                continue
            count += 1
            if agg.attribute is not None:
                v = self.attribute(agg.attribute, r)
                if v is not None:  # aggregates skip events lacking the attribute
                    values.append(float(v))
        if agg.function == "count":
            return count
        if agg.function == "sum":
            return sum(values)
        if not values:
            return None
        if agg.function == "avg":
            return sum(values) / len(values)
        return min(values) if agg.function == "min" else max(values)

    # -- scalar evaluation --------------------------------------------------------------------------

    def attribute(self, name: str, row: int):
        """Attribute ``name`` of ``row`` as a Python value, or None when missing/null/NaN."""
        col = self.table.columns.get(name)
        if col is None or not col.valid[row]:
            return None
        v = col.values[row]
        if col.kind == "string":
            return str(self._strings[v])
        if col.kind == "bool":
            return bool(v)
        if col.kind == "int":
            return int(v)
        v = float(v)
        return None if math.isnan(v) else v

    def holds(
        self, expr: Expr, binding: Binding, self_row: int | None = None, next_row: int | None = None
    ) -> bool:
        """A condition holds only when its value is true; null is false."""
        v = self.value(expr, binding, self_row, next_row)
        return v is not None and bool(v)

    def value(self, expr: Expr, binding: Binding, self_row: int | None = None, next_row: int | None = None):
        """The value of ``expr`` for one binding (None = null); ``SELF`` is ``self_row`` and
        ``NEXT`` (the next element of a Kleene set) ``next_row``."""
        nr = next_row
        if isinstance(expr, Const):
            return expr.value
        if isinstance(expr, Attr):
            row = self_row if expr.pred == SELF else nr if expr.pred == NEXT else binding[expr.pred]
            return self.attribute(expr.name, row)
        if isinstance(expr, Timestamp):
            row = self_row if expr.pred == SELF else nr if expr.pred == NEXT else binding[expr.pred]
            return self._ts(row)
        if isinstance(expr, AggValue):
            v = self.aggregate(self.rule.aggregates[expr.index], binding)
            return None if v is None else float(v)
        if isinstance(expr, Neg):
            a = self.value(expr.arg, binding, self_row, nr)
            return None if a is None else _wrap(-a)
        if isinstance(expr, Arith):
            a = self.value(expr.left, binding, self_row, nr)
            b = self.value(expr.right, binding, self_row, nr)
            if a is None or b is None:
                return None
            if expr.op == "/":
                return None if b == 0 else float(a) / float(b)
            if not (_is_int(a) and _is_int(b)):
                a, b = float(a), float(b)
            return _wrap(a + b if expr.op == "+" else a - b if expr.op == "-" else a * b)
        if isinstance(expr, Compare):
            a = self.value(expr.left, binding, self_row, nr)
            b = self.value(expr.right, binding, self_row, nr)
            if a is None or b is None:
                return None
            if _is_number(a) and _is_number(b) and _is_int(a) != _is_int(b):
                a, b = float(a), float(b)
            return _COMPARE[expr.op](a, b)
        if isinstance(expr, BoolOp):
            parts = [self.value(a, binding, self_row, nr) for a in expr.args]
            if any(p is None for p in parts):
                return None
            return all(map(bool, parts)) if expr.op == "and" else any(map(bool, parts))
        if isinstance(expr, Not):
            a = self.value(expr.arg, binding, self_row, nr)
            return None if a is None else not bool(a)
        raise TypeError(f"not an expression: {expr!r}")


def _wrap(v):
    """An int result in int64 two's-complement arithmetic, as every backend computes it (overflow
    wraps around; docs/language.md, "Integer arithmetic"); floats pass unchanged."""
    if _is_int(v) and not _INT64_MIN <= v <= _INT64_MAX:
        return (v - _INT64_MIN) % 2**64 + _INT64_MIN
    return v


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_COMPARE = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}

register("reference", ReferenceBackend)
