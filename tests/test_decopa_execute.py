"""DecoPa execution (issue 17): every executed plan returns exactly the rows of ``detect``.

Differential tests on generated SEQ/AND rules of 2-4 positions (conditions over one, two and three
positions, nulls, ``.ts`` arithmetic, ``return``), every binary split DAG of 3 positions and sampled
ones of 4, 1-3 units per operator, batch and streaming. The reference backend keeps them fast (no
kernel compilation per operator rule); one test runs the compiled CPU kernels.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams

import cep_gpu
from cep_gpu import decopa

ALIASES = "abcd"
STREAMS = ("A", "B", "C")  # no D: every event can bind a position


@st.composite
def decomposable_rules(draw, min_k: int = 2, max_k: int = 4) -> str:
    """Rule text: SEQ or AND over 2-4 positions of types A/B/C with random conditions."""
    k = draw(st.integers(min_k, max_k))
    kind = draw(st.sampled_from(["SEQ", "AND"]))
    types = draw(st.lists(st.sampled_from("ABC"), min_size=k, max_size=k))
    al = ALIASES[:k]
    conds = []
    for _ in range(draw(st.integers(0, 3))):
        p, q = draw(st.sampled_from(list(itertools.permutations(al, 2))))
        conds.append(draw(st.sampled_from([
            f"{p}.x < {q}.x", f"{p}.x = {q}.x", f"{p}.y + 1 >= {q}.y", f"{p}.s = {q}.s",
            f"{q}.ts - {p}.ts > 1", f"({p}.x = 1 or {q}.y > 1)", f"not {p}.s = {q}.s",
            f"{p}.x > 0", f"{p}.y != 1.5", f"{p}.s = 'u'", f"{p}.ts * 2 < {q}.ts + 3",
        ])))
    if k >= 3 and draw(st.booleans()):
        conds.append(f"{al[0]}.x + {al[1]}.x <= {al[2]}.x + 1")
    where = f" where {' and '.join(conds)}" if conds else ""
    window = draw(st.integers(1, 6))
    ret = draw(st.sampled_from(["", f" return g := {al[0]}.y, d := {al[-1]}.ts - {al[0]}.ts", " return n := a.s"]))
    return f"define Q pattern {kind}({', '.join(f'{t} {a}' for t, a in zip(types, al))}){where} within {window} s{ret}"


def all_splits(k: int):
    """Every binary split DAG over positions 0..k-1 (sub-queries split into two non-nested parts)."""
    def splits_of(s: frozenset):
        if len(s) == 1:
            yield {}
            return
        subsets = [frozenset(c) for m in range(1, len(s)) for c in itertools.combinations(sorted(s), m)]
        for a, b in itertools.combinations(subsets, 2):
            if a | b == s and not a <= b and not b <= a:
                for sa in splits_of(a):
                    for sb in splits_of(b):
                        merged = dict(sa)
                        if any(merged.get(x, y) != y for x, y in sb.items()):
                            continue  # one sub-query split two ways: not one DAG
                        merged.update(sb)
                        merged[s] = (a, b)
                        yield merged
    return list(splits_of(frozenset(range(k))))


def rates_for(rule) -> decopa.Stats:
    return decopa.Stats(rates={p.alias: 10.0 + i for i, p in enumerate(rule.predicates)})


def same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))


def test_three_positions_have_six_split_dags():
    assert len(all_splits(3)) == 6  # (pair, single) three ways + three overlapping pairs
    assert len(all_splits(2)) == 1


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=decomposable_rules(), events=event_streams(max_events=22, types=STREAMS, min_events=6), data=st.data())
def test_executed_plans_equal_detect(text, events, data):
    rule = cep_gpu.parse_rule(text)
    expected = cep_gpu.detect(events, rule, backend="reference")
    k = rule.n_predicates
    strategy = data.draw(st.sampled_from(decopa.STRATEGIES))
    n = data.draw(st.integers(max(k - 1, 1), 6))
    stats = decopa.Stats(rates={a: data.draw(st.floats(0.5, 500)) for a in ALIASES[:k]})
    plan = decopa.optimize(rule, stats, decopa.Units(n, iota=1000, kappa=5000), strategy=strategy)
    same(decopa.execute(events, plan, backend="reference"), expected)
    if data.draw(st.booleans()):
        chunk = data.draw(st.integers(1, 10))
        same(decopa.execute_stream(events, plan, backend="reference", chunk=chunk), expected)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=decomposable_rules(3, 3), events=event_streams(max_events=20, types=STREAMS, min_events=6), data=st.data())
def test_every_split_of_three_positions(text, events, data):
    rule = cep_gpu.parse_rule(text)
    expected = cep_gpu.detect(events, rule, backend="reference")
    for split in all_splits(3):
        units = {s: data.draw(st.integers(1, 3)) for s in split}
        plan = decopa.plan_from_split(rule, rates_for(rule), decopa.Units(9, 100, 100), split, units)
        assert [o.n_units for o in plan.operators] == [units[frozenset(o.positions)] for o in plan.operators]
        same(decopa.execute(events, plan, backend="reference"), expected)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=decomposable_rules(4, 4), events=event_streams(max_events=18, types=STREAMS, min_events=6), data=st.data())
def test_sampled_splits_of_four_positions(text, events, data):
    rule = cep_gpu.parse_rule(text)
    expected = cep_gpu.detect(events, rule, backend="reference")
    splits = all_splits(4)
    rng = random.Random(data.draw(st.integers(0, 10**6)))
    for split in rng.sample(splits, 3):
        units = {s: rng.randint(1, 3) for s in split}
        plan = decopa.plan_from_split(rule, rates_for(rule), decopa.Units(30, 100, 100), split, units)
        same(decopa.execute(events, plan, backend="reference"), expected)
        if rng.random() < 0.5:
            same(decopa.execute_stream(events, plan, backend="reference", chunk=rng.randint(1, 8)), expected)


def test_figure2_plans_on_compiled_kernels():
    """The paper's Figure 2 query on the CPU kernels, with datetime timestamps and float attributes."""
    rule = cep_gpu.parse_rule(
        "define Q(gap: float) pattern SEQ(A a, B b, C c) where a.x < b.x and b.x < c.x within 1 min "
        "return gap := c.ts - a.ts")
    rng = np.random.default_rng(1)
    n = 600
    events = pd.DataFrame({
        "type": rng.choice(list("ABC"), n, p=[0.45, 0.45, 0.1]),
        "ts": pd.Timestamp("2024-01-01") + pd.to_timedelta(np.sort(rng.integers(0, 600, n)), unit="s"),
        "x": rng.random(n),
    })
    stats = decopa.Stats(rates={"a": 1000, "b": 1000, "c": 30},
                         selectivity={("a", "b"): 0.01, ("a", "c"): 0.01, ("b", "c"): 0.01})
    expected = cep_gpu.detect(events, rule, backend="cpu")
    assert len(expected) > 100
    for strategy in decopa.STRATEGIES:
        plan = decopa.optimize(rule, stats, decopa.Units(4, 6000, 60000), strategy=strategy)
        same(decopa.execute(events, plan, backend="cpu"), expected)


def test_ties_and_explicit_ids_and_float_seconds():
    events = pd.DataFrame({
        "type": ["A", "B", "A", "B", "C", "A", "C"],
        "ts": [0.5, 0.5, 0.5, 1.25, 1.25, 1.25, 2.0],
        "id": [70, 11, 12, 3, 40, 5, 6],
        "x": [1, 2, 3, 1, 2, 3, 1],
    })
    for text in ("define P pattern AND(A a, B b, C c) where a.ts + 0.5 >= c.ts within 1 s",
                 "define P pattern AND(A a, A b, B c) within 2 s return t := b.ts - a.ts",
                 "define P pattern SEQ(A a, B b, C c) within 2 s"):
        rule = cep_gpu.parse_rule(text)
        expected = cep_gpu.detect(events, rule, backend="reference")
        for split in all_splits(3):
            plan = decopa.plan_from_split(rule, rates_for(rule), decopa.Units(6, 1, 1), split,
                                          {s: 2 for s in split})
            same(decopa.execute(events, plan, backend="reference"), expected)
            same(decopa.execute_stream(events, plan, backend="reference", chunk=2), expected)


def test_report_counts_what_units_ingest():
    rule = cep_gpu.parse_rule("define Q pattern SEQ(A a, B b, C c) within 5 s")
    rng = np.random.default_rng(3)
    events = pd.DataFrame({"type": rng.choice(list("ABC"), 300), "ts": np.sort(rng.integers(0, 200, 300))})
    plan = decopa.plan_from_split(rule, rates_for(rule), decopa.Units(5, 1, 1),
                                  {"abc": ("ac", "bc"), "ac": ("a", "c"), "bc": ("b", "c")},
                                  {"abc": 3, "ac": 1, "bc": 1})
    out, rep = decopa.execute(events, plan, backend="reference", report=True)
    same(out, cep_gpu.detect(events, rule, backend="reference"))
    import pyarrow as pa

    same(decopa.execute(pa.Table.from_pandas(events), plan, backend="reference"), out)
    assert rep.leaves == {a: int((events.type == a.upper()).sum()) for a in "abc"}
    root = rep.operators[-1]
    op = plan.root
    part, other = root.input_events[op.partitioned], root.input_events[1 - op.partitioned]
    # the partitioned input is spread over the units, the other one goes to each of them
    assert sum(u.ingested for u in root.units) == part + op.n_units * other
    assert sum(u.matches for u in root.units) == root.outputs == len(out)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=decomposable_rules(3, 4), events=event_streams(max_events=20, types=STREAMS, min_events=6),
       data=st.data())
def test_every_operator_finds_its_sub_query(text, events, data):
    """Each operator's output is exactly ``detect`` of its sub-query (``op.rule``, Definition 1),
    for SEQ and for AND over distinct types (where AND's engine reading and the sub-query agree)."""
    rule = cep_gpu.parse_rule(text)
    kind = "AND" if len(rule.plans) > 1 else "SEQ"
    types = [p.event_type for p in rule.predicates]
    if kind == "AND" and len(set(types)) < len(types):
        rule = cep_gpu.parse_rule(text.replace("AND(", "SEQ(", 1))
    splits = all_splits(rule.n_predicates)
    split = splits[data.draw(st.integers(0, len(splits) - 1))]
    plan = decopa.plan_from_split(rule, rates_for(rule), decopa.Units(30, 10, 10), split,
                                  {s: data.draw(st.integers(1, 3)) for s in split})
    _, report = decopa.execute(events, plan, backend="reference", report=True)
    for op, rep in zip(plan.operators, report.operators):
        counted = cep_gpu.detect(events, op.rule, backend="reference", output="count")
        assert rep.outputs == counted.get(op.rule.name, 0), op.rule.text
