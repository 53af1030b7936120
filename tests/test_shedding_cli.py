"""``cep-gpu shedding run``: DARLING on a user's own event file (docs/shedding.md, "On your own events")."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pandas as pd
import pytest

import cep_gpu
from cep_gpu.cli import main
from cep_gpu.shedding import CostModel, Shedder, SheddingEngine

RULE = "define Up pattern SEQ(A a, B b, C c) where a.price < b.price and b.price < c.price within 3 s\n"


def _files(tmp_path, n: int = 1500, shuffle: bool = False, ids: bool = False):
    ev = _files_frame(n)
    rng = np.random.default_rng(4)
    if ids:
        ev.insert(0, "id", rng.permutation(10 * n)[:n])
    if shuffle:  # a file need not be in time order: ids still name the file's rows
        ev = ev.sample(frac=1.0, random_state=1).reset_index(drop=True)
    (tmp_path / "rules.txt").write_text(RULE)
    ev.to_csv(tmp_path / "ev.csv", index=False)
    return ev


def _run(tmp_path, *extra: str) -> tuple[int, pd.DataFrame | None, dict | None]:
    out, rep = tmp_path / "found.parquet", tmp_path / "report.json"
    for p in (out, rep):
        p.unlink(missing_ok=True)
    rc = main(["shedding", "run", str(tmp_path / "rules.txt"), str(tmp_path / "ev.csv"), *extra,
               "--out", str(out), "--report", str(rep)])
    if rc:
        return rc, None, None
    return rc, pd.read_parquet(out), json.loads(rep.read_text())


def test_run_in_virtual_time_equals_the_api_and_keeps_the_bound(tmp_path, capsys):
    ev = _files(tmp_path)
    rc, found, rep = _run(tmp_path, "--latency-bound", "0.05", "--arrival", "arrival_s", "--mode", "virtual",
                          "--cost", "0.002", "--window-cost", "0.0001", "--warmup", "300")
    assert rc == 0
    eng = SheddingEngine(RULE, Shedder(0.05, seed=0), mode="virtual", cost_model=CostModel(default=0.002, window=1e-4))
    eng.warm_up(ev.iloc[:300], "arrival_s")
    want = eng.run(ev, "arrival_s")
    assert rep["dropped"] > 0 and rep["violations"] == 0 and rep["recall"] < 1  # the peak was shed
    assert rep == json.loads(json.dumps(eng.stats(), default=float))
    assert len(found) == len(want) and list(found["latency_s"]) == pytest.approx(list(want["latency_s"]))
    # the file is in time order without an id column: ids are the rows, as the API's positions
    assert [tuple(x) for x in found["ids"]] == [tuple(x) for x in want["ids"]]
    err = capsys.readouterr().err
    assert f"{rep['dropped']} dropped" in err and "0 violations" in err


@pytest.mark.parametrize("allocation", ["paper", "spread"])
def test_run_passes_the_allocation_and_utility(tmp_path, allocation):
    """--allocation and --utility reach the shedder: the CLI's report equals the API's."""
    ev = _files(tmp_path)
    rc, found, rep = _run(tmp_path, "--latency-bound", "0.05", "--arrival", "arrival_s", "--mode", "virtual",
                          "--cost", "0.002", "--window-cost", "0.0001", "--warmup", "300",
                          "--allocation", allocation, "--utility", "support")
    assert rc == 0
    sh = Shedder(0.05, seed=0, allocation=allocation, utility="support")
    eng = SheddingEngine(RULE, sh, mode="virtual", cost_model=CostModel(default=0.002, window=1e-4))
    eng.warm_up(ev.iloc[:300], "arrival_s")
    eng.run(ev, "arrival_s")
    assert rep == json.loads(json.dumps(eng.stats(), default=float))
    assert rep["dropped"] > 0 and rep["violations"] == 0


def test_ids_name_the_files_events_as_cep_gpu_run_does(tmp_path):
    _files(tmp_path, n=600, shuffle=True, ids=True)
    rc, found, rep = _run(tmp_path, "--latency-bound", "10", "--policy", "none", "--mode", "virtual")
    assert rc == 0 and rep["dropped"] == 0 and rep["recall"] == 1.0
    det = cep_gpu.detect(pd.read_csv(tmp_path / "ev.csv"), RULE, backend="cpu")
    assert len(det) > 20
    assert sorted(tuple(x) for x in found["ids"]) == sorted(tuple(x) for x in det["ids"])


def test_speedup_replays_the_timestamps_faster(tmp_path):
    ev = _files(tmp_path, n=800)
    args = ("--latency-bound", "0.01", "--mode", "virtual", "--cost", "0.001", "--no-reference")
    rc, fast, rep = _run(tmp_path, *args, "--speedup", "500")
    assert rc == 0 and rep["recall"] is None and rep["dropped"] > 0  # 500x: 5 events per 1 ms of work
    ev.assign(arrival_s=ev["ts"] / 500).to_csv(tmp_path / "ev.csv", index=False)
    rc, same, rep2 = _run(tmp_path, *args, "--arrival", "arrival_s")
    assert rc == 0 and rep2["dropped"] == rep["dropped"]
    assert [tuple(x) for x in same["ids"]] == [tuple(x) for x in fast["ids"]]
    assert list(same["detected_s"]) == pytest.approx(list(fast["detected_s"]))
    rc, slow, rep3 = _run(tmp_path, "--latency-bound", "0.01", "--mode", "virtual", "--cost", "0.001")
    assert rc == 0 and rep3["dropped"] == 0 and rep3["recall"] == 1.0  # at the data's own pace: no load


def test_statistics_from_a_sample_file(tmp_path):
    ev = _files(tmp_path, n=900)
    ev.iloc[:200].to_csv(tmp_path / "sample.csv", index=False)
    rc, found, rep = _run(tmp_path, "--latency-bound", "0.05", "--arrival", "arrival_s", "--mode", "virtual",
                          "--sample", str(tmp_path / "sample.csv"))
    assert rc == 0 and rep["events"] == 900 and rep["violations"] == 0
    assert rep["constraints"]["per_type"]["A"]["R"] > 0


@pytest.mark.parametrize("extra, option, words", [
    (["--arrival", "arrival_s", "--speedup", "2"], "--speedup", "cannot go with --arrival"),
    (["--arrival", "nope"], "--arrival", "no column 'nope'"),
    (["--cost", "0.1"], "--cost", "--mode virtual"),
    (["--warmup", "5000"], "--warmup", "fewer than 5000"),
    (["--warmup", "10", "--sample", "x.csv"], "--sample", "cannot go with --warmup"),
    (["--time-unit", "parsecs"], "--time-unit", "unknown unit"),
    (["--buckets", "0"], "--buckets", ">= 1"),
    # the engine's check of the name came out as an error of --time-unit
    (["--backend", "bogus"], "--backend", "unknown backend 'bogus'"),
])
def test_bad_arguments_are_one_line_naming_the_option(tmp_path, capsys, extra, option, words):
    _files(tmp_path, n=300)
    with pytest.raises(SystemExit) if option in ("--buckets", "--time-unit") else contextlib.nullcontext():
        rc = main(["shedding", "run", str(tmp_path / "rules.txt"), str(tmp_path / "ev.csv"),
                   "--latency-bound", "1", *extra])
        assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("cep-gpu shedding run: error: argument " + option) and words in err


@pytest.mark.parametrize("value, words", [
    ("C", "column 'arrival_s' of {path} holds 'C' at row 7: arrival times must be finite numbers of seconds"),
    (None, "column 'arrival_s' of {path} is null (or NaN) at row 7: arrival times must be finite numbers "
           "of seconds"),
    (float("inf"), "column 'arrival_s' of {path} holds inf at row 7: arrival times must be "
                   "finite numbers of seconds"),
    (-1.0, "column 'arrival_s' of {path}: row 7 arrives at -1 s, before row 6 (0.7 s), whose timestamp is "
           "not later: arrival times must not decrease in timestamp order"),
])
def test_a_bad_arrival_column_is_a_usage_error_naming_the_option_column_row_and_value(tmp_path, capsys, value, words):
    """A text value in the --arrival column was the engine's ``arrival times must be numbers of
    seconds (could not convert string to float: 'C')``, exit status 1, naming neither the option
    nor the column nor the row."""
    ev = _files(tmp_path, n=300)
    bad = ev.assign(arrival_s=ev["arrival_s"].astype(object))
    bad.loc[7, "arrival_s"] = value
    bad.to_csv(tmp_path / "bad.csv", index=False)
    for events, sample in (("bad.csv", None), ("ev.csv", "bad.csv")):
        more = ["--sample", str(tmp_path / sample)] if sample else []
        rc = main(["shedding", "run", str(tmp_path / "rules.txt"), str(tmp_path / events), "--latency-bound", "1",
                   "--arrival", "arrival_s", "--no-reference", *more])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2
        assert err == ["cep-gpu shedding run: error: argument --arrival: " +
                       words.format(path=tmp_path / "bad.csv")], err


def test_bad_files_are_one_line_errors(tmp_path, capsys):
    _files(tmp_path, n=300)
    pd.DataFrame({"type": ["A"], "time": [0.0]}).to_csv(tmp_path / "bad.csv", index=False)
    assert main(["shedding", "run", str(tmp_path / "rules.txt"), str(tmp_path / "bad.csv"),
                 "--latency-bound", "1"]) == 1
    assert "'ts'" in capsys.readouterr().err
    assert main(["shedding", "run", str(tmp_path / "nope.txt"), str(tmp_path / "ev.csv"),
                 "--latency-bound", "1"]) == 1
    assert "no such rule file" in capsys.readouterr().err


def test_bad_timestamps_name_the_row_and_the_value_as_cep_gpu_run_does(tmp_path, capsys):
    """A text value in ``ts`` was ``'ts' must be numbers or datetimes, got dtype category``; a
    null one became the int64 minimum (then a message about a missing 'ts' column)."""
    ev = _files(tmp_path, n=300)
    bad = ev.assign(ts=ev["ts"].astype(object))
    bad.loc[3, "ts"] = "abc"
    bad.to_csv(tmp_path / "text.csv", index=False)
    bad.loc[3, "ts"] = None
    bad.to_csv(tmp_path / "null.csv", index=False)
    for name, words in (("text.csv", "column 'ts' holds 'abc' at row 3, which is neither a number nor a datetime"),
                        ("null.csv", "column 'ts' is null at row 3")):
        for argv in ([str(tmp_path / name)], [str(tmp_path / "ev.csv"), "--sample", str(tmp_path / name)]):
            assert main(["shedding", "run", str(tmp_path / "rules.txt"), *argv, "--latency-bound", "1"]) == 1
            assert capsys.readouterr().err.strip().splitlines()[-1] == f"cep-gpu: error: {words}" + (
                ": use datetime64 or numbers in time_unit" if name == "text.csv" else
                ": every event needs a timestamp")


@pytest.mark.parametrize("edit, words", [
    (lambda ev: ev.assign(id=np.zeros(len(ev), np.int64)), "column 'id' has duplicate id 0"),
    (lambda ev: ev.assign(id=np.arange(len(ev)) + 0.5), "column 'id' must hold integers, got dtype float64"),
    (lambda ev: ev.assign(id=-np.arange(len(ev))), "column 'id' is negative (-1) at row 1"),
    (lambda ev: ev.assign(x=ev["price"]).set_axis(["type", "ts", "price", "price"], axis=1),
     "events have more than one column named 'price'"),
])
def test_ids_and_columns_are_checked_as_cep_gpu_run_checks_them(tmp_path, capsys, edit, words):
    """The ``id`` column names the events in the output: repeated, fractional (truncated) or
    negative ids went through, so two events came out under one id; two columns of one name
    were a raw pandas traceback ('Grouper for 'price' not 1-dimensional')."""
    ev = _files(tmp_path, n=300).drop(columns="arrival_s")
    edit(ev).to_csv(tmp_path / "bad.csv", index=False)
    for argv in ([str(tmp_path / "bad.csv")], [str(tmp_path / "ev.csv"), "--sample", str(tmp_path / "bad.csv")]):
        assert main(["shedding", "run", str(tmp_path / "rules.txt"), *argv, "--latency-bound", "1",
                     "--mode", "virtual"]) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(f"cep-gpu: error: {words}")


def test_the_engine_refuses_two_columns_of_one_name():
    ev = _files_frame(300).set_axis(["type", "ts", "price", "price"], axis=1)
    engine = SheddingEngine(RULE, shedding=Shedder(1.0), mode="virtual", cost_model=CostModel(default=1e-3))
    with pytest.raises(cep_gpu.EventError, match="more than one column named 'price'"):
        engine.warm_up(ev)


def test_an_empty_sample_file_is_named(tmp_path, capsys):
    _files(tmp_path, n=300)
    (tmp_path / "empty.csv").write_text("type,ts,price\n")
    assert main(["shedding", "run", str(tmp_path / "rules.txt"), str(tmp_path / "ev.csv"), "--latency-bound",
                 "1", "--sample", str(tmp_path / "empty.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"cep-gpu shedding run: error: argument --sample: {tmp_path / 'empty.csv'} holds no event"


def test_integer_timestamps_convert_exactly():
    """They went through float64: two int64 nanosecond epochs 1 ns apart became equal."""
    from cep_gpu.shedding.stats import times_ns

    epoch = 1_700_000_000_000_000_001
    got = times_ns(pd.Series(np.array([epoch, epoch + 1], np.int64)), 1)
    assert got.tolist() == [epoch, epoch + 1]
    assert times_ns(pd.Series([1.5, 2.25]), 1_000_000_000).tolist() == [1_500_000_000, 2_250_000_000]


def test_bench_refuses_an_unknown_backend_before_any_run(monkeypatch, capsys):
    from cep_gpu.shedding import bench

    monkeypatch.setattr(bench, "run", lambda *a, **k: pytest.fail("the benchmark ran"))
    assert main(["shedding", "bench", "--quick", "--backend", "bogus"]) == 2
    assert "cep-gpu shedding bench: error: argument --backend: unknown backend 'bogus'" in capsys.readouterr().err


def test_bench_quick_fills_only_what_was_not_given(monkeypatch, capsys):
    """``--quick`` used to replace --lengths/--factors/--events even when given, so a bad value
    such as ``--lengths 0`` ran the quick defaults silently."""
    from cep_gpu.shedding import bench

    seen = {}

    def fake_run(workload, lengths, factors, n_events, **kw):
        seen.update(lengths=list(lengths), factors=list(factors), events=n_events)
        return {"rows": [], "summary": {}}

    monkeypatch.setattr(bench, "run", fake_run)
    assert main(["shedding", "bench", "--quick", "--lengths", "7", "--events", "900"]) == 0
    assert seen == {"lengths": [7], "factors": [100, 1000], "events": 900}
    assert main(["shedding", "bench", "--quick"]) == 0
    assert seen == {"lengths": [3, 4, 5], "factors": [100, 1000], "events": 4000}
    # the documented split of a long sweep: one sweep may be empty, not both
    assert main(["shedding", "bench", "--lengths", "6,7", "--factors", ""]) == 0
    assert seen["lengths"] == [6, 7] and seen["factors"] == []
    capsys.readouterr()
    assert main(["shedding", "bench", "--lengths", "", "--factors", ""]) == 2
    assert "both empty" in capsys.readouterr().err
    for argv, option in ((["--lengths", "0"], "--lengths"), (["--events", "-5"], "--events"),
                         (["--factors", "-1"], "--factors")):
        capsys.readouterr()
        assert main(["shedding", "bench", "--quick", *argv]) == 2
        assert f"error: argument {option}:" in capsys.readouterr().err


def test_output_paths_are_checked_first_and_absent_types_are_named(tmp_path, capsys, monkeypatch):
    from cep_gpu.shedding import engine

    _files(tmp_path, n=300)
    called = []
    monkeypatch.setattr(engine.SheddingEngine, "warm_up", lambda *a, **k: called.append(a))
    for option in ("--out", "--report"):
        assert main(["shedding", "run", str(tmp_path / "rules.txt"), str(tmp_path / "ev.csv"),
                     "--latency-bound", "1", option, str(tmp_path / "no" / "such.csv")]) == 2
        assert f"error: argument {option}: cannot write" in capsys.readouterr().err
    assert called == []  # refused before any work
    monkeypatch.undo()
    (tmp_path / "typo.txt").write_text("define Up pattern SEQ(A a, GOGL b) within 3 s\n")
    assert main(["shedding", "run", str(tmp_path / "typo.txt"), str(tmp_path / "ev.csv"),
                 "--latency-bound", "1", "--mode", "virtual"]) == 0
    assert "warning: rule 'Up' reads type 'GOGL', which no event in" in capsys.readouterr().err


@pytest.mark.parametrize("form", ["datetime", "datetime-tz", "int-ms"])
def test_run_gives_timestamps_in_the_inputs_form(form):
    """The run's ts came as the engine's raw columns: nanoseconds (ints) for datetimes, floats
    for integer timestamps; now as detect gives them."""
    rng = np.random.default_rng(2)
    n = 300
    ev = pd.DataFrame({"type": rng.choice(["A", "B", "C"], n), "ts": np.arange(n) * 100,
                       "price": rng.normal(100, 20, n).round(1)})
    unit = "ms"
    if form.startswith("datetime"):
        ev["ts"] = pd.Timestamp("2026-01-01") + pd.to_timedelta(ev["ts"], unit="ms")
        if form == "datetime-tz":
            ev["ts"] = ev["ts"].dt.tz_localize("Europe/Rome")
    eng = SheddingEngine(RULE, Shedder(10.0, policy="none"), mode="virtual", time_unit=unit)
    eng.warm_up(ev.iloc[:100])
    got = eng.run(ev)
    want = cep_gpu.detect(ev, RULE, backend="cpu", time_unit=unit)
    assert len(got) == len(want) > 10
    assert got["ts"].dtype == want["ts"].dtype
    assert sorted(got["ts"].tolist()) == sorted(want["ts"].tolist())


def test_run_reports_progress_off_the_clock():
    """A long replay reports its progress (the CLI shows a bar from PROGRESS_EVENTS events on):
    about every 1% and at the end, in order; the run's results are those without it."""
    ev = _files_frame(2000)
    calls = []
    runs = []
    for progress in (None, lambda done, total: calls.append((done, total))):
        eng = SheddingEngine(RULE, Shedder(0.05, seed=0), mode="virtual", cost_model=CostModel(default=0.002))
        eng.warm_up(ev.iloc[:300], "arrival_s")
        runs.append(eng.run(ev, "arrival_s", progress=progress))
    pd.testing.assert_frame_equal(runs[0], runs[1])
    done = [d for d, _ in calls]
    assert calls[-1] == (2000, 2000) and all(t == 2000 for _, t in calls)
    assert done == sorted(done) and 50 <= len(calls) <= 120


def _files_frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(4)
    ev = pd.DataFrame({"type": rng.choice(["A", "B", "C", "X"], n), "ts": np.arange(n) * 0.1,
                       "price": rng.normal(100, 20, n).round(1)})
    gap = np.full(n, 0.1)
    gap[n // 2: n // 2 + n // 4] /= 100
    ev["arrival_s"] = np.cumsum(gap)
    return ev


@pytest.mark.parametrize("form", ["utc", "epoch-ns"])
def test_real_time_run_takes_the_timestamps_of_a_users_file(tmp_path, form):
    """The real-time run's warm-up engine got the sample's timestamps back as naive datetimes or
    floats, so a file of zone-aware (UTC) timestamps failed ('time-zone-aware ... but earlier
    events had naive ones'), and so did integer epoch nanoseconds ('the stream's ts dtype float64
    cannot hold exactly')."""
    ev = _files_frame(400).drop(columns="arrival_s")
    ts = pd.Timestamp("2025-03-01") + pd.to_timedelta(ev["ts"], unit="s")
    ev["ts"] = ts.dt.tz_localize("UTC") if form == "utc" else ts.astype("int64")
    unit = "s" if form == "utc" else "ns"
    eng = SheddingEngine(RULE, Shedder(10.0, policy="none"), mode="real", time_unit=unit)
    eng.warm_up(ev.iloc[:100])
    got = eng.run(ev)
    want = cep_gpu.detect(ev, RULE, backend="cpu", time_unit=unit)
    assert len(got) == len(want) > 5 and got["ts"].dtype == want["ts"].dtype
    assert got["ts"].tolist() == want["ts"].tolist()
    (tmp_path / "rules.txt").write_text(RULE)
    ev.to_csv(tmp_path / "ev.csv", index=False)
    rc, found, rep = _run(tmp_path, "--latency-bound", "10", "--policy", "none", "--time-unit", unit)
    assert rc == 0 and rep["recall"] == 1.0 and len(found) == len(want)


ATTR_RULES = {
    "return": "define Up pattern SEQ(A a, B b, C c) where a.price < b.price and b.price < c.price within 3 s "
              "return gain := c.price - a.price, sym := a.sym, hops := a.n\n",
    "kleene": "define Run(k: int, top: float) pattern SEQ(A a, KL(B b)[1..3], C c) where b.price > a.price "
              "within 2 s return k := count(b), top := max(b.price)\n",
}


@pytest.mark.parametrize("kind", sorted(ATTR_RULES))
def test_found_composite_events_carry_the_rules_attributes(tmp_path, kind):
    """The composite events found under shedding had only rule, ts, ids and the latencies: a
    rule's return attributes (and a Kleene rule's id_counts) were lost. Now they follow
    detected_s and latency_s, with detect's values and dtypes (API and file)."""
    ev = _files_frame(600).drop(columns="arrival_s")
    ev["sym"] = np.where(np.arange(600) % 3, "GOOG", "AAPL")
    ev["n"] = np.arange(600) % 7
    rule = ATTR_RULES[kind]
    eng = SheddingEngine(rule, Shedder(10.0, policy="none"), mode="virtual", cost_model=CostModel(default=1e-4))
    eng.warm_up(ev.iloc[:100])
    got = eng.run(ev)
    want = cep_gpu.detect(ev, rule, backend="cpu")
    assert len(want) > 10
    extra = [c for c in want.columns if c not in ("rule", "ts", "ids")]
    assert list(got.columns) == ["rule", "ts", "ids", "detected_s", "latency_s", *extra]
    assert [got[c].dtype for c in extra] == [want[c].dtype for c in extra]
    assert _by_ids(got, extra) == _by_ids(want, extra)
    (tmp_path / "rules.txt").write_text(rule)
    ev.to_csv(tmp_path / "ev.csv", index=False)
    rc, found, _ = _run(tmp_path, "--latency-bound", "10", "--policy", "none", "--mode", "virtual")
    assert rc == 0 and list(found.columns) == list(got.columns)
    assert _by_ids(found, extra) == _by_ids(want, extra)


def _by_ids(out: pd.DataFrame, cols: list[str]) -> dict:
    """Each composite event's fields ``cols`` by its rule and ids (lists as tuples, nulls None)."""
    def plain(v):
        return tuple(int(x) for x in v) if hasattr(v, "__len__") and not isinstance(v, str) else \
            (None if pd.isna(v) else v)
    rows = zip(out["rule"], map(tuple, out["ids"]), *(out[c].astype(object) for c in cols))
    return {(r[0], r[1], plain(r[2]) if "id_counts" in cols else None): tuple(map(plain, r[2:])) for r in rows}


def test_an_id_column_that_is_not_integers_is_one_line(tmp_path, capsys):
    """Ids such as 'evt-00001' gave a raw ValueError traceback after the whole replay."""
    ev = _files(tmp_path, n=300)
    ev.insert(0, "id", [f"evt-{i:05d}" for i in range(len(ev))])
    ev.to_csv(tmp_path / "ev.csv", index=False)
    rc, _, _ = _run(tmp_path, "--latency-bound", "1", "--mode", "virtual")
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1
    assert "column 'id' must hold integers" in err and "'evt-00000' at row 0" in err


def test_run_and_its_sample_read_the_files_own_column_names(tmp_path, capsys):
    """The mapping holds for EVENTS and --sample alike; the output keeps rule, ts, ids."""
    ev = _files(tmp_path, n=600, ids=True)
    ev.iloc[:150].to_csv(tmp_path / "sample.csv", index=False)
    common = ["--latency-bound", "0.05", "--arrival", "arrival_s", "--mode", "virtual"]
    rc, want, want_rep = _run(tmp_path, *common, "--sample", str(tmp_path / "sample.csv"))
    assert rc == 0
    names = {"type": "event", "ts": "when", "id": "key"}
    ev.rename(columns=names).to_csv(tmp_path / "ev.csv", index=False)
    ev.iloc[:150].rename(columns=names).to_csv(tmp_path / "sample.csv", index=False)
    rc, got, rep = _run(tmp_path, *common, "--sample", str(tmp_path / "sample.csv"),
                        "--type-column", "event", "--ts-column", "when", "--id-column", "key")
    assert rc == 0, capsys.readouterr().err
    assert list(got.columns[:3]) == ["rule", "ts", "ids"] and len(got) > 0
    pd.testing.assert_frame_equal(got.drop(columns=["detected_s", "latency_s"]),
                                  want.drop(columns=["detected_s", "latency_s"]))
    assert rep["events"] == want_rep["events"] and rep["dropped"] == want_rep["dropped"]
    assert set(ev["id"]) >= {i for ids in got["ids"] for i in ids}  # the key column's ids
