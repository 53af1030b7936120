"""DARLING load shedding (issue 15): utilities, constraints, runs, errors (docs/shedding.md)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import cep_gpu
from cep_gpu.errors import ArgumentError, CepError
from cep_gpu.shedding import CostModel, Normal, Shedder, SheddingEngine, SheddingError, Statistics
from cep_gpu.shedding.utility import UtilityModel

RULE = "define Q pattern SEQ(A a, B b, C c) where a.price < b.price and b.price < c.price within 3 s"


def stream(n: int, seed: int = 0, types=("A", "B", "C", "X"), p=None) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ty = np.array(types)[rng.choice(len(types), n, p=p)]
    return pd.DataFrame({"type": ty, "ts": np.arange(n) * 0.1, "price": rng.normal(100, 20, n).round(1)})


def _stub_sample(*types):
    return {t: pd.DataFrame({"type": [t], "ts": [0.0], "price": [1.0]}) for t in types}


# -- utilities (Section 4.3) ----------------------------------------------------------------------


def test_paper_worked_example():
    """SEQ(A, B) where A.price < B.price, A ~ N(500, 300²), B ~ N(400, 200²) (Section 4.3)."""
    rule = cep_gpu.parse_rule("define P pattern SEQ(A a, B b) where a.price < b.price within 1 min")
    st = Statistics(distributions={("A", "price"): Normal(500, 300), ("B", "price"): Normal(400, 200)},
                    samples=_stub_sample("A", "B"))
    u = UtilityModel([rule], st).compute(pd.DataFrame({"type": ["A", "A", "B"], "ts": [0.0, 1, 2],
                                                       "price": [200.0, 700.0, 500.0]}))
    assert u[0] == pytest.approx(0.8413, abs=5e-5)
    assert math.floor(u[1] * 1000) / 1000 == 0.066  # the paper prints 0.066 for 0.0668
    assert u[1] == pytest.approx(1 - 0.5 * math.erfc(-1.5 / math.sqrt(2)), abs=1e-12)
    # the other side: U_B(x) = CDF_A(x)
    assert u[2] == pytest.approx(0.5 * math.erfc(0.0), abs=1e-12)
    assert u[0] > u[1]


def test_utilities_match_monte_carlo_on_generated_data():
    rng = np.random.default_rng(3)
    a = rng.lognormal(3, 0.5, 4000)
    b = rng.gamma(3, 10, 4000)
    sample = pd.concat([pd.DataFrame({"type": "A", "ts": np.arange(4000.0), "price": a}),
                        pd.DataFrame({"type": "B", "ts": np.arange(4000.0), "price": b})], ignore_index=True)
    probe = pd.DataFrame({"type": "A", "ts": 0.0, "price": [5.0, 20.0, 35.0, 60.0]})
    linear = "define P pattern SEQ(A a, B b) where a.price < b.price * 2 + 3 within 1 min"
    sh = Shedder(1.0, distribution="empirical").fit(linear, sample, costs=CostModel())
    exact = np.array([(x < b * 2 + 3).mean() for x in probe["price"]])
    np.testing.assert_allclose(sh.utilities(probe), exact, atol=1e-12)
    # a condition with no closed form: the Monte-Carlo estimate against an independent one
    square = "define P pattern SEQ(A a, B b) where a.price * a.price < b.price * 20 within 1 min"
    sh = Shedder(1.0, utility_samples=4000).fit(square, sample, costs=CostModel())
    want = np.array([(x * x < b * 20).mean() for x in probe["price"]])
    np.testing.assert_allclose(sh.utilities(probe), want, atol=0.04)


def test_static_filters_parameters_and_types_nobody_reads():
    sample = pd.DataFrame({"type": ["B"] * 4 + ["A"] * 2, "ts": np.arange(6.0),
                           "k": ["x", "x", "x", "y", "x", "z"], "v": [1.0, 2, 3, 4, 5, 6]})
    rule = """define R(k: string) from B(k=$k and v>1.5) and each A(k=$k and v>4) within 5 s from B
              where k=B.k
              define N pattern SEQ(A a, NOT(Z z), B b) within 5 s"""
    sh = Shedder(1.0).fit(rule, sample, costs=CostModel())
    ev = pd.DataFrame({"type": ["A", "A", "A", "Q", "Z"], "ts": np.arange(5.0),
                       "k": ["x", "y", "x", "x", "x"], "v": [5.0, 5.0, 1.0, 1.0, 1.0]})
    u = sh.utilities(ev)
    # A in R: v>4 holds; k frequency among the B that pass v>1.5 (x, x, y): x 2/3, y 1/3;
    # A in N (no conditions): 1, and the maximum over the rules wins
    assert u[0] == 1.0 and u[1] == 1.0
    only_r = Shedder(1.0).fit(rule.split("define N")[0], sample, costs=CostModel())
    np.testing.assert_allclose(only_r.utilities(ev)[:3], [2 / 3, 1 / 3, 0.0])
    assert u[3] == 0.0  # Q: no rule reads it
    assert u[4] == 1.0  # Z: a negation reads it, dropping it could create false matches


def test_rule_without_conditions_gives_utility_one():
    sh = Shedder(1.0).fit("define P pattern SEQ(A a, B b) within 1 s", stream(50), costs=CostModel())
    u = sh.utilities(stream(50, seed=1))
    types = stream(50, seed=1)["type"].to_numpy()
    assert np.all(u[np.isin(types, ["A", "B"])] == 1.0) and np.all(u[~np.isin(types, ["A", "B"])] == 0.0)


# -- constraints (Section 4.2) ---------------------------------------------------------------------


def test_constraints_follow_the_paper():
    ev = stream(400, p=[0.1, 0.2, 0.3, 0.4])
    cm = CostModel(per_type={"A": 1e-3, "B": 2e-3, "C": 1e-3, "X": 5e-4}, utility=1e-5)
    sh = Shedder(0.5, beta=0.8).fit(RULE, ev, costs=cm)
    c = sh.constraints()
    st = sh.stats
    zbar = sum(st.rates[t] * st.z_full(t) for t in st.rates) / sum(st.rates.values())
    assert c["N_in"] == pytest.approx(0.5 / zbar)
    read = {"A", "B", "C"}  # TYPES: the types of the pattern; X, which no rule reads, gets N_X = 0
    tot = sum(st.z_full(t) * st.rates[t] for t in read)
    for t, row in c["per_type"].items():
        nt = st.z_full(t) * st.rates[t] / tot * c["N_in"] * 0.8 if t in read else 0.0
        assert row["N_T"] == pytest.approx(nt)
        alpha = sh.utility.conditions_of(t) * 1e-5
        assert row["gamma_T"] == pytest.approx(max(nt - math.ceil(nt * alpha / st.z_full(t)), 0))
    assert sum(r["N_T"] for r in c["per_type"].values()) == pytest.approx(0.8 * c["N_in"])


def test_spread_allocation_shares_the_combination_work_by_hand():
    """allocation="spread" (resolution 26): N_T weighs Z(T) without its combination work plus
    the read types' combination work per read event. Hand-worked: A 1 ms, B 2 ms, C 1 ms plus
    κ·E[w_C] = 6 ms of combination work (C terminates), rates 1, 2, 1 /s; the work 6 ms x 1 /s
    over 4 read events /s is 1.5 ms each: weights 2.5·1, 3.5·2, 2.5·1 = 2.5, 7, 2.5 (paper:
    1·1, 2·2, 7·1 = 1, 4, 7). N_in, z̄ and the queued-work estimates are the paper's."""
    st = Statistics(rates={"A": 1.0, "B": 2.0, "C": 1.0, "X": 3.0},
                    costs={"A": 1e-3, "B": 2e-3, "C": 1e-3, "X": 5e-4}, window_cost=1e-3)
    st.mean_window = {"C": 6.0}
    rule = "define Q pattern SEQ(A a, B b, C c) within 5 s"
    got = {}
    for alloc in ("paper", "spread"):
        sh = Shedder(0.5, beta=0.8, allocation=alloc).fit(rule, stats=st)
        got[alloc] = sh.constraints()
    for alloc, w in (("paper", {"A": 1, "B": 4, "C": 7}), ("spread", {"A": 2.5, "B": 7, "C": 2.5})):
        c = got[alloc]
        assert c["N_in"] == pytest.approx(got["paper"]["N_in"])
        for t, row in c["per_type"].items():
            want = w[t] / sum(w.values()) * c["N_in"] * 0.8 if t in w else 0.0
            assert row["N_T"] == pytest.approx(want), (alloc, t)
    with pytest.raises(ArgumentError, match="allocation must be one of paper, spread"):
        Shedder(0.5, allocation="even")


def test_spread_allocation_keeps_the_bound_in_virtual_time():
    """The allocation only chooses which buffer drops: the bound holds as with the paper's."""
    ev = stream(1200, p=[0.3, 0.3, 0.3, 0.1])
    arr = np.arange(len(ev)) * 1e-3  # ten times the engine's capacity
    for alloc in ("paper", "spread"):
        eng = SheddingEngine(RULE, Shedder(0.05, policy="darling", seed=1, allocation=alloc),
                             mode="virtual", cost_model=CostModel(default=1e-2, window=1e-4))
        eng.warm_up(stream(300, seed=2))
        eng.run(ev, arr)
        s = eng.stats()
        assert s["dropped"] > 0 and s["violations"] == 0


# -- runs ------------------------------------------------------------------------------------------


def _engine(policy="darling", bound=0.05, seed=0, window=2e-4, **kw):
    sh = Shedder(bound, policy=policy, seed=seed, **kw)
    eng = SheddingEngine(RULE, sh, mode="virtual", cost_model=CostModel(default=2e-3, window=window))
    eng.warm_up(stream(300, seed=99))
    return eng


def _peaked(n: int, seed: int = 0, factor: float = 200.0):
    ev = stream(n, seed)
    gap = np.full(n, 0.1)
    gap[n // 4: n // 2] /= factor
    return ev, np.cumsum(gap)


def test_no_overload_no_drop_and_full_recall():
    ev = stream(400, 1)
    eng = _engine(bound=1.0)
    out = eng.run(ev)  # arrivals = timestamps, 0.1 s apart: far below capacity
    s = eng.stats()
    assert s["dropped"] == 0 and s["recall"] == 1.0 and s["violations"] == 0
    assert s["composites"] == s["composites_reference"] > 0
    ref = cep_gpu.detect(ev, RULE, backend="cpu")
    assert sorted(map(tuple, ref["ids"])) == sorted(out["ids"])


def test_overload_keeps_the_bound_and_none_violates_it():
    ev, arr = _peaked(500)
    none = _engine("none")
    none.run(ev, arr)
    assert none.stats()["violations"] > 0 and none.stats()["dropped"] == 0
    for policy in ("darling", "random"):
        eng = _engine(policy)
        eng.run(ev, arr)
        s = eng.stats()
        assert s["violations"] == 0 and s["dropped"] > 0, (policy, s)
        assert s["latency_s"]["max"] <= 0.05 * (1 + 1e-9)
        assert 0 < s["recall"] <= 1 and s["false_positives"] == 0
        assert {"dropped_per_type", "composites", "estimated_recall", "latency_s", "violations"} <= set(s)
        assert sum(s["dropped_per_type"].values()) == s["dropped"] and 0 < s["estimated_recall"] < 1


def test_a_tighter_guard_keeps_every_latency_within_its_share():
    """In virtual time an event's estimate bounds its charged cost, so the guard's share of
    L_max bounds every detection latency (real time defaults to beta for wrong estimates)."""
    ev, arr = _peaked(500)
    sh = Shedder(0.05, policy="darling")
    eng = SheddingEngine(RULE, sh, mode="virtual", cost_model=CostModel(default=2e-3, window=2e-4), guard=0.5)
    eng.warm_up(stream(300, seed=99))
    eng.run(ev, arr)
    s = eng.stats()
    assert s["composites"] > 0 and s["latency_s"]["max"] <= 0.025 * (1 + 1e-9) and s["guard_drops"] > 0
    assert SheddingEngine(RULE, sh, mode="real")._guard() == 0.8


def test_state_baseline_evicts_and_reports():
    ev, arr = _peaked(500)
    eng = _engine("state", window=2e-3)
    eng.run(ev, arr)
    s = eng.stats()
    assert s["evicted"] > 0 and s["dropped"] == 0 and s["recall"] < 1.0


def test_deterministic_for_a_seed():
    ev, arr = _peaked(400)
    runs = []
    for _ in range(2):
        eng = _engine("darling", seed=7)
        out = eng.run(ev, arr)
        s = eng.stats()
        runs.append((sorted(out["ids"]), s["dropped_per_type"], s["latency_s"]))
    assert runs[0] == runs[1]


def test_given_utilities_follow_the_rows_of_the_events():
    """run(utilities=) (the diagnostic hook) takes one utility per row of ``events`` as given,
    in any row order: Eq. 11's own utilities give the default run."""
    ev, arr = _peaked(400)
    perm = np.random.default_rng(1).permutation(len(ev))
    shuffled, arr_s = ev.iloc[perm].reset_index(drop=True), arr[perm]
    base = _engine("darling", seed=3)
    want = sorted(base.run(shuffled, arr_s)["ids"])
    eng = _engine("darling", seed=3)
    got = sorted(eng.run(shuffled, arr_s, utilities=eng.shedder.utilities(shuffled))["ids"])
    assert got == want and eng.stats()["dropped"] == base.stats()["dropped"] > 0
    with pytest.raises(ArgumentError, match="utilities"):
        eng.run(ev, arr, utilities=np.full(len(ev), 2.0))


def test_engine_loop_equals_the_compiled_simulation():
    """The run loop (engine in the loop) and the all-Numba virtual simulation decide alike."""
    ev, arr = _peaked(400)
    eng = _engine("darling", seed=3)
    eng.run(ev, arr)
    kept_loop = eng.stats()["processed"]
    from cep_gpu.shedding.shedder import UNIT_NS
    from cep_gpu.shedding.stats import times_ns

    frame = ev.sort_values("ts", kind="stable").reset_index(drop=True)
    core = eng.shedder.make_core(frame, times_ns(frame["ts"], UNIT_NS["s"]), eng.cost_model)
    _, done, order = core.simulate(arr)
    assert len(order) == kept_loop
    lat = done[order] - arr[order]
    assert np.all(lat <= 0.05 * (1 + 1e-9))


def test_unread_types_are_dropped_first_and_cost_no_recall():
    # a burst of X (no rule reads it) while A, B, C come at a low rate
    rng = np.random.default_rng(5)
    base = stream(300, 5, types=("A", "B", "C"))
    burst = pd.DataFrame({"type": "X", "ts": 10.0 + np.arange(200) * 1e-4, "price": rng.normal(100, 20, 200)})
    ev = pd.concat([base, burst], ignore_index=True).sort_values("ts", kind="stable").reset_index(drop=True)
    sh = Shedder(0.05, policy="darling")
    eng = SheddingEngine(RULE, sh, mode="virtual", cost_model=CostModel(default=2e-3))
    eng.warm_up(stream(300, 9))
    eng.run(ev)
    s = eng.stats()
    assert s["dropped"] > 0 and set(s["dropped_per_type"]) == {"X"}
    assert s["recall"] == 1.0 and s["violations"] == 0


@pytest.mark.parametrize("policy", ["random", "darling"])
def test_guard_drains_buffers_above_their_constraint_first_and_no_type_alone(policy):
    """X (no rule reads it) fills the queue before a burst of A, B, C: the guard drops X first,
    then spreads over the pattern's buffers (it once always drained the first type, A)."""
    rng = np.random.default_rng(0)
    x = pd.DataFrame({"type": "X", "ts": np.arange(40) * 0.1, "price": 1.0})
    abc = pd.DataFrame({"type": np.tile(["A", "B", "C"], 100), "ts": 4.0 + np.arange(300) * 0.01,
                        "price": rng.normal(100, 20, 300)})
    ev = pd.concat([x, abc], ignore_index=True)
    eng = SheddingEngine(RULE, Shedder(0.05, policy=policy), mode="virtual",
                         cost_model=CostModel(default=1e-3))
    eng.warm_up(stream(400, 2))
    eng.run(ev, np.zeros(len(ev)), reference=False)
    d = eng.stats()["dropped_per_type"]
    assert d["X"] >= 29 and eng.stats()["violations"] == 0 and eng.stats()["recall"] is None
    assert max(d[t] for t in "ABC") - min(d[t] for t in "ABC") <= 10 and max(d[t] for t in "ABC") < 100


def test_shed_batch_keeps_the_work_within_the_bound():
    sh = Shedder(0.02, policy="darling").fit(RULE, stream(300, 2), costs=CostModel(default=1e-3))
    batch = stream(100, 4)
    keep = sh.shed_batch(batch)
    assert keep.dtype == bool and len(keep) == 100
    assert keep.sum() <= 20 and keep.sum() >= 15  # 0.02 s of 1 ms events
    small = sh.shed_batch(batch.iloc[:10])
    assert small.all()  # below the constraint: nothing dropped
    # the lowest utilities go first
    u = sh.utilities(batch)
    assert u[keep].mean() > u[~keep].mean()
    rnd = Shedder(0.02, policy="random").fit(RULE, stream(300, 2), costs=CostModel(default=1e-3))
    assert rnd.shed_batch(batch).sum() == keep.sum()  # the same constraints, other victims


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kw, match", [
    ({"latency_bound": 0}, "latency_bound"), ({"latency_bound": -1.0}, "latency_bound"),
    ({"latency_bound": float("nan")}, "latency_bound"), ({"latency_bound": "1"}, "latency_bound"),
    ({"latency_bound": 1, "beta": 0}, "beta"), ({"latency_bound": 1, "beta": 1.5}, "beta"),
    ({"latency_bound": 1, "buckets": 0}, "buckets"), ({"latency_bound": 1, "buckets": 2.5}, "buckets"),
    ({"latency_bound": 1, "policy": "drop-all"}, "policy"),
    ({"latency_bound": 1, "distribution": "cauchy"}, "distribution"),
])
def test_bad_settings(kw, match):
    with pytest.raises(ArgumentError, match=match):
        Shedder(**kw)


def test_bad_use():
    sh = Shedder(1.0)
    with pytest.raises(SheddingError, match="statistics"):
        sh.utilities(stream(5))
    eng = SheddingEngine(RULE, Shedder(1.0), mode="virtual")
    with pytest.raises(SheddingError):
        eng.run(stream(5))
    with pytest.raises(SheddingError, match="no run"):
        eng.stats()
    with pytest.raises(ArgumentError, match="mode"):
        SheddingEngine(RULE, Shedder(1.0), mode="fast")
    with pytest.raises(ArgumentError, match="Shedder"):
        SheddingEngine(RULE, 1.5)
    with pytest.raises(ArgumentError, match="cost_model"):
        SheddingEngine(RULE, Shedder(1.0), mode="real", cost_model=CostModel())
    with pytest.raises(ArgumentError, match="CostModel.window"):
        CostModel(window=-1)
    with pytest.raises(ArgumentError, match="guard"):
        SheddingEngine(RULE, Shedder(1.0), guard=1.5)
    eng.warm_up(stream(100))
    with pytest.raises(ArgumentError, match="arrival"):
        eng.run(stream(10), arrival=np.arange(5.0))
    with pytest.raises(ArgumentError, match="decrease"):
        eng.run(stream(10), arrival=np.arange(10.0)[::-1])
    with pytest.raises(ArgumentError, match="'type'"):
        eng.run(pd.DataFrame({"ts": [1.0]}))
    with pytest.raises(ArgumentError, match="at least 2"):
        eng.warm_up(stream(1))
    assert issubclass(SheddingError, CepError)


# -- the Spark hook (no Spark needed: the per-key step's shedding function) --------------------------


def test_spark_hook_sheds_a_micro_batch_with_its_buffer_as_context():
    import inspect

    import pyarrow as pa

    from cep_gpu.shedding.spark import check_shedder, shed_parts

    sh = Shedder(0.02, policy="darling").fit(RULE, stream(300, 2), costs=CostModel(default=1e-3, window=1e-4))
    ev = stream(160, 6)
    buffer = pa.Table.from_pandas(ev.iloc[:40], preserve_index=False)
    new = pa.Table.from_pandas(ev.iloc[40:], preserve_index=False)
    parts = shed_parts([new.slice(0, 60), new.slice(60)], buffer, sh, "s")
    kept = pa.concat_tables(parts)
    assert 0 < kept.num_rows < new.num_rows
    want = sh.shed_batch(ev.iloc[40:].reset_index(drop=True), context=ev.iloc[:40])
    assert kept.num_rows == want.sum()
    assert shed_parts([], buffer, sh, "s") == []
    # below the constraint nothing is dropped
    assert pa.concat_tables(shed_parts([new.slice(0, 5)], buffer, sh, "s")).num_rows == 5
    assert check_shedder(None) is None
    with pytest.raises(ArgumentError, match="Shedder"):
        check_shedder(0.5)
    with pytest.raises(SheddingError):
        check_shedder(Shedder(1.0))
    from cep_gpu.spark_udfs import stream as spark_stream

    assert "shedding" in inspect.signature(spark_stream.detect_stream).parameters
    assert "shedding" in inspect.signature(spark_stream._step).parameters


def test_bench_and_cli_smoke(tmp_path, capsys):
    import json

    from cep_gpu.cli import main

    out, png = tmp_path / "s.json", tmp_path / "s.png"
    rc = main(["shedding", "bench", "--mode", "virtual", "--lengths", "3", "--factors", "100",
               "--events", "400", "--warmup", "200", "--out", str(out), "--plot", str(png)])
    assert rc == 0 and png.stat().st_size > 0
    res = json.loads(out.read_text())
    for pol in ("none", "random", "state", "darling"):
        assert set(res["summary"][pol]) >= {"recall", "violations", "p99_latency_s"}
    assert res["summary"]["darling"]["violations"] == 0
    assert res["summary"]["none"]["violations"] > 0  # the bound is set so that no shedding violates it
    assert main(["shedding", "bench", "--noise", "1.5"]) == 2


def test_live_publish_sheds_each_micro_batch():
    eng = _engine("darling", bound=0.02)
    ev = stream(400, 8)
    small = eng.publish(ev.iloc[:5])  # below the constraint: all kept
    assert eng.live_stats()["kept"] == 5
    out = [small]
    for lo in range(5, 400, 79):
        out.append(eng.publish(ev.iloc[lo:lo + 79]))
    s = eng.live_stats()
    assert s["published"] == 400 and 0 < s["kept"] < 400
    assert sum(s["dropped_per_type"].values()) == 400 - s["kept"]
    assert s["engine"]["events"] == s["kept"]
    with pytest.raises(SheddingError):
        _engine("none").live_stats()


def test_live_publish_checks_its_columns_once(monkeypatch):
    """The gate checks a publish's columns; the shedder's own check (of direct shed_batch and
    utilities calls) is not run again on the publish path."""
    import cep_gpu.shedding.shedder as shedder_mod

    eng = _engine("darling", bound=0.02)
    ev = stream(100, 8)

    def twice(*args, **kwargs):
        raise AssertionError("a publish checked its columns a second time")

    monkeypatch.setattr(shedder_mod, "require_frame", twice)
    eng.publish(ev.iloc[:50])
    assert eng.live_stats()["published"] == 50
    with pytest.raises(cep_gpu.errors.EventError, match="no 'ts' column"):
        eng.publish(ev.iloc[50:].drop(columns="ts"))
    monkeypatch.undo()
    with pytest.raises(ArgumentError, match="shed_batch: events have no 'ts' column"):
        eng.shedder.shed_batch(ev.drop(columns="ts"))


def test_regathered_statistics_reach_the_running_shedder():
    """Concept drift (Sec. 4.1): after the warm-up every price moves up by 200; with stale
    statistics A's and B's utilities are ~0 (no B or C of the warm-up is that dear), they go first and lose
    more matches; re-gathering on the recent events gives the rest of the run the new utilities."""
    ev, arr = _peaked(600, seed=4)
    ev = ev.assign(price=ev["price"] + 200.0)
    calls = []

    def always(recent):
        calls.append(len(recent))
        return True

    recalls = {}
    for name, check in (("stale", None), ("regathered", always)):
        sh = Shedder(0.05, policy="darling", seed=1)
        eng = SheddingEngine(RULE, sh, mode="virtual", cost_model=CostModel(default=2e-3, window=2e-4),
                             drift_check=check, drift_every=100)
        eng.warm_up(stream(300, seed=99))
        eng.run(ev, arr)
        recalls[name] = eng.stats()["recall"]
        assert eng.stats()["violations"] == 0
    assert calls and all(c >= 100 for c in calls)
    assert sh.stats.samples["A"]["price"].mean() > 250  # the last run's shedder knows the new prices
    assert recalls["regathered"] > recalls["stale"], recalls


def test_the_guard_compares_utilities_across_buffers_only_at_zero():
    """An event whose utility is small but positive (u < 1/ξ, the paper's UtilArr^0) is not
    worthless: the guard must not drain such types' buffers before the others. Here every A and
    C has U < 1e-2 (a.x > c.x is rare) while B's utilities are near 1; all buffers overflow, and
    the guard once took its victims from A and C only (Section 4.4: utilities rank the events
    *of one buffer*; which buffer drops is the constraints' business, Section 4.2.2)."""
    rng = np.random.default_rng(1)
    rule = "define P pattern SEQ(A a, B b, C c) where a.price < b.price and a.x > c.x within 5 s"

    def abc(n, t0):
        k = np.arange(n) % 3
        return pd.DataFrame({"type": np.array(["A", "B", "C"])[k], "ts": t0 + np.arange(n) * 0.01,
                             "price": np.where(k == 0, rng.normal(90, 5, n), rng.normal(110, 5, n)),
                             "x": np.where(k == 0, rng.normal(0, 0.5, n), rng.normal(3, 0.4, n))})
    eng = SheddingEngine(rule, Shedder(0.05, policy="darling", distribution="normal"), mode="virtual",
                         cost_model=CostModel(default=1e-3), guard=0.5)
    eng.warm_up(abc(600, 0.0))
    run = abc(600, 10.0)
    u = eng.shedder.utilities(run)
    ty = run["type"].to_numpy()
    assert 0 < u[ty != "B"].min() and u[ty != "B"].max() < 1 / 100 and u[ty == "B"].min() > 0.5
    eng.run(run, np.zeros(len(run)), reference=False)
    s = eng.stats()
    d = s["dropped_per_type"]
    assert s["guard_drops"] > 0 and s["violations"] == 0
    kept = {t: 200 - d.get(t, 0) for t in "ABC"}
    # about 24 events fit the guard's share of the bound; they were B's alone (A 1, B 23, C 0)
    assert sum(kept.values()) >= 20 and min(kept.values()) >= 4, kept


# -- the benchmark's workloads (Section 5.1) -------------------------------------------------------


def test_nasdaq_workload_is_the_papers_q1a_on_per_minute_bars():
    """One bar per symbol and minute, log-normal volumes, Q1^A with factor C within 60 minutes."""
    from cep_gpu.shedding import bench

    rule, ev = bench.nasdaq(2400, 4, seed=3, noise=0.5, factor_c=1.5)
    again = bench.nasdaq(2400, 4, seed=3, noise=0.5, factor_c=1.5)[1]
    pd.testing.assert_frame_equal(ev, again)  # seeded
    assert "within 60 min" in rule and rule.count("volume * 1.5") == 3
    assert cep_gpu.parse_rule(rule).input_types == {"S0", "S1", "S2", "S3"}
    minute = (ev["ts"] // 60).astype(int)
    per = ev.groupby([minute, "type"]).size()
    assert per.max() == 1 and ev["type"].nunique() == 8  # 4 read + 4 unread symbols: noise 0.5
    assert ev["ts"].is_monotonic_increasing and ev["ts"].is_unique
    logv = np.log(ev.loc[ev["type"] == "S0", "volume"])
    v = ev.loc[ev["type"] == "S0", "volume"]
    assert abs(logv.skew()) < 0.5 and v.skew() > 2  # log-normal: symmetric log, heavy tail
    # ~60 events of each pattern symbol in one 60-minute window
    assert ((ev["type"] == "S1") & (ev["ts"] < 3600)).sum() == 60
    with pytest.raises(ValueError, match="noise"):
        bench.nasdaq(100, 4, noise=1.0)


def test_nasdaq_bench_keeps_the_bound_in_virtual_time():
    from cep_gpu.shedding import bench

    out = bench.run("nasdaq", lengths=(4,), factors=(), n_events=3000, warmup=1000, mode="virtual",
                    policies=("random", "darling"))
    rows = {r["policy"]: r for r in out["rows"]}
    assert rows["darling"]["violations"] == 0 and rows["random"]["violations"] == 0
    assert rows["darling"]["dropped"] > 0 and rows["darling"]["composites_reference"] > 0
    assert out["summary"]["criteria"]["darling_violations"] == 0


def test_chain_utility_is_the_exact_match_probability_and_eq11_stays_the_default():
    """The optional "chain" utility (docs/shedding.md, resolution 22) against brute force over
    the samples: P(b.x > 1.2·a.x and c.x > b.x + 1 | a.x = x), scaled to max 1 on A's sample."""
    rng = np.random.default_rng(5)
    m = 40
    sample = pd.DataFrame({"type": np.repeat(["A", "B", "C"], m), "ts": np.arange(3 * m, dtype=float),
                           "x": np.r_[rng.lognormal(0, 0.5, m), rng.lognormal(0.5, 0.5, m),
                                      rng.lognormal(1, 0.5, m)]})
    rule = "define P pattern SEQ(A a, B b, C c) where b.x > a.x * 1.2 and c.x > b.x + 1 within 1 min"
    xa, xb, xc = (sample.loc[sample["type"] == t, "x"].to_numpy() for t in "ABC")

    def brute_a(x):
        return ((xb[None, :, None] > 1.2 * x[:, None, None]) & (xc[None, None, :] > xb[None, :, None] + 1)).mean(axis=(1, 2))

    probe = pd.DataFrame({"type": "A", "ts": 0.0, "x": [0.2, 0.8, 1.5, 3.0]})
    chain = Shedder(1.0, utility="chain").fit(rule, sample, costs=CostModel())
    np.testing.assert_allclose(chain.utilities(probe), brute_a(probe["x"].to_numpy()) / brute_a(xa).max(),
                               atol=1e-12)
    # B sits between two conditions that both read it: the same ranking as Eq. 11 there
    pb = pd.DataFrame({"type": "B", "ts": 0.0, "x": [0.5, 1.5, 2.5]})
    raw = (xa[None, :] * 1.2 < pb["x"].to_numpy()[:, None]).mean(1) * (xc[None, :] > pb["x"].to_numpy()[:, None] + 1).mean(1)
    own = (xa[None, :] * 1.2 < xb[:, None]).mean(1) * (xc[None, :] > xb[:, None] + 1).mean(1)
    np.testing.assert_allclose(chain.utilities(pb), raw / own.max(), atol=1e-12)
    # Eq. 11 (the default) reads only the conditions on A: 1 - F_B(1.2 x), not the same numbers
    eq11 = Shedder(1.0, distribution="empirical").fit(rule, sample, costs=CostModel())
    np.testing.assert_allclose(eq11.utilities(probe), (xb[None, :] > 1.2 * probe["x"].to_numpy()[:, None]).mean(1),
                               atol=1e-12)
    # a cycle of conditions has no exact messages: Eq. 11 instead
    cyc = rule.replace("within", "and c.x > a.x within")
    got = Shedder(1.0, utility="chain", distribution="empirical").fit(cyc, sample, costs=CostModel())
    ref = Shedder(1.0, distribution="empirical").fit(cyc, sample, costs=CostModel())
    np.testing.assert_allclose(got.utilities(probe), ref.utilities(probe), atol=1e-12)
    with pytest.raises(ArgumentError, match="utility"):
        Shedder(1.0, utility="oracle")


def test_rules_are_taken_as_detect_takes_them():
    """A list of rule texts works as for detect; rules that hold none are an ArgumentError."""
    sample = pd.DataFrame({"type": ["A", "B"] * 20, "ts": np.arange(40.0), "price": np.arange(40.0)})
    texts = ["define P pattern SEQ(A a, B b) where a.price < b.price within 1 min",
             "define Q pattern SEQ(B b, A a) within 1 min"]
    sh = Shedder(1.0).fit(texts, sample, costs=CostModel())
    assert [r.name for r in sh.rules] == ["P", "Q"]
    for empty in ("", []):
        with pytest.raises(ArgumentError, match="the rules given hold no rule"):
            Shedder(1.0).fit(empty, sample, costs=CostModel())
