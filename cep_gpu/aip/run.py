"""The AIP run loop: sequence instances cloned, expired and resolved event by event."""

from __future__ import annotations

from collections import deque

import numpy as np

from ..analysis import has_aggregate
from ..backends import Matches
from ..evaluate import condition_mask, evaluate
from ..events import EventTable
from ..model import (
    SELF,
    Aggregate,
    Attr,
    Expr,
    Negation,
    Span,
    inputs,
)
from ..ranges import MAX_TS, lower_window_bound, shifted_ts
from .automaton import Automaton, FastCompare, read_attributes
from .kleene import KleeneSets, bind_sets, group_aggregate
from .trace import InstanceView, TraceStep

_NEVER = MAX_TS  # deadline of instances that cannot expire


_OPS = {
    "=": np.equal, "!=": np.not_equal, "<": np.less,
    "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
}



class _States:
    """The instances of one state of one sequence model: bound rows (declaration order, -1 = not
    bound yet) and their expiry deadline, in creation order."""

    __slots__ = ("rows", "deadline", "n", "min_deadline", "names")

    def __init__(self, width: int, named: bool) -> None:
        self.rows = np.empty((16, width), np.int64)
        self.deadline = np.empty(16, np.int64)
        self.n = 0
        self.min_deadline = _NEVER
        self.names: list[str] | None = [] if named else None

    def append(self, rows: np.ndarray, deadline: np.ndarray, names: list[str] | None) -> None:
        m = rows.shape[0]
        if self.n + m > self.rows.shape[0]:
            cap = max(2 * self.rows.shape[0], self.n + m)
            grown = np.empty((cap, self.rows.shape[1]), np.int64)
            grown[: self.n] = self.rows[: self.n]
            dl = np.empty(cap, np.int64)
            dl[: self.n] = self.deadline[: self.n]
            self.rows, self.deadline = grown, dl
        self.rows[self.n : self.n + m] = rows
        self.deadline[self.n : self.n + m] = deadline
        self.n += m
        if m:
            self.min_deadline = min(self.min_deadline, int(deadline.min()))
        if self.names is not None and names is not None:
            self.names.extend(names)

    def keep(self, mask: np.ndarray) -> None:
        """Delete the instances where ``mask`` is false."""
        kept = int(mask.sum())
        if kept == self.n:
            return
        self.rows[:kept] = self.rows[: self.n][mask]
        self.deadline[:kept] = self.deadline[: self.n][mask]
        if self.names is not None:
            self.names[:] = [nm for nm, k in zip(self.names, mask) if k]
        self.n = kept
        self.min_deadline = int(self.deadline[:kept].min()) if kept else _NEVER

    def expire(self, now: int) -> None:
        """Delete the instances whose time limit has passed (deadline before ``now``)."""
        if self.min_deadline < now:
            self.keep(self.deadline[: self.n] >= now)



class AipRun:
    """One pass of an :class:`Automaton` over an event table (rows in order)."""

    #: ``last`` early deletion runs once the first state holds ``GROWTH * n + SLACK`` instances,
    #: ``n`` being its size after the previous pass (tests set both to 0: a pass per event).
    SUPERSEDE_GROWTH = 2
    SUPERSEDE_SLACK = 8

    def __init__(self, auto: Automaton, table: EventTable, lo: int, hi: int,
                 excluded: np.ndarray | None, tracing: bool = False) -> None:
        self.auto = auto
        self.rule = rule = auto.rule
        self.table = table
        self.lo, self.hi = lo, hi
        self.tracing = tracing
        self.width = rule.n_predicates
        n = len(table)
        self.consumed = np.zeros(n, bool) if excluded is None else np.array(excluded, bool)
        self.ts = table.ts
        self.static = [self._static_mask(p) for p in range(self.width)]
        self.states = [
            [None] + [_States(self.width, tracing) for _ in m.order[:-1]] for m in auto.models
        ]
        self.super_cols = [
            read_attributes(rule, m.order[0]) if m.supersede or m.prune else ()
            for m in auto.models
        ]
        self.super_models = [m for m, model in enumerate(auto.models) if model.supersede]
        self.super_seen = [0] * len(auto.models)
        self.stores = [self._store(n_.event_type, n_.conditions) for n_ in rule.negations]
        self.agg_stores = [self._store(a.event_type, a.conditions) for a in rule.aggregates]
        self.children: dict[str, int] = {}
        self._root = np.full((1, self.width), -1, np.int64)
        self._kinds: dict[tuple[str, ...], bool] = {}
        self.out_rows: list[np.ndarray] = []
        self.out_aggs: list[np.ndarray] = []
        self.pending: deque[tuple[int, int, dict]] = deque()  # (deadline, term row, complete instances)
        self.last_accepted: list[InstanceView] = []
        self.last_composite: list[tuple[int, ...]] = []
        #: Kleene rules: the matches of each resolution (with their sets), and the matches
        #: estimated so far in this call (checked against max_matches)
        self.out_parts: list[Matches] = []
        self.estimate = 0.0
        self._kleene_rows: dict[str, np.ndarray] = {}

    # -- set-up --------------------------------------------------------------------------------

    def _static_mask(self, pred: int) -> np.ndarray:
        """Rows that pass ``pred``'s type and content test and are not excluded."""
        t = self.table
        code = t.type_code(self.rule.predicates[pred].event_type)
        mask = (t.types == code) & ~self.consumed if code >= 0 else np.zeros(len(t), bool)
        rows = np.flatnonzero(mask)
        if len(rows) and self.auto.static[pred]:
            probe = np.full((len(rows), self.width), -1, np.int64)
            probe[:, pred] = rows
            ok = np.ones(len(rows), bool)
            for c in self.auto.static[pred]:
                ok &= condition_mask(self.rule.conditions[c], t, probe)
            mask = np.zeros(len(t), bool)
            mask[rows[ok]] = True
        return mask

    def _store(self, event_type: str, conditions: tuple[Expr, ...]):
        """The negated/aggregated events: time-sorted rows passing their conditions on themselves
        alone, and the conditions left to check against each instance."""
        t = self.table
        rows = t.rows_of_type(event_type)
        own = [c for c in conditions if not inputs(c) and not has_aggregate(c)]
        rest = tuple(c for c in conditions if c not in own)
        if len(rows) and own:
            empty = np.empty((len(rows), 0), np.int64)
            ok = np.ones(len(rows), bool)
            for c in own:
                ok &= condition_mask(c, t, empty, None, rows)
            rows = rows[ok]
        return rows, t.ts[rows], rest

    # -- the event loop --------------------------------------------------------------------------

    def run(self) -> None:
        """Feed the rows in order; terminators are accepted only for rows in ``[lo, hi)``."""
        events = self._schedule()
        if self.tracing:
            self._trace_steps = []
        for r, work in events:
            self._process(r, work)
        self._flush()

    def _schedule(self) -> list[tuple[int, list[tuple[int, int]]]]:
        """For each row that fires some transition: the (model, transition) pairs, in order."""
        rows_l, ms, ts_ = [], [], []
        for m, model in enumerate(self.auto.models):
            for i, tr in enumerate(model.transitions):
                mask = self.static[tr.pred]
                rows = np.flatnonzero(mask[self.lo : self.hi]) + self.lo if tr.accepting \
                    else np.flatnonzero(mask[: self.hi])
                rows_l.append(rows)
                ms.append(np.full(len(rows), m, np.int64))
                ts_.append(np.full(len(rows), i, np.int64))
        if self.tracing:  # every event shows up in the trace, even those that fire nothing
            rows_l.append(np.arange(self.hi))
            ms.append(np.full(self.hi, -1, np.int64))
            ts_.append(np.full(self.hi, -1, np.int64))
        if not rows_l:
            return []
        rows = np.concatenate(rows_l)
        if not len(rows):
            return []
        mm, tt = np.concatenate(ms), np.concatenate(ts_)
        order = np.lexsort((tt, mm, rows))
        rows, mm, tt = rows[order], mm[order], tt[order]
        out: list[tuple[int, list[tuple[int, int]]]] = []
        cuts = np.flatnonzero(np.diff(rows)) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(rows)]):
            out.append((int(rows[a]), [(int(m), int(t)) for m, t in zip(mm[a:b], tt[a:b]) if m >= 0]))
        return out

    def _process(self, r: int, work: list[tuple[int, int]]) -> None:
        now = int(self.ts[r])
        while self.pending and self.pending[0][0] < now:
            _, term, done = self.pending.popleft()
            self._resolve(term, done)
        complete: dict[tuple[int, int], list[np.ndarray]] = {}
        self.last_accepted = []
        self.last_composite = []
        for m, i in work:
            self._advance(m, i, r, now, complete)
        for m in self.super_models:
            st = self.states[m][1]
            # amortised: only once the state has grown since the last pass
            if st.n >= self.SUPERSEDE_GROWTH * self.super_seen[m] + self.SUPERSEDE_SLACK:
                self._supersede(m, now)
                self.super_seen[m] = st.n
        if complete:
            if self.auto.waits_for_future:
                self.pending.append((min(int(now) + self.rule.trailing_horizon(), int(_NEVER)), r, complete))
            else:
                self._resolve(r, complete)
        if self.tracing:
            self._record(r, now)

    def _flush(self) -> None:
        for _, term, done in self.pending:
            self._resolve(term, done)
        self.pending.clear()

    def _advance(self, m: int, i: int, r: int, now: int, complete: dict) -> None:
        """Fire transition ``i`` of model ``m`` with row ``r`` on every instance that it fits."""
        model = self.auto.models[m]
        tr = model.transitions[i]
        ts = self.ts
        x_new = tr.pred
        if i == 0:
            parents = self._root
            names = ["Seq" if len(self.auto.models) == 1 else f"M{m}.Seq"] if self.tracing else None
            ok = np.ones(1, bool)
        else:
            st = self.states[m][i]
            st.expire(now)
            if st.n == 0:
                return
            parents = st.rows[: st.n]
            names = st.names
            last = parents[:, model.order[i - 1]]
            ok = last < r
            if tr.same_row:
                ok |= last == r

        # checks between the new event and the bound ones, before any clone is made
        def time_of(x: int):
            return now if x == x_new else ts[parents[:, x]]

        for x, a, w in tr.lower:
            ok &= time_of(x) >= lower_window_bound(time_of(a), w)
        def row_of(x: int):
            return r if x == x_new else parents[:, x]

        for x, b, ties in tr.upper:
            # rows are in (ts, id) order, so row order is the tie-breaking order of `ties`
            ok &= (row_of(x) < row_of(b)) if ties else (time_of(x) < time_of(b))
        for fc in tr.fast:
            if fc.implied_by and not self._same_kind(fc.implied_by):
                continue
            ok &= self._compare(fc, parents, x_new, r)
        sel = np.flatnonzero(ok)
        if not len(sel):
            return
        rows = parents[sel]
        rows[:, x_new] = r
        if tr.conditions:
            ok = np.ones(len(sel), bool)
            for c in tr.conditions:
                if ok.any():
                    ok[ok] = condition_mask(self.rule.conditions[c], self.table, rows[ok])
            rows, sel = rows[ok], sel[ok]
            if not len(sel):
                return
        if i == 1 and model.prune and len(sel) > 1:
            pick = self._prune(m, rows[:, model.order[0]], model.prune)
            rows, sel = rows[pick], sel[pick]
        if names is not None:
            names = [self._clone_name(names[j]) for j in sel]
        if tr.accepting:
            complete.setdefault((model.plan, model.depth), []).append(rows)
            if self.tracing:
                self.last_accepted.extend(self._views(m, i + 1, rows, names))
            return
        if len(tr.expiry) == 1:
            x, w = tr.expiry[0]
            deadline = shifted_ts(ts[rows[:, x]], w)  # (saturated at _NEVER: no wrap-around)
        elif tr.expiry:
            deadline = np.min(np.stack([shifted_ts(ts[rows[:, x]], w) for x, w in tr.expiry]), axis=0)
        else:
            deadline = np.full(rows.shape[0], _NEVER, np.int64)
        self.states[m][i + 1].append(rows, deadline, names)

    def _same_kind(self, names: tuple[str, ...]) -> bool:
        hit = self._kinds.get(names)
        if hit is None:
            kinds = {self.table.columns[n].kind if n in self.table.columns else None for n in names}
            hit = self._kinds[names] = len(kinds) == 1 and None not in kinds
        return hit

    def _compare(self, fc: FastCompare, parents: np.ndarray, x_new: int, r: int) -> np.ndarray:
        """``fc`` for every parent instance, with the new event (row ``r``) bound to ``x_new``."""
        sides = []
        for pred, name in (fc.left, fc.right):
            col = self.table.columns.get(name)
            if col is None:
                return np.zeros(parents.shape[0], bool)
            if pred == x_new:
                if not col.valid[r]:
                    return np.zeros(parents.shape[0], bool)
                sides.append((col.kind, col.values[r], True))
            else:
                idx = parents[:, pred]
                sides.append((col.kind, col.values[idx], col.valid[idx]))
        (ka, a, va), (kb, b, vb) = sides
        if ka != kb and ka in ("int", "float") and kb in ("int", "float"):
            a, b = np.float64(a) if np.isscalar(a) else a.astype(np.float64), \
                np.float64(b) if np.isscalar(b) else b.astype(np.float64)
        out = _OPS[fc.op](a, b) & va & vb
        return np.broadcast_to(out, (parents.shape[0],))

    def _supersede(self, m: int, now: int) -> None:
        """``last`` early deletion in the first state of model ``m``.

        Instance I (event e1) can never be chosen once a newer instance J (event e2, later row)
        in the same state has the same values of every attribute of the predicate that any check
        reads, and ``ts(e2) < now``: every event still to come is later than both, so each check
        that e1 passes e2 passes too (same attributes; the window edge is further from the older
        one; nothing reads the predicate's timestamp, see :func:`_supersedable`; it is the
        deepest predicate of the sub-plan, so nothing is anchored at it), and e2 is later.
        Clones of I that already advanced are kept: they bound events J cannot.
        """
        st = self.states[m][1]
        if st.n < 2:
            return
        x = self.auto.models[m].order[0]
        rows = st.rows[: st.n, x]
        settled = self.ts[rows] < now
        if settled.sum() < 2:
            return
        key = self._key(m, rows)
        order = np.lexsort([rows] + key[::-1])  # by key, then by row
        pos = np.arange(st.n)
        if key:
            k = np.stack(key, axis=1)[order]
            starts = np.r_[0, np.flatnonzero(np.any(k[1:] != k[:-1], axis=1)) + 1]
        else:
            starts = np.zeros(1, np.int64)
        s = settled[order]
        newest = np.maximum.reduceat(np.where(s, pos, -1), starts)
        sizes = np.diff(np.r_[starts, st.n])
        keep_sorted = ~s | (pos >= np.repeat(newest, sizes))
        if keep_sorted.all():
            return
        keep = np.empty(st.n, bool)
        keep[order] = keep_sorted
        st.keep(keep)

    def _key(self, m: int, rows: np.ndarray) -> list[np.ndarray]:
        """Integer key columns of the events ``rows`` (of the first predicate of model ``m``):
        the values and validity of every attribute of it that a check reads."""
        key = []
        for name in self.super_cols[m]:
            col = self.table.columns.get(name)
            if col is None:
                continue
            valid = col.valid[rows]
            v = col.values[rows]
            if col.kind == "float":  # by bit pattern: equal bits, equal outcomes
                v = np.where(valid, v, 0.0).view(np.int64)
            key.append(np.where(valid, v.astype(np.int64, copy=False), 0))
            key.append(valid.astype(np.int64))
        return key

    def _prune(self, m: int, rows: np.ndarray, policy: str) -> np.ndarray:
        """Early deletion for ``last``/``first`` at the second transition of model ``m``.

        ``rows``: the event bound to the model's first predicate X (the step chosen by
        ``policy``) in each new clone; all clones bind the same new event and passed every check
        of this transition. Of clones whose X events have the same key (:meth:`_key`), only the
        one with the latest (``last``) / earliest (``first``) X can ever be chosen: every later
        check reads only X's key attributes and events bound after it (nothing reads X's
        timestamp or fixes a span with it, see :func:`_supersedable`), and the one timing check
        left that could favour the other X was done here (see :func:`_sequence_model`). So the
        others are deleted at once. Returns the indices of the clones kept.
        """
        key = self._key(m, rows)
        if not key:
            return np.array([int(np.argmax(rows) if policy == "last" else np.argmin(rows))])
        order = np.lexsort([rows] + key[::-1])  # by key, then by row
        k = np.stack(key, axis=1)[order]
        change = np.any(k[1:] != k[:-1], axis=1)
        if policy == "last":
            ends = np.r_[np.flatnonzero(change), len(order) - 1]
        else:
            ends = np.r_[0, np.flatnonzero(change) + 1]
        return np.sort(order[ends])

    # -- resolution at the terminator -------------------------------------------------------------

    def _resolve(self, term: int, complete: dict) -> None:
        """Choose the matches of terminator ``term`` from the complete instances."""
        found_rows, found_aggs = [], []
        n_aggs = len(self.rule.aggregates)
        for p, steps in enumerate(self.auto.steps):
            chosen: list[tuple[tuple[int, ...], np.ndarray]] = []
            for step in steps:
                parts = complete.get((p, step.depth))
                if not parts:
                    break
                rows = np.concatenate(parts)
                cols = step.prefix + (step.pred,)
                ok = ~np.any(self.consumed[rows[:, list(cols)]], axis=1)
                aggs = np.full((rows.shape[0], n_aggs), np.nan)
                rows, aggs = rows[ok], aggs[ok]
                for kcols, keys in chosen:
                    if not len(rows):
                        break
                    sel = _isin_rows(rows[:, list(kcols)], keys)
                    rows, aggs = rows[sel], aggs[sel]
                for a in step.aggregates:
                    if len(rows):
                        aggs[:, a] = self._aggregate(a, rows)
                for ni in step.negations:
                    if len(rows):
                        sel = self._negation_ok(ni, rows)
                        rows, aggs = rows[sel], aggs[sel]
                rows, aggs = self._conditions(step.conditions, rows, aggs)
                if not len(rows):
                    break
                if step.policy is not None:
                    pick = _choose(rows, step.prefix, step.pred, step.policy)
                    rows, aggs = rows[pick], aggs[pick]
                    chosen.append((cols, rows[:, list(cols)].copy()))
                if step.final:
                    for a in range(n_aggs):
                        if a not in step.aggregates:
                            aggs[:, a] = self._aggregate(a, rows)
                    found_rows.append(rows)
                    found_aggs.append(aggs)
            else:  # every plain step has instances left: bind the Kleene positions' sets
                if self.auto.kleene:
                    self._bind_kleene(p, rows, aggs)
        if not found_rows:
            return
        rows = np.concatenate(found_rows)
        self.out_rows.append(rows)
        self.out_aggs.append(np.concatenate(found_aggs))
        if self.tracing:
            self.last_composite.extend(tuple(int(v) for v in self.table.ids[r]) for r in rows)
        # all composite events of this terminator exist before its consumption applies
        for pred in self.rule.consuming:
            self.consumed[rows[:, pred]] = True

    def _conditions(self, conds: tuple[int, ...], rows: np.ndarray, aggs: np.ndarray):
        """The instances (and their aggregate values) that pass the rule's conditions ``conds``."""
        for c in conds:
            if len(rows):
                sel = condition_mask(self.rule.conditions[c], self.table, rows, aggs)
                rows, aggs = rows[sel], aggs[sel]
        return rows, aggs

    def kleene_rows(self, event_type: str) -> np.ndarray:
        """Rows of ``event_type`` (time order): the store Kleene sets are taken from."""
        hit = self._kleene_rows.get(event_type)
        if hit is None:
            hit = self._kleene_rows[event_type] = self.table.rows_of_type(event_type)
        return hit

    def _bind_kleene(self, p: int, rows: np.ndarray, aggs: np.ndarray) -> None:
        """Extend the resolved instances of plan ``p`` by the sets of its Kleene positions
        (:mod:`cep_gpu.aip.kleene`), check what the sets make checkable, keep the matches."""
        plan = self.rule.plans[p]
        sets = KleeneSets(self.rule, self.table)
        rows = sets.widen(rows)
        for ks in self.auto.kleene[p]:
            rows, aggs = bind_sets(self, plan, ks, sets, rows, aggs)
            for ni in ks.negations:
                if len(rows):
                    probe = rows
                    if self.rule.negations[ni].span.lo_ref == ks.pred:
                        probe = rows.copy()  # a span that starts at the set starts at its last element
                        probe[:, ks.pred] = sets.last(rows, ks.pred)
                    sel = self._negation_ok(ni, probe)
                    rows, aggs = rows[sel], aggs[sel]
            rows, aggs = self._conditions(ks.conditions, rows, aggs)
            if not len(rows):
                return
        found = sets.matches(rows, aggs)
        self.out_parts.append(found)
        if self.tracing:  # the flat ids of each match: a set's ids at its position
            ids = self.table.ids
            for i, row in enumerate(found.rows):
                flat: list[int] = []
                for j, r in enumerate(row):
                    if j in found.sets:
                        off, members = found.sets[j]
                        flat.extend(int(ids[x]) for x in members[off[i]:off[i + 1]])
                    else:
                        flat.append(int(ids[r]))
                self.last_composite.append(tuple(flat))

    def _span_members(self, span: Span, rows: np.ndarray, store) -> tuple[np.ndarray, np.ndarray]:
        """(instance index, stored row) pairs: the stored events inside each instance's span."""
        cand, cts, _ = store
        ts = self.ts
        lo = shifted_ts(ts[rows[:, span.lo_ref]], span.lo_offset)
        hi = shifted_ts(ts[rows[:, span.hi_ref]], span.hi_offset)
        swap = lo > hi  # `between Y and Z` with Z before Y; the flags stay as they are
        lo, hi = np.where(swap, hi, lo), np.where(swap, lo, hi)
        a = np.searchsorted(cts, lo, "left" if span.lo_inclusive else "right")
        b = np.searchsorted(cts, hi, "right" if span.hi_inclusive else "left")
        counts = np.maximum(b - a, 0)
        idx = np.repeat(np.arange(rows.shape[0]), counts)
        starts = np.cumsum(counts) - counts
        offs = np.arange(len(idx)) - np.repeat(starts, counts)
        return idx, cand[np.repeat(a, counts) + offs]

    def _members_ok(self, conditions, rows, idx, members) -> np.ndarray:
        ok = np.ones(len(idx), bool)
        for c in conditions:
            if ok.any():
                ok[ok] = condition_mask(c, self.table, rows[idx[ok]], None, members[ok])
        return ok

    def _negation_ok(self, ni: int, rows: np.ndarray) -> np.ndarray:
        """For each instance: no negated event in its span satisfies the negation's conditions."""
        neg: Negation = self.rule.negations[ni]
        store = self.stores[ni]
        idx, members = self._span_members(neg.span, rows, store)
        ok = self._members_ok(store[2], rows, idx, members)
        return np.bincount(idx[ok], minlength=rows.shape[0]) == 0

    def _aggregate(self, ai: int, rows: np.ndarray) -> np.ndarray:
        """The aggregate's value for each instance (NaN = null)."""
        agg: Aggregate = self.rule.aggregates[ai]
        store = self.agg_stores[ai]
        m = rows.shape[0]
        idx, members = self._span_members(agg.span, rows, store)
        ok = self._members_ok(store[2], rows, idx, members)
        idx, members = idx[ok], members[ok]
        if agg.function == "count":
            return np.bincount(idx, minlength=m).astype(np.float64)
        v = evaluate(Attr(SELF, agg.attribute), self.table, np.empty((len(idx), 0), np.int64),
                     None, members)
        vals = v.values.astype(np.float64)
        good = v.valid & ~np.isnan(vals)
        return group_aggregate(agg.function, idx[good], vals[good], m)

    # -- tracing ---------------------------------------------------------------------------------

    @property
    def trace_steps(self) -> list[TraceStep]:
        """What a run with ``tracing=True`` recorded, one step per event (see :func:`cep_gpu.aip.trace`)."""
        return self._trace_steps

    def _clone_name(self, parent: str) -> str:
        k = self.children.get(parent, 0) + 1
        self.children[parent] = k
        return f"{parent}{k}"

    def _views(self, m: int, state: int, rows: np.ndarray, names) -> list[InstanceView]:
        model = self.auto.models[m]
        preds = self.rule.predicates
        out = []
        for j, row in enumerate(rows):
            ids = {preds[x].alias: int(self.table.ids[row[x]]) for x in model.order[:state]}
            out.append(InstanceView(names[j], m, model.state_name(self.rule, state), ids))
        return out

    def _record(self, r: int, now: int) -> None:
        alive = []
        for m, model in enumerate(self.auto.models):
            for s in range(1, len(model.order)):
                st = self.states[m][s]
                st.expire(now)
                alive.extend(self._views(m, s, st.rows[: st.n], st.names))
        t = self.table
        self._trace_steps.append(TraceStep(
            r, int(t.ids[r]), now, t.type_names[t.types[r]], alive,
            list(self.last_accepted), list(self.last_composite),
        ))

    def matches(self) -> Matches:
        if self.rule.kleene_positions:
            return Matches.concat(self.rule, self.out_parts)
        if not self.out_rows:
            return Matches.empty(self.rule)
        return Matches(np.concatenate(self.out_rows), np.concatenate(self.out_aggs))



def _choose(rows: np.ndarray, prefix: tuple[int, ...], pred: int, policy: str) -> np.ndarray:
    """Indices of the latest (``last``) / earliest (``first``) row of ``pred`` per prefix."""
    keys = [rows[:, pred]] + [rows[:, c] for c in reversed(prefix)]
    order = np.lexsort(keys)
    if not prefix:
        return order[-1:] if policy == "last" else order[:1]
    pre = rows[order][:, list(prefix)]
    change = np.any(pre[1:] != pre[:-1], axis=1)
    if policy == "last":
        ends = np.r_[np.flatnonzero(change), len(order) - 1]
    else:
        ends = np.r_[0, np.flatnonzero(change) + 1]
    return order[ends]



def _isin_rows(rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """For each row of ``rows``: whether it equals some row of ``keys`` (same width)."""
    if not len(keys):
        return np.zeros(len(rows), bool)
    both = np.ascontiguousarray(np.concatenate([keys, rows]))
    view = both.view(np.dtype((np.void, both.dtype.itemsize * both.shape[1]))).ravel()
    _, inv = np.unique(view, return_inverse=True)
    inv = inv.ravel()
    return np.isin(inv[len(keys):], inv[: len(keys)])

