"""Simulation (k-unit replay), benchmark harness and CLI of cep_gpu.parallel."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

import cep_gpu
from cep_gpu.cli import main
from cep_gpu.errors import ArgumentError
from cep_gpu.parallel.bench import run_bench, sensor_events, sensor_rule, stock_events, stock_rule
from cep_gpu.parallel.simulate import simulate, stats_from_trace, trace


@pytest.fixture(scope="module")
def small_trace():
    ev = stock_events(4000, seed=1)
    return trace(stock_rule(4, 0.5), ev, chunk_size=1000, batch_size=16), ev


def test_trace_counts_are_the_runs(small_trace):
    tr, ev = small_trace
    out = cep_gpu.detect(ev, stock_rule(4, 0.5), backend="reference", output="count")["Rise"]
    assert tr.outputs[:, -1].sum() == out  # the last stage emits the composite events
    # both layouts traced: fused (one agent) and split (one agent per stage), the same work
    assert tr.fused and tr.split is not None and not tr.split.fused
    assert tr.split.outputs[:, -1].sum() == out
    assert (tr.split.items.sum(axis=0) == tr.items.sum(axis=0)).all()
    assert tr.n_events == len(ev) and sum(tr.chunk_events) == len(ev)
    assert tr.tasks.shape == (4, 3) and (tr.scanned >= 0).all()
    st = stats_from_trace(tr, 1)
    # the first stage's match input is the first position's events: e_1 = m_2
    assert st.rates[0] == pytest.approx(tr.match_items[:, 0].sum() / tr.span_s)


def test_simulation_shapes(small_trace):
    tr, _ = small_trace
    for m in ("hybrid", "hybrid-equal", "state-parallel", "rip", "llsf"):
        r1, r8 = simulate(tr, m, 1), simulate(tr, m, 8)
        # ingestion is serial in every method (the hybrid builds its output while its units work)
        ingest = tr.serial_s - tr.output_s
        assert r1.seconds > ingest and r8.seconds > ingest
        assert r8.throughput == pytest.approx(r8.events / r8.seconds)
    # state-parallel has one unit per agent, whatever k
    assert simulate(tr, "state-parallel", 8).seconds == simulate(tr, "state-parallel", 24).seconds
    # data-parallel units never get slower with more units (their work only splits)
    assert simulate(tr, "rip", 8).seconds <= simulate(tr, "rip", 1).seconds
    with pytest.raises(ArgumentError, match="k must be"):
        simulate(tr, "rip", 0)
    with pytest.raises(ArgumentError, match="unknown method"):
        simulate(tr, "magic", 2)
    with pytest.raises(ArgumentError, match="two positions"):
        trace("define S pattern SEQ(S0 a) within 1 s", stock_events(10))


def test_cost_model_beats_equal_split_on_a_skewed_chain(small_trace):
    """A hand-made trace: the last stage does 30x the pair work of the others. With 8 static
    units, the equal split gives it 8/3 units, the cost model most of them."""
    tr, _ = small_trace
    n_chunks = len(tr.chunk_events)
    skew = dataclasses.replace(
        tr, serial_s=0.0, t_event=0.0, t_barrier=0.0, split=None,
        tasks=np.full((n_chunks, 3), 400.0), items=np.full((n_chunks, 3), 6400.0),
        match_items=np.full((n_chunks, 3), 3200.0), outputs=np.full((n_chunks, 3), 3200.0),
        scanned=np.array([[1e5, 1e5, 3e6]] * n_chunks), c_scan=np.full(3, 1e-8),
        t_task=np.full(3, 1e-6), t_access=1e-7)
    cost = simulate(skew, "hybrid", 8, dynamic=False, fusion=False)
    equal = simulate(skew, "hybrid-equal", 8, dynamic=False, fusion=False)
    assert cost.units_per_agent[2] > equal.units_per_agent[2]
    assert cost.throughput >= 1.5 * equal.throughput


def test_parallel_splitter_in_the_replay(small_trace):
    """The hybrid's chunks are routed by k splitters: with routing costs made large, k splitters
    take the routing time down by about k (the hand-over stays serial); the CPU charged is the
    same routing plus the slices' fixed costs; state-parallel keeps one splitter thread."""
    tr, _ = small_trace
    assert tr.t_slice > 0 and tr.t_event > 0
    big = dataclasses.replace(tr, t_event=1e-5, t_slice=1e-6, chunk_events=[4096] * 4, split=None)
    one = simulate(big, "hybrid", 8, splitters=1)
    par = simulate(big, "hybrid", 8)
    route = 1e-5 * 4096 * 4
    assert one.seconds - par.seconds == pytest.approx(route - (route + 4 * 2 * 1e-6) / 2, rel=1e-6)  # 2 slices
    assert par.cpu_s - one.cpu_s == pytest.approx(4 * 2 * 1e-6, rel=1e-6)
    assert simulate(big, "hybrid", 1).seconds == simulate(big, "hybrid", 1, splitters=1).seconds
    sp = simulate(big, "state-parallel", 8)
    assert sp.seconds == simulate(dataclasses.replace(big, t_slice=1.0), "state-parallel", 8).seconds


def test_generators_are_seeded():
    a, b = stock_events(500, seed=3), stock_events(500, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert not stock_events(500, seed=4).equals(a)
    s = sensor_events(300)
    assert set(s.columns) == {"type", "ts", "distance", "room"} and s.ts.is_monotonic_increasing
    assert "a2.distance > a1.distance" in sensor_rule(3, 1.0)


def test_bench_tiny_writes_summary(tmp_path):
    res = run_bench(events=1500, windows=(), lengths=(3,), workloads=("stock",), repeat=1, figure10_windows=(1.0,),
                    figure10_events=2000, paper_windows=(1.0,), paper_lengths=(3,), paper_events=3000)
    (p,) = res["points"]
    (q,) = res["figure10_paper"]
    assert q["matches"] > 0 and len(q["growth"]) == 2 and all(g > 0 for g in q["growth"])
    assert set(res["summary"]["figure10_paper_regime"]) == {"k=8", "k=12", "k=16", "k=24"}
    assert p["matches"] > 0
    assert set(p["real"]) >= {"hybrid", "rip", "llsf", "state-parallel", "sequential", "detect"}
    s = res["summary"]
    for key in ("real_hybrid_ahead_at_k2", "cost_model_ge_1_5x_equal_at_k_ge_8", "sim_validation_max_error",
                "hybrid2_vs_batch_detect"):
        assert key in s
    from cep_gpu.parallel.bench import markdown, write

    md = markdown(res)
    assert md.count("| stock | 3 | 0.5 |") == 2  # one row in each table

    write(res, str(tmp_path / "p.json"), None)
    assert json.loads((tmp_path / "p.json").read_text())["summary"]["real_hybrid_ahead_at_k2"]
    assert "| stock | 3 | 1 |" in md  # the paper-regime table
    # a benchmark split in runs, merged by the CLI: every point once per run, summary recomputed
    write(res, str(tmp_path / "q.json"), None)
    assert main(["parallel", "bench", "--merge", str(tmp_path / "p.json"), str(tmp_path / "q.json"),
                 "--out", str(tmp_path / "m.json")]) == 0
    merged = json.loads((tmp_path / "m.json").read_text())
    assert len(merged["points"]) == 2 and len(merged["figure10_paper"]) == 2
    assert merged["summary"]["real_hybrid_ahead_at_k2"].endswith("/6")
    (tmp_path / "bad.json").write_text('{"no": 1}')
    for bad in (str(tmp_path / "missing.json"), str(tmp_path / "bad.json")):
        assert main(["parallel", "bench", "--merge", bad, "--out", str(tmp_path / "x.json")]) == 1


@pytest.mark.parametrize("units", [1, 2, 3])
def test_paper_regime_rules_equal_detect(units):
    """The Figure 10 paper-regime rules (a band on neighbours' prices; distances to different
    places compared) through the hybrid engine: exactly detect's composite events."""
    from cep_gpu.parallel import HybridEngine
    from cep_gpu.parallel.bench import PAPER_WORKLOADS

    for name, (gen, rule_of) in PAPER_WORKLOADS.items():
        ev = gen(1200, seed=units)
        rule = rule_of(4, 1.0)
        with HybridEngine(rule, units=units) as eng:
            got = eng.publish(ev)
        expected = cep_gpu.detect(ev, rule, backend="cpu")
        assert len(expected) > 0, name
        assert [tuple(x) for x in got["ids"]] == [tuple(x) for x in expected["ids"]], name


def test_cli_run_equals_detect(tmp_path, capsys):
    ev = stock_events(1500, seed=2)
    rule = stock_rule(3, 0.5)
    (tmp_path / "r.txt").write_text(rule)
    ev.to_csv(tmp_path / "e.csv", index=False)
    assert main(["parallel", "run", str(tmp_path / "r.txt"), str(tmp_path / "e.csv"), "--units", "2",
                 "--out", str(tmp_path / "o.parquet"), "--explain", "--stats", str(tmp_path / "s.json")]) == 0
    import pyarrow.parquet as pq

    got = pq.read_table(tmp_path / "o.parquet").to_pydict()
    expected = cep_gpu.detect(ev, rule, backend="cpu")
    assert [tuple(x) for x in got["ids"]] == [tuple(x) for x in expected["ids"]] and len(got["ids"]) > 0
    assert "Eq. 6" in capsys.readouterr().err
    assert json.loads((tmp_path / "s.json").read_text())["events"] == len(ev)
    (tmp_path / "bad.txt").write_text("define Q pattern AND(S0 a, S1 b) within 1 s")
    assert main(["parallel", "run", str(tmp_path / "bad.txt"), str(tmp_path / "e.csv")]) == 1
    assert "AND" in capsys.readouterr().err


def test_cli_bad_arguments(capsys):
    for argv in (["parallel", "bench", "--events", "0"], ["parallel", "run", "r", "e", "--units", "0"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert "must be >=" in capsys.readouterr().err
    assert main(["parallel", "run", "/no/such/rules.txt", "/no/such/events.csv"]) == 1
    assert "no such" in capsys.readouterr().err


def test_replay_runs_the_gil_held_parts_one_at_a_time(small_trace):
    """A task's Python (everything of a stage's work but its scanned pairs) holds the GIL: with
    task costs made large, the hybrid's parallel phase at k units is at least the sum of every
    chunk's GIL-held work (not that sum / k), and RIP's time at least its units' Python."""
    from cep_gpu.parallel.engine import auto_batch
    from cep_gpu.parallel.simulate import stage_calls

    tr, _ = small_trace
    # the upper bound (no measured serial share): all but the pairs holds the GIL
    slow = dataclasses.replace(tr, t_task=np.full(3, 1e-3), split=None, units_serial=None, run_serial=None)
    for k in (4, 16):
        res = simulate(slow, "hybrid", k)
        batch = auto_batch(slow.chunk, slow.length, k)
        starts = {0} if len(res.units_per_agent) == 1 else set(range(slow.length - 1))
        held = sum(float(np.dot(stage_calls(slow, c, starts, batch), slow.t_task)) for c in range(len(slow.chunk_events)))
        assert res.parallel_s >= held * (1 - 1e-9)
        assert res.parallel_s > 2 * held / k  # far from a k-fold split of it
    rip1, rip16 = simulate(slow, "rip", 1), simulate(slow, "rip", 16)
    assert rip16.seconds > 0.3 * rip1.seconds  # the Python of 16 units does not split 16 ways
    # a measured serial share replaces the bound, never above it: all of it serial is the bound;
    # none of it, 16 units are faster
    for m in ("hybrid", "rip"):
        serial = dataclasses.replace(slow, units_serial=1.0, spin_units=1.0, run_serial=1.0)
        assert simulate(serial, m, 16).parallel_s == pytest.approx(simulate(slow, m, 16).parallel_s)
        free = dataclasses.replace(slow, units_serial=0.0, spin_units=0.0, run_serial=0.0)
        assert simulate(free, m, 16).parallel_s < simulate(slow, m, 16).parallel_s
    free = dataclasses.replace(slow, units_serial=0.0, spin_units=0.0)
    assert simulate(free, "hybrid", 16).parallel_s < 0.5 * simulate(free, "hybrid", 1).parallel_s
    # the GIL's hand-overs: charged in proportion to how busy k units keep the GIL
    handed = dataclasses.replace(slow, units_serial=0.05, spin_units=0.5)
    assert simulate(handed, "hybrid", 16).parallel_s > simulate(
        dataclasses.replace(handed, spin_units=0.05), "hybrid", 16).parallel_s


def test_serial_share_by_hand(small_trace):
    """held + (spinner's loss - held) x min(1, k x held); unknown hand-overs: the held share up to
    2 units, the upper bound (None) beyond."""
    from cep_gpu.parallel.simulate import serial_share

    tr, _ = small_trace
    t = dataclasses.replace(tr, units_serial=0.02, spin_units=0.10)
    assert serial_share(t, 8) == pytest.approx(0.02 + 0.08 * 0.16)
    assert serial_share(t, 100) == pytest.approx(0.10)
    assert serial_share(dataclasses.replace(t, spin_units=0.01), 8) == pytest.approx(0.02)
    assert serial_share(dataclasses.replace(t, spin_units=None), 2) == pytest.approx(0.02)
    assert serial_share(dataclasses.replace(t, spin_units=None), 8) is None
    assert serial_share(dataclasses.replace(t, units_serial=None), 1) is None
    # the trace accounts the held share directly: a share of the units' CPU time
    assert 0.0 < tr.units_serial < 1.0 and 0.0 < tr.split.units_serial < 1.0


def test_auto_batch_grows_with_many_units():
    from cep_gpu.parallel.engine import auto_batch

    # up to 4 units: four tasks per unit and position a chunk, within [256, 1024] (unchanged)
    assert [auto_batch(16_384, 4, u) for u in (1, 2, 4)] == [1024, 512, 256]
    assert [auto_batch(32_768, 4, u) for u in (1, 2, 4)] == [1024, 1024, 512]
    # from 5 units: at least 64 per unit (fewer tasks: their Python runs one at a time)
    assert auto_batch(16_384, 4, 8) == 512 and auto_batch(16_384, 4, 24) == 1536


def test_data_parallel_pieces_cost_what_two_units_measured(small_trace):
    """RIP/LLSF units from k = 2 pay a piece's fixed cost as measured with two units running
    pieces at once (the GIL contended: about twice its cost alone); one unit pays it alone."""
    import dataclasses

    tr = small_trace[0].split or small_trace[0]  # (the trace the data-parallel replay reads)
    assert tr.t_piece >= 0 and tr.t_piece2 is not None and tr.t_piece2 >= 0  # (measured: 0 on a loaded machine)
    cheap = dataclasses.replace(tr, t_piece2=tr.t_piece, split=None)
    dear = dataclasses.replace(tr, t_piece2=tr.t_piece + 1e-3, split=None)
    for method in ("rip", "llsf"):
        assert simulate(dear, method, 1).cpu_s == simulate(cheap, method, 1).cpu_s
        one, more = simulate(cheap, method, 2), simulate(dear, method, 2)
        pieces = (more.cpu_s - one.cpu_s) / 1e-3  # every piece of every unit, at the dearer cost
        assert round(pieces) >= 2 and abs(pieces - round(pieces)) < 1e-6  # (a difference of float sums)
