"""Smoke runs of the benchmark code at tiny sizes, so that it cannot rot: every workload, the CLI
(JSON and plots), calibration, and the benchmarks notebook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cep_gpu
from cep_gpu import planner as pl
from cep_gpu.benchmarks import calibrate as cal
from cep_gpu.benchmarks import plots, report, runner
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
    run = runner.run_bench(workload, ["reference", "cpu", "aip", "auto", "gpu"], sizes, n_events=n_events,
                           repeat=1, warmup=0, n_rules=100)
    assert run["machine"]["cores"] >= 1 and run["machine"]["cpu_model"]
    assert run["machine"]["gpu_backend_usable"] == pl.gpu_usable()
    rows = run["results"]
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["backend"] for r in ok} >= {"reference", "cpu", "aip", "auto"}
    assert all(r["status"] != "error" for r in rows), [r for r in rows if r["status"] == "error"]
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
    row = run["results"][0]
    assert row["status"] == "skipped" and str(runner.REFERENCE_MAX_EVENTS) in row["reason"]


def test_unknown_backend_is_refused_before_anything_runs(capsys):
    with pytest.raises(ValueError, match="unknown backend.*'nope'"):
        runner.run_bench("seq3", ["cpu", "nope"], [20], n_events=100, repeat=1, warmup=0)
    assert cli_main(["bench", "seq3", "--backend", "cpu,nope", "--sizes", "20", "--events", "100"]) == 2
    assert "nope" in capsys.readouterr().err


def test_bench_help_names_every_backend_and_the_reference_cap(capsys):
    with pytest.raises(SystemExit):
        cli_main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in runner.BACKENDS:
        assert name in text
    assert f"at most {runner.REFERENCE_MAX_EVENTS} events" in text
    assert "Figure 7" in text and "Figure 6" in text


def test_progress_inside_long_runs(monkeypatch):
    monkeypatch.setattr(runner, "DETAIL_EVERY_S", 0.0)
    steps, details = [], []
    runner.run_bench("rules1000", ["cpu"], [2], ["last"], n_events=300, repeat=2, warmup=1, n_rules=100,
                     on_step=steps.append, on_detail=details.append)
    assert steps == ["rules1000 last length=2 cpu"]
    assert details[0] == "warm-up 1/1" and "run 2/2" in details
    assert "run 2/2, rule 100/100" in details  # rule by rule within a repetition

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


def test_merged_runs_plot_like_one(tmp_path):
    # docs/performance.md measures rules1000 `each` and `last` at different event counts
    each = runner.run_bench("rules1000", ["cpu", "aip"], [2], ["each"], n_events=200, repeat=1, warmup=0,
                            n_rules=100)
    last = runner.run_bench("rules1000", ["cpu", "aip"], [2], ["last"], n_events=400, repeat=1, warmup=0,
                            n_rules=100)
    paths = []
    for name, run in (("each", each), ("last", last)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(run))
    out, fig = tmp_path / "r.json", tmp_path / "r.png"
    assert report.main(["--merge", str(out), *map(str, paths), "--plot", str(fig)]) == 0
    merged = json.loads(out.read_text())
    assert merged["settings"]["policies"] == ["each", "last"]
    assert merged["settings"]["n_events"] == {"each": 200, "last": 400}
    assert [(r["policy"], r["backend"], r["n_events"]) for r in merged["results"]] == [
        ("each", "cpu", 200), ("each", "aip", 200), ("last", "cpu", 400), ("last", "aip", 400)]
    assert fig.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="different workloads"):
        report.merge([each, runner.run_bench("museum", ["reference"], [200], repeat=1, warmup=0)])


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
    # both figures are drawn (Figure 7 from seq3, Figure 6 from rules1000 with each and last)
    images = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "display_data"
              and "image/png" in o.get("data", {})]
    assert len(images) >= 2
    assert (tmp_path / "seq3.png").exists() and (tmp_path / "rules1000.png").exists()


def test_kernel_benchmark_suite_runs_at_tiny_size():
    """bench/test_*.py (pytest-benchmark) is not part of the default run: run it once here, tiny and
    with timing disabled, so that it cannot rot."""
    pytest.importorskip("pytest_benchmark")
    env = dict(os.environ, CEP_GPU_BENCH_TINY="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "bench", "-q", "-n", "0", "-p", "no:cacheprovider",
         "--benchmark-disable"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # 5: nothing collected
