"""Kleene positions in AIP (docs/language.md, "Kleene closure"): sets bound at resolution.

The sequence models recognise the plain positions of a ``SEQ``, as for any rule. A Kleene
position is a span between two bound positions (after the previous one, before the next one,
within the window), like the span of a negation or an aggregate: when the complete instances of
a terminator are resolved, each instance's elements are read from the per-rule store of the
position's type (events passing the per-element conditions), the number of sets is estimated and
checked against ``max_matches``, and then the sets are made: every subset of an allowed size
(``each``, in size order, as ``itertools.combinations``) or the whole list (``greedy``), those
whose consecutive elements pass the consecutive conditions. Aggregates over the set, the set
conditions and the negations bounded by the set (its last element starts a span, its first ends
one) are then checked on the instances extended by their sets.

Why not a self-loop state that clones an instance for every element it may take (the NFA way of
SASE and OpenCEP)? It would keep up to ``2^n`` instances alive between events for a span of
``n`` elements, most of which a later condition rejects, and it would make them before the
match estimate could refuse the rule: the automaton would blow up before ``max_matches`` could
say so. Resolving sets at the terminator keeps the instances linear in the plain positions.

Sets travel with the instances as two hidden columns per Kleene position (start and length into
a flat store of the resolution), after the predicates' columns.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..backends import Matches
from ..evaluate import condition_mask, evaluate
from ..events import EventTable
from ..model import NEXT, SELF, Attr, Expr, Plan, Rule, Timestamp, map_expr
from ..ranges import lower_window_bound


@dataclass(frozen=True)
class KleeneStep:
    """Binding Kleene position ``pred`` of a plan at resolution (after its plain positions).

    ``negations`` / ``conditions``: indices into the rule's that become checkable once the set
    is bound (its neighbours are); ``aggregates``: the aggregates over this set.
    """

    pred: int
    negations: tuple[int, ...]
    conditions: tuple[int, ...]
    aggregates: tuple[int, ...]


@lru_cache(maxsize=256)
def _patterns(n: int, min_s: int, max_s: int | None, greedy: bool) -> tuple[np.ndarray, np.ndarray]:
    """(set lengths, flat element indices) of the sets of ``n`` elements, in order."""
    if greedy:
        ok = n >= max(min_s, 1) and (max_s is None or n <= max_s)
        return (np.array([n] if ok else [], np.int64), np.arange(n if ok else 0, dtype=np.int64))
    hi = n if max_s is None else min(max_s, n)
    lens, flat = [], []
    for size in range(min_s, hi + 1):
        for combo in itertools.combinations(range(n), size):
            lens.append(size)
            flat.extend(combo)
    return np.array(lens, np.int64), np.array(flat, np.int64)


class KleeneSets:
    """The sets bound during one resolution: per Kleene position, a flat store of rows."""

    def __init__(self, rule: Rule, table: EventTable) -> None:
        self.rule = rule
        self.table = table
        self.n_pred = rule.n_predicates
        self.base = {k: self.n_pred + 2 * j for j, k in enumerate(rule.kleene_positions)}
        self.flat: dict[int, np.ndarray] = {}

    @property
    def width(self) -> int:
        """Columns of an instance row: the predicates, then start and length per position."""
        return self.n_pred + 2 * len(self.base)

    def widen(self, rows: np.ndarray) -> np.ndarray:
        out = np.full((rows.shape[0], self.width), -1, np.int64)
        out[:, : rows.shape[1]] = rows
        return out

    def last(self, rows: np.ndarray, k: int) -> np.ndarray:
        """The last element of each instance's set of position ``k``."""
        b = self.base[k]
        return self.flat[k][rows[:, b] + rows[:, b + 1] - 1]

    def matches(self, rows: np.ndarray, aggs: np.ndarray) -> Matches:
        """The instances as :class:`Matches` with their sets."""
        sets = {}
        for k, b in self.base.items():
            start, length = rows[:, b], rows[:, b + 1]
            off = np.zeros(len(rows) + 1, np.int64)
            np.cumsum(length, out=off[1:])
            idx = np.repeat(start - off[:-1], length) + np.arange(off[-1], dtype=np.int64)
            sets[k] = (off, self.flat[k][idx] if len(idx) else np.empty(0, np.int64))
        return Matches(np.ascontiguousarray(rows[:, : self.n_pred]), aggs, sets)


def _as_columns(expr: Expr, self_col: int, next_col: int) -> Expr:
    """``expr`` with ``SELF``/``NEXT`` read from columns ``self_col``/``next_col`` of the rows."""

    def fn(node):
        if isinstance(node, (Attr, Timestamp)) and node.pred in (SELF, NEXT):
            return replace(node, pred=self_col if node.pred == SELF else next_col)
        return node

    return map_expr(expr, fn)


def bind_sets(run, plan: Plan, step: KleeneStep, sets: KleeneSets, rows: np.ndarray,
              aggs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Extend every instance (``rows``, widened) by each of its sets of position ``step.pred``
    that passes the consecutive conditions; aggregates over the set into ``aggs``. The set
    conditions and negations are left to the caller."""
    from ..kernels.kleene import subset_estimate
    from ..kleene import check_estimate

    rule, table, ts = run.rule, run.table, run.ts
    k = step.pred
    pred = plan.predicates[k]
    kl = pred.kleene
    cand = run.kleene_rows(pred.event_type)
    cts = ts[cand]
    m = rows.shape[0]
    # the span: ts(anchor) - window <= ts < ts(before), and after the previous position
    a = np.zeros(m, np.int64)
    if pred.window is not None:
        a = np.searchsorted(cts, lower_window_bound(ts[rows[:, pred.anchor]], pred.window), "left")
    if kl.after is not None:
        a = np.maximum(a, np.searchsorted(cts, ts[rows[:, kl.after]], "right"))
    b = np.maximum(np.searchsorted(cts, ts[rows[:, pred.before]], "left"), a)
    counts = b - a
    inst = np.repeat(np.arange(m), counts)
    members = cand[np.repeat(a, counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))]
    # elements: not consumed, passing every per-element condition
    ok = ~run.consumed[members]
    for c in kl.conditions:
        if ok.any():
            ok[ok] = condition_mask(c, table, rows[inst[ok]], None, members[ok])
    inst, members = inst[ok], members[ok]
    n_el = np.bincount(inst, minlength=m)
    run.estimate += subset_estimate(n_el, kl.min_size, kl.max_size, kl.greedy)
    check_estimate(rule, k, run.estimate)
    # the sets: per instance, the patterns of its element count over its elements
    el_off = np.zeros(m + 1, np.int64)
    np.cumsum(n_el, out=el_off[1:])
    set_inst, set_len, flat = [], [], []
    for i in range(m):
        lens, idx = _patterns(int(n_el[i]), kl.min_size, kl.max_size, kl.greedy)
        if len(lens):
            set_inst.append(np.full(len(lens), i, np.int64))
            set_len.append(lens)
            flat.append(members[el_off[i] + idx])
    if not set_inst:
        return rows[:0], aggs[:0]
    set_inst = np.concatenate(set_inst)
    set_len = np.concatenate(set_len)
    flat = np.concatenate(flat)
    start = np.cumsum(set_len) - set_len
    # consecutive conditions on every pair of consecutive elements of a set
    keep = np.ones(len(set_inst), bool)
    if kl.consecutive:
        pair_set = np.repeat(np.arange(len(set_len)), set_len - 1)
        first = np.repeat(start, set_len - 1) + (
            np.arange(len(pair_set)) - np.repeat(np.cumsum(set_len - 1) - (set_len - 1), set_len - 1))
        probe = np.empty((len(pair_set), sets.width + 2), np.int64)
        probe[:, : sets.width] = rows[set_inst[pair_set]]
        probe[:, sets.width] = flat[first]
        probe[:, sets.width + 1] = flat[first + 1]
        good = np.ones(len(pair_set), bool)
        for c in kl.consecutive:
            if good.any():
                expr = _as_columns(c, sets.width, sets.width + 1)
                good[good] = condition_mask(expr, table, probe[good])
        keep &= np.bincount(pair_set[~good], minlength=len(set_len)) == 0
    set_inst, set_len, start = set_inst[keep], set_len[keep], start[keep]
    out = rows[set_inst]
    out_aggs = aggs[set_inst]
    base = sets.base[k]
    sets.flat[k] = flat
    out[:, k] = flat[start]
    out[:, base] = start
    out[:, base + 1] = set_len
    for ai in step.aggregates:
        out_aggs[:, ai] = _set_aggregate(rule, table, ai, flat, start, set_len)
    return out, out_aggs


def _set_aggregate(rule: Rule, table: EventTable, ai: int, flat, start, length) -> np.ndarray:
    """Aggregate ``ai`` over each set (missing values skipped; NaN = null)."""
    agg = rule.aggregates[ai]
    n = len(start)
    owner = np.repeat(np.arange(n), length)
    members = flat[np.repeat(start, length) + (np.arange(length.sum()) - np.repeat(np.cumsum(length) - length, length))]
    if agg.function == "count":
        return length.astype(np.float64)
    col = table.columns.get(agg.attribute)
    if col is None or col.kind not in ("int", "float"):
        vals, good = np.zeros(len(members)), np.zeros(len(members), bool)
    else:
        v = evaluate(Attr(SELF, agg.attribute), table, np.empty((len(members), 0), np.int64), None, members)
        vals = v.values.astype(np.float64)
        good = v.valid & ~np.isnan(vals)
    return group_aggregate(agg.function, owner[good], vals[good], n)


def group_aggregate(function: str, owner: np.ndarray, vals: np.ndarray, n: int) -> np.ndarray:
    """``function`` (sum/avg/min/max) of ``vals`` per group ``owner`` in ``0..n`` (values already
    free of nulls; sums in input order; avg/min/max of no value: NaN = null)."""
    if function == "sum":
        return np.bincount(owner, weights=vals, minlength=n)
    cnt = np.bincount(owner, minlength=n)
    if function == "avg":
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.bincount(owner, weights=vals, minlength=n) / cnt
    elif function == "min":
        out = np.full(n, np.inf)
        np.minimum.at(out, owner, vals)
    else:
        out = np.full(n, -np.inf)
        np.maximum.at(out, owner, vals)
    out[cnt == 0] = np.nan
    return out
