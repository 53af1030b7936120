"""The planner: profiles, the cost model's decisions, batching, the auto backend and explain."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import cep_gpu
from cep_gpu import planner as pl
from cep_gpu.backends import Matches, get_backend
from cep_gpu.benchmarks import workloads as wl
from cep_gpu.events import EventTable

ZERO = dict.fromkeys(pl.FEATURES, 0.0)


def profile(cpu=None, gpu=None) -> pl.Profile:
    return pl.Profile({**ZERO, **(cpu or {})}, {**ZERO, **(gpu or {})}, "test")


def seq3_table(n=900, seed=3):
    return EventTable.from_pandas(wl.seq3_events(n, seed), time_unit="ms")


def rows_set(m: Matches) -> set:
    return {tuple(r) for r in m.rows.tolist()}


class Counting:
    """A backend that delegates to another and records the row ranges it was given."""

    def __init__(self, inner, name):
        self.inner, self.name, self.calls = inner, name, []

    def match(self, rule, table, lo=0, hi=None, excluded=None):
        self.calls.append((lo, hi))
        return self.inner.match(rule, table, lo, hi, excluded)


# ---------------------------------------------------------------------------------- profiles


def test_default_profile_loads_and_is_complete():
    prof = pl.default_profile()
    for dev in (prof.cpu, prof.gpu):
        assert set(dev) == set(pl.FEATURES)
        assert all(v >= 0 for v in dev.values())
    # the GPU pays a higher fixed price per launch than the CPU, and less per pair
    assert prof.gpu["launches"] > prof.cpu["launches"]
    assert prof.gpu["pairs"] <= prof.cpu["pairs"] + prof.cpu["matches"]


def test_profile_round_trip(tmp_path):
    prof = profile({"pairs": 1e-9}, {"launches": 1e-5})
    path = prof.save(tmp_path / "p.json")
    back = pl.read_profile(path)
    assert dict(back.cpu) == dict(prof.cpu) and dict(back.gpu) == dict(prof.gpu)


def test_missing_profile_is_a_clear_error(tmp_path):
    with pytest.raises(pl.ProfileError, match="no such file"):
        pl.load_profile(tmp_path / "nope.json")


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"format": "x", "cpu": {}, "gpu": {}}', "'format' must be"),
        ('{"format": "cep-gpu-profile/1", "gpu": {}}', "missing the 'cpu' object"),
        ('{"format": "cep-gpu-profile/1", "cpu": {"pairs": -1}, "gpu": {}}', "cpu.pairs must be a finite number >= 0"),
        ('{"format": "cep-gpu-profile/1", "cpu": {"pairs": "fast"}, "gpu": {}}', "cpu.pairs must be"),
        ('{"format": "cep-gpu-profile/1", "cpu": {}, "gpu": {"warp": 1}}', "unknown gpu coefficient"),
    ],
)
def test_malformed_profile_names_the_fault(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(pl.ProfileError, match=message):
        pl.load_profile(path)
    # the auto backend refuses it up front, not deep inside a kernel
    with pytest.raises(pl.ProfileError):
        pl.AutoBackend(profile=path)


def test_env_profile_is_used_and_checked(tmp_path, monkeypatch):
    good = profile({"launches": 7e-6}).save(tmp_path / "env.json")
    monkeypatch.setenv("CEP_GPU_PROFILE", str(good))
    assert pl.load_profile().cpu["launches"] == 7e-6
    monkeypatch.setenv("CEP_GPU_PROFILE", str(tmp_path / "missing.json"))
    with pytest.raises(pl.ProfileError, match="missing.json"):
        pl.load_profile()


def test_malformed_user_profile_falls_back_to_default(tmp_path, monkeypatch):
    monkeypatch.delenv("CEP_GPU_PROFILE", raising=False)
    user = tmp_path / "profile.json"
    monkeypatch.setattr(pl, "user_profile_path", lambda: user)
    user.write_text(json.dumps(profile({"launches": 3e-6}).to_json()))
    assert pl.load_profile().cpu["launches"] == 3e-6
    user.write_text("{broken")
    with pytest.warns(UserWarning, match="using the default profile"):
        prof = pl.load_profile()
    assert dict(prof.cpu) == dict(pl.default_profile().cpu)


# ---------------------------------------------------------------------------------- decisions


def test_decision_flips_exactly_where_the_estimates_cross():
    # cpu: 2 ns per pair; gpu: 10 us per launch + 0.5 ns per pair -> equal at 10e-6 / 1.5e-9 pairs
    prof = profile({"pairs": 2e-9}, {"launches": 1e-5, "pairs": 5e-10})
    cross = 1e-5 / 1.5e-9
    for pairs in (cross * 0.999, cross, cross * 1.001):
        f = {"launches": 1, "pairs": pairs}
        device, c, g, _ = pl.decide(prof, f, gpu_usable=True)
        assert device == ("gpu" if g < c else "cpu")
    assert pl.decide(prof, {"launches": 1, "pairs": cross * 0.999}, True)[0] == "cpu"
    assert pl.decide(prof, {"launches": 1, "pairs": cross * 1.001}, True)[0] == "gpu"
    # never the GPU when it is not usable, however cheap
    assert pl.decide(prof, {"launches": 1, "pairs": cross * 100}, False)[0] == "cpu"


def test_window_sweep_flips_once_at_the_crossing():
    """On seq3, a GPU with a fixed launch price wins from the window where the estimates meet."""
    prof = profile({"terminators": 1e-7, "pairs": 1e-9, "matches": 1e-8, "outputs": 1e-8},
                   {"launches": 5e-6, "pairs": 1e-12})
    table = EventTable.from_pandas(wl.seq3_events(20_000, 1), time_unit="ms")
    decisions = []
    for w in (30, 100, 300, 1000, 3000):
        (rule,) = cep_gpu.parse_rules(wl.seq3_rule(w))
        work = pl.estimate_work(rule, table, 2 * w, len(table))
        f = pl._average_launch(work, True)
        dev, c, g, _ = pl.decide(prof, f, True)
        decisions.append(dev)
        assert (dev == "gpu") == (g < c)
    assert decisions[0] == "cpu" and decisions[-1] == "gpu"
    flip = decisions.index("gpu")
    assert all(d == "gpu" for d in decisions[flip:])  # one crossing


# ---------------------------------------------------------------------------------- estimates


def test_window_ranges_are_exact_per_terminator():
    table = seq3_table(600)
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(40))
    work = pl.estimate_work(rule, table)
    ts = table.ts
    b_ts = ts[table.rows_of_type("B")]
    expect_pairs_step1 = np.array([((b_ts >= t - 40_000_000) & (b_ts < t)).sum() for t in work.term_ts])
    assert np.array_equal(work.term_rows, table.rows_of_type("C"))
    # step 1 starts from one partial per terminator: its pairs are the exact range sizes
    assert work.steps[0].events_per_window == pytest.approx(expect_pairs_step1.mean())
    assert work.steps[0].selectivity == pytest.approx(1 / len(np.unique(table.columns["k"].values)), rel=0.2)
    assert work.per_terminator[:, pl.FEATURES.index("terminators")].sum() == len(work.term_rows)


def test_batches_respect_the_latency_bound():
    table = seq3_table(900)
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(60))
    work = pl.estimate_work(rule, table)
    prof = profile({"launches": 1e-6, "terminators": 1e-6, "pairs": 1e-8}, {"launches": 1.0})
    bound = 2e-5
    batches = pl.plan_batches(work, prof, gpu_usable=False, max_batch_latency=bound)
    assert batches[0].first == 0 and batches[-1].stop == len(work.term_rows)
    assert all(a.stop == b.first for a, b in zip(batches, batches[1:]))
    for d in batches:
        if d.stop - d.first > 1:
            assert d.cpu_s <= bound + 1e-12
    assert len(pl.plan_batches(work, prof, False, None)) == 1
    assert len(pl.plan_batches(work, prof, False, 0.0)) == len(work.term_rows)


# ---------------------------------------------------------------------------------- auto backend


@pytest.mark.parametrize("latency", [None, 0.0, 5e-5])
@pytest.mark.parametrize("forced", ["cpu", "gpu", "mixed"])
def test_auto_dispatch_splits_batches_without_changing_results(latency, forced):
    """Whatever the split and the devices, auto returns exactly the matches of its devices."""
    table = seq3_table(700, seed=5)
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(80))
    ref = get_backend("reference")
    cpu, gpu = Counting(ref, "cpu"), Counting(ref, "gpu")
    if forced == "cpu":
        prof = profile({"pairs": 1e-9}, {"launches": 1.0})
    elif forced == "gpu":
        prof = profile({"launches": 1.0}, {"pairs": 1e-9})
    else:  # gpu for batches with many pairs, cpu for small ones
        prof = profile({"pairs": 1e-6, "terminators": 1e-6}, {"launches": 3e-5, "terminators": 1e-6})
    auto = pl.AutoBackend(profile=prof, max_batch_latency=latency, cpu=cpu, gpu=gpu)
    got = auto.match(rule, table, 0, len(table))
    assert rows_set(got) == rows_set(ref.match(rule, table, 0, len(table)))
    stats = auto.stats()
    n_term = len(table.rows_of_type("C"))
    assert stats["cpu"]["terminators"] + stats["gpu"]["terminators"] == n_term
    assert stats["cpu"]["decisions"] == len(cpu.calls) and stats["gpu"]["decisions"] == len(gpu.calls)
    if forced == "cpu":
        assert not gpu.calls
    if forced == "gpu":
        assert not cpu.calls
    if latency == 0.0:
        assert len(cpu.calls) + len(gpu.calls) == n_term
    # batches tile the requested rows
    calls = sorted(cpu.calls + gpu.calls)
    assert calls[0][0] == 0 and calls[-1][1] == len(table)
    assert all(a[1] == b[0] for a, b in zip(calls, calls[1:]))


def test_auto_without_gpu_runs_everything_on_cpu():
    table = seq3_table(500)
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(50, "last"))
    ref = get_backend("reference")
    cpu = Counting(ref, "cpu")
    auto = pl.AutoBackend(profile=profile({"launches": 1.0}, {}), cpu=cpu, gpu_available=False)
    got = auto.match(rule, table, 0, len(table))
    assert rows_set(got) == rows_set(ref.match(rule, table, 0, len(table)))
    assert cpu.calls == [(0, len(table))]
    assert auto.stats()["gpu"]["decisions"] == 0 and auto.stats()["cpu"]["decisions"] == 1


def test_auto_never_picks_gpu_on_this_machine_and_matches_cpu():
    """On a machine without a usable GPU, backend="auto" gives exactly the rows of backend="cpu"."""
    if pl.gpu_usable():
        pytest.skip("this machine has a usable GPU: covered by the dispatch tests above")
    events = wl.seq3_events(3000, seed=11)
    rules = wl.seq3_rule(200, "each") + "\n" + wl.seq3_rule(300, "last").replace("Seq3", "Last3")
    auto = cep_gpu.detect(events, rules, backend="auto", time_unit="ms")
    cpu = cep_gpu.detect(events, rules, backend="cpu", time_unit="ms")
    pd.testing.assert_frame_equal(auto, cpu)
    assert len(auto) > 0
    stats = get_backend("auto").stats()
    assert stats["gpu"]["decisions"] == 0 and stats["cpu"]["decisions"] >= 2


def test_consuming_rules_are_planned_as_one_batch():
    """Rules with consuming are planned as one batch (consumption order must stay sequential)."""
    rule = cep_gpu.parse_rule(
        "define P from B(k=$k) and each A(k=$k) within 50 ms from B consuming A"
    )
    table = EventTable.from_pandas(wl.seq3_events(400, 2).replace({"type": {"C": "B"}}), time_unit="ms")
    ref = get_backend("reference")
    cpu, gpu = Counting(ref, "cpu"), Counting(ref, "gpu")
    auto = pl.AutoBackend(profile=profile({"launches": 1.0}, {}), max_batch_latency=0.0, cpu=cpu, gpu=gpu)
    got = auto.match(rule, table, 0, len(table))
    assert rows_set(got) == rows_set(ref.match(rule, table, 0, len(table)))
    assert len(gpu.calls) == 1 and not cpu.calls


# ---------------------------------------------------------------------------------- explain


def test_explain_shows_columns_windows_decision_and_estimates():
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(1000))
    table = EventTable.from_pandas(wl.seq3_events(6000, 1), time_unit="ms")
    text = pl.explain_plan(rule, table, profile({"pairs": 1e-9}, {"launches": 1.0}), gpu_available=True)
    assert "column 0: C  terminator" in text
    assert "each within 1 s from C" in text and "each within 1 s from B" in text
    assert "expected 3" in text  # about 333 events of each type per 1000 ms window
    assert "cpu " in text and "gpu " in text and "-> cpu" in text
    rates = pl.explain_plan(rule, {"A": 100.0, "B": 100.0, "C": 100.0}, profile({"launches": 1.0}, {}), True)
    assert "expected 100.0 events per window" in rates and "-> gpu" in rates
    bare = pl.explain_plan(rule, None, None, False)
    assert "no events or rates given" in bare


def test_auto_is_registered():
    assert isinstance(get_backend("auto"), pl.AutoBackend)


def test_default_profile_reproduces_the_chapter_crossover():
    """The shipped GPU constants make the GPU win on seq3 `each` from windows of about 4000."""
    from cep_gpu.benchmarks.calibrate import crossover_window

    prof = pl.default_profile()
    assert prof.meta["gpu_source"].startswith("derived")
    got = crossover_window(prof, "each", windows=[2000, 3000, 3500, 4000, 4500, 5000, 6000])
    assert got is not None and 3500 <= got <= 4500


def test_engine_explain_shows_the_planner():
    engine = cep_gpu.Engine(wl.seq3_rule(100), backend="auto", time_unit="ms")
    engine.publish(wl.seq3_events(300))
    text = engine.explain()
    assert "planner: GPU" in text and "planner: last run -> cpu" in text
    auto = pl.AutoBackend(profile=profile({"pairs": 1e-9}, {"launches": 1.0}), gpu_available=False)
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(100))
    assert "expected" in auto.explain(rule, seq3_table(600))
