"""DecoPa planning (issue 17): the cost model, the paper's Figure 2, unit assignment against brute
force, DecoPa >= hybrid >= centralized, Stats.from_sample, and bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cep_gpu
from cep_gpu import decopa
from cep_gpu.decopa.model import RateModel
from cep_gpu.decopa.optimize import assign_greedy, instantiate
from cep_gpu.decopa.query import analyse
from cep_gpu.errors import ArgumentError, CepError

FIG2 = "define Q pattern SEQ(A a, B b, C c) where a.x < b.y within 1 min"
FIG2_STATS = decopa.Stats(rates={"a": 1000, "b": 1000, "c": 30},
                          selectivity={("a", "b"): 0.01, ("a", "c"): 0.01, ("b", "c"): 0.01})
FIG2_UNITS = decopa.Units(4, iota=6000, kappa=60000)


# -- the paper's Figure 2 ---------------------------------------------------------------------------


def test_figure2_hybrid_plan():
    plan = decopa.optimize(FIG2, FIG2_STATS, FIG2_UNITS, strategy="hybrid")
    o1, o2 = plan.operators
    assert o1.aliases == ("a", "b") and o1.n_units == 3 and o1.partitioned == 0  # a third of the A's
    assert o1.ingestion == pytest.approx(1000 / 3 + 1000)
    assert o1.comparisons == pytest.approx(2 * 1000 / 3 * 1000)
    assert o2.aliases == ("a", "b", "c") and o2.n_units == 1
    assert o2.input_rates == pytest.approx((0.01 * 1000 * 1000, 30))
    assert plan.c_star == pytest.approx(0.09)  # "for plan I, this is the case for kappa at x = 0.09"
    assert plan.bottleneck is o1 and o1.bound == "comparison"
    plan.validate()


def test_figure2_decopa_plan():
    plan = decopa.optimize(FIG2, FIG2_STATS, FIG2_UNITS)
    assert [o.aliases for o in plan.operators] == [("a", "c"), ("b", "c"), ("a", "b", "c")]
    assert [o.n_units for o in plan.operators] == [1, 1, 2]
    root = plan.root
    assert root.input_rates == pytest.approx((300, 300))
    assert root.ingestion == pytest.approx(150 + 300)  # c (r(SEQ(A,C))/2 + r(SEQ(B,C)))
    assert plan.c_star == pytest.approx(2 / 3)  # "up to a scaling factor of around c = 0.65"
    hybrid = decopa.optimize(FIG2, FIG2_STATS, FIG2_UNITS, strategy="hybrid")
    assert plan.c_star / hybrid.c_star == pytest.approx(7.4, abs=0.05)  # "7x higher throughput"
    plan.validate()
    text = plan.explain()
    for piece in ("SEQ(a, c)", "SEQ(b, c)", "SEQ(a, b, c)", "c* = 0.6667", "comparison"):
        assert piece in text


def test_example_5_and_6_rates():
    """Examples 5-6 of §5.3.1: σ(SEQ(A, AND(C, D))) = 0.1·0.1·0.2; r = r(A)·r(C)·r(D)·2·σ = 5 (flat
    AND(A, C, D) is our closest rule: the AND factor is k = 3 there, so 7.5)."""
    m = RateModel("AND", (10.0, 25.0, 10.0), ((1, 0.1, 0.1), (0.1, 1, 0.2), (0.1, 0.2, 1)))
    assert m.selectivity(frozenset({0, 1, 2})) == pytest.approx(0.002)
    assert m.rate(frozenset({0, 1, 2})) == pytest.approx(10 * 25 * 10 * 3 * 0.002)


def test_order_aware_estimate_divides_seq_by_k_minus_1_factorial():
    sel = ((1, 1, 1, 1),) * 4
    paper = RateModel("SEQ", (2.0, 3.0, 4.0, 5.0), sel)
    order = RateModel("SEQ", (2.0, 3.0, 4.0, 5.0), sel, "order")
    s = frozenset(range(4))
    assert paper.rate(s) == pytest.approx(120)
    assert order.rate(s) == pytest.approx(120 / math.factorial(3))
    assert RateModel("AND", (2.0, 3.0), sel, "order").rate(frozenset({0, 1})) == pytest.approx(12)


def test_centralized_sums_the_load_on_one_unit():
    plan = decopa.optimize(FIG2, FIG2_STATS, FIG2_UNITS, strategy="centralized")
    assert all(o.units == (0,) for o in plan.operators)
    load_k = sum(o.comparisons for o in plan.operators)
    load_i = sum(o.ingestion for o in plan.operators)
    assert plan.c_star == pytest.approx(min(6000 / load_i, 60000 / load_k))


# -- unit assignment and strategy ordering ----------------------------------------------------------


def compositions(total: int, parts: int):
    for cut in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cut, total)
        yield [bounds[i + 1] - bounds[i] for i in range(parts)]


@st.composite
def planning_cases(draw, max_k: int = 5):
    k = draw(st.integers(2, max_k))
    kind = draw(st.sampled_from(["SEQ", "AND"]))
    rule = cep_gpu.parse_rule(
        f"define Q pattern {kind}({', '.join(f'T{i} p{i}' for i in range(k))}) within 1 min")
    # skewed rates: a few frequent types, many rare ones (log-uniform over five orders)
    rates = {f"p{i}": 10 ** draw(st.floats(-1, 4)) for i in range(k)}
    sel = {(f"p{i}", f"p{j}"): draw(st.sampled_from([1.0, 0.5, 0.1, 0.05, 0.01, 0.001]))
           for i in range(k) for j in range(i + 1, k)}
    n = draw(st.integers(max(k - 1, 1), 12))
    units = decopa.Units(n, iota=draw(st.sampled_from([2500, 6500, 15000])),
                         kappa=draw(st.sampled_from([6e4, 5e5])))
    return rule, decopa.Stats(rates=rates, selectivity=sel), units


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=planning_cases(4), data=st.data())
def test_greedy_unit_assignment_equals_brute_force(case, data):
    rule, stats, units = case
    pattern = analyse(rule)
    rates, sel = stats.resolve(pattern)
    model = RateModel(pattern.kind, tuple(rates), tuple(map(tuple, sel)))
    k = pattern.k
    split = decopa.optimize(rule, stats, units).split()
    nodes = sorted(split, key=lambda s: (len(s), sorted(s)))
    n = min(units.n, len(nodes) + 5)
    units = decopa.Units(n, units.iota, units.kappa)
    best = 0.0
    for comp in compositions(n, len(nodes)):
        plan = instantiate(pattern, model, split, units, "decopa", stats, dict(zip(nodes, comp)))
        best = max(best, plan.c_star)
    greedy = instantiate(pattern, model, split, units, "decopa", stats, assign_greedy(model, split, units))
    assert greedy.c_star == pytest.approx(best, rel=1e-12)
    assert k >= 2


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=planning_cases(5), estimate=st.sampled_from(["paper", "order"]))
def test_decopa_at_least_hybrid_at_least_centralized(case, estimate):
    rule, stats, units = case
    plans = {s: decopa.optimize(rule, stats, units, strategy=s, estimate=estimate) for s in decopa.STRATEGIES}
    assert all(p.estimate == estimate for p in plans.values())
    for p in plans.values():
        p.validate()
    assert plans["decopa"].c_star >= plans["hybrid"].c_star * (1 - 1e-12)
    assert plans["hybrid"].c_star >= plans["centralized"].c_star * (1 - 1e-12)
    assert sum(o.n_units for o in plans["decopa"].operators) <= units.n


def test_rate_reducing_decomposition_beats_hybrid_on_a_long_query():
    rule = cep_gpu.parse_rule("define Q pattern SEQ(A a, B b, C c, D d, E e) within 1 min")
    stats = decopa.Stats(rates={"a": 3000, "b": 2000, "c": 5, "d": 1000, "e": 2},
                         selectivity={("a", "c"): 0.01, ("b", "e"): 0.01, ("d", "e"): 0.01})
    units = decopa.Units(10, 6500, 60000)
    d = decopa.optimize(rule, stats, units)
    h = decopa.optimize(rule, stats, units, strategy="hybrid")
    assert d.c_star > 2 * h.c_star


# -- measured statistics ----------------------------------------------------------------------------


def test_stats_from_sample_counts_rates_and_selectivity():
    rng = np.random.default_rng(0)
    n = 4000
    events = pd.DataFrame({"type": rng.choice(["A", "B"], n), "ts": np.arange(n, dtype=float),
                           "x": rng.integers(0, 10, n)})
    rule = cep_gpu.parse_rule("define Q pattern SEQ(A a, B b) where a.x = b.x and a.x < 5 within 100 s")
    stats = decopa.Stats.from_sample(events, rule, backend="cpu")
    windows = (n - 1) / 100
    n_a = int(((events.type == "A") & (events.x < 5)).sum())
    assert stats.rates["a"] == pytest.approx(n_a / windows)
    assert stats.rates["b"] == pytest.approx(int((events.type == "B").sum()) / windows)
    with_ = cep_gpu.detect(events, rule, output="count")["Q"]
    without = cep_gpu.detect(events, rule.text.replace("a.x = b.x and ", ""), output="count")["Q"]
    assert stats.selectivity[("a", "b")] == pytest.approx(with_ / without)
    assert 0.05 < stats.selectivity[("a", "b")] < 0.2  # about 1/10 by construction


# -- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("make, what", [
    (lambda: decopa.Units(0, 1, 1), "n must be an int >= 1"),
    (lambda: decopa.Units(2, 0, 1), "iota must be a finite number > 0"),
    (lambda: decopa.Units(2, 1, -5), "kappa must be a finite number > 0"),
    (lambda: decopa.Units(2, 1, float("nan")), "kappa"),
    (lambda: decopa.Stats(rates={"a": float("nan")}), "rate of 'a'"),
    (lambda: decopa.Stats(rates={"a": -1}), "rate of 'a'"),
    (lambda: decopa.Stats(rates={"a": 1}, selectivity={("a", "b"): 0}), "in (0, 1]"),
    (lambda: decopa.Stats(rates={"a": 1}, selectivity={("a", "b"): 1.5}), "in (0, 1]"),
])
def test_bad_arguments(make, what):
    with pytest.raises(ArgumentError, match=re_escape(what)):
        make()


def re_escape(s: str) -> str:
    import re

    return re.escape(s)


def test_bad_stats_against_the_rule():
    with pytest.raises(ArgumentError, match=r"missing the rate of \['c'\]"):
        decopa.optimize(FIG2, decopa.Stats(rates={"a": 1, "b": 1}), FIG2_UNITS)
    with pytest.raises(ArgumentError, match="unknown alias 'z'"):
        decopa.optimize(FIG2, decopa.Stats(rates={"a": 1, "b": 1, "c": 1, "z": 1}), FIG2_UNITS)
    with pytest.raises(ArgumentError, match="unknown alias 'q'"):
        decopa.optimize(FIG2, decopa.Stats(rates={"a": 1, "b": 1, "c": 1}, selectivity={("a", "q"): 0.5}),
                        FIG2_UNITS)
    with pytest.raises(ArgumentError, match="strategy must be one of"):
        decopa.optimize(FIG2, FIG2_STATS, FIG2_UNITS, strategy="fastest")


def test_too_few_units():
    with pytest.raises(decopa.DecompositionError, match="too few units: a 3-position query needs at least 2"):
        decopa.optimize(FIG2, FIG2_STATS, decopa.Units(1, 6000, 60000))
    assert decopa.optimize(FIG2, FIG2_STATS, decopa.Units(1, 6000, 60000), strategy="centralized").c_star > 0
    with pytest.raises(decopa.DecompositionError, match="uses more than the 2 units"):
        decopa.plan_from_split(FIG2, FIG2_STATS, decopa.Units(2, 1, 1),
                               {"abc": ("ac", "bc"), "ac": ("a", "c"), "bc": ("b", "c")},
                               {"abc": 1, "ac": 1, "bc": 1})


@pytest.mark.parametrize("text, feature", [
    ("define Q pattern SEQ(A a, NOT(C n), B b) within 1 s", "NOT"),
    ("define Q pattern SEQ(A a, B b) within 1 s select last", "select last"),
])
def test_unsupported_features_plan_but_do_not_execute(text, feature):
    rule = cep_gpu.parse_rule(text)
    plan = decopa.optimize(rule, decopa.Stats(rates={"a": 1, "b": 1}), decopa.Units(2, 10, 10))
    events = pd.DataFrame({"type": ["A", "B"], "ts": [0, 1]})
    with pytest.raises(decopa.DecompositionError, match=feature):
        decopa.execute(events, plan)


@pytest.mark.parametrize("text, what", [
    ("define T from B() and each A() within 1 s from B", "TESLA rule"),
    ("define Q pattern SEQ(A a)", "1 position"),
    ("define Q pattern SEQ(" + ", ".join(f"A a{i}" for i in range(11)) + ") within 1 s", "at most 10"),
])
def test_rules_outside_the_model(text, what):
    with pytest.raises(decopa.DecompositionError, match=what):
        decopa.optimize(text, decopa.Stats(rates={}), decopa.Units(20, 1, 1))


def test_plan_applied_to_another_rule():
    plan = decopa.optimize(FIG2, FIG2_STATS, FIG2_UNITS)
    events = pd.DataFrame({"type": ["A", "B", "C"], "ts": [0, 1, 2], "x": [1, 2, 3], "y": [1, 2, 3]})
    other = "define Q pattern SEQ(A a, B b, C c) where a.x > b.y within 1 min"
    with pytest.raises(decopa.DecompositionError, match="this plan was made for rule"):
        decopa.execute(events, plan, rule=other)
    assert isinstance(decopa.DecompositionError("x"), CepError)


def test_validate_names_the_broken_property():
    from dataclasses import replace

    plan = decopa.optimize(FIG2, FIG2_STATS, FIG2_UNITS)
    o1, o2, o3 = plan.operators
    broken = replace(plan, operators=(o1, o3))
    with pytest.raises(decopa.DecompositionError, match="produced by no earlier operator"):
        broken.validate()
    broken = replace(plan, operators=(o1, o2, replace(o3, partitioned=None)))
    with pytest.raises(decopa.DecompositionError, match=r"Definition 5 \(2\)"):
        broken.validate()
    broken = replace(plan, operators=(o1, replace(o2, units=(0,)), o3))
    with pytest.raises(decopa.DecompositionError, match="a unit is assigned to two operators"):
        broken.validate()
    broken = replace(plan, c_star=1.0)
    with pytest.raises(decopa.DecompositionError, match="does not follow"):
        broken.validate()
    events = pd.DataFrame({"type": ["A"], "ts": [0], "x": [1], "y": [1]})
    with pytest.raises(decopa.DecompositionError):
        decopa.execute(events, replace(plan, operators=(o1, o3)))


# -- command line and benchmark -----------------------------------------------------------------------


def test_cli_decompose_prints_the_plan(tmp_path, capsys):
    from cep_gpu.cli import main

    rules = tmp_path / "q.rules"
    rules.write_text(FIG2 + "\n")
    out_json = tmp_path / "plan.json"
    rc = main(["decompose", str(rules), "--rates", "a=1000,b=1000,c=30",
               "--selectivity", "a:b=0.01,a:c=0.01,b:c=0.01", "--units", "4", "--iota", "6000",
               "--kappa", "60000", "--compare", "--json", str(out_json)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "c* = 0.6667" in text and "hybrid       c* = 0.09" in text
    import json

    assert json.loads(out_json.read_text())["c_star"] == pytest.approx(2 / 3)
    assert main(["decompose", str(rules), "--rates", "a=1", "--units", "4", "--iota", "1", "--kappa", "1"]) == 2
    assert "missing the rate of" in capsys.readouterr().err


def test_bench_smoke():
    from cep_gpu.decopa import bench

    result = bench.run(draws=1, units=(5, 10), windows=1.5, backend="aip")
    s = result["summary"]
    assert s["decopa_ge_hybrid_every_draw"] and s["executed_exact"] and s["executed_ingestion_exact"]
    assert {r["query"] for r in result["table3"]} == {q.name for q in bench.QUERIES}
    assert all(r["median_decopa_over_hybrid"] >= 1 for r in result["table3"])
