"""Smoke runs of the benchmark code at tiny sizes, so that it cannot rot: every workload, the CLI
(JSON and plots), calibration, and the benchmarks notebook."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import cep_gpu
from cep_gpu import planner as pl
from cep_gpu.benchmarks import calibrate as cal
from cep_gpu.benchmarks import plots, runner
from cep_gpu.benchmarks import workloads as wl
from cep_gpu.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent


def test_seq3_generator_follows_the_design():
    ev = wl.seq3_events(3000, seed=1)
    assert list(ev["ts"]) == list(range(3000))
    assert set(ev["type"]) == {"A", "B", "C"}
    assert ev["k"].between(0, 99).all() and ev["v"].between(0, 1).all()
    # same seed, same events
    assert ev.equals(wl.seq3_events(3000, seed=1))


def test_rules1000_types_each_in_one_state_of_ten_rules():
    types = wl.rules1000_types(3)
    assert types.shape == (1000, 3)
    for j in range(3):
        counts = np.bincount(types[:, j] - 100 * j, minlength=100)
        assert (counts == 10).all()
    rules = cep_gpu.parse_rules(wl.rules1000_rules(3, "last", n_rules=100))
    assert len(rules) == 100 and all(r.n_predicates == 3 for r in rules)
    assert all(p.policy == "last" and p.window == 15 * 10**9 for p in rules[0].predicates[1:])


@pytest.mark.parametrize(
    "workload, sizes, n_events",
    [("seq3", [30, 100], 600), ("rules1000", [2, 3], 800), ("museum", [400], None)],
)
def test_each_workload_runs_and_backends_agree(workload, sizes, n_events):
    run = runner.run_bench(workload, ["reference", "cpu", "gpu"], sizes, n_events=n_events, repeat=1, warmup=0,
                           n_rules=100)
    assert run["machine"]["cores"] >= 1 and run["machine"]["cpu_model"]
    rows = run["results"]
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["backend"] for r in ok} >= {"reference", "cpu"}
    for r in ok:
        assert r["agree"], r
        assert r["events_per_s"]["min"] <= r["events_per_s"]["median"] <= r["events_per_s"]["max"]
    if workload == "seq3":
        assert any(r["composites"] > 0 for r in ok)
    if not pl.gpu_usable():  # never a GPU figure without a GPU
        assert all(r["status"] == "not measured" for r in rows if r["backend"] == "gpu")


def test_reference_is_skipped_on_large_inputs():
    run = runner.run_bench("seq3", ["reference"], [100], ["last"], n_events=runner.REFERENCE_MAX_EVENTS + 1,
                           repeat=1, warmup=0)
    assert run["results"][0]["status"] == "skipped"


def test_bench_cli_writes_json_and_plot(tmp_path):
    out, fig = tmp_path / "seq3.json", tmp_path / "seq3.png"
    rc = cli_main(["bench", "seq3", "--backend", "reference,cpu", "--backend", "gpu", "--sizes", "20,60",
                   "--events", "500", "--repeat", "2", "--warmup", "0", "--out", str(out), "--plot", str(fig)])
    assert rc == 0
    run = json.loads(out.read_text())
    assert run["workload"] == "seq3" and run["settings"]["repeat"] == 2
    assert {"cpu_model", "cores", "gpu", "versions"} <= set(run["machine"])
    assert len(run["results"]) == 3 * 2 * 2
    assert fig.stat().st_size > 1000 and fig.read_bytes()[:4] == b"\x89PNG"


def test_rules1000_and_museum_plots(tmp_path):
    run = runner.run_bench("rules1000", ["reference"], [2, 3], ["each"], n_events=400, repeat=1, warmup=0,
                           n_rules=100)
    assert plots.plot(run, tmp_path / "r.png").exists()
    run = runner.run_bench("museum", ["reference"], [300], repeat=1, warmup=0)
    assert plots.plot(run, tmp_path / "m.png").exists()


def test_crossover_is_found_where_curves_meet():
    xs = [100, 1000, 4000, 10000]
    cpu = [1.0, 10.0, 40.0, 100.0]
    gpu = [20.0, 20.0, 20.0, 30.0]
    x = plots.crossover(xs, cpu, gpu)
    assert 1000 < x < 4000
    assert plots.crossover(xs, cpu, [200.0] * 4) is None


def test_calibration_fits_known_coefficients():
    rng = np.random.default_rng(0)
    truth = {"launches": 3e-5, "terminators": 2e-7, "pairs": 1e-9, "matches": 0.0, "outputs": 4e-8}
    samples = []
    for _ in range(40):
        f = {"launches": 1.0, "terminators": rng.integers(1, 1000), "pairs": rng.integers(0, 10**6),
             "matches": rng.integers(0, 10**4), "outputs": rng.integers(0, 10**4)}
        samples.append((f, sum(truth[k] * f[k] for k in truth)))
    got = cal.fit(samples, list(truth))
    for k, v in truth.items():
        assert got[k] == pytest.approx(v, rel=1e-3, abs=1e-12)
    assert all(v >= 0 for v in cal.nnls(np.array([[1.0, 1.0], [1.0, 2.0]]), np.array([1.0, 0.5])))


def test_calibrate_cli_writes_a_usable_profile(tmp_path, monkeypatch):
    monkeypatch.setattr(cal, "_inputs", _tiny_inputs)
    out = tmp_path / "profile.json"
    assert cli_main(["calibrate", "--out", str(out), "--quick"]) == 0
    prof = pl.read_profile(out)
    assert prof.meta["cpu_source"].startswith("measured")
    if not pl.gpu_usable():
        assert prof.meta["gpu_source"].startswith("derived")


def _tiny_inputs(quick, n_events, seed):
    for policy in ("each", "last"):
        for w in (20, 60):
            yield wl.seq3_rule(w, policy), wl.seq3_events(400, seed)


def test_notebook_runs_on_tiny_sizes(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("CEP_GPU_BENCH_TINY", "1")
    monkeypatch.chdir(tmp_path)
    nb = nbformat.read(ROOT / "examples" / "benchmarks.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert any(o.get("output_type") == "display_data" for c in nb.cells for o in c.get("outputs", []))
