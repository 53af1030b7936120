"""Work estimates: the counts (:data:`~cep_gpu.planner.profile.FEATURES`) a batch of terminators
will cost, from the window ranges of the rule's columns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..columns import filter_rows, type_rows
from ..events import EventTable
from ..model import (
    AggValue,
    Attr,
    Compare,
    Plan,
    Predicate,
    Rule,
    static_conditions,
    step_checks,
    walk,
)
from .profile import FEATURES

#: selectivity assumed for a condition that is not an equality with a known number of values
OTHER_SELECTIVITY = 0.5



#: values sampled per column to count the distinct values of an equality parameter
_SAMPLE = 4096



@dataclass
class StepEstimate:
    """The expected work of one binding step, averaged per terminator."""

    pred: int
    event_type: str
    policy: str
    window: int
    events_per_window: float
    selectivity: float
    partials_in: float
    pairs: float
    matches: float
    partials_out: float
    #: a Kleene step: the expected sets per (partial sequence, span) before set conditions
    #: (greedy 1, ``[lo..hi]`` the sum of C(n, j), unbounded 2^n - 1, n the expected elements)
    sets_per_span: float = 1.0



@dataclass
class RuleWork:
    """Per-terminator work of one rule over a range of terminators (every plan summed).

    ``per_terminator`` is an array (n_terminators, len(FEATURES)) whose ``launches`` and
    ``events`` columns are 0: those are counted per batch by :meth:`batch_features`.
    """

    rule: Rule
    term_rows: np.ndarray
    term_ts: np.ndarray
    per_terminator: np.ndarray
    steps: list[StepEstimate]
    column_ts: list[np.ndarray]
    lookback: int

    def batch_features(self, i: int, j: int) -> dict[str, float]:
        """Feature counts of one launch over terminators ``i:j`` (indices into ``term_rows``)."""
        f = dict(zip(FEATURES, self.per_terminator[i:j].sum(axis=0).tolist()))
        f["launches"] = 1.0 if j > i else 0.0
        if j > i:
            lo_t, hi_t = self.term_ts[i] - self.lookback, self.term_ts[j - 1]
            f["events"] = float(
                sum(np.searchsorted(c, hi_t, "right") - np.searchsorted(c, lo_t, "left") for c in self.column_ts)
            )
        return f



def column_rows(
    rule: Rule, table: EventTable, pred: int, event_type: str, lo: int = 0, hi: int | None = None
) -> np.ndarray:
    """Rows of ``event_type`` in ``[lo, hi)`` that pass the static filters of predicate ``pred``."""
    rows = type_rows(table, event_type, lo, len(table) if hi is None else hi)
    for ci in static_conditions(rule, pred):
        nodes = list(walk(rule.conditions[ci]))
        if any(isinstance(node, AggValue) for node in nodes):
            continue  # an aggregate's value is known only once its span is bound: an upper bound
        if any(isinstance(node, Attr) and node.name not in table.columns for node in nodes):
            continue  # a sample without that attribute (explain): no filter, an upper bound
        rows = filter_rows(table, rows, (rule.conditions[ci],), pred, rule.n_predicates)
    return rows



def _selectivity(rule: Rule, table: EventTable, pred: int, cond_ids, column: np.ndarray) -> float:
    """Expected fraction of (partial, candidate) pairs that pass the step's non-static conditions."""
    static = set(static_conditions(rule, pred))
    sel = 1.0
    for ci in cond_ids:
        if ci in static:
            continue
        cond = rule.conditions[ci]
        own = None
        if isinstance(cond, Compare) and cond.op == "=":
            for side in (cond.left, cond.right):
                if isinstance(side, Attr) and side.pred == pred:
                    own = side.name
        col = table.columns.get(own) if own else None
        if col is not None and len(column):
            sample = column[:: max(1, len(column) // _SAMPLE)]
            vals = col.values[sample][col.valid[sample]]
            sel *= 1.0 / max(1, len(np.unique(vals)))
        else:
            sel *= OTHER_SELECTIVITY
    return sel



def estimate_work(rule: Rule, table: EventTable, lo: int = 0, hi: int | None = None) -> RuleWork:
    """The expected work of ``rule`` for each of its terminators in rows ``[lo, hi)``.

    Window ranges are exact per terminator (binary search); a predicate anchored on another
    predicate uses the terminator's time as a proxy for its anchor's. Partial sequences propagate
    with the conditions' expected selectivity (equality: 1 / distinct values; other: 0.5).
    """
    hi = len(table) if hi is None else hi
    all_term_rows, all_ts, parts, steps_all, col_ts = [], [], [], [], []
    for plan in rule.plans:
        term_rows, per, steps, cts = _plan_work(rule, plan, table, lo, hi)
        all_term_rows.append(term_rows)
        parts.append(per)
        steps_all.extend(steps)
        col_ts.extend(cts)
    term_rows = np.concatenate(all_term_rows) if all_term_rows else np.empty(0, np.int64)
    per = np.concatenate(parts) if parts else np.empty((0, len(FEATURES)))
    order = np.argsort(term_rows, kind="stable")
    term_rows, per = term_rows[order], per[order]
    all_ts = table.ts[term_rows] if len(term_rows) else np.empty(0, np.int64)
    return RuleWork(rule, term_rows, all_ts, per, steps_all, col_ts, rule.lookback())



def _plan_work(rule: Rule, plan: Plan, table: EventTable, lo: int, hi: int):
    term = plan.terminator
    tcol = column_rows(rule, table, term, plan.predicates[term].event_type)
    term_rows = tcol[(tcol >= lo) & (tcol < hi)]
    t = table.ts[term_rows]
    n = len(term_rows)
    idx = {f: k for k, f in enumerate(FEATURES)}
    per = np.zeros((n, len(FEATURES)))
    per[:, idx["terminators"]] = 1.0
    partials = np.ones(n)
    checks = step_checks(rule, plan)
    steps, col_ts = [], [table.ts[tcol]]
    for s in range(1, len(plan.order)):
        p = plan.order[s]
        pred = plan.predicates[p]
        col = column_rows(rule, table, p, pred.event_type)
        cts = table.ts[col]
        col_ts.append(cts)
        w = int(pred.window or 0)
        r = (np.searchsorted(cts, t, "left") - np.searchsorted(cts, t - w, "left")).astype(np.float64)
        sel = _selectivity(rule, table, p, checks[s].conditions, col)
        pairs, matches, out, sets = step_work(pred, partials, r, sel)
        per[:, idx["pairs"]] += pairs
        per[:, idx["matches"]] += matches
        steps.append(
            StepEstimate(
                p, pred.event_type, pred.policy or "each", w, float(r.mean()) if n else 0.0, sel,
                float(partials.mean()) if n else 0.0, float(pairs.mean()) if n else 0.0,
                float(matches.mean()) if n else 0.0, float(out.mean()) if n else 0.0,
                float(sets.mean()) if n else 1.0,
            )
        )
        partials = out
    per[:, idx["outputs"]] = partials
    return term_rows, per, steps, col_ts



def step_work(pred: Predicate, partials, r, sel: float):
    """(pairs, matches, partials out, sets per span) of one binding step, per terminator, from the
    partial sequences in, the candidates per window ``r`` and the conditions' selectivity ``sel``.

    A Kleene step (docs/language.md, "Kleene closure") expects ``n = r * 0.5^c`` elements per
    span (``c`` per-element conditions; ``r`` counts the whole window, so it is an upper bound of
    the span between the neighbours) and, per partial sequence, the sets of
    :func:`~cep_gpu.kernels.kleene.subsets_per_span`: greedy 1, ``[lo..hi]`` the sum of
    ``C(n, j)``, unbounded ``2^n - 1``. Its work is one thread per candidate (the per-element
    check) plus one per set (the GPU kernel's (sequence, set index) pairs; the CPU's walk), and
    a set passes the consecutive conditions (0.5 each) and the set conditions (``sel``)."""
    kl = pred.kleene
    if kl is None:
        pairs = partials * r
        matches = pairs * sel
        out = matches if pred.policy == "each" else partials * np.minimum(1.0, r * sel)
        return pairs, matches, out, np.ones_like(np.asarray(r, np.float64))
    from ..kernels.kleene import subsets_per_span

    elements = np.asarray(r, np.float64) * OTHER_SELECTIVITY ** len(kl.conditions)
    sets = subsets_per_span(elements, kl.min_size, kl.max_size, kl.greedy)
    pairs = partials * (r + sets)
    matches = partials * sets * (sel * OTHER_SELECTIVITY ** len(kl.consecutive))
    return pairs, matches, matches, sets


def average_launch(work: RuleWork, from_table: bool) -> dict[str, float]:
    """Features of a launch holding one average terminator (streaming, one event at a time):
    the events to move are the new ones since the previous terminator (columns stay resident)."""
    n = len(work.term_rows)
    f = dict(zip(FEATURES, work.per_terminator.mean(axis=0).tolist()))
    f["launches"] = 1.0
    if from_table:
        f["events"] = work.batch_features(0, n)["events"] / n
    return f



def count_terminators(rule: Rule, table: EventTable, lo: int, hi: int | None) -> int:
    """Terminators of ``rule`` in rows ``[lo, hi)`` (events of a terminator type that pass its
    static filters), summed over the rule's plans as :func:`estimate_work` counts them."""
    return sum(
        len(column_rows(rule, table, plan.terminator, plan.predicates[plan.terminator].event_type, lo, hi))
        for plan in rule.plans
    )

