"""The reference matcher against independent definitions, and the backend contract it implements.

* For ``each``-only rules without consumption, a match is simply a tuple of events (one per
  predicate) meeting every timing constraint, condition and negation: a declarative enumeration of
  all tuples must find exactly the reference's matches.
* The reference's scalar evaluator and the vectorised :mod:`cep_gpu.evaluate` must agree on every
  attribute and condition of every match.
* The contract of ``match(rule, table, lo, hi, excluded)``: terminator ranges, excluded rows,
  consumption across calls, trailing negations reading rows at or after ``hi``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams, rules_and_streams, seq_rules, tesla_rules

import cep_gpu
from cep_gpu.backends import Matches, get_backend
from cep_gpu.evaluate import condition_mask, evaluate
from cep_gpu.events import EventTable
from cep_gpu.model import Rule
from cep_gpu.reference import ReferenceBackend, _Context

REF = ReferenceBackend()
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def _table(events: pd.DataFrame) -> EventTable:
    return EventTable.from_pandas(events)


def _match_set(m: Matches) -> set[tuple[int, ...]]:
    return {tuple(int(v) for v in row) for row in m.rows}


def _declarative(rule: Rule, table: EventTable) -> set[tuple[int, ...]]:
    """All tuples of rows satisfying every constraint, for rules with only `each` predicates."""
    ctx = _Context(rule, table, np.zeros(len(table), bool))
    found = set()
    for plan in rule.plans:
        pools = [table.rows_of_type(p.event_type).tolist() for p in plan.predicates]
        for combo in itertools.product(*pools):
            binding = dict(enumerate(combo))
            ok = True
            for i, p in enumerate(plan.predicates):
                if i == plan.terminator:
                    continue
                t = table.ts[combo[i]]
                # with `ties` (AND) "before" is (ts, id) order, i.e. row order in the table
                earlier = combo[i] < combo[p.before] if p.ties else t < table.ts[combo[p.before]]
                if not (table.ts[combo[p.anchor]] - p.window <= t and earlier):
                    ok = False
                    break
            if ok and all(ctx.holds(c, binding) for c in rule.conditions) and all(
                ctx.negation_holds(n, binding) for n in rule.negations
            ):
                found.add(combo)
    return found


@SETTINGS
@given(st.one_of(
    tesla_rules(max_predicates=4, consuming=False, policies=("each",)),
    seq_rules(max_positions=4, policies=("each",)),
), event_streams(max_events=18, min_events=4))
def test_each_rules_equal_declarative_enumeration(text, events):
    rule = cep_gpu.parse_rule(text)
    table = _table(events)
    assert _match_set(REF.match(rule, table)) == _declarative(rule, table)


@SETTINGS
@given(rules_and_streams())
def test_scalar_and_vectorised_evaluation_agree(case):
    text, events = case
    rules = cep_gpu.parse_rules(text)
    table = _table(events)
    for rule in rules[:1]:  # the first rule reads primitive events only
        m = REF.match(rule, table)
        ctx = _Context(rule, table, np.zeros(len(table), bool))
        bindings = [dict(enumerate(int(r) for r in row)) for row in m.rows]
        for c in rule.conditions:  # every reported match passes every condition
            assert condition_mask(c, table, m.rows, m.aggs).all()
        for a in rule.attributes:
            vec = evaluate(a.expr, table, m.rows, m.aggs)
            for k, b in enumerate(bindings):
                expected = ctx.value(a.expr, b)
                if expected is None:
                    assert not vec.valid[k], (a, b)
                    continue
                assert vec.valid[k], (a, b)
                got = vec.values[k]
                if vec.kind == "string":
                    got = table.strings.decode(np.array([got]))[0]
                if isinstance(expected, float):
                    assert math.isclose(float(got), expected, rel_tol=1e-12, abs_tol=1e-12)
                else:
                    assert got == expected
        for j, agg in enumerate(rule.aggregates):
            for k, b in enumerate(bindings):
                v = ctx.aggregate(agg, b)
                assert (v is None and math.isnan(m.aggs[k, j])) or math.isclose(m.aggs[k, j], v)


# -- the backend contract --------------------------------------------------------------------------


def test_registered_as_reference():
    assert isinstance(get_backend("reference"), ReferenceBackend)


@SETTINGS
@given(rules_and_streams(syntax=("tesla",), hierarchy=False), st.data())
def test_terminator_range(case, data):
    text, events = case
    rule = cep_gpu.parse_rule(text)
    if rule.consuming:
        rule = Rule(rule.name, rule.plans, rule.conditions, rule.negations, rule.aggregates, rule.attributes)
    table = _table(events)
    lo = data.draw(st.integers(0, len(table)))
    hi = data.draw(st.integers(lo, len(table)))
    full = REF.match(rule, table)
    term = rule.plans[0].terminator
    keep = (full.rows[:, term] >= lo) & (full.rows[:, term] < hi)
    assert _match_set(REF.match(rule, table, lo, hi)) == {tuple(r) for r in full.rows[keep].tolist()}


@SETTINGS
@given(rules_and_streams(syntax=("tesla", "seq"), hierarchy=False), st.data())
def test_excluded_rows_are_never_bound(case, data):
    text, events = case
    rule = cep_gpu.parse_rule(text)
    table = _table(events)
    excluded = np.array(data.draw(st.lists(st.booleans(), min_size=len(table), max_size=len(table))), bool)
    before = excluded.copy()
    m = REF.match(rule, table, 0, len(table), excluded)
    assert not excluded[m.rows].any()
    assert (excluded == before).all()  # consumption works on a copy of the caller's mask


@SETTINGS
@given(rules_and_streams(syntax=("tesla",), hierarchy=False), st.data())
def test_consumption_across_calls_equals_one_call(case, data):
    text, events = case
    rule = cep_gpu.parse_rule(text)
    table = _table(events)
    cut = data.draw(st.integers(0, len(table)))
    first = REF.match(rule, table, 0, cut)
    excluded = np.zeros(len(table), bool)
    if rule.consuming and len(first):
        excluded[first.rows[:, list(rule.consuming)].ravel()] = True
    second = REF.match(rule, table, cut, len(table), excluded)
    whole = REF.match(rule, table)
    assert sorted(map(tuple, whole.rows.tolist())) == sorted(
        map(tuple, first.rows.tolist() + second.rows.tolist())
    )


def test_caller_mask_is_copied_when_consuming():
    rule = cep_gpu.parse_rule("define R from B() as b and each A() as a within 5 s from b consuming a")
    table = _table(pd.DataFrame({"type": ["A", "B", "B"], "ts": [0, 1, 2]}))
    excluded = np.zeros(3, bool)
    m = REF.match(rule, table, 0, 3, excluded)
    assert _match_set(m) == {(1, 0)}
    assert not excluded.any()


def test_excluded_terminator_is_skipped():
    rule = cep_gpu.parse_rule("define R from B() as b and each A() as a within 5 s from b")
    table = _table(pd.DataFrame({"type": ["A", "B", "B"], "ts": [0, 1, 2]}))
    m = REF.match(rule, table, 0, 3, np.array([False, True, False]))
    assert _match_set(m) == {(2, 0)}


def test_trailing_negation_reads_rows_at_or_after_hi():
    rule = cep_gpu.parse_rule("define S pattern SEQ(A a, B b, NOT(C z)) within 3 s")
    table = _table(pd.DataFrame({"type": ["A", "B", "C"], "ts": [0, 1, 2]}))
    assert len(REF.match(rule, table, 0, 2)) == 0  # C@2 (row 2 >= hi) blocks the match
    table2 = _table(pd.DataFrame({"type": ["A", "B", "C"], "ts": [0, 1, 5]}))
    assert _match_set(REF.match(rule, table2, 0, 2)) == {(0, 1)}


def test_aggregate_values_are_returned_per_match():
    rule = cep_gpu.parse_rule(
        "define R from B() as b and each A() as a within 5 s from b and n=Sum(A() between a and b).y"
    )
    table = _table(pd.DataFrame({"type": ["A", "A", "A", "B"], "ts": [0, 1, 2, 3], "y": [1.0, 2.0, 4.0, None]}))
    m = REF.match(rule, table)
    got = {tuple(r): v for r, v in zip(m.rows.tolist(), m.aggs[:, 0].tolist())}
    assert got == {(3, 0): 6.0, (3, 1): 4.0, (3, 2): 0.0}


def test_empty_table_and_unknown_types():
    rule = cep_gpu.parse_rule("define R from B() as b and each A() as a within 5 s from b")
    table = _table(pd.DataFrame({"type": pd.Series([], dtype=object), "ts": np.array([], np.int64)}))
    m = REF.match(rule, table)
    assert m.rows.shape == (0, 2) and m.aggs.shape == (0, 0)
    table2 = _table(pd.DataFrame({"type": ["C", "D"], "ts": [0, 1]}))
    assert len(REF.match(rule, table2)) == 0
