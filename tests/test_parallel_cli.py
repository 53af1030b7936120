"""``cep-gpu parallel run`` as a user meets it: errors, files and printing as ``cep-gpu run``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from unittest import mock

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from cli_helpers import run_cli as cli

import cep_gpu

RULE = "define T pattern SEQ(GOOG a, MSFT b) where a.price < b.price within 5 s\n"
TYPO = RULE.replace("a.price", "a.prise")


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    n = 400
    ev = pd.DataFrame({"type": rng.choice(["GOOG", "MSFT", "IBM"], n), "ts": np.arange(n) * 0.1,
                       "price": rng.normal(100, 5, n).round(2)})
    (tmp_path / "rules.txt").write_text(RULE)
    (tmp_path / "typo.txt").write_text(TYPO)
    ev.to_csv(tmp_path / "ticks.csv", index=False)
    return tmp_path, ev


# -- 1. a rule reading an attribute no event has --------------------------------------------------

def test_an_attribute_no_event_has_is_the_error_run_reports(files, capsys):
    d, _ = files
    rc, out, err = cli(capsys, "run", d / "typo.txt", d / "ticks.csv")
    assert rc == 1 and "reads attribute 'prise', which no event in the input has" in err
    rc, out, perr = cli(capsys, "parallel", "run", d / "typo.txt", d / "ticks.csv")
    assert rc == 1, perr  # was: "(no composite events)" and 0
    assert perr == err  # the very line run prints (cep-gpu: error: ...)
    assert "composite events" not in out


# -- 2. --out FILE.parquet reads back -------------------------------------------------------------

READ_BACK = """
import json, sys
import pandas as pd, pyarrow.parquet as pq
rows = []
for path in sys.argv[1:]:
    df = pd.read_parquet(path)
    assert pq.read_table(path).num_rows == len(df)
    rows.append([[r, t, [int(i) for i in ids]] for r, t, ids in zip(df["rule"], df["ts"], df["ids"])])
print(json.dumps(rows))
"""


def read_back(*paths) -> list:
    """The files' rows, read with pandas and pyarrow in a fresh interpreter (reading the broken
    file could abort the interpreter, not only raise)."""
    proc = subprocess.run([sys.executable, "-c", READ_BACK, *map(str, paths)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_parquet_out_reads_back_with_pandas_and_pyarrow(files, capsys):
    d, ev = files
    rc, _, err = cli(capsys, "parallel", "run", d / "rules.txt", d / "ticks.csv", "--out", d / "par.parquet")
    assert rc == 0, err
    summary = "".join(err.split())  # (rich wraps the line as run's)
    assert cli(capsys, "run", d / "rules.txt", d / "ticks.csv", "--out", d / "run.parquet")[0] == 0
    par, run = read_back(d / "par.parquet", d / "run.parquet")
    assert pq.read_schema(d / "par.parquet") == pq.read_schema(d / "run.parquet")  # the same file form
    expected = cep_gpu.detect(ev, RULE, backend="reference")
    assert len(expected) > 50
    want = [[r, t, list(map(int, ids))] for r, t, ids in zip(expected["rule"], expected["ts"], expected["ids"])]
    assert par == want and run == want
    assert f"{len(want)}compositeeventsfrom400eventsin" in summary and f"->{d / 'par.parquet'}" in summary


# -- 3. printing and --limit as cep-gpu run -------------------------------------------------------

@pytest.mark.parametrize("limit", [None, "3", "0"])
def test_prints_the_table_run_prints(files, capsys, limit):
    d, _ = files
    extra = [] if limit is None else ["--limit", limit]
    rc, want, _ = cli(capsys, "run", d / "rules.txt", d / "ticks.csv", *extra)
    assert rc == 0
    rc, got, err = cli(capsys, "parallel", "run", d / "rules.txt", d / "ticks.csv", *extra)
    assert rc == 0, err
    assert got == want  # was: every row, with pandas' to_string
    n = len(cep_gpu.detect(pd.read_csv(d / "ticks.csv"), RULE))
    shown = 50 if limit is None else int(limit)
    assert f"... {n - shown} more rows (use --out to write them all)" in got
    assert len(got.splitlines()) < shown + 10
    assert f"{n} composite events from 400 events in " in err


def test_negative_limit_is_a_bad_argument(files, capsys):
    d, _ = files
    rc, _, err = cli(capsys, "parallel", "run", d / "rules.txt", d / "ticks.csv", "--limit", "-3")
    assert rc == 2
    assert err.strip().splitlines()[-1] == "cep-gpu parallel run: error: argument --limit: must be >= 0, got -3"


# -- 4. output paths checked before the work ------------------------------------------------------

@pytest.mark.parametrize("option, path, message", [
    ("--out", "/nonexistent/o.csv", "cannot write /nonexistent/o.csv: the folder /nonexistent does not exist"),
    ("--stats", "/nonexistent/s.json", "cannot write /nonexistent/s.json: the folder /nonexistent does not exist"),
    ("--out", "{d}", "{d} is a folder: give a file name"),
    ("--out", "{d}/rules.txt/o.csv", "cannot write {d}/rules.txt/o.csv: {d}/rules.txt is not a folder"),
    ("--out", "{d}/o.txt", "unknown file type '.txt' in {d}/o.txt; use .csv or .parquet"),
])
def test_an_output_path_that_cannot_be_written_is_one_line_before_any_work(files, capsys, option, path, message):
    d, _ = files
    with mock.patch("cep_gpu.parallel.engine.HybridEngine", side_effect=AssertionError("ran")):
        rc, out, err = cli(capsys, "parallel", "run", d / "rules.txt", d / "ticks.csv", option, path.format(d=d))
    assert rc == 2, err  # was: the whole run, then a raw [Errno 2] (exit 1)
    assert err.strip().splitlines() == [f"cep-gpu parallel run: error: argument {option}: {message.format(d=d)}"]
    assert out == ""


def test_an_unwritable_folder_is_named_before_any_work(files, capsys):
    d, _ = files
    locked = d / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    real = os.access
    denied = mock.patch("os.access", lambda p, mode: False if str(p) == str(locked) else real(p, mode))
    try:  # root may write anywhere: there the folder is denied by os.access
        with denied if os.geteuid() == 0 else contextlib.nullcontext(), \
                mock.patch("cep_gpu.parallel.engine.HybridEngine", side_effect=AssertionError("ran")):
            rc, _, err = cli(capsys, "parallel", "run", d / "rules.txt", d / "ticks.csv", "--stats", locked / "s.json")
    finally:
        locked.chmod(0o700)
    assert rc == 2
    assert err.strip() == f"cep-gpu parallel run: error: argument --stats: cannot write {locked / 's.json'}: " \
                          f"the folder {locked} is not writable"


def test_stats_and_explain_still_written(files, capsys):
    d, _ = files
    rc, _, err = cli(capsys, "parallel", "run", d / "rules.txt", d / "ticks.csv", "--out", d / "o.csv",
                     "--stats", d / "s.json", "--explain")
    assert rc == 0, err
    assert json.loads((d / "s.json").read_text())["events"] == 400
    assert "HybridEngine: 2 unit(s)" in err
    assert pd.read_csv(d / "o.csv")["ids"].iloc[0].count(" ") == 1


def test_a_type_no_event_has_is_a_warning(files, capsys):
    d, _ = files
    (d / "gogl.txt").write_text(RULE.replace("GOOG", "GOGL"))
    rc, out, err = cli(capsys, "parallel", "run", d / "gogl.txt", d / "ticks.csv")
    assert rc == 0 and "warning: rule 'T' reads type 'GOGL', which no event in" in err
    rc, out, err = cli(capsys, "parallel", "run", d / "rules.txt", d / "ticks.csv")
    assert rc == 0 and "warning" not in err


def test_a_second_flush_gives_an_empty_frame_as_engine_does():
    from cep_gpu.parallel import HybridEngine

    eng = HybridEngine(RULE)
    eng.publish(pd.DataFrame({"type": ["GOOG", "MSFT"], "ts": [1.0, 2.0], "price": [1.0, 2.0]}))
    first, again = eng.flush(), eng.flush()  # (the second was None)
    assert len(first) == 0 and len(again) == 0 and list(again.columns) == list(first.columns)
    assert HybridEngine(RULE).flush(output="arrow").num_rows == 0


# -- --units above the engine's limit --------------------------------------------------------------


def test_too_many_units_is_a_usage_error(files, capsys):
    d, _ = files
    # was: exit 1 and "cep-gpu: error: units must be at most 1024 ...", not naming the option
    rc, out, err = cli(capsys, "parallel", "run", d / "rules.txt", d / "ticks.csv", "--units", "2000")
    assert rc == 2 and not out
    assert err.strip().splitlines()[-1] == (
        "cep-gpu parallel run: error: argument --units: must be at most 1024 (one thread each), got 2000")


def test_run_reads_a_files_own_column_names(files, capsys):
    """--type-column/--ts-column/--id-column (cep_gpu.io.read_table): the same rows as the file with
    the engine's names; the ids are the given column's."""
    d, ev = files
    ev = ev.assign(id=np.arange(len(ev)) * 3 + 7)
    ev.to_csv(d / "ticks.csv", index=False)
    ev.rename(columns={"type": "sym", "ts": "t", "id": "n"}).to_parquet(d / "mine.parquet", index=False)
    rc, _, err = cli(capsys, "parallel", "run", d / "rules.txt", d / "mine.parquet", "--type-column", "sym",
                     "--ts-column", "t", "--id-column", "n", "--out", d / "mine.csv")
    assert rc == 0, err
    assert cli(capsys, "parallel", "run", d / "rules.txt", d / "ticks.csv", "--out", d / "std.csv")[0] == 0
    assert (d / "mine.csv").read_text() == (d / "std.csv").read_text()
    assert (d / "mine.csv").read_text().splitlines()[0] == '"rule","ts","ids"'
    rc, out, err = cli(capsys, "parallel", "run", d / "rules.txt", d / "mine.parquet", "--ts-column", "time")
    assert rc == 2 and err.strip() == (f"cep-gpu parallel run: error: argument --ts-column: {d / 'mine.parquet'} "
                                       "has no column 'time' (its columns: 'sym', 't', 'price', 'n')")
