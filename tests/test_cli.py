"""The command line: run (CSV/Parquet in and out, table to the terminal), explain, errors."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from cli_helpers import run_cli

import cep_gpu
from cep_gpu.cli import main
from cep_gpu.museum import MUSEUM_RULES, generate_museum

TOUCH = """define Touch(room: string, painting: string)
from   Vibration(painting=$p and value>3.0) and
       each PeopleNear(painting=$p) within 2 min. from Vibration
where  room=Vibration.room and painting=Vibration.painting
"""


@pytest.fixture()
def files(tmp_path):
    rules = tmp_path / "museum.tesla"
    rules.write_text(MUSEUM_RULES)
    events = generate_museum(3000, seed=3)
    pq_path = tmp_path / "events.parquet"
    events.to_parquet(pq_path, index=False)
    csv_path = tmp_path / "events.csv"
    events.to_csv(csv_path, index=False)
    return rules, pq_path, csv_path, events


def test_run_parquet_to_parquet_equals_detect(files, tmp_path):
    rules, pq_path, _, events = files
    out = tmp_path / "out.parquet"
    assert main(["run", str(rules), str(pq_path), "--backend", "reference", "--out", str(out)]) == 0
    got = pq.read_table(out).to_pandas()
    expected = cep_gpu.detect(events, MUSEUM_RULES, backend="reference")
    assert len(expected) > 0
    assert got["rule"].tolist() == expected["rule"].tolist()
    assert [tuple(x) for x in got["ids"]] == [tuple(x) for x in expected["ids"]]
    assert (pd.to_datetime(got["ts"]) == expected["ts"]).all()


def test_run_csv_to_csv(files, tmp_path):
    rules, _, csv_path, events = files
    out = tmp_path / "out.csv"
    assert main(["run", str(rules), str(csv_path), "--backend", "reference", "--out", str(out)]) == 0
    got = pd.read_csv(out)
    expected = cep_gpu.detect(events, MUSEUM_RULES, backend="reference")
    assert got["ids"].tolist() == [" ".join(map(str, x)) for x in expected["ids"]]


def test_run_prints_table(files, capsys):
    rules, pq_path, _, _ = files
    assert main(["run", str(rules), str(pq_path), "--backend", "reference", "--limit", "3"]) == 0
    out = capsys.readouterr()
    assert "Touch" in out.out or "Theft" in out.out or "Alarm" in out.out
    assert "composite events from 3000 events" in out.err


def test_run_reports_rule_errors(tmp_path, files, capsys):
    _, pq_path, _, _ = files
    bad = tmp_path / "bad.tesla"
    bad.write_text("define X\nfrom A(x > ) and")
    assert main(["run", str(bad), str(pq_path)]) == 1
    err = capsys.readouterr().err
    assert "line 2" in err


def test_run_reports_unknown_file_type(tmp_path, files, capsys):
    rules, _, _, _ = files
    odd = tmp_path / "events.json"
    odd.write_text("{}")
    assert main(["run", str(rules), str(odd)]) == 1
    assert "unknown file type" in capsys.readouterr().err


def test_run_with_its_files_swapped_says_so(files, capsys):
    rules, pq_path, _, _ = files
    assert main(["run", str(pq_path), str(rules)]) == 1
    assert "the rules come first (cep-gpu run RULES EVENTS)" in capsys.readouterr().err


def test_explain_names_rules_and_windows(files, capsys):
    rules, _, _, _ = files
    assert main(["explain", str(rules), "--backend", "reference"]) == 0
    out = capsys.readouterr().out
    for name in ("Touch", "Theft", "Alarm", "PeopleNear"):
        assert name in out


def test_explain_with_events_shows_the_planner(files, capsys):
    rules, pq_path, _, _ = files
    assert main(["explain", str(rules), str(pq_path)]) == 0
    out = capsys.readouterr().out
    for name in ("Touch", "Theft"):
        assert f"rule {name}" in out
    assert "events per window" in out and "within 2 min from" in out
    assert "per terminator (one launch each): cpu " in out and "all " in out and " -> " in out
    assert main(["explain", str(rules), str(pq_path), "--backend", "cpu"]) == 0
    assert "what backend='auto' would do" in capsys.readouterr().out


def test_run_max_batch_latency(files, tmp_path, capsys):
    rules, pq_path, _, events = files
    out = tmp_path / "out.parquet"
    assert main(["run", str(rules), str(pq_path), "--out", str(out), "--max-batch-latency", "0"]) == 0
    err = capsys.readouterr().err
    assert "planner: " in err and "batch(es)" in err and "on cpu" in err and "on gpu" in err
    got = pq.read_table(out).to_pandas()
    expected = cep_gpu.detect(events, MUSEUM_RULES, backend="cpu")
    assert [tuple(x) for x in got["ids"]] == [tuple(x) for x in expected["ids"]]
    assert main(["run", str(rules), str(pq_path), "--backend", "reference", "--out", str(out),
                 "--max-batch-latency", "none"]) == 0
    with pytest.raises(SystemExit) as exc:
        main(["run", str(rules), str(pq_path), "--max-batch-latency", "-1"])
    assert exc.value.code == 2
    assert "--max-batch-latency" in capsys.readouterr().err


def _fake_calibrate(quick=False, n_events=0, seed=0, on_step=None):
    from cep_gpu import planner as pl

    zero = dict.fromkeys(pl.FEATURES, 0.0)
    return pl.Profile({**zero, "pairs": 1e-9}, {**zero, "launches": 1e-5}, "<calibrated>",
                      {"cpu_source": "measured (fake)", "gpu_source": "derived (fake)"})


def test_calibrate_writes_to_the_user_cache_dir_or_the_given_path(tmp_path, monkeypatch, capsys):
    from cep_gpu import planner as pl
    from cep_gpu.benchmarks import calibrate as cal

    monkeypatch.setattr(cal, "calibrate", _fake_calibrate)  # the measuring is tested in test_bench_smoke
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CEP_GPU_PROFILE", raising=False)
    default = tmp_path / "cache" / "cep-gpu" / "profile.json"
    assert pl.user_profile_path() == default
    assert main(["calibrate"]) == 0
    assert pl.read_profile(default).cpu["pairs"] == 1e-9
    assert str(default) in capsys.readouterr().err.replace("\n", "")
    # the planner now uses it by default
    assert pl.load_profile().gpu["launches"] == 1e-5
    given = tmp_path / "elsewhere" / "mine.json"
    assert main(["calibrate", "--out", str(given)]) == 0
    assert pl.read_profile(given).meta["cpu_source"] == "measured (fake)"


def test_read_table_keeps_parquet_strings_as_dictionaries(files, tmp_path):
    from cep_gpu.errors import EventError
    from cep_gpu.io import read_events, read_table

    _, pq_path, csv_path, events = files
    table = read_table(pq_path)
    assert table.num_rows == len(events)
    assert str(table.schema.field("room").type).startswith("dictionary<values=string")
    assert table.column("room").to_pylist() == events["room"].tolist()
    # a directory of Parquet files, and CSV, read the same events
    d = tmp_path / "dir"
    d.mkdir()
    events.iloc[:1000].to_parquet(d / "a.parquet", index=False)
    events.iloc[1000:].to_parquet(d / "b.parquet", index=False)
    assert read_table(d).column("id").to_pylist() == events["id"].tolist()
    assert read_table(csv_path).num_rows == len(events)
    frame = read_events(pq_path)["painting"].astype(object)
    assert frame.where(frame.notna(), None).tolist() == events["painting"].tolist()
    with pytest.raises(EventError, match="no such file"):
        read_table(tmp_path / "missing.parquet")


def test_explain_describes_what_run_does(files, tmp_path, capsys):
    """Issue 11.6: explain counts the terminators run finds (Alarm's aggregate condition is no
    static filter) and reports run's batching (unbounded unless --max-batch-latency is given)."""
    rules, pq_path, _, events = files
    found = cep_gpu.detect(events, MUSEUM_RULES, backend="cpu")
    assert (found["rule"] == "Alarm").sum() > 0
    assert main(["explain", str(rules), str(pq_path)]) == 0
    out = capsys.readouterr().out
    alarm = out[out.index("rule Alarm (tesla)"):]
    assert "no terminators" not in out
    n_vib = int(((events["type"] == "Vibration") & (events["value"] > 3.0)).sum())
    assert f"all {n_vib} terminators in one batch" in alarm
    assert "max batch latency unbounded" in out and "max batch latency 0" not in out
    assert main(["explain", str(rules), str(pq_path), "--max-batch-latency", "0"]) == 0
    assert "max batch latency 0 (one terminator per batch)" in capsys.readouterr().out


def test_explain_with_events_refuses_what_run_refuses(tmp_path, capsys):
    """A rule reading an attribute no event has: run is an error naming it; explain explained
    the run (planner decisions and all) as if it would go, exit status 0."""
    rules = tmp_path / "typo.rules"
    rules.write_text("define Q\npattern SEQ(A a, B b)\nwhere a.prise < b.price\nwithin 5 s\n")
    events = tmp_path / "ev.csv"
    events.write_text("type,ts,price\nA,1,10\nB,2,11\n")
    for command in ("run", "explain"):
        rc, out, err = run_cli(capsys, command, rules, events)
        assert rc == 1 and not out
        assert err.startswith("cep-gpu: error: rule 'Q' reads attribute 'prise', which no event in the input has")
    rc, out, err = run_cli(capsys, "explain", rules)  # without events: nothing to check it against
    assert rc == 0 and "rule Q (seq)" in out


def test_bench_bad_numbers_are_one_line_errors(capsys):
    """Issue 11.8: negative sizes, zero repetitions, bad policies: a usage error, no traceback."""
    for argv, option in ((["bench", "museum", "--sizes", "-5"], "--sizes"),
                         (["bench", "seq3", "--sizes", "100,abc"], "--sizes"),
                         (["bench", "seq3", "--sizes", "nan"], "--sizes"),
                         (["bench", "seq3", "--repeat", "0"], "--repeat"),
                         (["bench", "seq3", "--events", "-1"], "--events"),
                         (["bench", "seq3", "--warmup", "-1"], "--warmup")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {option}:" in err and "Traceback" not in err
    assert main(["bench", "rules1000", "--sizes", "1"]) == 2
    assert "chain lengths must be >= 2" in capsys.readouterr().err
    assert main(["bench", "seq3", "--policy", "each,sometimes"]) == 2
    assert "'sometimes'" in capsys.readouterr().err


def test_bench_summary_keeps_brackets_of_pip_hints():
    """Issue 11.10: rich markup must not eat ``[gpu]`` in ``pip install 'cep-gpu[gpu]'``."""
    import io

    from rich.console import Console

    from cep_gpu.benchmarks.cli import print_summary

    machine = {"cpu_model": "x", "cores": 1, "gpu": None}
    reason = "not measured: backend 'gpu' needs CuPy (pip install 'cep-gpu[gpu]')"
    run = {"workload": "seq3", "machine": machine,
           "results": [{"policy": "each", "size": 100, "backend": "gpu", "status": "not measured",
                        "reason": reason}]}
    buf = io.StringIO()
    print_summary(run, Console(file=buf, width=200))
    assert "cep-gpu[gpu]" in buf.getvalue()


def test_dir_lists_the_public_api():
    """Issue 11.10: ``dir(cep_gpu)`` shows Engine (imported lazily) and not ``annotations``."""
    names = dir(cep_gpu)
    assert "Engine" in names and "detect" in names and "annotations" not in names
    assert set(cep_gpu.__all__) <= set(names)


def test_derived_gpu_note_states_the_crossover_it_gives(monkeypatch):
    """Issue 11.10: the profile note and the printed crossover agree, also when the launch
    overhead is floored (a fast CPU fit), which moves the crossover past the window aimed at."""
    from cep_gpu import planner as pl
    from cep_gpu.benchmarks import calibrate as cal

    # features grow with the window (synthetic, so that the test needs no generated input)
    def features(window_ms, policy, n_events=0, seed=0):
        return {**dict.fromkeys(pl.FEATURES, 0.0), "launches": 1.0, "pairs": window_ms * 10.0}

    monkeypatch.setattr(cal, "seq3_launch_features", features)
    zero = dict.fromkeys(pl.FEATURES, 0.0)
    aimed = cal.CROSSOVER_WINDOW_MS
    # slow enough: the GPU wins from the window aimed at
    gpu, meta = cal.derive_gpu({**zero, "launches": 1e-6, "pairs": 1e-9})
    each = meta["seq3_crossover_window_ms"]["each"]
    assert abs(each - aimed) <= 0.01 * aimed  # the grid's nearest window
    assert "floored" not in meta["gpu_source"] and f"wins from {each} ms" in meta["gpu_source"]
    # so fast that the overhead is floored: the note says where the GPU now wins
    gpu, meta = cal.derive_gpu({**zero, "launches": 1e-6, "pairs": 1e-12})
    each = meta["seq3_crossover_window_ms"]["each"]
    assert each is None or each > aimed
    assert "floored at 5 us" in meta["gpu_source"]
    assert (f"wins from {each} ms" if each else "no window up to 40000 ms") in meta["gpu_source"]


def test_spark_input_is_made_readable_for_spark(tmp_path):
    """Issue 11.7: `cep-gpu spark` converts local CSV and nanosecond Parquet to microsecond
    Parquet (what Spark reads), refuses sub-microsecond times in one line, and leaves µs Parquet
    and URIs alone; the generator writes µs timestamps."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("pyspark")
    from cep_gpu.errors import EventError
    from spark_udfs.cli import spark_readable

    events = generate_museum(500, seed=4)
    events["ts"] = events["ts"].dt.floor("us")
    ns_path, csv_path = tmp_path / "ns.parquet", tmp_path / "ev.csv"
    events.to_parquet(ns_path, index=False)  # pandas writes timestamp[ns]
    assert str(pq.read_schema(ns_path).field("ts").type) == "timestamp[ns]"
    events.to_csv(csv_path, index=False)
    out = tmp_path / "out"
    for src in (ns_path, csv_path):
        got = spark_readable(str(src), out)
        assert got != str(src) and Path(got).parent == out
        table = pq.read_table(got)
        assert str(table.schema.field("ts").type) == "timestamp[us]"
        assert table.column("ts").to_pandas().astype("datetime64[ns]").tolist() == events["ts"].tolist()
    assert spark_readable("s3a://bucket/events", out) == "s3a://bucket/events"
    fine = generate_museum(50, seed=4)  # nanosecond times
    fine.to_parquet(tmp_path / "fine.parquet", index=False)
    with pytest.raises(EventError, match="finer than a microsecond.*--time-unit"):
        spark_readable(str(tmp_path / "fine.parquet"), out)
    script = Path(__file__).resolve().parents[1] / "examples" / "generate_museum.py"
    gen = tmp_path / "gen.parquet"
    subprocess.run([sys.executable, str(script), "300", str(gen)], check=True, capture_output=True)
    assert str(pq.read_schema(gen).field("ts").type) == "timestamp[us]"
    assert spark_readable(str(gen), out) == str(gen)


# -- bad arguments: one style for every subcommand ----------------------------------------------------

R = "define Q pattern SEQ(A a, B b) where a.x < b.x within 1 s\n"


@pytest.mark.parametrize("argv, option", [
    (["run", "{rules}", "{ev}", "--max-batch-latency", "-1"], "--max-batch-latency"),
    (["explain", "{rules}", "--backend", "nope"], "--backend"),
    (["bench", "seq3", "--backend", "cpu,nope"], "--backend"),
    (["bench", "seq3", "--policy", "each,sometimes"], "--policy"),
    (["bench", "kleene", "--backend", "nope"], "--backend"),
    (["calibrate", "--events", "5"], "--events"),
    (["spark", "{rules}", "{ev}", "--out", "{tmp}", "--conf", "novalue"], "--conf"),
    (["spark", "{rules}", "{ev}", "--out", "{tmp}", "--slices", "0"], "--slices"),
    (["spark", "{rules}", "{ev}", "--out", "{tmp}", "--slices", "-2"], "--slices"),
    (["run", "{rules}", "{ev}", "--limit", "-3"], "--limit"),
    (["run", "{rules}", "{ev}", "--out", "{tmp}/no/such/o.csv"], "--out"),
    (["run", "{rules}", "{ev}", "--out", "{ev}/o.csv"], "--out"),
    (["run", "{rules}", "{ev}", "--out", "{net}/../o.json"], "--out"),
    (["spark", "{rules}", "{ev}", "--out", "{ev}"], "--out"),
    (["spark", "{rules}", "{ev}", "--out", "{ev}/sub"], "--out"),
    (["run", "{rules}", "{ev}", "--max-matches", "0"], "--max-matches"),
    (["muse", "network", "--nodes", "0"], "--nodes"),
    (["muse", "network", "--skew", "nan"], "--skew"),
    (["muse", "plan", "{rules}", "{net}", "--algorithm", "nope"], "--algorithm"),
    (["muse", "simulate", "{rules}", "{net}", "--duration", "-1"], "--duration"),
    (["muse", "bench", "--seeds", "0"], "--seeds"),
    (["muse", "bench", "--max-rate", "inf"], "--max-rate"),
    (["decompose", "{rules}", "--units", "2", "--iota", "0", "--kappa", "9"], "--iota"),
    (["decompose", "{rules}", "--units", "2", "--iota", "9", "--kappa", "9", "--rates", "a=1"], "--rates"),
    (["decompose", "{rules}", "--units", "2", "--iota", "9", "--kappa", "9", "--rates", "a=1,b=1",
      "--selectivity", "a:z=0.5"], "--selectivity"),
    (["decompose", "{rules}", "--units", "10000000", "--iota", "9", "--kappa", "9", "--rates", "a=1,b=1"],
     "--units"),
    (["decopa", "bench", "--draws", "0"], "--draws"),
    (["decopa", "bench", "--backend", "nope"], "--backend"),
    (["parallel", "run", "{rules}", "{ev}", "--units", "0"], "--units"),
    (["parallel", "bench", "--events", "10"], "--events"),
    (["shedding", "bench", "--noise", "1.5"], "--noise"),
    (["shedding", "bench", "--factors", "0"], "--factors"),
    (["shedding", "bench", "--latency-bound", "-1"], "--latency-bound"),
    # --time-unit: checked while parsing (run read the whole events file first, then exit 1)
    (["run", "{rules}", "{ev}", "--time-unit", "bogus"], "--time-unit"),
    (["explain", "{rules}", "--time-unit", "bogus"], "--time-unit"),
    (["spark", "{rules}", "{ev}", "--out", "{tmp}", "--time-unit", "bogus"], "--time-unit"),
    (["decompose", "{rules}", "--time-unit", "bogus"], "--time-unit"),
    (["decopa", "run", "{net}", "{ev}", "--time-unit", "bogus"], "--time-unit"),
    (["muse", "network", "{ev}", "--time-unit", "bogus"], "--time-unit"),
    (["muse", "plan", "{rules}", "{net}", "--time-unit", "bogus"], "--time-unit"),
    (["muse", "simulate", "{rules}", "{net}", "--time-unit", "bogus"], "--time-unit"),
    (["parallel", "run", "{rules}", "{ev}", "--time-unit", "bogus"], "--time-unit"),
    (["shedding", "run", "{rules}", "{ev}", "--latency-bound", "1", "--time-unit", "bogus"], "--time-unit"),
    # an empty path was taken as no --out (the table printed, exit 0)
    (["run", "{rules}", "{ev}", "--out", ""], "--out"),
    (["spark", "{rules}", "{ev}", "--out", ""], "--out"),
    (["muse", "network", "--out", ""], "--out"),
    (["parallel", "run", "{rules}", "{ev}", "--stats", ""], "--stats"),
    (["bench", "seq3", "--out", ""], "--out"),
    (["bench", "seq3", "--seed", "-1"], "--seed"),
    (["bench", "seq3", "--policy", ""], "--policy"),
    (["calibrate", "--seed", "-2"], "--seed"),
    (["calibrate", "--quick", "--out", "{ev}/p.json"], "--out"),
    (["bench", "seq3", "--sizes", "10", "--events", "50", "--repeat", "1", "--out", "{ev}/r.json"], "--out"),
    (["spark", "{rules}", "{ev}", "--out", "{tmp}", "--master", "bogus://x"], "--master"),
    # --out naming the input overwrote it
    (["run", "{rules}", "{ev}", "--out", "{ev}"], "--out"),
    (["decopa", "run", "{net}", "{ev}", "--out", "{ev}"], "--out"),
    (["muse", "simulate", "{rules}", "{net}", "{ev}", "--out", "{ev}"], "--out"),
    (["parallel", "run", "{rules}", "{ev}", "--out", "{ev}"], "--out"),
    (["shedding", "run", "{rules}", "{ev}", "--latency-bound", "1", "--out", "{ev}"], "--out"),
])
def test_bad_argument_is_one_line_naming_it_and_exit_2(tmp_path, capsys, argv, option):
    """Checked while parsing (argparse raises SystemExit) or after it (main returns): the same line,
    ``PROG: error: argument OPTION: ...``, and status 2; an exception escaping main fails here."""
    (tmp_path / "r.txt").write_text(R)
    (tmp_path / "ev.csv").write_text("type,ts,x\nA,0,1\nB,0.5,2\n")
    (tmp_path / "net.json").write_text('{"nodes": {"n1": ["A", "B"]}, "rates": {"A": 1, "B": 1}}')
    paths = {"rules": tmp_path / "r.txt", "ev": tmp_path / "ev.csv", "net": tmp_path / "net.json",
             "tmp": tmp_path / "out"}
    try:
        rc = main([a.format(**paths) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert rc == 2, err
    assert "Traceback" not in err
    assert last.startswith("cep-gpu") and f": error: argument {option}" in last, err


def test_bad_argument_from_the_script_has_no_traceback():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "cep_gpu.cli", "muse", "bench", "--seeds", "0"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == "cep-gpu muse bench: error: argument --seeds: must be >= 1, got 0"


# -- a rule file without rules --------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["run", "{rules}", "{ev}"],
    ["explain", "{rules}"],
    ["explain", "{rules}", "{ev}"],
    ["spark", "{rules}", "{ev}", "--out", "{out}"],
])
@pytest.mark.parametrize("text", ["", "\n\n", "# no rule yet\n"])
def test_a_rule_file_without_a_rule_is_an_error_naming_it(tmp_path, capsys, argv, text):
    """It gave an empty table (run) or 'Engine: 0 rule(s)' (explain), exit status 0."""
    if argv[0] == "spark":
        pytest.importorskip("pyspark")
    rules = tmp_path / "rules.txt"
    rules.write_text(text)
    (tmp_path / "ev.csv").write_text("type,ts,x\nA,0,1\nB,0.5,2\n")
    paths = {"rules": rules, "ev": tmp_path / "ev.csv", "out": tmp_path / "out"}
    assert main([a.format(**paths) for a in argv]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == f"cep-gpu: error: {rules} holds no rule"
    assert captured.out == ""


# -- an output that cannot be written is found before the work -------------------------------------


def test_an_unwritable_out_is_a_usage_error_before_any_work(tmp_path, capsys, monkeypatch):
    """It was found after detection, as a raw '[Errno 2] Failed to open local file ...' (exit 1)."""
    import importlib

    def no_detection(*a, **k):
        raise AssertionError("detection ran")

    monkeypatch.setattr(importlib.import_module("cep_gpu.detect"), "detect_table", no_detection)
    (tmp_path / "r.txt").write_text(R)
    (tmp_path / "ev.csv").write_text("type,ts,x\nA,0,1\nB,0.5,2\n")
    assert main(["run", str(tmp_path / "r.txt"), str(tmp_path / "ev.csv"), "--out", "/nonexistent/o.csv"]) == 2
    assert capsys.readouterr().err.strip() == (
        "cep-gpu run: error: argument --out: cannot write /nonexistent/o.csv: the folder /nonexistent does not exist")
    # a folder, where a file is expected; and a file where spark wants its folder
    assert main(["run", str(tmp_path / "r.txt"), str(tmp_path / "ev.csv"), "--out", str(tmp_path)]) == 2
    assert f"argument --out: {tmp_path} is a folder: give a file name" in capsys.readouterr().err
    out = tmp_path / "o.csv"
    monkeypatch.undo()
    assert main(["run", str(tmp_path / "r.txt"), str(tmp_path / "ev.csv"), "--out", str(out)]) == 0
    assert out.exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_out_where_no_file_can_be_made_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """``os.access`` says yes to root for every folder, /proc included, where no file can be
    made: ``calibrate --out /proc/x.json`` calibrated (minutes), then ended in a bare
    ``[Errno 2] No such file or directory: '/proc/x.json'``. Now a file is made (and removed)
    in the folder first. (``os.access`` is made to say yes here as it does to root.)"""
    import importlib
    import os

    from cep_gpu.benchmarks import calibrate as cal

    def no_work(*a, **k):
        raise AssertionError("the work ran")

    monkeypatch.setattr(cal, "calibrate", no_work)
    monkeypatch.setattr(importlib.import_module("cep_gpu.benchmarks.runner"), "run_bench", no_work)
    monkeypatch.setattr(importlib.import_module("cep_gpu.detect"), "detect_table", no_work)
    monkeypatch.setattr(os, "access", lambda *a, **k: True)
    (tmp_path / "r.txt").write_text(R)
    (tmp_path / "ev.csv").write_text("type,ts,x\nA,0,1\nB,0.5,2\n")
    made = "no file can be made in /proc (No such file or directory)"
    for argv, option, path in [
        (["calibrate", "--quick", "--out", "/proc/x.json"], "--out", "/proc/x.json"),
        (["bench", "seq3", "--sizes", "10", "--events", "50", "--repeat", "1", "--out", "/proc/new/b.json"],
         "--out", "/proc/new/b.json"),
        (["bench", "seq3", "--sizes", "10", "--events", "50", "--repeat", "1", "--plot", "/proc/b.png"],
         "--plot", "/proc/b.png"),
        (["run", str(tmp_path / "r.txt"), str(tmp_path / "ev.csv"), "--out", "/proc/o.csv"], "--out", "/proc/o.csv"),
    ]:
        rc, _, err = run_cli(capsys, *argv)
        assert (rc, err.splitlines()) == (2, [f"cep-gpu {argv[0]}: error: argument {option}: cannot write "
                                              f"{path}: {made}"])
    # calibrate's default path (no --out) is checked too: it was found only once calibrated
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/cache")
    monkeypatch.delenv("CEP_GPU_PROFILE", raising=False)
    rc, _, err = run_cli(capsys, "calibrate", "--quick")
    assert (rc, err.splitlines()) == (2, ["cep-gpu calibrate: error: argument --out: cannot write "
                                          f"/proc/cache/cep-gpu/profile.json: {made}"])


def test_time_unit_and_out_are_checked_before_the_events_are_read(tmp_path, capsys):
    (tmp_path / "r.txt").write_text(R)
    ev = tmp_path / "ev.csv"
    ev.write_text("type,ts,x\nA,0,1\nB,0.5,2\n")
    # no such events file: the argument is the error
    rc, _, err = run_cli(capsys, "run", tmp_path / "r.txt", tmp_path / "none.csv", "--time-unit", "bogus")
    assert rc == 2 and err.splitlines()[-1] == ("cep-gpu run: error: argument --time-unit: unknown unit 'bogus'; "
                                       "use one of h, min, ms, ns, s, sec, us")
    for out in (ev, tmp_path / "." / "ev.csv"):
        rc, _, err = run_cli(capsys, "run", tmp_path / "r.txt", ev, "--out", out)
        assert rc == 2 and err.strip() == (f"cep-gpu run: error: argument --out: {out} is the events "
                                           f"file {ev}: it would be overwritten")
    assert ev.read_text() == "type,ts,x\nA,0,1\nB,0.5,2\n"
    rc, _, err = run_cli(capsys, "run", tmp_path / "r.txt", ev, "--out", "")
    assert rc == 2 and err.splitlines()[-1] == "cep-gpu run: error: argument --out: expected a path, got ''"
    # a folder of Parquet files: an output inside it would be read as events the next time
    (tmp_path / "d").mkdir()
    pd.DataFrame({"type": ["A", "B"], "ts": [0.0, 0.5], "x": [1, 2]}).to_parquet(tmp_path / "d" / "a.parquet")
    rc, _, err = run_cli(capsys, "run", tmp_path / "r.txt", tmp_path / "d", "--out", tmp_path / "d" / "o.csv")
    assert rc == 2 and "is in the events folder" in err
    assert run_cli(capsys, "run", tmp_path / "r.txt", ev, "--out", tmp_path / "o.csv", "--time-unit", "ms")[0] == 0


def test_writable_is_one_check_for_files_and_folders(tmp_path):
    from cep_gpu.cli import UsageError, writable

    (tmp_path / "f.txt").write_text("x")
    assert writable("--out", tmp_path / "o.csv") == tmp_path / "o.csv"
    assert writable("--out", tmp_path / "f.txt") == tmp_path / "f.txt"  # an existing file is replaced
    assert writable("--out", tmp_path / "a" / "b", folder=True) == tmp_path / "a" / "b"  # made later
    assert writable("--out", tmp_path, folder=True) == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]  # the file made to try is gone
    for path, folder, message in [
        (tmp_path / "no" / "o.csv", False, "the folder .* does not exist"),
        (tmp_path / "f.txt" / "o.csv", False, "is not a folder"),
        (tmp_path, False, "is a folder: give a file name"),
        (tmp_path / "f.txt", True, "is a file, not a folder"),
        (tmp_path / "f.txt" / "sub", True, "cannot make the folder .*f.txt is a file"),
    ]:
        with pytest.raises(UsageError, match=r"^argument --out: .*" + message):
            writable("--out", path, folder=folder)


def test_run_on_a_header_only_csv_gives_no_composite_events(tmp_path, capsys):
    (tmp_path / "r.txt").write_text("define Rally(gain: float) pattern SEQ(GOOG a, GOOG b) "
                                    "where a.price < b.price within 10 s return gain := b.price - a.price\n")
    (tmp_path / "ev.csv").write_text("type,ts\n")
    assert main(["run", str(tmp_path / "r.txt"), str(tmp_path / "ev.csv"), "--backend", "cpu"]) == 0
    assert "0 composite events from 0 events" in capsys.readouterr().err


# -- a rule that reads a type the input lacks: one warning line per type ------------------------------


def test_run_and_explain_warn_of_a_type_no_event_has(tmp_path, capsys):
    """`SEQ(GOGL a, MSFT b)` (a typo of GOOG) gave 0 composite events without a word."""
    rules, ev = tmp_path / "rules.txt", tmp_path / "events.csv"
    rules.write_text("define T pattern SEQ(GOGL a, MSFT b) within 10 s\n"
                     "define U pattern SEQ(T t, NOT(Halt h), GOOG g) within 10 s\n"  # T is made by a rule
                     "define W pattern SEQ(GOOG a, MSFT b) within 10 s\n")
    ev.write_text("type,ts\nGOOG,1\nMSFT,2\nGOOG,3\n")
    want = [f"rule 'T' reads type 'GOGL', which no event in {ev} has (types: GOOG, MSFT)",
            f"rule 'U' reads type 'Halt', which no event in {ev} has (types: GOOG, MSFT)"]
    for command in ("run", "explain"):
        assert main([command, str(rules), str(ev), "--backend", "cpu"]) == 0  # the status is unchanged
        err = capsys.readouterr().err
        warnings = [line for line in err.splitlines() if ": warning: " in line]
        assert warnings == [f"cep-gpu {command}: warning: {w}" for w in want], err
    # without events to compare with, explain says nothing of types; the API stays silent
    assert main(["explain", str(rules)]) == 0
    assert "warning" not in capsys.readouterr().err
    out = cep_gpu.detect(pd.read_csv(ev), rules.read_text(), backend="cpu")
    assert out["rule"].tolist() == ["W"]
    assert "warning" not in capsys.readouterr().err


NUMBERED_TYPES = "column 'type' must hold strings (event type names), got 1 (int) at row 0"


@pytest.mark.parametrize("command", [
    ["explain", "{rules}", "{ev}"],
    ["run", "{rules}", "{ev}"],
    ["parallel", "run", "{rules}", "{ev}"],
    ["shedding", "run", "{rules}", "{ev}", "--latency-bound", "1"],
    ["muse", "simulate", "{rules}", "{net}", "{ev}"],
    ["decompose", "{rules}", "--sample", "{ev}", "--units", "2", "--iota", "1", "--kappa", "1"],
    ["decopa", "run", "{plan}", "{ev}"],
])
def test_numbers_in_type_are_the_one_error_with_no_warning_before_it(tmp_path, capsys, command):
    """Event types are strings: numbers in ``type`` gave a warning per type a rule reads
    ("reads type 'A', which no event ... has (types: 1, 2)") before that error; muse simulate
    left every event out as of a type no query reads, and exited 0."""
    paths = {"rules": tmp_path / "r.txt", "ev": tmp_path / "ev.csv", "net": tmp_path / "net.json",
             "plan": tmp_path / "plan.json"}
    paths["rules"].write_text("define Q pattern SEQ(A a, B b) within 5 s\n")
    paths["ev"].write_text("type,ts,node\n1,1,a\n2,2,a\n1,3,b\n")
    paths["net"].write_text('{"nodes": {"a": ["A", "B"], "b": ["A"]}, "rates": {"A": 1.0, "B": 2.0}}')
    if command[0] == "decopa":
        assert main(["decompose", str(paths["rules"]), "--rates", "a=1,b=2", "--units", "2", "--iota", "1",
                     "--kappa", "1", "--json", str(paths["plan"])]) == 0
        capsys.readouterr()
    rc, _, err = run_cli(capsys, *[a.format(**paths) for a in command])
    assert rc == 1
    assert err.splitlines() == [f"cep-gpu: error: {NUMBERED_TYPES}; convert it first, e.g. df['type'].astype(str)"]


def test_run_on_the_museum_warns_of_nothing(files, capsys):
    rules, pq_path, _, _ = files
    assert main(["run", str(rules), str(pq_path), "--backend", "cpu", "--limit", "0"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_spark_names_a_bad_ts_value_and_row_as_run_does(tmp_path, capsys):
    """`cep-gpu spark r.txt bad.csv` said only "column 'ts' has unsupported type string"; the
    driver-side read now gives `cep-gpu run`'s message (the value and its row), before Spark
    starts."""
    pytest.importorskip("pyspark")
    rules, bad = tmp_path / "r.txt", tmp_path / "bad.csv"
    rules.write_text("define R\nfrom B() and last A() within 5 s from B\n")
    bad.write_text("type,ts,k\nA,1,1\nB,abc,1\nA,3,1\n")
    assert main(["run", str(rules), str(bad)]) != 0
    run_err = capsys.readouterr().err
    assert "column 'ts' holds 'abc' at row 1" in run_err
    assert main(["spark", str(rules), str(bad), "--out", str(tmp_path / "out")]) != 0
    spark_err = capsys.readouterr().err
    assert "column 'ts' holds 'abc' at row 1" in spark_err, spark_err
    assert spark_err.strip().splitlines()[-1] == run_err.strip().splitlines()[-1]


def test_spark_out_inside_the_events_folder_is_refused_before_spark_starts(tmp_path, capsys):
    folder = tmp_path / "events"
    folder.mkdir()
    pd.DataFrame({"type": ["A", "B"], "ts": [0.0, 0.5], "x": [1, 2]}).to_parquet(folder / "p0.parquet")
    (tmp_path / "r.txt").write_text(R)
    for out in (folder, folder / "out"):
        rc = main(["spark", str(tmp_path / "r.txt"), str(folder), "--out", str(out), "--no-plot"])
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert rc == 2 and "argument --out" in last and "is inside the events" in last
    assert sorted(p.name for p in folder.iterdir()) == ["p0.parquet"]


def test_a_cep_gpu_error_inside_a_spark_task_is_reported_as_its_one_line():
    # what cep-gpu spark reads failures with
    from cep_gpu.spark_udfs.failures import error_from_text

    trace = ("py4j.protocol.Py4JJavaError: An error occurred\norg.apache.spark.api.python.PythonException: "
             "Traceback (most recent call last):\n  File \"x.py\", line 1\ncep_gpu.errors.EventError: "
             "column 'value' holds numbers stored as text, such as '2.22'; store them as numbers\n\tat org.apache")
    err = error_from_text(trace)
    assert isinstance(err, cep_gpu.EventError) and str(err).startswith("column 'value' holds numbers stored as text")
    assert isinstance(error_from_text("Traceback (most recent call last):\ncep_gpu.errors.RuleError: rule 'R' ..."), cep_gpu.RuleError)
    assert error_from_text("java.lang.OutOfMemoryError") is None


def test_bench_and_calibrate_refuse_a_folder_as_out_before_any_work(tmp_path, capsys):
    for argv in (["bench", "seq3", "--sizes", "10", "--events", "50", "--repeat", "1", "--out", str(tmp_path)],
                 ["calibrate", "--quick", "--out", str(tmp_path)]):
        rc = main(argv)
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert rc == 2 and "argument --out" in last and "is a folder: give a file name" in last


SEQ_AB = "define Q pattern SEQ(A a, B b) within 1s\n"
EVENTS_CSV = "type,ts,x,node\nA,0,1,n1\nB,0.5,2,n2\nA,1,1,n1\nB,1.2,2,n1\n"


@pytest.mark.parametrize(("command", "option", "target"), [
    (["parallel", "run", "{rules}", "{events}"], "--stats", "{events}"),
    (["parallel", "run", "{rules}", "{events}"], "--stats", "{rules}"),
    (["shedding", "run", "{rules}", "{events}", "--latency-bound", "1"], "--report", "{events}"),
    (["shedding", "run", "{rules}", "{events}", "--latency-bound", "1", "--sample", "{sample}"],
     "--out", "{sample}"),
    (["muse", "plan", "{rules}", "{network}"], "--json", "{network}"),
    (["muse", "simulate", "{rules}", "{network}", "{events}"], "--json", "{events}"),
    (["muse", "network", "{events}"], "--out", "{events}"),
    (["decompose", "{rules}", "--units", "2", "--iota", "10", "--kappa", "10", "--rates", "a=1,b=1"],
     "--json", "{rules}"),
    (["decompose", "{rules}", "--units", "2", "--iota", "10", "--kappa", "10", "--sample", "{sample}"],
     "--json", "{sample}"),
    (["run", "{rules}", "{folder}"], "--out", "{folder}/o.csv"),
])
def test_no_output_option_overwrites_an_input(tmp_path, capsys, command, option, target):
    """Every output option of every subcommand is checked against the inputs before any work
    (only --out against the events was: --stats, --report and --json overwrote the events)."""
    paths = {"rules": tmp_path / "q.txt", "events": tmp_path / "ev.csv", "sample": tmp_path / "sample.csv",
             "network": tmp_path / "net.json", "folder": tmp_path / "parts"}
    paths["rules"].write_text(SEQ_AB)
    for p in (paths["events"], paths["sample"]):
        p.write_text(EVENTS_CSV)
    paths["network"].write_text('{"nodes": {"n1": {"A": 1.0, "B": 1.0}}}')
    paths["folder"].mkdir()
    pd.DataFrame({"type": ["A", "B"], "ts": [0.0, 0.5]}).to_parquet(paths["folder"] / "a.parquet")
    before = {p: p.read_bytes() for p in paths.values() if p.is_file()}
    argv = [a.format(**paths) for a in command] + [option, target.format(**paths)]
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 2, err
    assert f"error: argument {option}: " in err
    assert ("it would be overwritten" in err) or ("is in the events folder" in err), err
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(q.name for q in paths["folder"].iterdir()) == ["a.parquet"]


def test_two_outputs_may_not_name_one_file(tmp_path, capsys):
    (tmp_path / "q.txt").write_text(SEQ_AB)
    (tmp_path / "ev.csv").write_text(EVENTS_CSV)
    out = tmp_path / "o.csv"
    rc, _, err = run_cli(capsys, "parallel", "run", tmp_path / "q.txt", tmp_path / "ev.csv", "--out", out,
                         "--stats", out)
    assert rc == 2 and err.strip() == (f"cep-gpu parallel run: error: argument --stats: {out} is also the "
                                       f"file of --out ({out}): give each output its own file")
    assert not out.exists()
    # the benchmarks too, before any run (their --plot was not checked at all)
    rc, _, err = run_cli(capsys, "bench", "seq3", "--out", tmp_path / "r.png", "--plot", tmp_path / "r.png")
    assert rc == 2 and "argument --plot: " in err and "is also the file of --out" in err
    rc, _, err = run_cli(capsys, "muse", "bench", "--plot", tmp_path)
    assert rc == 2 and err.strip() == f"cep-gpu muse bench: error: argument --plot: {tmp_path} is a folder: give a file name"


def test_merged_results_are_inputs_of_parallel_bench(tmp_path, capsys):
    merged = tmp_path / "a.json"
    merged.write_text('{"points": []}')
    rc, _, err = run_cli(capsys, "parallel", "bench", "--merge", merged, "--out", merged)
    assert rc == 2 and f"argument --out: {merged} is the merged result file {merged}: it would be overwritten" in err
    assert merged.read_text() == '{"points": []}'


def test_a_hard_link_to_the_events_is_the_events(tmp_path, capsys):
    import os

    (tmp_path / "q.txt").write_text(SEQ_AB)
    ev = tmp_path / "ev.csv"
    ev.write_text(EVENTS_CSV)
    os.link(ev, tmp_path / "link.csv")
    rc, _, err = run_cli(capsys, "run", tmp_path / "q.txt", ev, "--out", tmp_path / "link.csv")
    assert rc == 2 and "is the events file" in err
    assert ev.read_text() == EVENTS_CSV


def _bad_event_files(tmp_path):
    import numpy as np

    good = tmp_path / "good.parquet"
    pd.DataFrame({"type": ["A", "B"] * 500, "ts": np.arange(1000) / 10, "x": np.arange(1000)}).to_parquet(
        good, compression=None)
    data = good.read_bytes()
    (tmp_path / "half.parquet").write_bytes(data[: len(data) // 2])
    (tmp_path / "pages.parquet").write_bytes(data[:100] + b"\xff" * 2900 + data[3000:])
    (tmp_path / "text.parquet").write_text("type,ts\nA,0\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.parquet").write_bytes(data[: len(data) // 2])
    (tmp_path / "dir.csv").mkdir()
    (tmp_path / "ev.jsonl").write_text('{"type": "A", "ts": 0}\n{bad\n')
    (tmp_path / "u16.csv").write_bytes(b"\xff\xfe" + "type,ts\nA,0\n".encode("utf-16-le"))
    (tmp_path / "u32.csv").write_bytes(b"\x00\x00\xfe\xff" + "type,ts\nA,0\n".encode("utf-32-be"))
    (tmp_path / "ragged.csv").write_text("type,ts,x\nA,0,1\nB,0.5\n")


@pytest.mark.parametrize(("name", "message"), [
    ("none.csv", "none.csv: no such file"),
    ("half.parquet", "half.parquet: cannot read the Parquet data: "),
    ("pages.parquet", "pages.parquet: cannot read the Parquet data: "),
    ("text.parquet", "text.parquet: cannot read the Parquet data: "),
    ("folder", "folder: cannot read the Parquet data: "),
    ("dir.csv", "dir.csv: the folder holds no Parquet file"),
    ("ev.jsonl", "ev.jsonl: unknown file type '.jsonl'; use .csv or .parquet"),
    ("u16.csv", "u16.csv: the CSV file is UTF-16 (little-endian) text"),
    ("u32.csv", "u32.csv: the CSV file is UTF-32 (big-endian) text"),  # was a UnicodeDecodeError
    ("ragged.csv", "ragged.csv: cannot read the CSV file: CSV parse error: Expected 3 columns, got 2"),
])
@pytest.mark.parametrize("command", [["run"], ["explain"], ["parallel", "run"]])
def test_a_bad_event_file_is_one_line_naming_it(tmp_path, capsys, name, message, command):
    """Damaged Parquet pages were 'cep-gpu: error: Unexpected end of stream', naming no file."""
    _bad_event_files(tmp_path)
    (tmp_path / "q.txt").write_text(SEQ_AB)
    rc, _, err = run_cli(capsys, *command, tmp_path / "q.txt", tmp_path / name)
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"cep-gpu: error: {tmp_path / message.split(':')[0]}:{message.split(':', 1)[1]}"), err


@pytest.mark.parametrize("command", [["bench", "seq3"], ["muse", "bench"], ["decopa", "bench"],
                                     ["shedding", "bench"], ["parallel", "bench"]])
def test_a_plot_of_an_unknown_image_type_is_refused_before_the_benchmark(tmp_path, capsys, command):
    """matplotlib's ValueError (Format 'txt' is not supported) came after the whole run, as a traceback."""
    rc, _, err = run_cli(capsys, *command, "--plot", tmp_path / "fig.txt")
    assert rc == 2 and f"argument --plot: unknown image type '.txt' in {tmp_path / 'fig.txt'}; use one of" in err
    assert ".png" in err and not (tmp_path / "fig.txt").exists()


def test_check_outputs_takes_its_inputs_as_pairs(tmp_path):
    """The contract: inputs are (what, path) pairs, checked in their order; one kind of input may
    come several times (parallel bench --merge A B); a path None is not given. It took a dict or
    a list of pairs; a dict is now a TypeError (iterating one gives its keys, which a pair-taking
    loop would unpack: a two-letter key silently became a 'what' and a path)."""
    import re

    from cep_gpu.cli import check_outputs
    from cep_gpu.errors import UsageError

    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "out.json"
    a.write_text("{}")
    b.write_text("{}")
    merged = [("merged result", a), ("merged result", b)]
    check_outputs({"--out": out}, merged)
    check_outputs({"--out": out})  # no inputs
    with pytest.raises(UsageError, match=re.escape(f"argument --out: {b} is the merged result file {b}: ")):
        check_outputs({"--out": b}, merged)  # the second of one kind is checked too
    with pytest.raises(UsageError, match=re.escape(f"argument --out: {a} is the events file {a}: ")):
        check_outputs({"--out": a}, [("rule", None), ("events", a), ("sample", a)])  # the first, in order
    with pytest.raises(TypeError, match=r"\(what, path\) pairs, not a mapping"):
        check_outputs({"--out": out}, {"events": a})


# -- --type-column, --ts-column, --id-column: a user's own column names ---------------------------

UP = "define Up pattern SEQ(A a, B b) where a.x < b.x within 2 s\n"


def _user_events(n: int = 60):
    """Events whose ids are not their rows (so that reading ``id`` from another column shows)."""
    import numpy as np

    rng = np.random.default_rng(5)
    return pd.DataFrame({"type": rng.choice(["A", "B", "C"], n), "ts": np.arange(n) * 0.25,
                         "id": rng.permutation(np.arange(1000, 1000 + 3 * n))[:n],
                         "x": rng.integers(0, 10, n)})


USER_NAMES = {"type": "kind", "ts": "time", "id": "eid"}
COLUMN_ARGS = ["--type-column", "kind", "--ts-column", "time", "--id-column", "eid"]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_run_reads_a_files_own_column_names_and_writes_the_engines(tmp_path, capsys, suffix):
    ev = _user_events()
    rules = tmp_path / "up.txt"
    rules.write_text(UP)
    std, mine = tmp_path / f"std{suffix}", tmp_path / f"mine{suffix}"
    for frame, path in ((ev, std), (ev.rename(columns=USER_NAMES), mine)):
        frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path, index=False)
    rc, _, err = run_cli(capsys, "run", rules, mine, "--backend", "reference", "--out", tmp_path / "o.csv")
    assert rc == 1 and "no 'type' column" in err  # the file as it is: the engine's names are missing
    rc, _, err = run_cli(capsys, "run", rules, mine, "--backend", "reference", *COLUMN_ARGS,
                         "--out", tmp_path / "o.csv")
    assert rc == 0, err
    rc, _, err = run_cli(capsys, "run", rules, std, "--backend", "reference", "--out", tmp_path / "s.csv")
    assert rc == 0, err
    got = pd.read_csv(tmp_path / "o.csv")
    assert list(got.columns) == ["rule", "ts", "ids"]  # the engine's output layout, not the file's names
    assert (tmp_path / "o.csv").read_text() == (tmp_path / "s.csv").read_text()
    want = cep_gpu.detect(ev, UP, backend="reference")
    assert len(want) > 3
    assert got["ids"].tolist() == [" ".join(map(str, i)) for i in want["ids"]]  # eid, not the rows
    assert min(int(i) for text in got["ids"] for i in text.split()) >= 1000


def test_columns_given_crosswise_are_renamed_at_once(tmp_path, capsys):
    """A file whose ``ts`` column holds the types and ``type`` the times: a swap is no collision."""
    ev = _user_events()
    rules = tmp_path / "up.txt"
    rules.write_text(UP)
    ev.rename(columns={"type": "ts", "ts": "type"}).to_parquet(tmp_path / "x.parquet", index=False)
    rc, out, err = run_cli(capsys, "run", rules, tmp_path / "x.parquet", "--backend", "reference",
                           "--type-column", "ts", "--ts-column", "type", "--limit", "0")
    assert rc == 0, err
    assert f"{len(cep_gpu.detect(ev, UP, backend='reference'))} composite events from 60 events" in err


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("option", ["--type-column", "--ts-column", "--id-column"])
def test_a_column_the_file_lacks_is_a_usage_error_naming_option_column_and_columns(tmp_path, capsys,
                                                                                   suffix, option):
    rules = tmp_path / "up.txt"
    rules.write_text(UP)
    path = tmp_path / f"ev{suffix}"
    ev = _user_events(5)
    ev.to_csv(path, index=False) if suffix == ".csv" else ev.to_parquet(path, index=False)
    rc, out, err = run_cli(capsys, "run", rules, path, option, "nope")
    assert rc == 2 and not out
    assert err.strip() == (f"cep-gpu run: error: argument {option}: {path} has no column 'nope' "
                           "(its columns: 'type', 'ts', 'id', 'x')")


def test_a_parquet_mapping_is_checked_on_the_schema_before_any_data_is_read(tmp_path, monkeypatch):
    import cep_gpu.io as io
    from cep_gpu.errors import UsageError

    path = tmp_path / "ev.parquet"
    _user_events(5).to_parquet(path, index=False)

    def no_data(*args, **kwargs):
        raise AssertionError("the data was read")

    monkeypatch.setattr(io.pq, "read_table", no_data)
    with pytest.raises(UsageError, match="argument --ts-column: .* has no column 'time'"):
        io.read_table(path, {"ts": "time"})


def test_a_parquet_rename_shares_the_column_data(tmp_path):
    """The rename is a new schema over the same Arrow buffers: no copy of the data."""
    from cep_gpu.io import column_renames, rename_columns

    table = pq.read_table(_parquet(tmp_path, _user_events().rename(columns=USER_NAMES)))
    renamed = rename_columns(table, column_renames(table.column_names, USER_NAMES, "ev.parquet"))
    assert renamed.column_names == ["type", "ts", "id", "x"]
    for old, new in zip(table.columns, renamed.columns):
        assert [b.address for c in old.chunks for b in c.buffers() if b is not None] == \
               [b.address for c in new.chunks for b in c.buffers() if b is not None]


def _parquet(tmp_path, frame):
    path = tmp_path / "ev.parquet"
    frame.to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("extra, option, words", [
    # the file has a `type` column besides the one given: which one holds the types is not known
    (["--type-column", "kind"], "--type-column", "has a column 'type' besides 'kind', the column given: "
                                                 "both would be 'type'; rename or drop the column 'type'"),
    (["--id-column", "x"], "--id-column", "has a column 'id' besides 'x'"),
    (["--type-column", "kind", "--ts-column", "kind"], "--ts-column",
     "column 'kind' is given to --type-column too: give each option its own column"),
])
def test_a_mapping_that_collides_is_a_usage_error(tmp_path, capsys, extra, option, words):
    rules = tmp_path / "up.txt"
    rules.write_text(UP)
    ev = _user_events(5)
    ev["kind"] = ev["type"]
    path = _parquet(tmp_path, ev)
    rc, out, err = run_cli(capsys, "run", rules, path, *extra)
    assert rc == 2 and not out
    assert err.startswith(f"cep-gpu run: error: argument {option}: ") and words in err


def test_explain_reads_the_columns_and_refuses_them_without_events(tmp_path, capsys):
    rules = tmp_path / "up.txt"
    rules.write_text(UP)
    path = _parquet(tmp_path, _user_events().rename(columns=USER_NAMES))
    rc, out, err = run_cli(capsys, "explain", rules, path, *COLUMN_ARGS)
    assert rc == 0 and "Up" in out, err
    rc, out, err = run_cli(capsys, "explain", rules, "--ts-column", "time")
    assert rc == 2 and not out
    assert "argument --ts-column: names a column of the events: give EVENTS" in err


def test_a_csv_file_read_with_its_own_names_keeps_the_csv_checks(tmp_path):
    """An empty type names the user's column; a column of dates given as ts is datetimes."""
    from cep_gpu.errors import EventError
    from cep_gpu.io import read_table

    path = tmp_path / "ev.csv"
    path.write_text("kind,day\nA,2024-01-01\n,2024-01-02\n")
    with pytest.raises(EventError, match="column 'kind' is empty at row 1"):
        read_table(path, {"type": "kind", "ts": "day"})
    path.write_text("kind,day\nA,2024-01-01\nB,2024-01-02\n")
    table = read_table(path, {"type": "kind", "ts": "day"})
    assert table.column_names == ["type", "ts"] and str(table.schema.field("ts").type) == "timestamp[s]"


#: every subcommand that reads an event file, with its required arguments
EVENT_SUBCOMMANDS = [
    ["run", "r", "e"], ["explain", "r", "e"], ["spark", "r", "e", "--out", "o"],
    ["parallel", "run", "r", "e"], ["shedding", "run", "r", "e", "--latency-bound", "1"],
    ["decompose", "r", "--units", "1", "--iota", "1", "--kappa", "1", "--sample", "e"],
    ["decopa", "run", "p", "e"], ["muse", "network", "e"], ["muse", "plan", "q", "n"],
    ["muse", "simulate", "q", "n", "e"],
]


@pytest.mark.parametrize("argv", EVENT_SUBCOMMANDS, ids=lambda a: " ".join(a[:2]))
def test_every_subcommand_that_reads_events_has_the_column_options(argv):
    from cep_gpu.cli import build_parser, event_columns

    parser = build_parser()
    args = parser.parse_args([*argv, "--type-column", "kind", "--ts-column", "time"])
    assert event_columns(args) == {"type": "kind", "ts": "time"}
    assert event_columns(parser.parse_args(argv)) == {}


def test_spark_input_is_read_with_the_columns_given(tmp_path):
    """`cep-gpu spark`: a converted file has the engine's names; a Parquet file Spark reads as it
    is has the mapping checked on its schema before Spark starts."""
    pytest.importorskip("pyspark")
    from cep_gpu.errors import UsageError
    from spark_udfs.cli import spark_readable

    ev = _user_events().rename(columns=USER_NAMES)
    csv_path = tmp_path / "ev.csv"
    ev.to_csv(csv_path, index=False)
    got = spark_readable(str(csv_path), tmp_path / "out", USER_NAMES)
    assert pq.read_schema(got).names == ["type", "ts", "id", "x"]
    ev.to_parquet(tmp_path / "ev.parquet", index=False)  # float ts: read by Spark as it is
    assert spark_readable(str(tmp_path / "ev.parquet"), tmp_path / "out", USER_NAMES) == str(tmp_path / "ev.parquet")
    with pytest.raises(UsageError, match="argument --id-column: .* has no column 'ids'"):
        spark_readable(str(tmp_path / "ev.parquet"), tmp_path / "out", {"id": "ids"})


def test_warnings_of_the_input_are_one_line_like_errors(tmp_path, capsys):
    """was: Python's format, ``.../cep_gpu/cli.py:457: CepWarning: ...`` and a line of cep-gpu's
    source, pointing into the package instead of at the input."""
    rows = "".join(f"A,{i},{i}\n" for i in range(1, 20))
    (tmp_path / "events.csv").write_text(f"type,ts,k\n{rows}B,20,oops\n")
    (tmp_path / "rules.tesla").write_text(
        "define P(k: string) from B(k = $k) and each A(k = $k) within 5 s from B where k = $k")
    assert main(["run", str(tmp_path / "rules.tesla"), str(tmp_path / "events.csv"),
                 "--out", str(tmp_path / "out.csv")]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "read as text" in line]
    assert len(said) == 1 and said[0].startswith("cep-gpu run: warning: "), err
    assert "CepWarning" not in err and "warnings.warn" not in err and ".py:" not in err
    import warnings

    from cep_gpu.errors import CepWarning

    shown = warnings.showwarning
    with pytest.warns(CepWarning):  # outside the command, Python's handling is untouched
        warnings.warn("x", CepWarning, stacklevel=1)
    assert warnings.showwarning is shown
