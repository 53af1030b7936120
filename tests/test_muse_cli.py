"""``cep-gpu muse`` and ``cep-gpu bench muse``: the command line and the benchmark's JSON/PNG."""

from __future__ import annotations

import json

import pytest

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


def test_simulate_duration_must_be_positive(files, capsys):
    q, net, tmp = files
    with pytest.raises(SystemExit) as exc:  # was: exit 0, "0 events, 0 matches"
        main(["muse", "simulate", str(q), str(net), "--duration", "0"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "cep-gpu muse simulate: error: argument --duration: must be a finite number of seconds > 0, got '0'")
