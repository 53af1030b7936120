"""Event utilities U_T(e) (paper Section 4.3, Eq. 11), computed for a batch of events at once.

For a rule, a positive predicate ``p`` of type ``T`` and a condition ``c`` that reads ``p``:

* ``c`` reads only ``p`` (a static filter): φ_c(e) is 1 if ``e`` passes it, else 0;
* ``c`` is linear in one attribute ``x`` of ``p`` and one attribute ``y`` of one other predicate
  ``q`` (``a·x + b·y + k  op  0``, the shape of every condition of the paper's workloads):
  φ_c(e) = P(b·y op -(a·e.x + k)) from y's distribution: the normal CDF (``ndtr``) or the
  empirical CDF (``searchsorted``); ``=``/``!=`` use y's value frequencies;
* a string (in)equality between ``p`` and ``q``: the frequency of e's value among q's values;
* anything else over plain attributes (products of attributes, several other predicates):
  a Monte-Carlo estimate over ``samples`` value tuples drawn from the other predicates' samples;
* conditions on aggregates or timestamps: φ = 1 (no distribution to read; the engine's window
  check decides).

The distributions of ``q`` are fitted on the sample events of q's type that pass q's own static
filters (only those can fill ``q``). U for the role ``p`` is the product over its conditions
(Eq. 11); an event of a type that fills several roles (or several rules) gets the maximum over
them (Section 4.5, "multi-pattern"). A type that some negation or aggregate reads gets 1 (dropping
it can create false matches or change an aggregate); a type no rule reads gets 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import ArgumentError
from ..model import (
    Arith,
    Attr,
    Compare,
    Const,
    Expr,
    Neg,
    Rule,
    inputs,
)
from .expr import attr_names, evaluate, passes_static, plain
from .stats import Empirical, Normal, Statistics, fit
from .support import chain_roles, support

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
#: ``"eq11"``: the paper's Eq. 11 (default); ``"chain"``: the optional extension of
#: docs/shedding.md, resolution 22 (every condition of the rule, not only those that read T);
#: ``"support"``: the extension of resolution 23 (the partial matches an event ends, times the
#: chain messages of the later roles; cep_gpu/shedding/support.py)
UTILITIES = ("eq11", "chain", "support")
_CHUNK = 1 << 20  # values per Monte-Carlo evaluation chunk


class UtilityModel:
    """Utility functions of ``rules`` under ``stats``; :meth:`compute` scores a batch of events."""

    def __init__(self, rules: list[Rule], stats: Statistics, samples: int = 256, seed: int = 0,
                 kind: str = "eq11", time_unit_ns: int = 1_000_000_000) -> None:
        if not isinstance(samples, int) or samples < 1:
            raise ArgumentError(f"utility samples must be an int >= 1, got {samples!r}")
        if kind not in UTILITIES:
            raise ArgumentError(f"utility must be one of {', '.join(UTILITIES)}; got {kind!r}")
        self.kind = kind
        self.time_unit_ns = time_unit_ns
        self._roles: dict[int, list[int] | None] = {}  # the support utility's chain per rule
        self._support_scale: dict[tuple[int, int], float] = {}
        self._forward_msgs: dict[tuple[int, int], list | None] = {}
        self._incoming_cache: dict[tuple[int, int], list | None] = {}
        self._chain_top: dict[tuple[int, int], float] = {}  # the chain utility's scale per role
        self.rules = rules
        self.stats = stats
        self.samples = samples
        self.seed = seed
        self._filtered: dict[tuple[int, int], pd.DataFrame | None] = {}
        self._dists: dict[tuple[int, int, str], Normal | Empirical | None] = {}
        self.roles: dict[str, list[tuple[int, int]]] = {}  # type -> (rule, predicate)
        self.protected: set[str] = set()  # read by a negation or an aggregate: utility 1
        for ri, r in enumerate(rules):
            for pi, p in enumerate(r.predicates):
                self.roles.setdefault(p.event_type, []).append((ri, pi))
            self.protected.update(n.event_type for n in r.negations)
            self.protected.update(a.event_type for a in r.aggregates)

    def conditions_of(self, event_type: str) -> int:
        """|C_type(T)|: the condition factors evaluated for an event of this type (for α_T)."""
        return sum(len(self._conditions(ri, pi)) for ri, pi in self.roles.get(event_type, []))

    def compute(self, events: pd.DataFrame, context: pd.DataFrame | None = None) -> np.ndarray:
        """U_T(e) in [0, 1] for every row of ``events`` (a DataFrame with a ``type`` column).

        ``context``: the events that arrived before ``events`` (within the rules' lookback); only
        the ``support`` utility reads it (an event's support counts earlier events)."""
        sup = self._support(events, context) if self.kind == "support" else {}
        # rows per type by hashing (factorize) and one integer sort: sorting the type strings
        # (np.unique) and comparing them once per type cost more than Eq. 11 itself
        codes, names = pd.factorize(events["type"].astype(str).to_numpy())
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
        out = np.zeros(len(events))
        for k, t in enumerate(names):
            rows = order[bounds[k]:bounds[k + 1]]
            if t in self.protected:
                out[rows] = 1.0
                continue
            roles = self.roles.get(t)
            if not roles:
                continue  # no rule reads it: utility 0
            sub = events.iloc[rows]
            best = np.zeros(len(rows))
            for ri, pi in roles:
                u = sup[ri, pi][rows] if (ri, pi) in sup else \
                    self._chain(ri, pi, sub) if self.kind in ("chain", "support") else None
                if u is None:  # Eq. 11
                    u = np.ones(len(rows))
                    for c in self._conditions(ri, pi):
                        u *= self._factor(ri, pi, c, sub)
                np.maximum(best, u, out=best)
            out[rows] = best
        return out

    # -- one condition ------------------------------------------------------------------------

    def _conditions(self, ri: int, pi: int) -> list[Expr]:
        rule = self.rules[ri]
        out = []
        for c in rule.conditions:
            ins = inputs(c, rule)
            if pi in ins and plain(c):
                out.append(c)
        return out

    def _factor(self, ri: int, pi: int, c: Expr, sub: pd.DataFrame) -> np.ndarray:
        rule = self.rules[ri]
        others = sorted(inputs(c, rule) - {pi})
        n = len(sub)
        if not others:
            vals, valid = evaluate(c, {pi: sub}, n)
            return (valid & vals.astype(bool)).astype(np.float64)
        samples = {q: self._filtered_sample(ri, q) for q in others}
        if any(s is None or len(s) == 0 for s in samples.values()):
            return np.ones(n)  # nothing known about the other side: no preference
        if len(others) == 1 and isinstance(c, Compare):
            q = others[0]
            got = self._closed_form(ri, pi, q, c, sub, samples[q])
            if got is not None:
                return got
        return self._monte_carlo(c, pi, sub, samples)

    def _closed_form(self, ri, pi, q, c: Compare, sub, qsample) -> np.ndarray | None:
        n = len(sub)
        # string (in)equality between one attribute of each side
        if c.op in ("=", "!=") and isinstance(c.left, Attr) and isinstance(c.right, Attr):
            mine, theirs = (c.left, c.right) if c.left.pred == pi else (c.right, c.left)
            if mine.pred == pi and theirs.pred == q:
                x = sub[mine.name] if mine.name in sub.columns else pd.Series([None] * n)
                y = qsample[theirs.name] if theirs.name in qsample.columns else pd.Series([], dtype=object)
                if not (pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y)):
                    p = _frequency(x, y)
                    return p if c.op == "=" else np.where(x.notna().to_numpy(), 1.0 - p, 0.0)
        lin = _linear(c.left, c.right)
        if lin is None:
            return None
        xs = [k for k in lin if k is not None and k[0] == pi]
        ys = [k for k in lin if k is not None and k[0] == q]
        if len(xs) > 1 or len(ys) != 1:
            return None
        b = lin[ys[0]]
        if b == 0:
            return None
        yname = ys[0][1]
        dist = self._distribution(ri, q, yname)
        if dist is None:
            return np.ones(n)
        # a·x + b·y + k op 0  <=>  y op' t  with t = -(a·x + k)/b (op flipped when b < 0)
        if xs:
            x, valid = _column(sub, xs[0][1])
            ax = lin[xs[0]] * x
        else:
            ax, valid = np.zeros(n), np.ones(n, bool)
        t = -(ax + lin.get(None, 0.0)) / b
        op = c.op if b > 0 else _FLIP[c.op]
        if op in ("=", "!="):
            emp = dist if isinstance(dist, Empirical) else self._distribution(ri, q, yname, "empirical")
            p = emp.equal(t) if isinstance(emp, Empirical) else np.zeros(n)
            p = p if op == "=" else 1.0 - p
        elif op in ("<", "<="):  # y < t
            p = dist.below(t, op == "<=")
        else:  # y > t  = 1 - P(y <= t)
            p = 1.0 - dist.below(t, op == ">")
        return np.where(valid, np.clip(p, 0.0, 1.0), 0.0)

    def _monte_carlo(self, c: Expr, pi: int, sub: pd.DataFrame, samples: dict[int, pd.DataFrame]) -> np.ndarray:
        n, k = len(sub), self.samples
        rng = np.random.default_rng(self.seed)
        names = attr_names(c)
        draws = {q: s.iloc[rng.integers(0, len(s), k)] for q, s in samples.items()}
        out = np.empty(n)
        step = max(1, _CHUNK // k)
        for lo in range(0, n, step):
            part = sub.iloc[lo:lo + step]
            m = len(part)
            env = {pi: {a: np.repeat(_raw(part, a), k) for a in names.get(pi, ())}}
            for q, d in draws.items():
                env[q] = {a: np.tile(_raw(d, a), m) for a in names.get(q, ())}
            vals, valid = evaluate(c, env, m * k)
            out[lo:lo + m] = (valid & vals.astype(bool)).reshape(m, k).mean(axis=1)
        return out

    # -- the "chain" extension (docs/shedding.md, resolution 22; not the paper's Eq. 11) --------

    def _chain(self, ri: int, pi: int, sub: pd.DataFrame) -> np.ndarray | None:
        """P(every condition of the rule holds | the role ``pi`` has e's values, the other roles
        drawn independently from their samples), scaled to a maximum of 1 over pi's own sample:
        the conditions between the *other* roles count too (Eq. 11 leaves them out). Exact by
        message passing when the rule's conditions between roles are binary linear order
        comparisons forming a forest (a chain such as Q1^A); None (Eq. 11 instead) otherwise."""
        incoming = self._incoming(ri, pi)
        if incoming is None:
            return None
        u = self._messages(incoming, sub)
        top = self._chain_top.get((ri, pi))
        if top is None:  # pi's own sample does not change between fits: once per role
            own = self._filtered_sample(ri, pi)
            top = self._chain_top[ri, pi] = self._messages(incoming, own).max() if own is not None and len(own) else 0.0
        if top <= 0:
            return None
        u = np.minimum(u / top, 1.0)
        for c in self._conditions(ri, pi):  # p's own static filters: 0 or 1
            if inputs(c, self.rules[ri]) == {pi}:
                u *= self._factor(ri, pi, c, sub)
        return u

    def _messages(self, incoming: list, frame: pd.DataFrame) -> np.ndarray:
        out = np.ones(len(frame))
        for mine, a, b, k, op, vals, cum in incoming:
            x, valid = _column(frame, mine)
            out *= np.where(valid, _weighted_count(vals, cum, -(b * x + k) / a, op), 0.0)
        return out

    def _incoming(self, ri: int, pi: int) -> list | None:
        """The messages into role ``pi``: per neighbour q (one condition a·y_q + b·x_pi + k op 0),
        (pi's attribute, a, b, k, op, q's sorted values, their cumulative weights / m); None if
        the rule's conditions do not form such a forest."""
        key = (ri, pi)
        if key not in self._incoming_cache:
            edges = self._edges(ri)
            self._incoming_cache[key] = None if edges is None else \
                [self._message(ri, q, pi, e, edges) for q, e in _neighbours(edges, pi)]
        return self._incoming_cache[key]

    def _edges(self, ri: int) -> list | None:
        rule = self.rules[ri]
        edges, parent = [], list(range(len(rule.predicates)))

        def root(i):
            while parent[i] != i:
                i = parent[i]
            return i
        for c in rule.conditions:
            ins = sorted(inputs(c, rule))
            if len(ins) < 2 or not plain(c):
                continue  # static filters act through the samples; time conditions: φ = 1
            if len(ins) > 2 or not isinstance(c, Compare) or c.op not in ("<", "<=", ">", ">="):
                return None
            lin = _linear(c.left, c.right)
            if lin is None:
                return None
            attrs = [k for k in lin if k is not None]
            if sorted(a[0] for a in attrs) != ins or any(lin[a] == 0 for a in attrs):
                return None
            if root(ins[0]) == root(ins[1]):
                return None  # a cycle: the messages would not be exact
            parent[root(ins[0])] = root(ins[1])
            edges.append((c.op, lin))
        return edges

    def _message(self, ri: int, q: int, r: int, edge: tuple, edges: list) -> tuple:
        """The message from role q to role r along ``edge``: q's sample rows weighted by the
        messages from q's other neighbours (recursively), as a step function of r's value."""
        op, lin = edge
        sample = self._filtered_sample(ri, q)
        (qa,) = [k for k in lin if k is not None and k[0] == q]
        (ra,) = [k for k in lin if k is not None and k[0] == r]
        if sample is None or len(sample) == 0:
            w, vals = np.zeros(0), np.zeros(0)
        else:
            w = np.ones(len(sample))
            for k, e in _neighbours(edges, q):
                if k != r:
                    w *= self._messages([self._message(ri, k, q, e, edges)], sample)
            vals, valid = _column(sample, qa[1])
            w, vals = w[valid], vals[valid]
        # a·y_q + b·x_r + k op 0  <=>  y_q op' -(b·x_r + k)/a  (op flipped when a < 0)
        a, b = lin[qa], lin[ra]
        order = np.argsort(vals, kind="stable")
        m = max(len(vals), 1)
        cum = np.concatenate([[0.0], np.cumsum(w[order])]) / m
        return (ra[1], a, b, lin.get(None, 0.0), op if a > 0 else _FLIP[op], vals[order], cum)

    # -- the "support" extension (docs/shedding.md, resolution 23) ------------------------------

    def _support(self, events: pd.DataFrame, context: pd.DataFrame | None) -> dict:
        """(rule, role) -> the support utility of every row of ``events``, for the rules whose
        roles form a chain (the others fall back to ``chain``)."""
        from .stats import times_ns

        chains = {ri: self._chain_of(ri) for ri in range(len(self.rules))}
        if not any(r is not None for r in chains.values()) or not len(events):
            return {}
        frame = events if context is None or not len(context) else \
            pd.concat([context, events], ignore_index=True)
        m = len(frame) - len(events)
        ts = times_ns(frame["ts"], self.time_unit_ns)
        order = np.argsort(ts, kind="stable")
        fr = frame.iloc[order].reset_index(drop=True)
        ts, types = ts[order], frame["type"].astype(str).to_numpy()[order]
        out = {}
        for ri, roles in chains.items():
            if roles is None:
                continue
            s = support(self.rules[ri], roles, fr, ts, types)
            for k, r in enumerate(roles):
                v = s[r]
                idx = np.flatnonzero(v > 0)
                if len(idx):
                    v[idx] *= self._forward(ri, r, roles[k + 1:], fr.iloc[idx])
                back = np.empty(len(frame))
                back[order] = v
                v = back[m:]
                scale = self._support_scale.get((ri, r))
                if scale is None:
                    pos = v[v > 0]
                    scale = float(np.median(pos)) if len(pos) else 1.0
                    if len(pos):  # kept from the first batch with support, so batches compare
                        self._support_scale[ri, r] = scale
                out[ri, r] = v / (v + scale)
        return out

    def _chain_of(self, ri: int) -> list[int] | None:
        if ri not in self._roles:
            self._roles[ri] = chain_roles(self.rules[ri])
        return self._roles[ri]

    def _forward(self, ri: int, r: int, later: list[int], sub: pd.DataFrame) -> np.ndarray:
        """F: the probability that the rows of ``sub`` (role ``r``) pass the conditions towards
        the ``later`` roles: the chain messages from them, or Eq. 11's factors of those
        conditions when the rule's conditions are not a forest of order comparisons."""
        key = (ri, r)
        if key not in self._forward_msgs:
            edges = self._edges(ri)
            self._forward_msgs[key] = None if edges is None else \
                [self._message(ri, q, r, e, edges) for q, e in _neighbours(edges, r) if q in later]
        msgs = self._forward_msgs[key]
        if msgs is not None:
            return self._messages(msgs, sub)
        u = np.ones(len(sub))
        for c in self._conditions(ri, r):
            others = inputs(c, self.rules[ri]) - {r}
            if others and others <= set(later):
                u *= self._factor(ri, r, c, sub)
        return u

    # -- distributions --------------------------------------------------------------------------

    def _filtered_sample(self, ri: int, q: int) -> pd.DataFrame | None:
        key = (ri, q)
        if key not in self._filtered:
            rule = self.rules[ri]
            sample = self.stats.samples.get(rule.predicates[q].event_type)
            if sample is not None and len(sample):
                sample = sample[passes_static(rule, q, sample)].reset_index(drop=True)
            self._filtered[key] = sample
        return self._filtered[key]

    def _distribution(self, ri: int, q: int, attr: str, kind: str | None = None):
        rule = self.rules[ri]
        given = self.stats.distributions.get((rule.predicates[q].event_type, attr))
        if given is not None and kind is None:
            return given
        key = (ri, q, attr + "|" + str(kind))
        if key not in self._dists:
            s = self._filtered_sample(ri, q)
            if s is None or attr not in s.columns:
                self._dists[key] = None
            else:
                v = pd.to_numeric(s[attr], errors="coerce").to_numpy(np.float64)
                v = v[~np.isnan(v)]
                self._dists[key] = fit(v, kind or self.stats.distribution) if len(v) else None
        return self._dists[key]


# -- expression helpers (over plain NumPy columns; no engine internals) ---------------------------


def _neighbours(edges: list, p: int) -> list:
    """(the other role, the edge) for every edge of role ``p``."""
    out = []
    for e in edges:
        roles = [k[0] for k in e[1] if k is not None]
        if p in roles:
            out.append(([x for x in roles if x != p][0], e))
    return out


def _weighted_count(vals: np.ndarray, cum: np.ndarray, t: np.ndarray, op: str) -> np.ndarray:
    """Σ w_j / m over the sorted values v_j with v_j op t (``cum``: cumulative w / m, from 0)."""
    if op == "<":
        return cum[np.searchsorted(vals, t, "left")]
    if op == "<=":
        return cum[np.searchsorted(vals, t, "right")]
    if op == ">":
        return cum[-1] - cum[np.searchsorted(vals, t, "right")]
    return cum[-1] - cum[np.searchsorted(vals, t, "left")]


def _raw(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame.columns:
        return np.full(len(frame), np.nan)
    return frame[name].to_numpy()


def _column(frame: pd.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray]:
    if name not in frame.columns:
        return np.zeros(len(frame)), np.zeros(len(frame), bool)
    v = pd.to_numeric(frame[name], errors="coerce").to_numpy(np.float64)
    return np.nan_to_num(v), ~np.isnan(v)


def _frequency(x: pd.Series, y: pd.Series) -> np.ndarray:
    """For each value of ``x``: its relative frequency among the non-null values of ``y``."""
    y = y.dropna()
    if len(y) == 0:
        return np.zeros(len(x))
    counts = y.astype(str).value_counts()
    idx = pd.Index(counts.index).get_indexer(x.astype(str))
    freq = counts.to_numpy(np.float64) / len(y)
    return np.where((idx >= 0) & x.notna().to_numpy(), freq[np.maximum(idx, 0)], 0.0)


def _linear(left: Expr, right: Expr) -> dict | None:
    """``left - right`` as ``{(pred, attr): coefficient, None: constant}``, or None if not linear."""
    a, b = _lin(left), _lin(right)
    if a is None or b is None:
        return None
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) - v
    return out


def _lin(e: Expr) -> dict | None:
    if isinstance(e, Const):
        v = e.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        return {None: float(v)}
    if isinstance(e, Attr):
        return {(e.pred, e.name): 1.0}
    if isinstance(e, Neg):
        a = _lin(e.arg)
        return None if a is None else {k: -v for k, v in a.items()}
    if isinstance(e, Arith):
        a, b = _lin(e.left), _lin(e.right)
        if a is None or b is None:
            return None
        if e.op in "+-":
            s = 1.0 if e.op == "+" else -1.0
            out = dict(a)
            for k, v in b.items():
                out[k] = out.get(k, 0.0) + s * v
            return out
        if e.op == "*":
            if set(a) == {None}:
                return {k: a[None] * v for k, v in b.items()}
            if set(b) == {None}:
                return {k: b[None] * v for k, v in a.items()}
            return None
        if e.op == "/" and set(b) == {None} and b[None] != 0:
            return {k: v / b[None] for k, v in a.items()}
    return None
