"""``cep-gpu muse`` and ``cep-gpu bench muse``: the command line and the benchmark's JSON/PNG."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli

from cep_gpu.cli import main
from cep_gpu.muse import bench

QUERY = "define Q pattern SEQ(E0 a, E1 b, E2 c) where a.k = b.k within 1 s\n"


@pytest.fixture
def files(tmp_path):
    net = tmp_path / "net.json"
    assert main(["muse", "network", "--nodes", "4", "--types", "3", "--ratio", "0.6",
                 "--seed", "1", "--out", str(net)]) == 0
    q = tmp_path / "q.txt"
    q.write_text(QUERY)
    return q, net, tmp_path


def test_plan_and_simulate(files, capsys):
    q, net, tmp = files
    assert main(["muse", "plan", str(q), str(net), "--algorithm", "amuse",
                 "--json", str(tmp / "plan.json")]) == 0
    out = capsys.readouterr().out
    assert "MuSE plan (amuse)" in out and "transmission ratio" in out
    plan = json.loads((tmp / "plan.json").read_text())
    assert 0 < plan["transmission_ratio"] <= 1 and plan["sinks"]["Q"]
    assert main(["muse", "simulate", str(q), str(net), "--duration", "10", "--backend", "aip",
                 "--json", str(tmp / "sim.json")]) == 0
    out = capsys.readouterr().out
    assert "matches at the sinks" in out and "predicted by the cost model" in out
    sim = json.loads((tmp / "sim.json").read_text())["simulation"]
    assert sim["messages_counted"] == sum(m["count"] for m in sim["messages"])


def test_errors_exit_1(files, capsys):
    q, net, tmp = files
    assert main(["muse", "plan", str(q), str(tmp / "missing.json")]) == 1
    assert "no such network file" in capsys.readouterr().err
    bad = tmp / "bad.json"
    bad.write_text(json.dumps({"nodes": {"a": ["E0"]}, "rates": {"E0": -1}}))
    assert main(["muse", "plan", str(q), str(bad)]) == 1
    assert "positive finite" in capsys.readouterr().err
    other = tmp / "q2.txt"
    other.write_text("define Q pattern SEQ(E0 a, X b) within 1 s")
    assert main(["muse", "plan", str(other), str(net)]) == 1
    assert "no node produces type(s) X" in capsys.readouterr().err


def test_bench_json_summary_and_plot(tmp_path):
    result = bench.run({"nodes": [4, 6]}, seeds=1, queries=2, size=3, simulate_events=150,
                       backend="aip")
    s = result["summary"]
    assert set(s["median_transmission_ratio"]) == {"nodes=4", "nodes=6"}
    for ratios in s["median_transmission_ratio"].values():
        assert ratios["centralized"] == pytest.approx(1.0)
        assert ratios["amuse"] <= 1.0 + 1e-9
    assert s["share_amuse_le_centralized"] == 1.0
    assert len(result["simulations"]) == 2
    for sim in result["simulations"]:
        assert sim["messages_counted"] > 0 and sim["messages_predicted"] > 0
    bench.plot(result, str(tmp_path / "muse.png"))
    assert (tmp_path / "muse.png").stat().st_size > 1000


def test_selectivity_conditions_realise_sigma():
    """with_conditions: x_A.h - x_B.h > 1 - sqrt(2σ) holds with probability σ for uniforms."""
    import numpy as np

    from cep_gpu import muse

    q = muse.Query.from_pattern("SEQ(A, B)", 1.0, selectivity={("A", "B"): 0.08})
    qc, attrs = bench.with_conditions(q)
    assert attrs == ["h0"] and "x_A.h0 - x_B.h0 >" in qc.rule_text()
    rng = np.random.default_rng(0)
    u, v = rng.random(200_000), rng.random(200_000)
    t = float(qc.conjuncts[0].text.split(">")[1])
    assert np.mean(u - v > t) == pytest.approx(0.08, abs=0.003)


def test_bench_muse_through_the_bench_command(monkeypatch, tmp_path):
    from cep_gpu.muse import cli as muse_cli

    seen = {}
    real_run = bench.run

    def fake_run(sweeps, seeds, queries, size, simulate_events, backend, on_step=None,
                 max_rate=None):
        seen.update(seeds=seeds, queries=queries, size=size)
        return real_run({"nodes": [4]}, 1, 1, 3, 0, backend)

    monkeypatch.setattr(bench, "run", fake_run)
    out = tmp_path / "m.json"
    assert main(["bench", "muse", "--out", str(out)]) == 0
    assert "summary" in json.loads(out.read_text())
    assert seen == {"seeds": 2, "queries": 5, "size": 5}
    assert muse_cli.muse_bench_from_bench_args  # the bench command's route


# -- simulate on a user's event file: --out, datetimes, --duration ----------------------------------

QUERIES = """define Q1 pattern SEQ(A a, B b) where a.k = b.k within 1 s

define Q2 pattern AND(B b, C c) where b.v < c.v within 500 ms
"""
NET = {"nodes": {"a": ["A", "B"], "b": ["B", "C"], "c": ["A", "C"]}, "rates": {"A": 0.5, "B": 2.0, "C": 1.0}}


@pytest.fixture
def user_files(tmp_path):
    import pandas as pd

    from cep_gpu import muse

    (tmp_path / "q.txt").write_text(QUERIES)
    (tmp_path / "net.json").write_text(json.dumps(NET))
    events = muse.generate_streams(muse.Network.from_dict(NET), QUERIES, 60, seed=1).drop(columns=["id"])
    events.to_csv(tmp_path / "events.csv", index=False)
    dated = events.assign(ts=pd.Timestamp("2024-01-01") + pd.to_timedelta(events["ts"], unit="s"))
    dated.to_parquet(tmp_path / "dated.parquet")
    return tmp_path


@pytest.mark.parametrize("events, suffix", [("events.csv", "csv"), ("dated.parquet", "parquet"),
                                            ("dated.parquet", "csv")])
def test_simulate_out_writes_the_rows_of_cep_gpu_run(user_files, capsys, events, suffix):
    import pandas as pd

    d = user_files
    got, want = d / f"sim.{suffix}", d / f"run.{suffix}"
    # was: counts only (and datetimes refused: "'ts' must be numbers of seconds")
    assert main(["muse", "simulate", str(d / "q.txt"), str(d / "net.json"), str(d / events),
                 "--backend", "reference", "--out", str(got)]) == 0
    out, err = capsys.readouterr()
    assert "matches at the sinks" in out and f"-> {got}" in err
    assert main(["run", str(d / "q.txt"), str(d / events), "--backend", "reference", "--out", str(want)]) == 0
    capsys.readouterr()
    if suffix == "csv":
        lines = [line.rsplit(",", 1)[0] for line in got.read_text().splitlines()]
        assert lines == want.read_text().splitlines() and len(lines) > 50
        assert got.read_text().splitlines()[0] == '"rule","ts","ids","node"'
    else:
        sim, run = pd.read_parquet(got), pd.read_parquet(want)
        assert str(sim["ts"].dtype) == "datetime64[ns]"
        pd.testing.assert_frame_equal(sim.drop(columns=["node"]), run)
        assert set(sim["node"]) <= set(NET["nodes"])


def test_simulate_duration_must_be_positive(user_files, capsys):
    d = user_files
    argv = ["muse", "simulate", str(d / "q.txt"), str(d / "net.json"), "--duration", "0"]
    with pytest.raises(SystemExit) as exc:  # was: exit 0, "0 events, 0 matches"
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "cep-gpu muse simulate: error: argument --duration: must be a finite number of seconds > 0, got '0'")
    assert main(["muse", "simulate", str(d / "q.txt"), str(d / "net.json"), str(d / "events.csv"),
                 "--duration", "120", "--backend", "reference", "--json", str(d / "sim.json")]) == 0
    assert "over 120 s" in capsys.readouterr().out  # the file's duration for the predictions
    assert main(["muse", "simulate", str(d / "q.txt"), str(d / "net.json"), "--out", str(d / "x.txt")]) == 2
    assert "argument --out" in capsys.readouterr().err


# -- a network measured on events, selectivities, types no query reads ------------------------------


@pytest.mark.parametrize("column, what", [("ts", "timestamp"), ("type", "type"), ("id", "id")])
def test_the_node_column_cannot_be_type_ts_or_id(user_files, capsys, column, what):
    """docs/muse.md: the node column names the node that emitted each event. ``--node-column ts``
    was taken: every timestamp a node of the measured network; ``--node-column type`` made one
    node per type, and simulate then failed with a KeyError traceback (its type column gone)."""
    import pandas as pd

    from cep_gpu import muse

    d = user_files
    events = pd.read_csv(d / "events.csv").assign(id=lambda f: range(len(f)))
    events.to_csv(d / "with_id.csv", index=False)
    want = (f"argument --node-column: {column!r} is the events' {what} column: the node column must be "
            "another one, naming the node that emitted each event")
    for argv in (["network", d / "with_id.csv", "--out", d / "n.json"],
                 ["simulate", d / "q.txt", d / "net.json", d / "with_id.csv", "--out", d / "s.csv"]):
        rc, out, err = run_cli(capsys, "muse", *argv, "--node-column", column)
        assert (rc, err.splitlines()) == (2, [f"cep-gpu muse {argv[0]}: error: {want}"])
        assert not (d / "n.json").exists() and not (d / "s.csv").exists()
    # the API refuses it too, with the same words
    lib = want.removeprefix("argument --node-column: ")
    with pytest.raises(muse.MuseError) as err:
        muse.Network.from_events(events, node_column=column)
    assert str(err.value) == f"node_column {lib}"
    plan = muse.place(muse.parse_queries(QUERIES), muse.Network.from_dict(NET))
    with pytest.raises(muse.MuseError) as err:
        muse.simulate(plan, events, backend="reference", node_column=column)
    assert str(err.value) == f"node_column {lib}"


def test_network_from_an_event_file(user_files, capsys):
    """was: `muse network` only generated random networks; rates were typed in by hand."""
    from cep_gpu import muse
    from cep_gpu.io import read_events

    d = user_files
    (d / "events.csv").write_text((d / "events.csv").read_text().replace(",node,", ",host,", 1))
    rc, out, err = run_cli(capsys, "muse", "network", d / "events.csv", "--node-column", "host",
                           "--out", d / "measured.json")
    assert rc == 0, err
    assert "network of 3 nodes, 3 types from" in out and "rate (events/s per node)" in out
    got = json.loads((d / "measured.json").read_text())
    assert got == muse.Network.from_events(read_events(d / "events.csv"), "host").to_dict()
    assert got["nodes"] == NET["nodes"]
    for t, r in NET["rates"].items():
        assert got["rates"][t] == pytest.approx(r, rel=0.35)
    # the measured network plans and simulates the file it was measured on
    rc, out, err = run_cli(capsys, "muse", "simulate", d / "q.txt", d / "measured.json",
                           d / "events.csv", "--node-column", "host", "--backend", "reference")
    assert rc == 0, err
    assert "matches at the sinks" in out
    # errors: the node column (naming the columns there are), generator options with EVENTS
    rc, out, err = run_cli(capsys, "muse", "network", d / "events.csv")
    assert rc == 1 and "no node column 'node'" in err and "'host'" in err
    rc, out, err = run_cli(capsys, "muse", "network", d / "events.csv", "--nodes", "4")
    assert rc == 2 and "argument --nodes: generates a random network" in err
    rc, out, err = run_cli(capsys, "muse", "network", "--node-column", "host")
    assert rc == 2 and "argument --node-column: reads an event file" in err
    one = d / "one.csv"
    one.write_text("type,ts,node\nA,1.0,a\nB,1.0,b\n")
    rc, out, err = run_cli(capsys, "muse", "network", one)
    assert rc == 1 and "same timestamp" in err


def test_selectivity_option(user_files, capsys):
    """was: plan and simulate had no way to give σ (the API's selectivity=): every σ was 1."""
    from cep_gpu import muse

    d = user_files
    q, net = d / "q.txt", d / "net.json"
    rc, out, _ = run_cli(capsys, "muse", "plan", q, net, "--json", d / "plain.json")
    assert rc == 0
    rc, out, err = run_cli(capsys, "muse", "plan", q, net, "--selectivity", "A,B=0.1", "Q2:C=0.5",
                           "--json", d / "sel.json")
    assert rc == 0, err
    want = muse.place(muse.parse_queries(QUERIES, selectivity={"Q1": {("A", "B"): 0.1},
                                                               "Q2": {"C": 0.5}}),
                      muse.Network.from_dict(NET))
    got = json.loads((d / "sel.json").read_text())
    assert got["cost"] == pytest.approx(want.cost)
    assert got["cost"] < json.loads((d / "plain.json").read_text())["cost"]
    # simulate takes it too (repeated options add up)
    rc, out, err = run_cli(capsys, "muse", "simulate", q, net, d / "events.csv", "--selectivity",
                           "A,B=0.1", "--selectivity", "Q2:C=0.5", "--backend", "reference",
                           "--json", d / "sim.json")
    assert rc == 0, err
    assert json.loads((d / "sim.json").read_text())["cost"] == pytest.approx(want.cost)
    for value, message in [
        ("A,B=2", "'A,B=2': σ must be a number in (0, 1], got '2'"),
        ("A,B=x", "'A,B=x': σ must be a number in (0, 1], got 'x'"),
        ("A,Z=0.5", "'A,Z=0.5': no query has the type(s) A, Z (queries: Q1: A, B; Q2: B, C)"),
        ("Q2:A,B=0.5", "'Q2:A,B=0.5': query Q2 has no type(s) A (its types: B, C)"),
        ("Q9:A=0.5", "'Q9:A=0.5': no query named 'Q9' (queries: Q1, Q2)"),
        ("A,,B=0.5", "'A,,B=0.5': expected distinct type names separated by commas before '='"),
        ("AB", "expected [QUERY:]TYPE,TYPE=σ (e.g. A,B=0.1), got 'AB'"),
    ]:
        rc, out, err = run_cli(capsys, "muse", "plan", q, net, "--selectivity", value)
        assert rc == 2 and err.strip().splitlines() == [
            f"cep-gpu muse plan: error: argument --selectivity: {message}"], (value, err)


def test_selectivity_from_a_sample(user_files, capsys):
    from cep_gpu import muse
    from cep_gpu.io import read_events

    d = user_files
    rc, out, err = run_cli(capsys, "muse", "plan", d / "q.txt", d / "net.json", "--selectivity-from",
                           d / "events.csv", "--selectivity", "Q2:B,C=0.5", "--json", d / "plan.json")
    assert rc == 0, err
    measured = muse.selectivity_from_sample(QUERIES, read_events(d / "events.csv"))
    ab, bc = measured["Q1"][("A", "B")], measured["Q2"][("B", "C")]
    assert f"selectivity of Q1 measured on {d / 'events.csv'}: A,B={ab:.4g}" in err
    assert f"B,C={bc:.4g} (--selectivity: 0.5)" in err  # given values win
    want = muse.place(muse.parse_queries(QUERIES, selectivity={"Q1": {("A", "B"): ab},
                                                               "Q2": {("B", "C"): 0.5}}),
                      muse.Network.from_dict(NET))
    assert json.loads((d / "plan.json").read_text())["cost"] == pytest.approx(want.cost)


def test_simulate_ignores_types_no_query_reads_with_one_warning(user_files, capsys):
    """was: exit 1, "node 'c' emits type 'News', which the network says it does not produce"."""
    import pandas as pd


    d = user_files
    events = pd.read_csv(d / "events.csv")
    news = pd.DataFrame({"type": ["News"] * 3 + ["Tick"], "ts": [1.0, 2.0, 3.0, 4.0],
                         "node": ["c", "c", "nyse", "a"]})
    mixed = pd.concat([events, news]).sort_values("ts", kind="stable")
    mixed.to_csv(d / "mixed.csv", index=False)
    rc, out, err = run_cli(capsys, "muse", "simulate", d / "q.txt", d / "net.json", d / "mixed.csv",
                           "--backend", "reference", "--out", d / "sim.csv")
    assert rc == 0, err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == ["cep-gpu muse simulate: warning: ignored 4 event(s) of type(s) that no "
                        "query reads: News (3), Tick (1)"]
    assert f"\n{len(events)} events, " in out
    assert main(["run", str(d / "q.txt"), str(d / "mixed.csv"), "--backend", "reference",
                 "--out", str(d / "run.csv")]) == 0
    capsys.readouterr()
    lines = [line.rsplit(",", 1)[0] for line in (d / "sim.csv").read_text().splitlines()]
    assert lines == (d / "run.csv").read_text().splitlines()
    # a type a query reads but the network does not declare at that node: still an error
    mixed.loc[mixed["type"] == "A", "node"] = "b"
    mixed.to_csv(d / "bad.csv", index=False)
    rc, out, err = run_cli(capsys, "muse", "simulate", d / "q.txt", d / "net.json", d / "bad.csv")
    assert rc == 1 and "node 'b' emits type 'A', which a query reads" in err


def test_simulate_warns_of_query_types_absent_from_the_events(user_files, capsys):
    import pandas as pd


    d = user_files
    events = pd.read_csv(d / "events.csv")
    events[events["type"] != "C"].to_csv(d / "no_c.csv", index=False)
    rc, out, err = run_cli(capsys, "muse", "simulate", d / "q.txt", d / "net.json", d / "no_c.csv",
                           "--backend", "reference")
    assert rc == 0, err
    assert "cep-gpu muse simulate: warning: rule 'Q2' reads type 'C', which no event in" in err


# -- a network file or a selectivity that says one thing twice, or a key with a typo ----------------


@pytest.mark.parametrize("text, message", [
    # was: JSON keeps the last "a", so node a's A was lost: "query Q1: no node produces type(s) A"
    ('{"nodes": {"a": ["A", "B"], "a": ["B", "C"], "c": ["A", "C"]}, "rates": {"A": 1, "B": 2, "C": 1}}',
     "key 'a' appears twice in one object (JSON would keep only the last)"),
    ('{"nodes": {"a": ["A", "B"], "b": ["B", "C"]}, "rates": {"A": 1, "B": 2, "C": 1, "B": 3}}',
     "key 'B' appears twice in one object (JSON would keep only the last)"),
    # was: an unknown key (a typo of "links") was silently ignored: every pair of nodes linked
    ('{"nodes": {"a": ["A", "B"], "b": ["B", "C"]}, "rates": {"A": 1, "B": 2, "C": 1}, "link": [["a", "b"]]}',
     "unknown key(s) 'link' in the network spec (its keys: 'nodes', 'rates' and optionally 'links')"),
])
def test_network_file_faults_are_named(user_files, capsys, text, message):
    d = user_files
    (d / "bad.json").write_text(text)
    rc, out, err = run_cli(capsys, "muse", "plan", d / "q.txt", d / "bad.json")
    assert rc == 1 and not out
    assert err.strip().splitlines() == [f"cep-gpu: error: {d / 'bad.json'}: {message}"]


def test_network_from_dict_refuses_unknown_keys():
    from cep_gpu import muse

    with pytest.raises(muse.MuseError, match="unknown key"):
        muse.Network.from_dict({**NET, "link": [["a", "b"]]})


@pytest.mark.parametrize("values", [["A,B=0.1", "A,B=0.2"], ["Q1:A,B=0.1", "Q1:B,A=0.2"]])
def test_a_selectivity_given_twice_is_a_usage_error(user_files, capsys, values):
    d = user_files
    # was: the last value silently won
    rc, out, err = run_cli(capsys, "muse", "plan", d / "q.txt", d / "net.json", "--selectivity", *values)
    assert rc == 2 and not out
    assert err.strip().splitlines() == [
        f"cep-gpu muse plan: error: argument --selectivity: {values[1]!r}: σ of these types given twice "
        f"(first {values[0]!r})"]


def test_network_and_simulate_read_the_files_own_column_names(user_files, capsys):
    import pandas as pd

    d = user_files
    names = {"type": "sensor", "ts": "seconds"}
    pd.read_csv(d / "events.csv").rename(columns=names).to_csv(d / "mine.csv", index=False)
    opts = ["--type-column", "sensor", "--ts-column", "seconds"]
    assert main(["muse", "network", str(d / "events.csv"), "--out", str(d / "std.json")]) == 0
    assert main(["muse", "network", str(d / "mine.csv"), *opts, "--out", str(d / "mine.json")]) == 0
    assert (d / "mine.json").read_text() == (d / "std.json").read_text()
    sim = ["muse", "simulate", str(d / "q.txt"), str(d / "net.json")]
    assert main([*sim, str(d / "events.csv"), "--backend", "reference", "--out", str(d / "std.csv")]) == 0
    assert main([*sim, str(d / "mine.csv"), *opts, "--backend", "reference", "--out", str(d / "mine.csv.out.csv")]) == 0
    assert (d / "mine.csv.out.csv").read_text() == (d / "std.csv").read_text()
    capsys.readouterr()
    # the node column read as the types, and a column option without any event file: usage errors
    rc, _, err = run_cli(capsys, *sim, d / "mine.csv", "--type-column", "node")
    assert rc == 2 and ("argument --node-column: the column 'node' is given to --type-column too, which "
                        "reads it as 'type': the nodes need a column of their own") in err
    rc, _, err = run_cli(capsys, "muse", "plan", d / "q.txt", d / "net.json", "--ts-column", "seconds")
    assert rc == 2 and "argument --ts-column: names a column of the events, and no event file is given" in err
