"""Running a DecoPa plan on cep-gpu: every operator unit is a cep-gpu rule over a two-type table.

An operator over positions ``S`` with inputs ``S1`` and ``S2`` (which may overlap) gets one table
per unit: the matches of ``S1`` as events of type ``L`` and those of ``S2`` as type ``R``, each at
the time of its latest position, carrying per position ``p`` its event id ``i{p}``, time ``t{p}``
(ns) and the attributes the rule reads, ``a{p}_{attr}``, plus its earliest and latest time
``lo``/``hi``. The unit runs ``AND(L l, R r) within W`` with conditions

* ``l.i{p} = r.i{p}`` for every shared position (the parameter index makes it a hash join);
* ``SEQ``: ``l.t{p} < r.t{q}`` (or ``>``) for every order constraint between the two sides;
  ``AND``, at the root only: the latest event is bound by one position alone (``detect``'s
  reading of ``AND``: the other positions may share an event, see docs/decopa.md);
* ``l.hi - r.lo <= W`` and ``r.hi - l.lo <= W``: the whole match within the window;
* the original rule's conditions over ``S`` that neither input covers.

``AND`` of two types combines events at equal times exactly once (the engine orders them by
``(ts, id)``), so no match is lost to ties. The partitioned input is spread over the units by a
hash of its shared ids (of all its ids when nothing is shared), the other input goes to every
unit; each pair of input matches meets on exactly one unit. The root's matches get the rule's
``return`` attributes from a one-position rule and the ids in declaration order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import pyarrow as pa

from ..events import AttributeColumn, EventTable, TimeFormat
from ..model import Arith, Attr, Compare, Const, Timestamp, map_expr, walk
from .errors import DecompositionError
from .ingest import ingest
from .optimize import Operator, Plan
from .query import Pattern, pattern_rule, renumber

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass
class Matches:
    """Matches of a sub-query: per position, the row of its event in the base table."""

    positions: tuple[int, ...]
    rows: dict[int, np.ndarray]

    def __len__(self) -> int:
        return len(next(iter(self.rows.values())))

    def take(self, idx: np.ndarray) -> Matches:
        return Matches(self.positions, {p: r[idx] for p, r in self.rows.items()})

    @staticmethod
    def concat(parts: list[Matches], positions) -> Matches:
        if not parts:
            return Matches(tuple(positions), {p: np.empty(0, np.int64) for p in positions})
        return Matches(tuple(positions), {p: np.concatenate([m.rows[p] for m in parts]) for p in positions})


@dataclass
class UnitReport:
    unit: int
    ingested: int
    pairs: int
    matches: int


@dataclass
class OperatorReport:
    name: str
    input_events: tuple[int, int]
    outputs: int
    units: list[UnitReport] = field(default_factory=list)


@dataclass
class ExecutionReport:
    """What an execution measured, per operator and unit, to set against the plan's model.

    ``windows``: the input's time span over the window (at least 1), to turn counts into rates
    per window. ``pairs``: input pairs of a unit within the window of each other (what a unit
    compares, the model's K̂ counts both directions: K̂ = 2 pairs per window at c = 1).
    """

    windows: float
    leaves: dict[str, int]
    operators: list[OperatorReport]

    def to_json(self) -> dict:
        return {"windows": self.windows, "leaves": self.leaves, "operators": [
            {"name": o.name, "input_events": list(o.input_events), "outputs": o.outputs,
             "units": [u.__dict__ for u in o.units]} for o in self.operators]}


class PlanRules:
    """The cep-gpu rules that execute a plan: one per leaf (the position's own filters), one per
    operator (module docstring) and the final one (``return``). ``ts_scale``: ns per unit of a
    numeric input ``ts`` (``X.ts`` is read in that unit), None for datetimes or ns."""

    def __init__(self, plan: Plan, ts_scale: float | None) -> None:
        self.plan = plan
        self.pattern: Pattern = plan.pattern
        self.ts_scale = ts_scale
        self.attrs: dict[int, list[str]] = {p: [] for p in range(self.pattern.k)}
        for expr in list(plan.rule.conditions) + [a.expr for a in plan.rule.attributes]:
            for node in walk(expr):
                if isinstance(node, Attr) and node.name not in self.attrs[node.pred]:
                    self.attrs[node.pred].append(node.name)
        self.op_rules = {op.name: self._op_rule(op) for op in plan.operators}
        self.leaf_rules = {p: self._leaf_rule(p) for p in range(self.pattern.k)}
        attrs = tuple(replace(a, expr=self._map(a.expr, lambda p: 0)) for a in plan.rule.attributes)
        self.final_rule = pattern_rule(plan.rule.name, "SEQ", ["L"], ["m"], 0, [], attrs)

    # ---------------------------------------------------------------------------------

    def _map(self, expr, side_of):
        """An original expression over the op table's columns (``side_of(p)``: 0 = l, 1 = r)."""

        def fn(e):
            if isinstance(e, Attr):
                return Attr(side_of(e.pred), f"a{e.pred}_{e.name}")
            if isinstance(e, Timestamp):
                t = Attr(side_of(e.pred), f"t{e.pred}")
                # X.ts in the input's unit, exactly as detect's in_time_units computes it
                return Arith("/", t, Const(self.ts_scale)) if self.ts_scale else t
            return e

        return map_expr(expr, fn)

    def _leaf_rule(self, p: int):
        pat = self.pattern
        conds = [renumber(pat.rule.conditions[i], {p: 0}) for i in pat.conditions_within(frozenset((p,)))]
        return pattern_rule("decopa_leaf", "SEQ", [pat.types[p]], [pat.aliases[p]], 0, conds)

    def _op_rule(self, op: Operator):
        pat = self.pattern
        s1, s2 = (frozenset(i) for i in op.inputs)
        s = s1 | s2

        def side(p: int) -> int:
            return 0 if p in s1 else 1

        conds = [Compare("=", Attr(0, f"i{p}"), Attr(1, f"i{p}")) for p in sorted(s1 & s2)]
        for p, q in pat.order_pairs(s1, s2):
            conds.append(Compare("<", Attr(side(p), f"t{p}"), Attr(side(q), f"t{q}")))
        if pat.kind == "AND" and len(s) == pat.k:
            conds.extend(self._and_unique_last(side))
        w = Const(int(pat.window))
        conds.append(Compare("<=", Arith("-", Attr(0, "hi"), Attr(1, "lo")), w))
        conds.append(Compare("<=", Arith("-", Attr(1, "hi"), Attr(0, "lo")), w))
        for i, ins in enumerate(pat.condition_inputs):
            if ins <= s and not ins <= s1 and not ins <= s2:
                conds.append(self._map(pat.rule.conditions[i], side))
        return pattern_rule(f"decopa_{op.name}", "AND", ["L", "R"], ["l", "r"], pat.window, conds)

    def _and_unique_last(self, side) -> list:
        """``AND`` binds one distinct event per position (as ``detect`` does, and the paper's
        §3.1 (iv)): for positions ``p``, ``q`` of one type, ``i_p != i_q``. Checked at the root,
        where every position is bound; the order constraints already keep other types apart."""
        pat = self.pattern
        return [
            Compare("!=", Attr(side(p), f"i{p}"), Attr(side(q), f"i{q}"))
            for p in range(pat.k)
            for q in range(p + 1, pat.k)
            if pat.types[p] == pat.types[q]
        ]


class _Context:
    """The ingested input and everything derived from the plan, shared by batch and streaming."""

    def __init__(self, events, plan: Plan, time_unit: str, rule=None) -> None:
        if not isinstance(plan, Plan):
            raise DecompositionError(f"expected a cep_gpu.decopa.Plan, got {type(plan).__name__}")
        if rule is not None:
            if isinstance(rule, str):
                from .. import parse_rule

                rule = parse_rule(rule)
            if rule != plan.rule:
                raise DecompositionError(
                    f"this plan was made for rule {plan.rule.name!r} ({plan.rule.text!r}), "
                    f"not for {rule.name!r} ({rule.text!r})")
        plan.validate()
        self.plan = plan
        self.pattern: Pattern = plan.pattern
        self.pattern.require_executable()
        from ..detect import check_schema

        self.base = ingest(events, time_unit)
        check_schema([plan.rule], self.base)
        scale = self.base.time.scale_ns()
        self.rules = PlanRules(plan, float(scale) if self.base.time.kind == "numeric" and scale != 1 else None)
        self.attrs = self.rules.attrs
        self.op_rules = self.rules.op_rules
        self.leaf_rules = self.rules.leaf_rules
        self.id_order = np.argsort(self.base.ids, kind="stable")

    # -- tables ---------------------------------------------------------------------------------

    def leaf(self, p: int, table: EventTable, backend: str) -> Matches:
        """The events of position ``p`` that pass its own filters (rows of the base table)."""
        from .. import detect

        out = detect(table, self.leaf_rules[p], backend=backend, output="arrow")
        ids = out.column("ids").combine_chunks().flatten().to_numpy(zero_copy_only=False).astype(np.int64)
        sorted_ids = self.base.ids[self.id_order]
        rows = self.id_order[np.searchsorted(sorted_ids, ids)]
        return Matches((p,), {p: rows.astype(np.int64)})

    def side_table(self, left: Matches, right: Matches, time: TimeFormat | None = None,
                   ids: np.ndarray | None = None) -> tuple[EventTable, int]:
        """The two inputs as one table (``L`` rows first; ids ``0 ..`` unless given), and the count of L."""
        base = self.base
        n1, n2 = len(left), len(right)
        n = n1 + n2
        positions = sorted(set(left.positions) | set(right.positions))
        columns: dict[str, AttributeColumn] = {}
        tss = []
        for m, count in ((left, n1), (right, n2)):
            t = np.stack([base.ts[m.rows[p]] for p in m.positions]) if count else np.empty((1, 0), np.int64)
            tss.append(t)
        lo = np.concatenate([t.min(axis=0) if t.shape[1] else np.empty(0, np.int64) for t in tss])
        hi = np.concatenate([t.max(axis=0) if t.shape[1] else np.empty(0, np.int64) for t in tss])
        columns["lo"] = AttributeColumn("int", lo, np.ones(n, bool))
        columns["hi"] = AttributeColumn("int", hi, np.ones(n, bool))
        for p in positions:
            rows = np.zeros(n, np.int64)
            valid = np.zeros(n, bool)
            if p in left.rows:
                rows[:n1] = left.rows[p]
                valid[:n1] = True
            if p in right.rows:
                rows[n1:] = right.rows[p]
                valid[n1:] = True
            columns[f"i{p}"] = AttributeColumn("int", np.where(valid, base.ids[rows], 0), valid)
            columns[f"t{p}"] = AttributeColumn("int", np.where(valid, base.ts[rows], 0), valid)
            for name in self.attrs[p]:
                col = base.columns.get(name)
                if col is None:
                    continue
                columns[f"a{p}_{name}"] = AttributeColumn(col.kind, col.values[rows], col.valid[rows] & valid)
        types = np.concatenate([np.zeros(n1, np.int32), np.ones(n2, np.int32)])
        names = list(columns)
        schema = {"L": set(names), "R": set(names)}
        ids = np.arange(n, dtype=np.int64) if ids is None else ids
        table = EventTable(hi, ids, types, ["L", "R"],
                           columns, base.strings, time or base.time, schema)
        return table.sorted(), n1

    def combine(self, op: Operator, left: Matches, right: Matches, pairs: np.ndarray) -> Matches:
        """Matches of ``op`` from the (left index, right index) pairs the unit found."""
        rows = {}
        for p in op.positions:
            rows[p] = left.rows[p][pairs[:, 0]] if p in left.rows else right.rows[p][pairs[:, 1]]
        return Matches(op.positions, rows)

    def unit_of(self, op: Operator, m: Matches) -> np.ndarray:
        """The unit (0 .. n-1) of each match of the partitioned input: a hash of its shared ids."""
        n = op.n_units
        s1, s2 = (set(i) for i in op.inputs)
        keys = sorted(s1 & s2) or list(m.positions)
        h = np.zeros(len(m), np.uint64)
        for p in keys:
            h = (h ^ self.base.ids[m.rows[p]].astype(np.uint64)) * _GOLDEN
            h ^= h >> np.uint64(29)
        return (h % np.uint64(n)).astype(np.int64)

    def split_rows(self, op: Operator, left: Matches, right: Matches):
        """Per unit: the indices of its left and right inputs (the partitioned one hashed, the
        other one whole)."""
        all_l, all_r = np.arange(len(left)), np.arange(len(right))
        if op.n_units == 1:
            return [(all_l, all_r)]
        part = (left, right)[op.partitioned]
        u = self.unit_of(op, part)
        out = []
        for unit in range(op.n_units):
            share = np.flatnonzero(u == unit)
            out.append((share, all_r) if op.partitioned == 0 else (all_l, share))
        return out

    def split_units(self, op: Operator, left: Matches, right: Matches):
        """Per unit: (its left input, its right input)."""
        return [(left.take(a), right.take(b)) for a, b in self.split_rows(op, left, right)]

    def pairs_within(self, left: Matches, right: Matches) -> int:
        """Input pairs of one unit whose latest times lie within the window of each other."""
        if not len(left) or not len(right):
            return 0
        hl = np.max(np.stack([self.base.ts[left.rows[p]] for p in left.positions]), axis=0)
        hr = np.sort(np.max(np.stack([self.base.ts[right.rows[p]] for p in right.positions]), axis=0))
        w = self.pattern.window
        return int((np.searchsorted(hr, hl + w, "right") - np.searchsorted(hr, hl - w, "left")).sum())

    # -- final ----------------------------------------------------------------------------------

    def finalize(self, root: Matches, backend: str) -> pd.DataFrame:
        """The rows ``detect`` returns: rule, ts, ids in declaration order, ``return`` attributes."""
        from .. import detect

        base, k = self.base, self.pattern.k
        ids = np.stack([base.ids[root.rows[p]] for p in range(k)], axis=1) if len(root) else np.empty((0, k), np.int64)
        ts = np.stack([base.ts[root.rows[p]] for p in range(k)], axis=1).max(axis=1) if len(root) else np.empty(0, np.int64)
        order = np.lexsort(tuple(ids[:, j] for j in reversed(range(k))) + (ts,)) if len(root) else np.empty(0, np.int64)
        final = root.take(order)
        table, _ = self.side_table(final, _empty(final.positions))
        out = detect(table, self.rules.final_rule, backend=backend)
        rank = np.array([int(x[0]) for x in out["ids"]], dtype=np.int64) if len(out) else np.empty(0, np.int64)
        chosen = ids[order][rank]
        flat = pa.array(chosen.reshape(-1), type=pa.int64())
        offsets = pa.array(np.arange(0, len(chosen) * k + 1, k, dtype=np.int32))
        ids_arr = pa.ListArray.from_arrays(offsets, flat)
        out["ids"] = pd.Series(type(out["ids"].array)(pa.chunked_array([ids_arr], type=pa.list_(pa.int64()))),
                               index=out.index)
        return out


def _pairs_of(out: pa.Table, n1: int) -> np.ndarray:
    ids = out.column("ids").combine_chunks().flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    pairs = ids.reshape(-1, 2)
    pairs[:, 1] -= n1
    return pairs


def execute(events, plan: Plan, time_unit: str = "s", backend: str = "auto", rule=None,
            report: bool = False):
    """Run ``plan`` over ``events``: exactly the rows of ``cep_gpu.detect(events, plan.rule)``.

    Every operator unit runs its cep-gpu rule (module docstring) over its share of the inputs;
    the units of an operator together find every match of its sub-query once. ``rule``: when
    given, it must be the rule the plan was made for. ``report=True`` also returns an
    :class:`ExecutionReport` (ingested events, window pairs and outputs per unit).

    Raises :class:`DecompositionError` for rules outside the executable scope (``NOT``,
    aggregates, ``select last/first``, ``consuming``), a plan that fails :meth:`Plan.validate`,
    or a ``rule`` other than the plan's.
    """
    from .. import detect

    ctx = _Context(events, plan, time_unit, rule)
    results: dict[frozenset, Matches] = {}
    leaves = {}
    for p in range(ctx.pattern.k):
        results[frozenset((p,))] = ctx.leaf(p, ctx.base, backend)
        leaves[ctx.pattern.aliases[p]] = len(results[frozenset((p,))])
    ops_report = []
    for op in plan.operators:
        left, right = results[frozenset(op.inputs[0])], results[frozenset(op.inputs[1])]
        rep = OperatorReport(op.name, (len(left), len(right)), 0)
        parts = []
        for unit, (lu, ru) in zip(op.units if plan.strategy != "centralized" else [op.units[0]],
                                  ctx.split_units(op, left, right)):
            table, n1 = ctx.side_table(lu, ru)
            out = detect(table, ctx.op_rules[op.name], backend=backend, output="arrow")
            found = ctx.combine(op, lu, ru, _pairs_of(out, n1))
            parts.append(found)
            if report:
                rep.units.append(UnitReport(unit, len(lu) + len(ru), ctx.pairs_within(lu, ru), len(found)))
        results[frozenset(op.positions)] = Matches.concat(parts, op.positions)
        rep.outputs = len(results[frozenset(op.positions)])
        ops_report.append(rep)
    out = ctx.finalize(results[frozenset(plan.root.positions)], backend)
    if not report:
        return out
    span = int(ctx.base.ts.max() - ctx.base.ts.min()) if len(ctx.base) else 0
    windows = max(span / ctx.pattern.window, 1.0) if ctx.pattern.window else 1.0
    return out, ExecutionReport(windows, leaves, ops_report)


def execute_stream(events, plan: Plan, time_unit: str = "s", backend: str = "auto", chunk: int = 1000,
                   rule=None) -> pd.DataFrame:
    """The streaming counterpart of :func:`execute`: one :class:`cep_gpu.Engine` per operator unit.

    The input is fed in chunks of about ``chunk`` events (never splitting a timestamp); each
    chunk's leaf events go to the units of their operators, and the matches every unit's engine
    publishes travel on to the next operators' engines within the same chunk (a match is complete
    when its latest event arrives, so every engine sees its events in time order). Returns the
    same rows as :func:`execute`.
    """
    from .. import Engine

    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise DecompositionError(f"chunk must be an int >= 1, got {chunk!r}")
    ctx = _Context(events, plan, time_unit, rule)
    ns = TimeFormat("numeric", unit="ns", dtype="int64")
    engines = {op.name: [Engine(ctx.op_rules[op.name], backend=backend, time_unit="ns")
                         for _ in range(op.n_units)] for op in plan.operators}
    # per operator: the base-table rows of every event its engines were given, by event id
    registry: dict[str, dict[int, list[np.ndarray]]] = {
        op.name: {p: [] for p in op.positions} for op in plan.operators}
    next_id = {op.name: 0 for op in plan.operators}
    root_parts = []
    base = ctx.base
    bounds = _chunk_bounds(base.ts, chunk)
    for start, stop in zip(bounds[:-1], bounds[1:]):
        piece = base.take(np.arange(start, stop))
        new: dict[frozenset, Matches] = {frozenset((p,)): ctx.leaf(p, piece, backend) for p in range(ctx.pattern.k)}
        for op in plan.operators:
            left, right = new[frozenset(op.inputs[0])], new[frozenset(op.inputs[1])]
            n1, n2 = len(left), len(right)
            first = next_id[op.name]
            next_id[op.name] += n1 + n2
            reg = registry[op.name]
            for p in op.positions:
                col = np.full(n1 + n2, -1, np.int64)
                if p in left.rows:
                    col[:n1] = left.rows[p]
                if p in right.rows:
                    col[n1:] = right.rows[p]
                reg[p].append(col)
            ids_l = np.arange(first, first + n1, dtype=np.int64)
            ids_r = np.arange(first + n1, first + n1 + n2, dtype=np.int64)
            found = []
            if n1 + n2:
                for unit, (sel_l, sel_r) in enumerate(ctx.split_rows(op, left, right)):
                    lu, ru = left.take(sel_l), right.take(sel_r)
                    if not len(lu) + len(ru):
                        continue
                    ids = np.concatenate([ids_l[sel_l], ids_r[sel_r]])
                    table, _ = ctx.side_table(lu, ru, time=ns, ids=ids)
                    res = engines[op.name][unit].publish(table.to_pandas(), output="records")
                    if res:
                        found.append(np.array([r["ids"] for r in res], dtype=np.int64).reshape(-1, 2))
            pairs = np.concatenate(found) if found else np.empty((0, 2), np.int64)
            rows = {}
            for p in op.positions:
                col = np.concatenate(reg[p])
                reg[p] = [col]
                side = 0 if p in op.inputs[0] else 1
                rows[p] = col[pairs[:, side]]
            new[frozenset(op.positions)] = Matches(op.positions, rows)
        root_parts.append(new[frozenset(plan.root.positions)])
    return ctx.finalize(Matches.concat(root_parts, plan.root.positions), backend)


def _empty(positions) -> Matches:
    return Matches(tuple(positions), {p: np.empty(0, np.int64) for p in positions})


def _chunk_bounds(ts: np.ndarray, chunk: int) -> list[int]:
    """Row bounds of chunks of about ``chunk`` rows that never split one timestamp."""
    n = len(ts)
    bounds = [0]
    while bounds[-1] < n:
        stop = min(bounds[-1] + chunk, n)
        if stop < n:
            stop = int(np.searchsorted(ts, ts[stop - 1], "right"))
        bounds.append(stop)
    return bounds
