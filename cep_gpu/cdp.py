"""Column Delayed Processing (the chapter's section 3.2): the host side shared by ``cpu`` and ``gpu``.

For one rule over rows ``[lo, hi)`` of a table:

1. **Columns** (:class:`~cep_gpu.columns.ColumnStore`): per predicate, the rows of its type that
   pass its static filters, time-sorted; only rows within ``rule.lookback()`` of ``ts[lo]`` are
   read, so a streaming call on a large buffer stays cheap.
2. **Batch of terminators**: every terminator in ``[lo, hi)`` starts a partial sequence (an int64
   row of table rows in declaration order, -1 = unbound).
3. **Step by step** in the plan's binding order: the host computes each sequence's candidate range
   in the step's column by binary search (:mod:`cep_gpu.ranges`), through the parameter index when
   the step has an equality on already bound attributes; then a :class:`Combiner` runs the
   combination kernel (``each``: every valid candidate, ``last``/``first``: the latest/earliest).
4. Aggregates of the complete sequences are computed in kernels and returned in ``Matches.aggs``.

Rules with ``consuming`` run terminator by terminator in row order, with an excluded mask that
grows as composite events consume their events.

Only the combination differs between backends: :class:`Combiner` is the seam. The ``cpu`` backend
uses :class:`CpuCombiner` (Numba, :mod:`cep_gpu.kernels.cpu`); the ``gpu`` backend registers its own
combiner through :func:`register_combiner`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from .analysis import unbounded_window
from .backends import Matches, register
from .codegen import RuleSpec, StepSpec, compile_numba, lower
from .columns import Column, ColumnStore
from .evaluate import evaluate
from .events import EventTable
from .jit import cached_njit
from .model import Rule
from .ranges import as_keys, step_keyed_ranges, step_ranges
from .rule_text import aliases, duration, expr_text

# ------------------------------------------------------------------------------------------------
# The seam between the host loop and the kernels


@dataclass
class StepInput:
    """What a combination kernel gets for one step of one plan.

    ``seqs`` (n, P) partial sequences; ``lo``/``hi`` (n,) candidate ranges into ``cand`` (table
    rows); ``excluded``/``use_excluded``: consumed rows to skip; ``kernel_args``: the kernel argument tuple
    (:class:`cep_gpu.codegen.Layout`); ``plan``/``spec``: which generated check applies.
    """

    spec: StepSpec
    plan: int
    seqs: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    cand: np.ndarray
    excluded: np.ndarray
    use_excluded: bool
    kernel_args: tuple


class Combiner(Protocol):
    """The backend-specific part of CDP: compile a rule, combine one step, compute aggregates."""

    name: str

    def prepare(self, spec: RuleSpec, kinds: dict[str, str | None]) -> object:
        """Compile (or fetch from a cache) the rule's kernels; the result is passed back below."""
        ...

    def each(self, compiled: object, step: StepInput) -> np.ndarray:
        """(n_out, P) new sequences: each sequence extended by every valid candidate, in order."""
        ...

    def select(self, compiled: object, step: StepInput, last: bool) -> np.ndarray:
        """(n,) the latest (``last``) or earliest valid candidate row per sequence, -1 if none."""
        ...

    # Optional: ``count_each(compiled, step) -> int``, the number of sequences ``each`` would
    # return, without building them (``detect(..., output="count")``); else ``len(each(...))``.
    # Optional: ``bind_lineage(lineage)``, called with the table's row lineage
    # (``EventTable.lineage``) before the steps of a call over that table (the GPU combiner
    # keeps device columns across calls with it).

    def aggregates(self, compiled: object, spec: RuleSpec, seqs: np.ndarray, kernel_args: tuple) -> np.ndarray:
        """(n, n_aggregates) float64 aggregate values of complete sequences (NaN = null)."""
        ...


class CpuCombiner:
    """Numba kernels of :mod:`cep_gpu.kernels.cpu` with the rule's generated checks."""

    name = "cpu"
    #: evaluates Kleene positions (the host loop's Kleene step runs the generated checks)
    supports_kleene = True

    def prepare(self, spec: RuleSpec, kinds: dict[str, str | None]):
        return compile_numba(spec, kinds)

    def _valid(self, compiled, step: StepInput):
        from .kernels.cpu import always_valid

        return always_valid if step.spec.trivial else compiled.valid[step.plan][step.spec.step]

    def each(self, compiled, step: StepInput) -> np.ndarray:
        from .kernels.cpu import combine_each

        return combine_each(
            self._valid(compiled, step), step.seqs, step.lo, step.hi, step.cand, step.spec.pred,
            step.excluded, step.use_excluded, step.kernel_args, step.spec.trivial,
        )

    def count_each(self, compiled, step: StepInput) -> int:
        from .kernels.cpu import count_each

        return count_each(
            self._valid(compiled, step), step.seqs, step.lo, step.hi, step.cand,
            step.excluded, step.use_excluded, step.kernel_args, step.spec.trivial,
        )

    def select(self, compiled, step: StepInput, last: bool) -> np.ndarray:
        from .kernels.cpu import combine_select

        if step.spec.trivial and not step.use_excluded:
            # nothing to check: the choice is the range's edge
            n = len(step.cand)
            has = step.hi > step.lo
            edge = np.clip(step.hi - 1 if last else step.lo, 0, max(n - 1, 0))
            return np.where(has, step.cand[edge] if n else -1, -1).astype(np.int64)
        return combine_select(
            self._valid(compiled, step), step.seqs, step.lo, step.hi, step.cand,
            step.excluded, step.use_excluded, step.kernel_args, last,
        )

    def aggregates(self, compiled, spec: RuleSpec, seqs: np.ndarray, kernel_args: tuple) -> np.ndarray:
        from .kernels.cpu import compute_aggregates

        return compute_aggregates(compiled.aggs_all, seqs, kernel_args, len(spec.rule.aggregates))


# ------------------------------------------------------------------------------------------------
# Host side


def attribute_kinds(spec: RuleSpec, table: EventTable) -> dict[str, str | None]:
    """Kind of every attribute the kernels read (None: no such column in the table)."""
    return {a: (table.columns[a].kind if a in table.columns else None) for a in spec.layout.attrs}


def kernel_args(spec: RuleSpec, table: EventTable, store: ColumnStore) -> tuple:
    """The kernel argument tuple of :class:`cep_gpu.codegen.Layout`."""
    args: list = [table.ts]
    for a in spec.layout.attrs:
        col = table.columns.get(a)
        if col is None:  # never read: the generator emits a constant null for it
            args += [np.zeros(1, np.float64), np.zeros(1, np.bool_)]
        else:
            args += [col.values, col.valid]
    codes = [table.strings.lookup(s) for s in spec.layout.strings]
    args.append(np.array(codes or [-2], dtype=np.int64))
    for col in store.negations + store.aggregates:
        args += [col.rows, col.ts]
    return tuple(args)


def _conds(rule: Rule, idx: tuple[int, ...]):
    return tuple(rule.conditions[i] for i in idx)


class CDPBackend:
    """The CDP matcher (:class:`cep_gpu.backends.Backend`) over a given :class:`Combiner`.

    ``use_index=False`` scans every window instead of using parameter indexes (for tests and
    comparisons: both give the same matches).
    """

    def __init__(self, combiner: Combiner, name: str | None = None, use_index: bool = True) -> None:
        self.combiner = combiner
        self.name = name or combiner.name
        self.use_index = use_index
        self._specs: dict[int, tuple[Rule, RuleSpec]] = {}

    def spec(self, rule: Rule) -> RuleSpec:
        """The lowered rule (cached per rule object)."""
        hit = self._specs.get(id(rule))
        if hit is None or hit[0] is not rule:
            if len(self._specs) >= 1024:  # bounded: rules come and go in long sessions
                self._specs.clear()
            hit = self._specs[id(rule)] = (rule, lower(rule, self.use_index))
        return hit[1]

    def _check_kleene(self, rule: Rule) -> None:
        """Kleene positions need a combiner that evaluates them (the CPU one): others refuse."""
        if rule.kleene_positions and not getattr(self.combiner, "supports_kleene", False):
            from .kleene import require_support

            require_support(rule, self.name)

    def explain(self, rule: Rule, sample=None) -> str:
        """What CDP does for ``rule`` (for ``Engine.explain`` and the CLI): see :func:`describe`;
        ``sample`` plays no part (the steps do not depend on the input)."""
        return describe(rule, self.use_index)

    # -- the backend contract ---------------------------------------------------------------------

    def match(
        self,
        rule: Rule,
        table: EventTable,
        lo: int = 0,
        hi: int | None = None,
        excluded: np.ndarray | None = None,
    ) -> Matches:
        """Matches of ``rule`` whose terminator is a row in ``[lo, hi)`` (see the backend contract)."""
        self._check_kleene(rule)
        lo, hi = _clip(table, lo, hi)
        if hi <= lo:
            return Matches.empty(rule)
        spec = self.spec(rule)
        run = self._run(rule, spec, table, lo, hi, excluded)
        if not rule.consuming:
            parts = [run.plan(p, run.terminators(p, lo, hi), _NO_EXCL, False) for p in range(len(spec.plans))]
            seqs = parts[0] if len(parts) == 1 else np.concatenate(parts)
        else:
            mask = np.zeros(len(table), np.bool_) if excluded is None else np.array(excluded, np.bool_)
            seqs = run.consuming(lo, hi, mask)
        if rule.kleene_positions:
            return run.kleene_matches(seqs)
        aggs = (
            self.combiner.aggregates(run.compiled, spec, seqs, run.kernel_args)
            if rule.aggregates and len(seqs)
            else np.full((len(seqs), len(rule.aggregates)), np.nan)
        )
        return Matches(np.ascontiguousarray(seqs, np.int64), aggs)

    def count(self, rule: Rule, table: EventTable, lo: int = 0, hi: int | None = None) -> int:
        """``len(self.match(rule, table, lo, hi))`` without building the matches of the last step.

        The last binding step of each plan counts its valid (sequence, candidate) pairs instead of
        writing the extended sequences (``detect(..., output="count")``). Rules with ``consuming``
        need their matches to know what is consumed: they are matched in full.
        """
        self._check_kleene(rule)
        lo, hi = _clip(table, lo, hi)
        if hi <= lo or rule.consuming or rule.kleene_positions:
            return len(self.match(rule, table, lo, hi))
        spec = self.spec(rule)
        run = self._run(rule, spec, table, lo, hi, None)
        return sum(run.plan_count(p, run.terminators(p, lo, hi)) for p in range(len(spec.plans)))

    def _run(
        self, rule: Rule, spec: RuleSpec, table: EventTable, lo: int, hi: int, excluded: np.ndarray | None
    ) -> _Run:
        """Columns, kernel arguments and the compiled rule of one call over terminators ``[lo, hi)``."""
        ts = table.ts
        # only rows that some window of a terminator in [lo, hi) can reach
        # a predicate without a window (never made by the parser) can reach back to the start
        unbounded = unbounded_window(rule)
        # bounds as Python ints clamped to int64: no wrap-around for timestamps near the range's ends
        start = 0 if unbounded else int(np.searchsorted(ts, max(int(ts[lo]) - rule.lookback(), _TS_MIN), "left"))
        horizon = rule.trailing_horizon()
        stop_ext = int(np.searchsorted(ts, min(int(ts[hi - 1]) + horizon, _TS_MAX), "right")) if horizon else hi
        store = ColumnStore(
            rule, table,
            tuple(_conds(rule, f) + _kleene_filters(rule, p) for p, f in enumerate(spec.filters)),
            tuple(tuple(n.conditions[i] for i in f) for n, f in zip(rule.negations, spec.neg_filters)),
            tuple(tuple(a.conditions[i] for i in f) for a, f in zip(rule.aggregates, spec.agg_filters)),
            start, hi, max(stop_ext, hi),
            excluded=None if rule.consuming else excluded,
        )
        args = kernel_args(spec, table, store)
        combiner = self.combiner
        bind = getattr(combiner, "bind_lineage", None)
        if bind is not None:
            bind(table.lineage)
        compiled = combiner.prepare(spec, attribute_kinds(spec, table))
        return _Run(combiner, compiled, spec, table, store, args)


def _kleene_filters(rule: Rule, pred: int) -> tuple:
    """A Kleene position's per-element conditions that read the element alone, as column filters
    (fewer candidates to scan; the kernel's per-element check still holds them all)."""
    from .model import SELF, Attr, Timestamp, inputs, map_expr, walk

    kl = rule.predicates[pred].kleene
    if kl is None:
        return ()
    alone = [
        c for c in kl.conditions
        if not inputs(c) and all(not isinstance(n, (Attr, Timestamp)) or n.pred == SELF for n in walk(c))
    ]

    def to_pred(node):
        if isinstance(node, (Attr, Timestamp)) and node.pred == SELF:
            return replace(node, pred=pred)
        return node

    return tuple(map_expr(c, to_pred) for c in alone)


def _in_range(rows: np.ndarray, lo: int, hi: int) -> np.ndarray:
    a, b = np.searchsorted(rows, [lo, hi])
    return rows[a:b]


def _clip(table: EventTable, lo: int, hi: int | None) -> tuple[int, int]:
    return max(lo, 0), len(table) if hi is None else min(hi, len(table))


#: the excluded mask of calls that consume nothing
_NO_EXCL = np.zeros(1, np.bool_)
_TS_MIN, _TS_MAX = -(2**63), 2**63 - 1  # int64 ns


@dataclass
class _Run:
    """One ``match`` call: the step loop over a batch of partial sequences."""

    combiner: Combiner
    compiled: object
    spec: RuleSpec
    table: EventTable
    store: ColumnStore
    kernel_args: tuple
    #: the matches so far estimated for the Kleene sets of this call (checked against max_matches)
    estimate: float = 0.0
    #: Kleene position -> the flat set store its step wrote (sequences point into it)
    _sets: dict = field(default_factory=dict)
    #: Kleene position -> (set starts sorted, aggregate values per set) computed by a device
    #: combiner's kernel (``kleene_sets``); the host computes them where it is absent
    _set_values: dict = field(default_factory=dict)

    def plan(self, p: int, terms: np.ndarray, excl: np.ndarray, use_excl: bool) -> np.ndarray:
        """Complete sequences of plan ``p`` for the terminator rows ``terms``."""
        return self._steps(p, terms, excl, use_excl, count=False)

    def plan_count(self, p: int, terms: np.ndarray) -> int:
        """``len(self.plan(p, terms, _NO_EXCL, False))``, counting the last step's results."""
        return self._steps(p, terms, _NO_EXCL, False, count=True)

    def terminators(self, p: int, lo: int, hi: int) -> np.ndarray:
        """Rows of plan ``p``'s terminator column in ``[lo, hi)``."""
        return _in_range(self.store.predicates[self.spec.plans[p].plan.terminator].rows, lo, hi)

    def _steps(self, p: int, terms: np.ndarray, excl: np.ndarray, use_excl: bool, count: bool):
        plan = self.spec.plans[p]
        seqs = np.full((len(terms), self.spec.width), -1, np.int64)
        for st in plan.steps:
            if len(seqs) == 0:
                break
            if st.step == 0:
                seqs[:, st.pred] = terms
                if st.trivial:
                    continue
                # the terminator's own checks (aggregates, negations): a one-candidate `each`
                lo = np.arange(len(terms), dtype=np.int64)
                step = StepInput(st, p, seqs, lo, lo + 1, terms, excl, False, self.kernel_args)
            else:
                lo, hi, cand = self.ranges(st, seqs)
                kleene = plan.plan.predicates[st.pred].kleene
                if kleene is not None:
                    seqs = self._kleene_step(p, st, kleene, seqs, lo, hi, cand)
                    continue
                step = StepInput(st, p, seqs, lo, hi, cand, excl, use_excl, self.kernel_args)
                if st.policy != "each":
                    chosen = self.combiner.select(self.compiled, step, st.policy == "last")
                    keep = chosen >= 0
                    seqs = seqs[keep]
                    seqs[:, st.pred] = chosen[keep]
                    continue
            if count and st is plan.steps[-1]:
                return self._count_each(step)
            seqs = self.combiner.each(self.compiled, step)
        return len(seqs) if count else seqs

    # -- Kleene closure (docs/language.md) -----------------------------------------------------

    def _kleene_step(self, p: int, st: StepSpec, kl, seqs, lo, hi, cand) -> np.ndarray:
        """Each sequence extended by every candidate set of Kleene position ``st.pred``.

        Elements: the candidates after the previous position that pass the per-element checks;
        sets: every subset of them of an allowed size whose consecutive elements pass the
        consecutive checks (``greedy``: all of them); then the set conditions (aggregates over
        the set, vectorised on the host) and the negations bounded by the set (generated check).
        """
        from .errors import RuleError
        from .kernels import kleene as kk
        from .kleene import check_estimate

        rule, k = self.spec.rule, st.pred
        col: Column = self.store.predicates[k]
        if kl.after is not None:  # strictly after the previous position
            lo = np.maximum(lo, np.searchsorted(col.ts, self.table.ts[seqs[:, kl.after]], "right"))
            hi = np.maximum(hi, lo)
        device = getattr(self.combiner, "kleene_sets", None)  # the GPU kernels (cuda/cdp.cuh)
        if device is not None:
            e_off, e_rows = self.combiner.kleene_elements(self.compiled, k, seqs, lo, hi, cand, self.kernel_args)
        else:
            elem, pair = self.compiled.kleene[k]
            e_off, e_rows = kk.elements(elem, seqs, lo, hi, cand, self.kernel_args)
        self.estimate += kk.subset_estimate(np.diff(e_off), kl.min_size, kl.max_size, kl.greedy)
        check_estimate(rule, k, self.estimate)
        if k in self._sets:  # a second step of this position cannot happen (one plan, one step)
            raise RuleError(f"rule {rule.name!r}: Kleene position {k} bound twice")  # pragma: no cover
        if device is not None:
            # consecutive and set conditions and negations are checked in the kernel; it reads
            # the aggregates over the sets bound before this one from aggs_in
            aggs_in = self._kleene_aggs(seqs)
            set_seq, set_start, set_len, flat, set_aggs = device(
                self.compiled, p, st.step, k, seqs, e_off, e_rows, aggs_in, self.kernel_args
            )
            # the kernel's values of k's aggregates, found again by set start (unique per set)
            by_start = np.argsort(set_start, kind="stable")
            self._set_values[k] = (set_start[by_start], set_aggs[by_start])
        else:
            set_seq, set_start, set_len, flat = kk.enumerate_sets(
                pair, seqs, e_off, e_rows, self.kernel_args, kl.min_size, kl.max_size, kl.greedy
            )
        out = seqs[set_seq]
        base = self.spec.kleene_base(k)
        self._sets[k] = flat
        out[:, k] = flat[set_start] if len(flat) else -1
        out[:, base] = set_start
        out[:, base + 1] = set_len
        out[:, base + 2] = flat[set_start + set_len - 1] if len(flat) else -1
        if device is not None:
            return out
        if len(out) and st.conditions:
            from .evaluate import condition_mask

            aggs = self._kleene_aggs(out)  # the sets bound so far (this one included)
            keep = np.ones(len(out), bool)
            for c in st.conditions:
                keep &= condition_mask(rule.conditions[c], self.table, out[:, : rule.n_predicates], aggs)
            out = out[keep]
        if len(out) and st.negations:
            from .kernels.cpu import launch

            mask = np.empty(len(out), np.bool_)
            valid = self.compiled.valid[p][st.step]
            launch("_pair_mask", 0, valid, out, np.arange(len(out), dtype=np.int64), out[:, k].copy(), self.kernel_args, mask)
            out = out[mask]
        return out

    def _kleene_aggs(self, seqs: np.ndarray) -> np.ndarray:
        """(n, n_aggregates) the aggregates over the Kleene sets of ``seqs`` (NaN where unbound)."""
        rule = self.spec.rule
        from .kernels import kleene as kk

        out = np.full((len(seqs), len(rule.aggregates)), np.nan)
        for a, agg in enumerate(rule.aggregates):
            k = agg.kleene
            if k is None or k not in self._sets:
                continue
            base = self.spec.kleene_base(k)
            if k in self._set_values:  # computed on the device with the set's checks
                starts, values = self._set_values[k]
                out[:, a] = values[np.searchsorted(starts, seqs[:, base]), a] if len(seqs) else np.nan
                continue
            col = self.table.columns.get(agg.attribute) if agg.attribute else None
            if col is None or col.kind not in ("int", "float"):  # never a value: count only
                values, valid = np.zeros(len(self.table), np.float64), np.zeros(len(self.table), np.bool_)
            else:
                values, valid = col.values.astype(np.float64, copy=False), col.valid
            out[:, a] = kk.set_aggregates(
                agg.function, values, valid, self._sets[k], np.ascontiguousarray(seqs[:, base]),
                np.ascontiguousarray(seqs[:, base + 1]),
            )
        return out

    def kleene_matches(self, seqs: np.ndarray) -> Matches:
        """The complete sequences of a Kleene rule as :class:`Matches` (rows, aggregates, sets)."""
        rule = self.spec.rule
        n_pred = rule.n_predicates
        if not len(seqs) or any(k not in self._sets for k in rule.kleene_positions):
            return Matches.empty(rule)
        sets = {}
        for k in rule.kleene_positions:
            base = self.spec.kleene_base(k)
            start, length = seqs[:, base], seqs[:, base + 1]
            off = np.zeros(len(seqs) + 1, np.int64)
            np.cumsum(length, out=off[1:])
            idx = np.repeat(start - off[:-1], length) + np.arange(off[-1], dtype=np.int64)
            sets[k] = (off, self._sets[k][idx])
        rows = np.ascontiguousarray(seqs[:, :n_pred], np.int64)
        return Matches(rows, self._kleene_aggs(seqs), sets)

    def _count_each(self, step: StepInput) -> int:
        counter = getattr(self.combiner, "count_each", None)
        if counter is None:
            return len(self.combiner.each(self.compiled, step))
        return int(counter(self.compiled, step))

    def ranges(self, st: StepSpec, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each sequence's candidate range in the step's column (or its parameter index)."""
        col: Column = self.store.predicates[st.pred]
        ts = self.table.ts
        if st.key is None:
            lo, hi = step_ranges(
                ts, seqs, st.anchor, st.before, st.window, col.ts, col.rows if st.ties else None
            )
            return lo, hi, col.rows
        index = col.key_index(self.table, st.key.attr)
        value = evaluate(st.key.expr, self.table, seqs)
        keys, valid = as_keys(index.uniq, value.values, value.valid)
        lo, hi = step_keyed_ranges(
            ts, seqs, st.anchor, st.before, st.window, index.uniq, index.seg, index.ts, keys, valid,
            index.dense, index.dense_min, index.rows if st.ties else None,
        )
        return lo, hi, index.rows

    def consuming(self, lo: int, hi: int, excluded: np.ndarray) -> np.ndarray:
        """Terminators in row order; each one's consumed events leave the positive columns.

        Optimistic: one batch pass computes every terminator's matches as if nothing were
        consumed in this call; a Numba walk (:func:`_accept_until`) then takes them in order,
        consuming as it goes, as long as no event consumed so far lies within the rule's
        lookback of the next terminator (then its batch result cannot have changed). A terminator
        that fails that test is recomputed alone against the current excluded mask.
        """
        rule, spec = self.spec.rule, self.spec
        cols = [np.asarray(self.store.predicates[pl.plan.terminator].rows) for pl in spec.plans]
        terms = np.unique(np.concatenate([_in_range(c, lo, hi) for c in cols]))
        consumed = np.array(rule.consuming, np.int64)
        # the batch pass, against the excluded mask as it was on entry
        initial = excluded.copy()
        parts, owners = [], []
        for p, pl in enumerate(spec.plans):
            got = self.plan(p, _in_range(cols[p], lo, hi), initial, True)
            parts.append(got)
            owners.append(got[:, pl.plan.terminator])
        batch = np.concatenate(parts)
        order = np.argsort(np.concatenate(owners), kind="stable")
        batch = np.ascontiguousarray(batch[order])
        owner = np.concatenate(owners)[order]
        group_lo = np.searchsorted(owner, terms, "left").astype(np.int64)
        group_hi = np.searchsorted(owner, terms, "right").astype(np.int64)
        accepted = np.zeros(len(terms), np.bool_)
        newest = np.array([np.iinfo(np.int64).min], np.int64)  # latest consumed timestamp
        ts = self.table.ts
        term_ts = ts[terms]
        lookback = np.int64(2**62 if unbounded_window(rule) else rule.lookback())
        redone = []
        i = 0
        while i < len(terms):
            i = _accept_until(
                i, terms, term_ts, group_lo, group_hi, batch, consumed, excluded, ts, lookback,
                newest, accepted,
            )
            if i == len(terms):
                break
            t = int(terms[i])
            found = [
                self.plan(p, np.array([t], np.int64), excluded, True)
                for p in range(len(spec.plans))
                if _contains(cols[p], t)
            ]
            got = np.concatenate(found)
            if len(got):
                redone.append(got)
                used = got[:, consumed].ravel()
                excluded[used] = True
                newest[0] = max(newest[0], int(ts[used].max()))
            i += 1
        keep = np.repeat(accepted, group_hi - group_lo)
        return np.concatenate([batch[keep]] + redone)


@cached_njit
def _accept_until(
    start, terms, term_ts, group_lo, group_hi, batch, consumed, excluded, ts, lookback, newest, accepted
):
    """Accept batch results from terminator ``start`` on, consuming their events, until one may
    have changed (a consumed event within its lookback); return its index (``len(terms)``: done)."""
    for i in range(start, terms.shape[0]):
        if excluded[terms[i]]:
            continue  # consumed before its turn: it terminates nothing
        if newest[0] >= term_ts[i] - lookback:
            return i
        accepted[i] = True
        for m in range(group_lo[i], group_hi[i]):
            for c in consumed:
                r = batch[m, c]
                excluded[r] = True
                if ts[r] > newest[0]:
                    newest[0] = ts[r]
    return terms.shape[0]


def _contains(sorted_rows: np.ndarray, row: int) -> bool:
    i = np.searchsorted(sorted_rows, row)
    return bool(i < len(sorted_rows) and sorted_rows[i] == row)


# ------------------------------------------------------------------------------------------------
# explain


def describe(rule: Rule, use_index: bool = True) -> str:
    """How CDP evaluates ``rule``: columns and their filters, windows, and the checks per step."""
    spec = lower(rule, use_index)
    names = aliases(rule)
    lines = [f"CDP ({len(spec.plans)} plan(s)):"]
    for p, pred in enumerate(rule.predicates):
        filters = ", ".join(expr_text(rule.conditions[i], names) for i in spec.filters[p]) or "none"
        lines.append(f"  column {p} {pred.alias} ({pred.event_type}): filters {filters}")
    for pi, plan in enumerate(spec.plans):
        lines.append(f"  plan {pi}: binding order {list(plan.plan.order)}")
        for st in plan.steps:
            pred = plan.plan.predicates[st.pred]
            if st.step == 0:
                head = f"    step 0: terminator {pred.alias}"
            else:
                win = duration(None if st.window is None else int(st.window))
                anchor = plan.plan.predicates[st.anchor].alias
                before = plan.plan.predicates[st.before].alias
                head = (
                    f"    step {st.step}: {st.policy} {pred.alias} in "
                    f"[{anchor}.ts - {win}, {before}.ts)"
                )
                if st.key is not None:
                    head += f", parameter index on {st.key.attr} = {expr_text(st.key.expr, names)}"
                kl = pred.kleene
                if kl is not None:
                    after = "" if kl.after is None else f", after {plan.plan.predicates[kl.after].alias}"
                    size = f"[{kl.min_size}..{'' if kl.max_size is None else kl.max_size}]"
                    head = (
                        head.replace(f"each {pred.alias}", f"Kleene {pred.alias}{size} "
                                     f"({'greedy' if kl.greedy else 'each subset'})") + after
                    )
                    head += f"; {len(kl.conditions)} per-element, {len(kl.consecutive)} consecutive check(s)"
            checks = [expr_text(rule.conditions[i], names) for i in st.conditions]
            checks += [f"not {rule.negations[i].event_type} (negation {i})" for i in st.negations]
            lines.append(head + (f"; checks {', '.join(checks)}" if checks else ""))
    for k, agg in enumerate(rule.aggregates):
        lines.append(f"  aggregate {k}: {agg.function}({agg.event_type}.{agg.attribute or '*'})")
    if rule.consuming:
        lines.append(f"  consuming {list(rule.consuming)}: terminators one by one, in order")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# registry

def register_combiner(name: str, factory: Callable[[], Combiner]) -> None:
    """Register backend ``name`` as CDP over the combiner that ``factory`` builds (e.g. ``gpu``)."""
    register(name, lambda: CDPBackend(factory(), name))


register_combiner("cpu", CpuCombiner)

