"""The optional ``support`` utility (docs/shedding.md, resolution 23): an extension beyond the
paper's Eq. 11 that reads time as well as values.

For a rule whose positive events form a chain (``SEQ(a0, ..., an)``, or TESLA ``each ... within
... from`` links that compile to the same shape), the utility of an event ``e`` in role ``i`` is

    v(e) = S_i(e) · F_i(e)

* ``S_i(e)``, the *support*: the partial matches of roles ``0..i`` that end at ``e`` among the
  events that arrived before it, each weighted by the share of the window left to complete it,
  (1 - age / W)^(roles still to come), W the chain's longest window. A role-``i-1`` event ``x``
  extends to ``e`` when it is earlier than ``e``, no more than its window before it, and passes
  the conditions between the two roles; the ages of the partial matches ending at an event are
  kept as a histogram of :data:`AGE_BINS` bins, a predecessor's histogram shifted by the whole
  bins between the two events. The window test is the necessary one (the terminator comes at or
  after ``e``) and whole-bin shifts never overstate an age, so S counts every partial match that
  can still complete, and a few that cannot: an event with S = 0 can be in no match at all.
* ``F_i(e)``, the *forward* factor: the probability that ``e``'s values pass the conditions
  towards the later roles, by the ``chain`` utility's messages from those roles (or Eq. 11's
  factors of those conditions when the conditions do not form a forest of order comparisons).

``v`` is mapped to [0, 1) by ``v / (v + c)``, ``c`` the median positive ``v`` of the role in the
first batch the model scores (utilities are compared only within one type's buffer, so the map
only needs to keep the order and spread the buckets). S reads the events that arrived before
``e``, including any that are dropped later: it is computed for a batch in one vectorised pass
(with the ``context`` rows before it), in O(pairs · AGE_BINS) where pairs is the number of
(earlier event, event) pairs inside the windows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import Rule, inputs
from ..ranges import shifted_ts
from .expr import attr_names, evaluate, passes_static, plain

_PAIRS = 1 << 22  # (predecessor, event) pairs times age bins per vectorised chunk
#: bins of a partial match's age (the time since its first event) over the chain's window
AGE_BINS = 16


def chain_roles(rule: Rule) -> list[int] | None:
    """The rule's predicates in sequence order when they form one chain of ``before`` links
    ending at the terminator (one plan, no Kleene position); None otherwise."""
    if len(rule.plans) != 1 or rule.kleene_positions:
        return None
    preds = rule.predicates
    term = rule.plans[0].terminator
    prev: dict[int, int] = {}
    for i, p in enumerate(preds):
        if i == term:
            continue
        if p.before is None or p.before in prev:
            return None
        prev[p.before] = i
    order = [term]
    while order[-1] in prev and len(order) <= len(preds):
        order.append(prev[order[-1]])
    return order[::-1] if len(order) == len(preds) else None


def pair_conditions(rule: Rule, a: int, b: int) -> list:
    """The conditions that read exactly roles ``a`` and ``b`` (no timestamps, no aggregates)."""
    return [c for c in rule.conditions if inputs(c, rule) == {a, b} and plain(c)]


def support(rule: Rule, roles: list[int], frame: pd.DataFrame, ts_ns: np.ndarray, types: np.ndarray,
            bins: int = AGE_BINS) -> dict[int, np.ndarray]:
    """The remaining-time-weighted support of every role over ``frame`` (rows in timestamp
    order, ``ts_ns`` nondecreasing): for each role, an array over all rows, 0 where the row is not
    of the role's type or fails its filters (see the module docstring)."""
    preds = rule.predicates
    n = len(frame)
    span = _span(rule, roles)
    out: dict[int, np.ndarray] = {}
    prev = None  # the previous role and its (rows, age histograms)
    for k, r in enumerate(roles):
        rows = np.flatnonzero(types == preds[r].event_type)
        if len(rows):
            rows = rows[passes_static(rule, r, frame.iloc[rows])]
        if k == 0:
            hist = np.zeros((len(rows), bins))
            hist[:, 0] = 1.0
        elif len(rows) and len(prev[1]):
            hist = _link(rule, prev[0], r, frame, ts_ns, prev[1], prev[2], rows, roles, span, bins)
            keep = hist.any(axis=1)
            rows, hist = rows[keep], hist[keep]
        else:
            rows, hist = rows[:0], np.zeros((0, bins))
        # weight each partial match by the share of the span left to complete it, to the power of
        # the roles still to come (their events must all arrive in that time)
        later = len(roles) - 1 - k
        left = (bins - np.arange(bins) - 0.5) / bins
        s = np.zeros(n)
        s[rows] = hist @ (left ** later)
        out[r] = s
        prev = (r, rows, hist)
    return out


def _span(rule: Rule, roles: list[int]) -> float:
    """The longest window of the chain's roles (ns): the time one partial match may span."""
    wins = [rule.predicates[r].window for r in roles if rule.predicates[r].window is not None]
    return float(max(wins)) if wins else 0.0


def _link(rule: Rule, p: int, r: int, frame: pd.DataFrame, ts_ns: np.ndarray, cand: np.ndarray,
          h_prev: np.ndarray, rows: np.ndarray, roles: list[int], span: float,
          bins: int) -> np.ndarray:
    """The age histograms of the partial matches ending at each row of role ``r``: the
    histograms of its predecessors (rows ``cand`` of role ``p``), shifted by the time between."""
    pred_p = rule.predicates[p]
    t_e = ts_ns[rows]
    t_c = ts_ns[cand]
    # earlier: a strictly smaller timestamp (TESLA, SEQ), or an earlier row at ties (AND)
    hi = np.searchsorted(cand, rows, "left") if pred_p.ties else np.searchsorted(t_c, t_e, "left")
    pos = {role: i for i, role in enumerate(roles)}
    if pred_p.window is not None and (pred_p.anchor is None or pos.get(pred_p.anchor, -1) > pos[p]):
        # the anchor comes at or after r, so x.ts >= anchor.ts - W implies x.ts >= e.ts - W
        # in integer nanoseconds, saturated (float64 would round the edge by up to 256 ns)
        lo = np.minimum(np.searchsorted(t_c, shifted_ts(t_e, -pred_p.window), "left"), hi)
    else:
        lo = np.zeros(len(rows), np.int64)
    conds = pair_conditions(rule, p, r)
    names: dict[int, set[str]] = {p: set(), r: set()}
    for cond in conds:
        for q, attrs in attr_names(cond).items():
            names[q] |= attrs
    cols = {q: {a: frame[a].to_numpy() for a in names[q] if a in frame.columns} for q in (p, r)}
    counts = hi - lo
    out = np.zeros((len(rows), bins))
    width = span / bins if span > 0 else 0.0
    b = np.arange(bins + 1)  # the last slot: an age of exactly the span, folded into the last bin
    start = 0
    while start < len(rows):
        # a chunk of rows whose pairs fit in _PAIRS (at least one row)
        cum = np.cumsum(counts[start:])
        stop = start + max(1, int(np.searchsorted(cum, _PAIRS // bins, "right")))
        c = counts[start:stop]
        total = int(c.sum())
        if total:
            owner = np.repeat(np.arange(start, stop), c)
            xi = lo[owner] + np.arange(total) - np.repeat(np.cumsum(c) - c, c)
            ei = rows[owner]
            ok = np.ones(total, bool)
            if conds:
                xr = cand[xi]
                env = {p: {a: v[xr] for a, v in cols[p].items()}, r: {a: v[ei] for a, v in cols[r].items()}}
                for cond in conds:
                    vals, valid = evaluate(cond, env, total)
                    ok &= valid & vals.astype(bool)
            owner, xi = owner[ok], xi[ok]
            # shift each predecessor's histogram by the bins between the two events
            shift = np.zeros(len(xi), np.int64) if width <= 0 else \
                ((t_e[owner] - t_c[xi]) / width).astype(np.int64)
            src = b[None, :] - shift[:, None]
            val = np.where((src >= 0) & (src < bins), h_prev[xi[:, None], np.clip(src, 0, bins - 1)], 0.0)
            val[:, bins - 1] += val[:, bins]  # the window's edge is inclusive
            for j in range(bins):
                out[start:stop, j] += np.bincount(owner - start, weights=val[:, j], minlength=stop - start)
        start = stop
    return out
