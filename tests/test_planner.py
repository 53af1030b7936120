"""The planner: profiles, the cost model's decisions, batching, the auto backend and explain."""

from __future__ import annotations

import json
import re

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
    # the GPU pays a higher fixed price per launch than the CPU (measured: launch and transfers)
    assert prof.gpu["launches"] > prof.cpu["launches"]


def test_profile_round_trip(tmp_path):
    prof = profile({"pairs": 1e-9}, {"launches": 1e-5})
    path = prof.save(tmp_path / "p.json")
    back = pl.read_profile(path)
    assert dict(back.cpu) == dict(prof.cpu) and dict(back.gpu) == dict(prof.gpu)


def test_malformed_profiles_are_profile_errors_and_a_user_profile_falls_back(tmp_path, monkeypatch):
    good = pl.default_profile()
    huge = {"format": pl.PROFILE_FORMAT, "cpu": {"pairs": 10**400}, "gpu": {}}
    (tmp_path / "huge.json").write_text(json.dumps(huge))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(pl.ProfileError, match=r"huge.json: malformed \(OverflowError"):
        pl.read_profile(tmp_path / "huge.json")
    with pytest.raises(pl.ProfileError, match=r"deep.json: not valid JSON \(RecursionError"):
        pl.read_profile(tmp_path / "deep.json")
    with pytest.raises(pl.ProfileError, match="a folder, not a profile file"):
        pl.read_profile(tmp_path)
    # as the user profile: a warning, and the default
    monkeypatch.delenv("CEP_GPU_PROFILE", raising=False)
    monkeypatch.setattr(pl.profile, "user_profile_path", lambda: tmp_path / "huge.json")
    with pytest.warns(UserWarning, match="using the default profile instead"):
        prof = pl.load_profile()
    assert dict(prof.cpu) == dict(good.cpu)


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
        (
            '{"format": "cep-gpu-profile/1", "cpu": {"pairs": -1}, "gpu": {}}',
            "cpu.pairs must be a finite number >= 0",
        ),
        (
            '{"format": "cep-gpu-profile/1", "cpu": {"pairs": "fast"}, "gpu": {}}',
            "cpu.pairs must be",
        ),
        (
            '{"format": "cep-gpu-profile/1", "cpu": {}, "gpu": {"warp": 1}}',
            "unknown gpu coefficient",
        ),
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
    import cep_gpu.planner.profile as profiles

    monkeypatch.setattr(profiles, "user_profile_path", lambda: user)
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
    prof = profile(
        {"terminators": 1e-7, "pairs": 1e-9, "matches": 1e-8, "outputs": 1e-8},
        {"launches": 5e-6, "pairs": 1e-12},
    )
    table = EventTable.from_pandas(wl.seq3_events(20_000, 1), time_unit="ms")
    decisions = []
    for w in (30, 100, 300, 1000, 3000):
        (rule,) = cep_gpu.parse_rules(wl.seq3_rule(w))
        work = pl.estimate_work(rule, table, 2 * w, len(table))
        f = pl.average_launch(work, True)
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
    expect_pairs_step1 = np.array(
        [((b_ts >= t - 40_000_000) & (b_ts < t)).sum() for t in work.term_ts]
    )
    assert np.array_equal(work.term_rows, table.rows_of_type("C"))
    # step 1 starts from one partial per terminator: its pairs are the exact range sizes
    assert work.steps[0].events_per_window == pytest.approx(expect_pairs_step1.mean())
    assert work.steps[0].selectivity == pytest.approx(
        1 / len(np.unique(table.columns["k"].values)), rel=0.2
    )
    assert work.per_terminator[:, pl.FEATURES.index("terminators")].sum() == len(work.term_rows)


@pytest.mark.parametrize("per_event", [0.0, 1e-7])
def test_batches_respect_the_latency_bound(per_event):
    """Every batch of more than one terminator is estimated within the bound, including the
    per-batch cost of the events it reads."""
    table = seq3_table(900)
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(60))
    work = pl.estimate_work(rule, table)
    prof = profile(
        {"launches": 1e-6, "terminators": 1e-6, "pairs": 1e-8, "events": per_event},
        {"launches": 1.0},
    )
    bound = 2e-5
    batches = pl.plan_batches(work, prof, gpu_usable=False, max_batch_latency=bound)
    assert batches[0].first == 0 and batches[-1].stop == len(work.term_rows)
    assert all(a.stop == b.first for a, b in zip(batches, batches[1:]))
    for d in batches:
        if d.stop - d.first > 1:
            assert d.cpu_s <= bound + 1e-12
    # and batches are as large as the bound allows: one more terminator would not fit
    for d in batches[:-1]:
        assert prof.cost("cpu", work.batch_features(d.first, d.stop + 1)) > bound
    assert len(batches) > 1 and any(d.stop - d.first > 1 for d in batches)
    assert len(pl.plan_batches(work, prof, False, None)) == 1
    assert len(pl.plan_batches(work, prof, False, 0.0)) == len(work.term_rows)


def test_each_batch_takes_the_cheaper_device_of_its_own_estimates():
    """Decisions are per batch: with a bound, small batches stay on the CPU and big ones may go to
    the GPU, each decision agreeing with its two estimates."""
    table = seq3_table(900)
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(60))
    work = pl.estimate_work(rule, table)
    # cpu: by pairs; gpu: by terminators, so batches with more pairs than average go to the GPU
    mean_pairs = work.per_terminator[:, pl.FEATURES.index("pairs")].mean()
    prof = profile({"pairs": 1e-7}, {"terminators": 1e-7 * mean_pairs})
    batches = pl.plan_batches(work, prof, True, 1e-5)
    assert len(batches) > 1
    for d in batches:
        f = work.batch_features(d.first, d.stop)
        assert d.cpu_s == pytest.approx(prof.cost("cpu", f)) and d.gpu_s == pytest.approx(
            prof.cost("gpu", f)
        )
        assert d.device == ("gpu" if d.gpu_s < d.cpu_s else "cpu")
    assert {d.device for d in batches} == {"cpu", "gpu"}


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
        prof = profile(
            {"pairs": 1e-6, "terminators": 1e-6}, {"launches": 3e-5, "terminators": 1e-6}
        )
    auto = pl.AutoBackend(profile=prof, max_batch_latency=latency, cpu=cpu, gpu=gpu)
    got = auto.match(rule, table, 0, len(table))
    assert rows_set(got) == rows_set(ref.match(rule, table, 0, len(table)))
    stats = auto.stats()
    n_term = len(table.rows_of_type("C"))
    assert stats["cpu"]["terminators"] + stats["gpu"]["terminators"] == n_term
    assert stats["cpu"]["decisions"] == len(cpu.calls) and stats["gpu"]["decisions"] == len(
        gpu.calls
    )
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
    table = EventTable.from_pandas(
        wl.seq3_events(400, 2).replace({"type": {"C": "B"}}), time_unit="ms"
    )
    ref = get_backend("reference")
    cpu, gpu = Counting(ref, "cpu"), Counting(ref, "gpu")
    auto = pl.AutoBackend(
        profile=profile({"launches": 1.0}, {}), max_batch_latency=0.0, cpu=cpu, gpu=gpu
    )
    got = auto.match(rule, table, 0, len(table))
    assert rows_set(got) == rows_set(ref.match(rule, table, 0, len(table)))
    assert len(gpu.calls) == 1 and not cpu.calls


# ---------------------------------------------------------------------------------- explain


def test_explain_shows_columns_windows_decision_and_estimates():
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(1000))
    table = EventTable.from_pandas(wl.seq3_events(6000, 1), time_unit="ms")
    text = pl.explain_plan(
        rule, table, profile({"pairs": 1e-9}, {"launches": 1.0}), gpu_available=True
    )
    assert "column 0: C  terminator" in text
    assert "each within 1 s from C" in text and "each within 1 s from B" in text
    assert "expected 3" in text  # about 333 events of each type per 1000 ms window
    assert "cpu " in text and "gpu " in text and "-> cpu" in text
    rates = pl.explain_plan(
        rule, {"A": 100.0, "B": 100.0, "C": 100.0}, profile({"launches": 1.0}, {}), True
    )
    assert "expected 100.0 events per window" in rates and "-> gpu" in rates
    bare = pl.explain_plan(rule, None, None, False)
    assert "no events or rates given" in bare


def test_auto_is_registered():
    assert isinstance(get_backend("auto"), pl.AutoBackend)


def test_default_profile_is_measured_on_a_gpu_and_says_its_crossover():
    """The shipped profile was measured by `cep-gpu calibrate` on a GPU machine (both devices on the
    same host), and the seq3 crossover it records is the one its coefficients give."""
    from cep_gpu.benchmarks.calibrate import crossover_window

    prof = pl.default_profile()
    assert prof.meta["gpu_source"].startswith("measured") and prof.meta["cpu_source"].startswith(
        "measured"
    )
    assert prof.meta["machine"]["gpu"]
    for policy in ("each", "last"):
        assert crossover_window(prof, policy) == prof.meta["seq3_crossover_window_ms"][policy]


def test_engine_explain_shows_the_planner():
    engine = cep_gpu.Engine(wl.seq3_rule(100), backend="auto", time_unit="ms")
    engine.publish(wl.seq3_events(300))
    text = engine.explain()
    n_c = int((wl.seq3_events(300)["type"] == "C").sum())
    assert "planner: GPU" in text and f"planner: last run, {n_c} terminator(s) -> cpu" in text
    auto = pl.AutoBackend(profile=profile({"pairs": 1e-9}, {"launches": 1.0}), gpu_available=False)
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(100))
    assert "expected" in auto.explain(rule, seq3_table(600))


# ---------------------------------------------------------------------------------- decisions end to end


def _cross_profile(rule, table, below: bool) -> pl.Profile:
    """cpu: 1 ns per pair; gpu: a launch price just under (``below``) or exactly at the CPU estimate
    of the whole input as one batch."""
    work = pl.estimate_work(rule, table)
    cpu_s = 1e-9 * work.batch_features(0, len(work.term_rows))["pairs"]
    assert cpu_s > 0
    return profile({"pairs": 1e-9}, {"launches": cpu_s * (1 - 1e-9) if below else cpu_s})


@pytest.mark.parametrize("below", [True, False])
def test_auto_flips_to_the_gpu_exactly_where_the_estimates_cross(below):
    """Through estimate -> decide -> dispatch: a GPU estimate a hair under the CPU's runs on the
    GPU, an equal one stays on the CPU (ties go to the CPU)."""
    table = seq3_table(700, seed=4)
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(80))
    ref = get_backend("reference")
    cpu, gpu = Counting(ref, "cpu"), Counting(ref, "gpu")
    auto = pl.AutoBackend(profile=_cross_profile(rule, table, below), cpu=cpu, gpu=gpu)
    got = auto.match(rule, table, 0, len(table))
    assert rows_set(got) == rows_set(ref.match(rule, table, 0, len(table)))
    (d,) = auto.last_decisions[rule.name]
    if below:
        assert d.gpu_s < d.cpu_s and d.device == "gpu" and len(gpu.calls) == 1 and not cpu.calls
    else:
        assert d.gpu_s == d.cpu_s and d.device == "cpu" and len(cpu.calls) == 1 and not gpu.calls
    # the same profile without a usable GPU: always the CPU
    auto = pl.AutoBackend(
        profile=_cross_profile(rule, table, True), cpu=cpu, gpu=gpu, gpu_available=False
    )
    cpu.calls.clear(), gpu.calls.clear()
    auto.match(rule, table, 0, len(table))
    assert not gpu.calls and len(cpu.calls) == 1


def test_decisions_are_per_rule_one_batch_each_in_detect():
    """In one detect call, each rule is decided on its own work: a small window stays on the CPU,
    a large one goes to the GPU; without a latency bound each rule is one call, whatever the
    number of terminators and candidates."""
    events = wl.seq3_events(2000, seed=6)
    small = wl.seq3_rule(20).replace("Seq3", "Small")
    big = wl.seq3_rule(400).replace("Seq3", "Big")
    rules = cep_gpu.parse_rules(small + "\n" + big)
    table = EventTable.from_pandas(events, time_unit="ms")
    pairs = {}
    for r in rules:
        work = pl.estimate_work(r, table)
        pairs[r.name] = work.batch_features(0, len(work.term_rows))["pairs"]
    assert pairs["Small"] < pairs["Big"]
    launch = 1e-9 * (pairs["Small"] + pairs["Big"]) / 2  # between the two rules' CPU estimates
    ref = get_backend("reference")
    cpu, gpu = Counting(ref, "cpu"), Counting(ref, "gpu")
    auto = pl.AutoBackend(profile=profile({"pairs": 1e-9}, {"launches": launch}), cpu=cpu, gpu=gpu)
    from cep_gpu.detect import detect_table

    got = detect_table(table, rules, auto)
    want = detect_table(table, rules, "reference")
    for g, w in zip(got, want):
        assert np.array_equal(g.ids, w.ids) and len(g.ts) > 0
    assert [d.device for d in auto.last_decisions["Small"]] == ["cpu"]
    assert [d.device for d in auto.last_decisions["Big"]] == ["gpu"]
    assert len(cpu.calls) == 1 and len(gpu.calls) == 1
    st = auto.stats()
    assert st["cpu"]["decisions"] == 1 and st["gpu"]["decisions"] == 1
    n_c = len(table.rows_of_type("C"))
    assert st["cpu"]["terminators"] == n_c and st["gpu"]["terminators"] == n_c
    assert st["gpu"]["estimated_s"] == pytest.approx(launch)


def test_auto_without_gpu_counts_filtered_terminators():
    """The no-GPU path (one CPU call, no estimate) still counts the terminators it hands over,
    as the planner counts them (after the terminator's static filters)."""
    events = wl.seq3_events(800, seed=9)
    (rule,) = cep_gpu.parse_rules("define P from C(v > 0.5) and each B() within 30 ms from C")
    table = EventTable.from_pandas(events, time_unit="ms")
    auto = pl.AutoBackend(profile=profile(), gpu_available=False)
    lo, hi = 100, 700
    auto.match(rule, table, lo, hi)
    want = len(pl.estimate_work(rule, table, lo, hi).term_rows)
    assert 0 < want < len(table.rows_of_type("C"))
    assert auto.stats()["cpu"]["terminators"] == want
    (d,) = auto.last_decisions["P"]
    assert d.device == "cpu" and d.stop - d.first == want


# ---------------------------------------------------------------------------------- max_batch_latency


def test_max_batch_latency_values():
    import datetime

    assert pl.check_max_batch_latency(None) is None
    assert pl.check_max_batch_latency(float("inf")) is None
    assert pl.check_max_batch_latency(0) == 0.0
    assert pl.check_max_batch_latency(0.25) == 0.25
    assert pl.check_max_batch_latency(datetime.timedelta(milliseconds=5)) == pytest.approx(0.005)
    assert pl.check_max_batch_latency(pd.Timedelta("2ms")) == pytest.approx(0.002)
    assert pl.check_max_batch_latency(np.timedelta64(3, "ms")) == pytest.approx(0.003)
    for bad in (-1, float("nan"), "1", True, [1]):
        with pytest.raises(ValueError, match="max_batch_latency"):
            pl.check_max_batch_latency(bad)
    with pytest.raises(ValueError, match="max_batch_latency"):
        pl.AutoBackend(profile=profile(), max_batch_latency=-0.5)


def test_backend_for_never_changes_the_shared_instance():
    shared = get_backend("auto")
    assert shared.max_batch_latency is None
    assert pl.backend_for("auto") is shared
    mine = pl.backend_for("auto", 0.01)
    assert (
        mine is not shared and mine.max_batch_latency == 0.01 and shared.max_batch_latency is None
    )
    assert mine.profile is shared.profile  # nothing reloaded
    private = pl.backend_for("auto", None, private=True)
    assert private is not shared and private.max_batch_latency is None
    # other backends accept the setting and ignore it (but still check it)
    assert pl.backend_for("cpu", 0.5) is get_backend("cpu")
    with pytest.raises(ValueError, match="max_batch_latency"):
        pl.backend_for("cpu", -1)
    with pytest.raises(ValueError, match="max_batch_latency"):
        cep_gpu.detect(
            wl.seq3_events(30),
            wl.seq3_rule(10),
            backend="cpu",
            time_unit="ms",
            max_batch_latency="x",
        )


@pytest.fixture()
def fake_gpu(monkeypatch):
    """The shared auto backend, made to believe a GPU is usable: its "gpu" and "cpu" are the cpu
    backend behind call recorders; its profile sends every launch to the GPU."""
    shared = get_backend("auto")
    cpu_impl = get_backend("cpu")
    cpu, gpu = Counting(cpu_impl, "cpu"), Counting(cpu_impl, "gpu")
    monkeypatch.setattr(shared, "_cpu", cpu)
    monkeypatch.setattr(shared, "_gpu", gpu)
    monkeypatch.setattr(shared, "_gpu_available", True)
    monkeypatch.setattr(shared, "profile", profile({"launches": 1.0}, {"pairs": 1e-9}))
    shared.reset_stats()
    yield shared, cpu, gpu
    shared.reset_stats()


def _seq3_case():
    """Small seq3 events, the rule, the cpu backend's result and the number of terminators."""
    events = wl.seq3_events(600, seed=2)
    rule = wl.seq3_rule(60)
    return (
        events,
        rule,
        cep_gpu.detect(events, rule, backend="cpu", time_unit="ms"),
        int((events["type"] == "C").sum()),
    )


def test_detect_passes_max_batch_latency_to_the_planner(fake_gpu):
    shared, cpu, gpu = fake_gpu
    events, rule, want, n_c = _seq3_case()
    # default: unbounded, one launch per rule (on the shared instance)
    got = cep_gpu.detect(events, rule, backend="auto", time_unit="ms")
    pd.testing.assert_frame_equal(got, want)
    assert len(gpu.calls) == 1 and shared.stats()["gpu"]["decisions"] == 1
    # per terminator: one launch each, on a copy: the shared instance keeps its setting and counts
    gpu.calls.clear()
    got = cep_gpu.detect(events, rule, backend="auto", time_unit="ms", max_batch_latency=0)
    pd.testing.assert_frame_equal(got, want)
    assert len(gpu.calls) == n_c and not cpu.calls
    assert shared.max_batch_latency is None and shared.stats()["gpu"]["decisions"] == 1


def test_engine_defaults_to_per_event_planning_and_counts_its_own_decisions(fake_gpu):
    shared, cpu, gpu = fake_gpu
    events, rule, want, n_c = _seq3_case()

    per_event = cep_gpu.Engine(rule, backend="auto", time_unit="ms")
    got = pd.concat(
        [per_event.publish(events.iloc[:300]), per_event.publish(events.iloc[300:])],
        ignore_index=True,
    )
    pd.testing.assert_frame_equal(got, want)
    assert len(gpu.calls) == n_c  # one launch per terminator, though frames were published
    st = per_event.stats()
    assert st["max_batch_latency"] == 0.0 and st["backend_calls"] == 2
    assert st["backend_stats"]["gpu"]["decisions"] == n_c
    assert st["backend_stats"]["gpu"]["terminators"] == n_c
    assert st["backend_stats"]["cpu"]["decisions"] == 0
    assert st["backend_stats"]["gpu"]["seconds"] > 0 and st["backend_seconds"] > 0

    gpu.calls.clear()
    batched = cep_gpu.Engine(rule, backend="auto", time_unit="ms", max_batch_latency=None)
    batched.publish(events.iloc[:300])
    batched.publish(events.iloc[300:])
    assert len(gpu.calls) == 2  # one launch per publish
    assert batched.stats()["backend_stats"]["gpu"]["decisions"] == 2
    # each engine counts only its own decisions; the shared instance counts none of them
    assert per_event.stats()["backend_stats"]["gpu"]["decisions"] == n_c
    assert shared.stats()["gpu"]["decisions"] == 0 and shared.max_batch_latency is None


def test_engine_auto_streams_like_cpu_batch_with_mixed_devices(monkeypatch):
    """Per-event planning with both devices in use returns the rows of batch detect."""
    from cep_gpu.museum import MUSEUM_RULES, generate_museum

    shared = get_backend("auto")
    cpu_impl = get_backend("cpu")
    cpu, gpu = Counting(cpu_impl, "cpu"), Counting(get_backend("reference"), "gpu")
    monkeypatch.setattr(shared, "_cpu", cpu)
    monkeypatch.setattr(shared, "_gpu", gpu)
    monkeypatch.setattr(shared, "_gpu_available", True)
    events = generate_museum(800, seed=5, n_rooms=2, paintings_per_room=2)
    # the GPU for terminators with more pairs than the median one
    table = EventTable.from_pandas(events)
    per_term = np.concatenate(
        [
            pl.estimate_work(r, table).per_terminator[:, pl.FEATURES.index("pairs")]
            for r in cep_gpu.parse_rules(MUSEUM_RULES)
        ]
    )
    monkeypatch.setattr(
        shared, "profile", profile({"pairs": 1e-6}, {"launches": 1e-6 * np.median(per_term)})
    )
    want = cep_gpu.detect(events, MUSEUM_RULES, backend="cpu")
    eng = cep_gpu.Engine(MUSEUM_RULES, backend="auto")
    parts = [eng.publish(events.iloc[k : k + 37]) for k in range(0, len(events), 37)] + [
        eng.flush()
    ]
    got = pd.concat(parts, ignore_index=True).sort_values(["ts", "rule"], kind="stable")
    assert len(want) > 5
    assert sorted(map(repr, got[["rule", "ts"]].itertuples(index=False))) == sorted(
        map(repr, want[["rule", "ts"]].itertuples(index=False))
    )
    assert sorted(tuple(x) for x in got["ids"]) == sorted(tuple(x) for x in want["ids"])
    st = eng.stats()["backend_stats"]
    assert st["cpu"]["decisions"] > 0 and st["gpu"]["decisions"] > 0


# ---------------------------------------------------------------------------------- explain with events


def test_engine_explain_with_sample_events_or_rates():
    rule = wl.seq3_rule(1000)
    events = wl.seq3_events(6000, 1)
    eng = cep_gpu.Engine(rule, backend="auto", time_unit="ms")
    text = eng.explain(events)
    assert "column 1: B  each within 1 s from C" in text
    assert "expected 3" in text and "events per window" in text  # ~333 B per 1000 ms
    assert "per terminator (one launch each): cpu " in text and ", gpu " in text and " -> " in text
    assert "max batch latency 0 (one terminator per batch)" in text
    assert eng.stats()["events"] == 0  # nothing published
    rates = eng.explain({"A": 100.0, "B": 100.0, "C": 100.0})
    assert "expected 100.0 events per window" in rates
    other = cep_gpu.Engine(rule, backend="cpu", time_unit="ms").explain(events)
    assert "what backend='auto' would do" in other and "events per window" in other
    with pytest.raises(ValueError, match="events per second"):
        eng.explain({"type": "A", "ts": 1})
    with pytest.raises(cep_gpu.EventError, match="explain"):
        eng.explain([1, 2])


class CountingWithCount(Counting):
    """A recorder whose backend also counts (as CDP does for output="count")."""

    def __init__(self, inner, name):
        super().__init__(inner, name)
        self.counts = []

    def count(self, rule, table, lo=0, hi=None):
        self.counts.append((lo, hi))
        return len(self.inner.match(rule, table, lo, len(table) if hi is None else hi))


@pytest.mark.parametrize("latency", [None, 0.0])
@pytest.mark.parametrize("usable", [True, False])
def test_auto_count_uses_the_devices_count_and_is_planned_like_match(latency, usable):
    table = seq3_table(700, seed=5)
    (rule,) = cep_gpu.parse_rules(wl.seq3_rule(80))
    ref = get_backend("reference")
    want = len(ref.match(rule, table, 0, len(table)))
    assert want > 0
    cpu, gpu = CountingWithCount(ref, "cpu"), Counting(ref, "gpu")  # the "gpu" cannot count
    prof = profile({"pairs": 1e-6, "terminators": 1e-6}, {"launches": 3e-5, "terminators": 1e-6})
    auto = pl.AutoBackend(
        profile=prof, max_batch_latency=latency, cpu=cpu, gpu=gpu, gpu_available=usable
    )
    assert auto.count(rule, table) == want
    assert not cpu.calls  # the cpu counted without matching
    if not usable:
        assert cpu.counts == [(0, None)] and not gpu.calls
    st = auto.stats()
    assert st["cpu"]["decisions"] == len(cpu.counts) and st["gpu"]["decisions"] == len(gpu.calls)
    assert st["cpu"]["terminators"] + st["gpu"]["terminators"] == len(table.rows_of_type("C"))


def test_detect_count_with_auto_equals_cpu():
    events = wl.seq3_events(2000, seed=8)
    rules = wl.seq3_rule(100) + "\n" + wl.seq3_rule(200, "last").replace("Seq3", "Last3")
    got = cep_gpu.detect(events, rules, backend="auto", time_unit="ms", output="count")
    assert got == cep_gpu.detect(events, rules, backend="cpu", time_unit="ms", output="count")
    assert got["Seq3"] > 0 and got["Last3"] > 0


def test_explain_plan_refuses_rates_that_are_not_finite_numbers():
    rule = cep_gpu.parse_rule(wl.seq3_rule(100))
    for rates in ({"A": -1.0, "B": 1.0, "C": 1.0}, {"A": float("nan")}, {"A": "fast"}):
        with pytest.raises(cep_gpu.ArgumentError, match="finite numbers >= 0"):
            pl.explain_plan(rule, rates)
    assert "expected 0.2 events per window" in pl.explain_plan(rule, {"A": 1.0, "B": 2.0, "C": 3.0})


def test_estimates_stay_numbers_when_a_kleene_step_expects_unboundedly_many_sets():
    # 1100 B in the window: 2^1100 - 1 sets is inf; the default profile's 'matches' coefficient
    # is 0, and 0 * inf made both estimates NaN ("cpu nan us, gpu nan us" in explain).
    from cep_gpu.planner import decide, default_profile

    events = pd.DataFrame({"type": ["A"] + ["B"] * 1100 + ["C"], "ts": np.arange(1102.0)})
    eng = cep_gpu.Engine(
        "define R pattern SEQ(A a, KL(B b), C c) within 2000 s select each", backend="auto"
    )
    text = eng.explain(events)
    assert not re.search(r"\bnan\b", text, re.IGNORECASE) and "cpu inf s, gpu inf s" in text
    feats = {"launches": 1.0, "pairs": np.inf, "matches": np.inf, "outputs": np.inf}
    device, cpu_s, gpu_s, _ = decide(default_profile(), feats, True)
    assert device == "cpu" and cpu_s == gpu_s == np.inf
