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
``e``, including any that are dropped later: it is computed for a batch in one pass per role
(with the ``context`` rows before it), in O(pairs · AGE_BINS) where pairs is the number of
(earlier event, event) pairs inside the windows. When every condition between two roles compares
a value of one with a value of the other (``a.volume > b.volume * 1.5``), each side is evaluated
once per event and the pairs are walked in one compiled pass (:func:`_link_fused`); other
conditions are evaluated pairwise in NumPy, and the shifted histograms added in a compiled pass.
"""

from __future__ import annotations

import numba
import numpy as np
import pandas as pd

from ..model import Compare, Expr, Rule, inputs
from ..ranges import shifted_ts
from .expr import as_numbers, attr_names, evaluate, passes_static, plain

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
    width = span / bins if span > 0 else 0.0
    out = np.zeros((len(rows), bins))
    split = _separable(conds, p, r, frame, cand, rows)
    if split is not None:  # every condition compares a value of x with a value of e: one fused pass
        _link_fused(lo, hi, *split, t_e, t_c, width, h_prev, out)
        return out
    names: dict[int, set[str]] = {p: set(), r: set()}
    for cond in conds:
        for q, attrs in attr_names(cond).items():
            names[q] |= attrs
    cols = {q: {a: frame[a].to_numpy() for a in names[q] if a in frame.columns} for q in (p, r)}
    counts = hi - lo
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
            _shift_add(owner[ok] - start, xi[ok], t_e[start:stop], t_c, width, h_prev, out[start:stop])
        start = stop
    return out


@numba.njit(cache=True, nogil=True)
def _shift_add(owner: np.ndarray, xi: np.ndarray, t_e: np.ndarray, t_c: np.ndarray, width: float,
               h_prev: np.ndarray, out: np.ndarray) -> None:
    """Adds to ``out[owner[k]]`` the histogram ``h_prev[xi[k]]`` shifted by the whole bins
    between the two events, for each pair ``k``: one compiled pass, no (pairs x bins)
    temporaries."""
    for k in range(len(owner)):
        _add_shifted(out, owner[k], h_prev, xi[k], t_e[owner[k]] - t_c[xi[k]], width)


@numba.njit(cache=True, nogil=True, inline="always")
def _add_shifted(out: np.ndarray, o: int, h_prev: np.ndarray, x: int, gap: int, width: float) -> None:
    """``out[o] += h_prev[x]`` shifted by the whole bins in ``gap`` (ns); an age of exactly the
    span (the window's edge is inclusive) folds into the last bin."""
    bins = h_prev.shape[1]
    shift = np.int64(gap / width) if width > 0 else np.int64(0)
    if shift > bins:
        return
    for j in range(shift, bins - 1):
        out[o, j] += h_prev[x, j - shift]
    # the last bin: its own source plus the one an age of exactly the span comes from (the sum
    # first, as the pairwise NumPy code summed it)
    last = 0.0
    if bins - 1 - shift >= 0:
        last += h_prev[x, bins - 1 - shift]
    if shift > 0:
        last += h_prev[x, bins - shift]
    out[o, bins - 1] += last

#: comparison operators, in the order :func:`_compare` codes them
_OPS = ("=", "!=", "<", "<=", ">", ">=")
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _separable(conds: list[Expr], p: int, r: int, frame: pd.DataFrame, cand: np.ndarray,
               rows: np.ndarray) -> tuple | None:
    """When every condition is a numeric comparison of a value of role ``p`` with a value of
    role ``r`` (``a.volume > b.volume * 1.5``), each side evaluated once per event: (values of
    x's sides over ``cand``, their validity, values of e's sides over ``rows``, their validity,
    operator codes as ``x_side OP e_side``); None otherwise (the pairwise NumPy path)."""
    xv, xok, ev, eok, ops = [], [], [], [], []
    for cond in conds:
        if not isinstance(cond, Compare):
            return None
        sides = {frozenset(inputs(cond.left)): cond.left, frozenset(inputs(cond.right)): cond.right}
        if set(sides) != {frozenset({p}), frozenset({r})}:
            return None
        op = cond.op if inputs(cond.left) == {p} else _FLIP[cond.op]
        vals = []
        for role, at in ((p, cand), (r, rows)):
            expr = sides[frozenset({role})]
            # only the columns the side reads, taken at its rows (not the whole frame's rows)
            v, ok = evaluate(expr, {role: {a: frame[a].to_numpy()[at] for a in attr_names(expr).get(role, ())
                                           if a in frame.columns}}, len(at))
            if v.dtype.kind not in "iufb":
                return None  # strings compare as objects: the pairwise path
            vals.append((as_numbers(v), np.asarray(ok, bool)))
        (a, a_ok), (b, b_ok) = vals
        xv.append(a)
        xok.append(a_ok)
        ev.append(b)
        eok.append(b_ok)
        ops.append(_OPS.index(op))
    k = len(conds)
    return (np.array(xv).reshape(k, len(cand)), np.array(xok).reshape(k, len(cand)),
            np.array(ev).reshape(k, len(rows)), np.array(eok).reshape(k, len(rows)), np.array(ops, np.int64))


@numba.njit(cache=True, nogil=True)
def _compare(a: float, b: float, op: int) -> bool:
    if op == 0:
        return a == b
    if op == 1:
        return a != b
    if op == 2:
        return a < b
    if op == 3:
        return a <= b
    if op == 4:
        return a > b
    return a >= b


@numba.njit(cache=True, nogil=True)
def _link_fused(lo: np.ndarray, hi: np.ndarray, xv: np.ndarray, xok: np.ndarray, ev: np.ndarray,
                eok: np.ndarray, ops: np.ndarray, t_e: np.ndarray, t_c: np.ndarray, width: float,
                h_prev: np.ndarray, out: np.ndarray) -> None:
    """:func:`_link`'s pairs and conditions in one compiled pass, for separable conditions:
    row ``o`` gets each predecessor ``x`` in ``[lo[o], hi[o])`` that passes them all."""
    for o in range(len(lo)):
        for x in range(lo[o], hi[o]):
            good = True
            for k in range(len(ops)):
                if not (xok[k, x] and eok[k, o] and _compare(xv[k, x], ev[k, o], ops[k])):
                    good = False
                    break
            if good:
                _add_shifted(out, o, h_prev, x, t_e[o] - t_c[x], width)
