"""``cep-gpu bench parallel``: HYPERSONIC against its baselines, real and simulated.

Workloads (seeded): **stock** (the paper's NASDAQ-like stream: one event type per ticker, prices
as random walks, ``SEQ`` of tickers with rising prices) and **sensor** (the paper's smart-home
stream: one type per sensor, distances, ``SEQ`` of sensors with growing distance and a shared
room). Sweeps: window size (pattern length 4) and pattern length 3-6.

Per point: real throughput (events/s, ingestion to output, on this machine) at 1 and 2 units of
hybrid (cost model), hybrid (equal split), state-parallel, RIP, LLSF, cep-gpu's sequential
streaming ``Engine`` and batch ``detect``; then the deterministic simulation (simulate.py) at
k = 1..24 units, validated against the real 1- and 2-unit runs. Writes JSON (with ``summary``)
and a PNG.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import time

import numpy as np
import pandas as pd

from ..benchmarks.save import json_default
from .baselines import run
from .engine import HybridEngine
from .simulate import cores_available, simulate, trace

REAL_METHODS = ("hybrid", "hybrid-equal", "state-parallel", "rip", "llsf")
SIM_METHODS = ("hybrid", "hybrid-equal", "state-parallel", "rip", "llsf")
SIM_UNITS = (1, 2, 4, 8, 12, 16, 24)


def stock_events(n: int, tickers: int = 8, rate: float = 100.0, seed: int = 0) -> pd.DataFrame:
    """``n`` price updates: ``type`` = ticker ``S0..``, ``ts`` seconds (Poisson at ``rate``/s),
    ``price`` = a market random walk shared by all tickers plus each update's own noise (so
    that "b rose above a" has a steady selectivity), ``volume``."""
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.exponential(1.0 / rate, n))
    which = rng.integers(0, tickers, n)
    market = 100.0 + np.cumsum(rng.normal(0.0, 0.05, n))
    price = market + rng.normal(0.0, 0.5, n)
    return pd.DataFrame({"type": np.array([f"S{k}" for k in range(tickers)])[which], "ts": ts,
                         "price": price, "volume": rng.integers(1, 1000, n)})


def stock_rule(length: int, window: float, threshold: float = 0.0) -> str:
    """``SEQ(S0 a0, ..., S(L-1))``, each price above the one before; with ``threshold`` above it
    by at least that much (the paper's ``Corr(...) > T``: a threshold sets the selectivity)."""
    al = [f"a{i}" for i in range(length)]
    seq = ", ".join(f"S{i} {a}" for i, a in enumerate(al))
    plus = f" + {threshold:g}" if threshold else ""
    where = " and ".join(f"{al[i]}.price > {al[i - 1]}.price{plus}" for i in range(1, length))
    return f"define Rise pattern SEQ({seq}) where {where} within {window:g} s"


def sensor_events(n: int, sensors: int = 8, rate: float = 100.0, seed: int = 0, locations: int = 1) -> pd.DataFrame:
    """``n`` readings: ``type`` = sensor ``D0..``, ``distance`` in [0, 10), ``room`` of 3; with
    ``locations > 1`` also ``distance1..`` (the distances to other places, as the paper's
    smart-home readings have: its conditions compare ``A.distanceX < B.distanceY``)."""
    rng = np.random.default_rng(seed + 1)
    ts = np.cumsum(rng.exponential(1.0 / rate, n))
    df = pd.DataFrame({"type": np.array([f"D{k}" for k in range(sensors)])[rng.integers(0, sensors, n)],
                       "ts": ts, "distance": rng.random(n) * 10.0,
                       "room": np.array(["hall", "kitchen", "bed"])[rng.integers(0, 3, n)]})
    for j in range(1, locations):
        df[f"distance{j}"] = rng.random(n) * 10.0
    return df


def sensor_rule(length: int, window: float, threshold: float = 0.0) -> str:
    """``SEQ(D0 a0, ..., D(L-1))`` with growing distance (by more than ``threshold``) and the
    same room at both ends."""
    al = [f"a{i}" for i in range(length)]
    seq = ", ".join(f"D{i} {a}" for i, a in enumerate(al))
    plus = f" + {threshold:g}" if threshold else ""
    conds = [f"{al[i]}.distance > {al[i - 1]}.distance{plus}" for i in range(1, length)]
    conds.append(f"{al[-1]}.room = {al[0]}.room")
    return f"define Walk pattern SEQ({seq}) where {' and '.join(conds)} within {window:g} s"


WORKLOADS = {"stock": (stock_events, stock_rule), "sensor": (sensor_events, sensor_rule)}


def close_rule(length: int, window: float, band: float = 0.3) -> str:
    """The paper's stock query Q1^A (Table 2) on this stream: ``SEQ(S0 a0, ..., S(L-1))`` whose
    neighbours' prices are within ``band`` of each other, the analogue of ``Corr(S_(i-1), S_i) >
    T`` (tickers that move together). Unlike "each price above the last" (whose conditions chain,
    ``a0 < a1 < a2``: the selectivity falls as ``1 / L!``), the pairs' conditions are nearly
    independent, as Theorem 2 (Appendix A) assumes."""
    al = [f"a{i}" for i in range(length)]
    seq = ", ".join(f"S{i} {a}" for i, a in enumerate(al))
    where = " and ".join(f"{al[i]}.price < {al[i - 1]}.price + {band:g} and {al[i]}.price > {al[i - 1]}.price - {band:g}"
                         for i in range(1, length))
    return f"define Close pattern SEQ({seq}) where {where} within {window:g} s"


def zones_rule(length: int, window: float, threshold: float = 2.0) -> str:
    """The paper's sensor query Q1^B (Table 2, Section 5.1: ``A.distanceX < B.distanceY``, distances
    to different places): each reading farther from one place (by more than ``threshold``) than
    the reading before was from another; every event's two distances differ, so the conditions
    are independent. Needs ``sensor_events(..., locations=4)``."""
    def d(j: int) -> str:
        return "distance" if j == 0 else f"distance{j}"

    al = [f"a{i}" for i in range(length)]
    seq = ", ".join(f"D{i} {a}" for i, a in enumerate(al))
    where = " and ".join(f"{al[i]}.{d(2 * (i % 2))} > {al[i - 1]}.{d(2 * ((i - 1) % 2) + 1)} + {threshold:g}"
                         for i in range(1, length))
    return f"define Zones pattern SEQ({seq}) where {where} within {window:g} s"


def _sensor4(n: int, seed: int = 0) -> pd.DataFrame:
    return sensor_events(n, seed=seed, locations=4)


#: the paper's Figure 10 regime (docs/performance.md): independent pairwise conditions of
#: selectivity ~0.1-0.2 a compared pair, windows where Theorem 2's growth ``2 e s W`` runs from
#: about 1 to about 8, pattern lengths 3-5, streams of several chunks
PAPER_WORKLOADS = {"stock": (stock_events, close_rule), "sensor": (_sensor4, zones_rule)}


def _cpu_run(fn):
    """(result, wall seconds, process CPU seconds)."""
    c0 = time.process_time()
    w0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def bench_point(workload: str, length: int, window: float, events: int, seed: int, repeat: int,
                units_list=(1, 2), progress=None) -> dict:
    """All measurements of one (workload, length, window) point."""
    gen, rule_of = WORKLOADS[workload]
    ev = gen(events, seed=seed)
    rule = rule_of(length, window)
    import cep_gpu

    expected = cep_gpu.detect(ev, rule, backend="cpu")  # also warms the CDP kernels
    (stats,) = HybridEngine(rule).calibrate(ev.iloc[: min(len(ev), 10_000)])
    point = {"workload": workload, "length": length, "window_s": window, "events": len(ev),
             "matches": len(expected), "rule": rule, "real": {}, "sim": {}, "sim_parallel_phase": {},
             "validation": {}, "cores_available": cores_available()}
    best: dict = {}

    runs = [("detect", 1, lambda: cep_gpu.detect(ev, rule, backend="cpu")),
            ("sequential", 1, lambda: run("sequential", rule, ev, 1).output)]
    for units in units_list:
        for m in REAL_METHODS:
            runs.append((m, units, lambda m=m, units=units: run(m, rule, ev, units, stats=[stats]).output))
    # the hybrid engine builds composite events while its units go on; the other methods build
    # them at the end: the same engine building them at the end too, for a like-for-like figure
    runs.append(("hybrid-output-at-end", 2,
                 lambda: run("hybrid", rule, ev, 2, stats=[stats], output_part=2**62).output))
    # repetitions interleaved (every method once, then again): a burst of load from other jobs
    # then hits every method alike instead of all the repetitions of one
    walls: dict = {}
    cpus: dict = {}
    for _ in range(repeat):
        for name, units, fn in runs:
            out, wall, cpu = _cpu_run(fn)
            walls.setdefault((name, units), []).append(wall)
            cpus.setdefault((name, units), []).append(cpu)
            if out is not None and len(out) != len(expected):
                raise AssertionError(f"{name} with {units} units found {len(out)} composite events, "
                                     f"detect {len(expected)}")
    # two threads' cores, before and after the real runs
    point["cores_available"] = (point["cores_available"] + cores_available()) / 2
    for name, units, _ in runs:
        w, c = walls[(name, units)], cpus[(name, units)]
        k = int(np.argmin(w))
        best[(name, units)] = w[k]
        point["real"].setdefault(name, {})[str(units)] = {
            "seconds": w[k], "events_per_s": len(ev) / w[k], "cpu_seconds": c[k],
            "cores_used": c[k] / w[k] if w[k] else 0.0}
        if progress:
            progress(f"{workload} L={length} W={window:g} {name} x{units}: {len(ev) / w[k]:,.0f} ev/s")
    tr = trace(rule, ev, stats=stats, chunk_size=_chunk_of(rule, ev), batch_size=_trace_batch(rule, ev, length),
               repeat=repeat)
    for m in SIM_METHODS:
        point["sim"][m] = {str(k): simulate(tr, m, k).throughput for k in SIM_UNITS}
    # the paper's Figure 10: load balancing on and off, nothing else (no dynamic units, no fusion)
    point["sim"]["hybrid-static"] = {str(k): simulate(tr, "hybrid", k, dynamic=False, fusion=False).throughput
                                     for k in SIM_UNITS}
    point["sim"]["hybrid-equal-static"] = {str(k): simulate(tr, "hybrid-equal", k, dynamic=False,
                                                            fusion=False).throughput for k in SIM_UNITS}
    point["sim"]["hybrid-static-fusion"] = {str(k): simulate(tr, "hybrid", k, dynamic=False).throughput
                                            for k in SIM_UNITS}
    # the hybrid engine as it was with one splitter thread (before runtime.SplitJob), for comparison
    point["sim"]["hybrid-one-splitter"] = {str(k): simulate(tr, "hybrid", k, splitters=1).throughput
                                           for k in SIM_UNITS}
    point["sim_parallel_phase"] = allocation_ratios(tr)
    for m in REAL_METHODS:
        for units in units_list:
            real_s = best[(m, units)]
            used = point["real"][m][str(units)]["cores_used"]
            # state-parallel runs one thread per agent whatever ``units``: its threads, not
            # ``units``, meet the machine's cores (its "x1" run used 1.5 cores here)
            threads = length - 1 if m == "state-parallel" else units
            sim = simulate(tr, m, units, cores=min(threads, os.cpu_count() or 1))
            pred_eff = simulate(tr, m, units, cores=max(1, round(used))).seconds
            real_cpu = point["real"][m][str(units)]["cpu_seconds"]
            point["validation"].setdefault(m, {})[str(units)] = {
                "real_s": real_s, "sim_s": sim.seconds, "error": sim.seconds / real_s - 1.0,
                "sim_s_at_cores_used": pred_eff, "error_at_cores_used": pred_eff / real_s - 1.0,
                # CPU time adds up over threads and is not inflated by other processes' load
                "real_cpu_s": real_cpu, "sim_cpu_s": sim.cpu_s, "cpu_error": sim.cpu_s / real_cpu - 1.0}
    return point


def allocation_ratios(tr) -> dict:
    """The paper's Figure 10 comparison in the simulation (static units, no fusion): per k, the
    cost model's speed over the equal split's, end to end and for the parallel phase alone
    (the units' work: no ingestion, splitter, barriers or output assembly)."""
    out = {}
    for k in SIM_UNITS:
        c = simulate(tr, "hybrid", k, dynamic=False, fusion=False)
        e = simulate(tr, "hybrid-equal", k, dynamic=False, fusion=False)
        out[str(k)] = {"end_to_end": e.seconds / c.seconds,
                       "parallel_phase": e.parallel_s / c.parallel_s if c.parallel_s else 1.0,
                       "units_cost_model": c.units_per_agent, "units_equal": e.units_per_agent,
                       **eq6_bound(tr, k)}
    return out


def eq6_bound(tr, k: int) -> dict:
    """What any allocation can gain over the equal split with ``k`` units, by the cost model's
    own loads (Eq. 5, statistics read off the trace; no fusion): the equal split's largest load
    per unit over the least possible, the loads spread exactly in proportion (Eq. 6 with
    fractional units: ``eq6_bound``) or over the cost model's whole units (``eq6_whole``). A
    workload whose loads are close to equal cannot reach 1.5x whatever the allocation."""
    from .costmodel import allocate, equal_allocation
    from .simulate import stats_from_trace

    al = allocate(stats_from_trace(tr, k), k, "cost-model", fusion=False)
    loads = [a.load for a in al.loads]
    if not loads or not sum(loads) or k < len(loads):
        return {"eq6_bound": 1.0, "eq6_whole": 1.0}
    eq = max(x / u for x, u in zip(loads, equal_allocation(len(loads), k)))
    return {"eq6_bound": eq / (sum(loads) / k), "eq6_whole": eq / max(x / u for x, u in zip(loads, al.units))}


def _figure10_trace(workloads: dict, workload: str, length: int, window: float, events: int, seed: int):
    """The rule, the events and the trace of one simulated Figure 10 point."""
    gen, rule_of = workloads[workload]
    ev = gen(events, seed=seed)
    rule = rule_of(length, window)
    tr = trace(rule, ev, chunk_size=_chunk_of(rule, ev), batch_size=_trace_batch(rule, ev, length))
    head = {"workload": workload, "length": length, "window_s": window, "events": len(ev),
            "matches": int(tr.outputs[:, -1].sum())}
    return rule, tr, head


def figure10_point(workload: str, length: int, window: float, events: int, seed: int) -> dict:
    """Simulation only (no real runs): the allocation ratios of :func:`allocation_ratios`."""
    _, tr, head = _figure10_trace(WORKLOADS, workload, length, window, events, seed)
    return {**head, "ratios": allocation_ratios(tr)}


def figure10_paper_point(workload: str, length: int, window: float, events: int, seed: int) -> dict:
    """A point of the paper-regime Figure 10 sweep (:data:`PAPER_WORKLOADS`), simulated: the
    allocation ratios, with Theorem 2's growth factor ``2 e_i s_i W`` per agent and the
    selectivities read off the trace, and the output's measured parallel share."""
    from .simulate import stats_from_trace

    rule, tr, head = _figure10_trace(PAPER_WORKLOADS, workload, length, window, events, seed)
    st = stats_from_trace(tr, 8)
    growth = [2.0 * st.rates[j] * st.selectivity[j] * st.window for j in range(1, length)]
    return {**head, "rule": rule, "chunks": len(tr.chunk_events),
            "selectivity": list(st.selectivity[1:]), "growth": growth,
            "pairs_per_match": float(tr.scanned.sum() / max(tr.outputs[:, -1].sum(), 1.0)),
            "output_parallel": tr.output_parallel, "output_cores": tr.output_cores,
            "units_serial": tr.units_serial, "units_serial_split": tr.split.units_serial if tr.split else None,
            "spin_units": tr.spin_units, "spin_run": tr.run_serial, "spin_control": tr.spin_control,
            "ratios": allocation_ratios(tr)}


def _trace_batch(rule, ev, length: int) -> int:
    """The trace's batch: the engine's with two units (the real runs it is checked against are
    at one and two units; simulate scales the task counts to other batch sizes)."""
    from .engine import auto_batch

    return auto_batch(_chunk_of(rule, ev), length, 2)


def _chunk_of(rule, ev) -> int:
    from .baselines import baseline_chunk
    from .engine import as_rule_list

    return baseline_chunk(as_rule_list(rule), ev, "s")


def run_bench(*, events: int = 30_000, windows=(0.25, 0.5, 1.0, 1.5), lengths=(3, 4, 5, 6),
              length_window: float = 0.5, window_length: int = 4, workloads=("stock", "sensor"),
              repeat: int = 2, seed: int = 0, figure10_windows=(1.0, 1.5, 2.0), figure10_events: int = 20_000,
              paper_windows=(0.5, 1.0, 1.5, 2.0), paper_lengths=(3, 4, 5), paper_events: int = 100_000,
              real: bool = True, figure10: bool = True, progress=None) -> dict:
    """The whole benchmark; returns the JSON-ready result with its ``summary``.

    ``figure10_windows``: the paper's Figure 10 sweep (allocation against the window, pattern
    length ``window_length``), simulated only, on ``figure10_events`` events; ``paper_*``: the
    same in the paper's regime (:data:`PAPER_WORKLOADS`). ``real=False`` / ``figure10=False``
    leave out the real points / both Figure 10 sweeps (to split the benchmark in runs; see
    :func:`merge`).
    """
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    points = []
    for w in workloads if real else ():
        for win in windows:
            points.append(bench_point(w, window_length, win, events, seed, repeat, progress=progress) | {"sweep": "window"})
        for L in lengths:
            points.append(bench_point(w, L, length_window, events, seed, repeat, progress=progress) | {"sweep": "length"})
    fig10, paper = [], []
    for w in workloads if figure10 else ():
        for L in paper_lengths:
            for win in paper_windows:
                paper.append(figure10_paper_point(w, L, win, paper_events, seed))
                if progress:
                    r = paper[-1]["ratios"]
                    progress(f"figure 10 (paper regime) {w} L={L} W={win:g}: growth "
                             f"{', '.join(f'{g:.1f}' for g in paper[-1]['growth'])}; cost/equal end to end "
                             + ", ".join(f"k={k} {r[k]['end_to_end']:.2f}" for k in r if int(k) >= 8))
    for w in workloads if figure10 else ():
        for win in figure10_windows:
            fig10.append(figure10_point(w, window_length, win, figure10_events, seed))
            if progress:
                r = fig10[-1]["ratios"]["8"]
                progress(f"figure 10 {w} L={window_length} W={win:g}: cost/equal at k=8 end to end "
                         f"{r['end_to_end']:.2f}, parallel phase {r['parallel_phase']:.2f}")
    return {
        "machine": {"description": "2-core shared dev machine (other jobs running; see load average)",
                    "platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                    "load_average_start": load0, "load_average_end": os.getloadavg()},
        "settings": {"events": events, "windows": list(windows), "lengths": list(lengths), "repeat": repeat,
                     "seed": seed, "sim_units": list(SIM_UNITS), "figure10_windows": list(figure10_windows),
                     "figure10_events": figure10_events, "paper_windows": list(paper_windows),
                     "paper_lengths": list(paper_lengths), "paper_events": paper_events,
                     "workloads": list(workloads), "real": real, "figure10": figure10},
        "points": points,
        "figure10": fig10,
        "figure10_paper": paper,
        "summary": summarize(points, fig10, paper),
        "seconds": time.perf_counter() - t0,
    }


def _spread(xs: list[float]) -> dict | None:
    return {"min": min(xs), "median": float(np.median(xs)), "max": max(xs)} if xs else None


def summarize(points: list[dict], figure10: list[dict] | None = None, paper: list[dict] | None = None) -> dict:
    """The issue's success criteria, measured (any of the three lists may be empty)."""
    figure10 = figure10 or []
    paper = paper or []
    ahead, total, behind = 0, 0, []
    ahead_free, total_free = 0, 0  # at points where two threads got at least 1.5 cores
    for p in points:
        for units in ("2",):
            h = p["real"]["hybrid"][units]["events_per_s"]
            free = p.get("cores_available", 0.0) >= 1.5
            for m in ("rip", "llsf", "state-parallel"):
                total += 1
                o = p["real"][m][units]["events_per_s"]
                total_free += free
                ahead_free += free and h > o
                if h > o:
                    ahead += 1
                else:
                    behind.append(f"{p['workload']} L={p['length']} W={p['window_s']:g}: {m} {o:,.0f} >= hybrid {h:,.0f}")
    ahead_end = sum(p["real"]["hybrid-output-at-end"]["2"]["events_per_s"] > p["real"][m]["2"]["events_per_s"]
                    for p in points if "hybrid-output-at-end" in p["real"] for m in ("rip", "llsf", "state-parallel"))
    total_end = sum(3 for p in points if "hybrid-output-at-end" in p["real"])
    # CPU seconds (all threads) of the same runs: what the wall clock follows when other jobs
    # leave the process about one core
    cpu_less = sum(p["real"]["hybrid"]["2"]["cpu_seconds"] < p["real"][m]["2"]["cpu_seconds"]
                   for p in points for m in ("rip", "llsf", "state-parallel"))
    sim_ahead, sim_total, sim_ahead1, sim_behind = 0, 0, 0, []
    for p in points:
        for k in SIM_UNITS[1:]:
            h = p["sim"]["hybrid"][str(k)]
            h1 = p["sim"].get("hybrid-one-splitter", {}).get(str(k), 0.0)
            for m in ("rip", "llsf", "state-parallel"):
                sim_total += 1
                sim_ahead += h > p["sim"][m][str(k)]
                sim_ahead1 += h1 > p["sim"][m][str(k)]
                if h <= p["sim"][m][str(k)]:
                    sim_behind.append(f"{p['workload']} L={p['length']} W={p['window_s']:g} k={k}: {m} "
                                      f"{p['sim'][m][str(k)]:,.0f} >= hybrid {h:,.0f}")
    over_rip = [p["sim"]["hybrid"][str(k)] / p["sim"]["rip"][str(k)] for p in points for k in SIM_UNITS if k >= 8]
    ratios = [p["sim"]["hybrid-static"][str(k)] / p["sim"]["hybrid-equal-static"][str(k)]
              for p in points for k in SIM_UNITS if k >= 8]
    ratios_fused = [p["sim"]["hybrid-static-fusion"][str(k)] / p["sim"]["hybrid-equal-static"][str(k)]
                    for p in points for k in SIM_UNITS if k >= 8]
    ratios_dyn = [p["sim"]["hybrid"][str(k)] / p["sim"]["hybrid-equal"][str(k)]
                  for p in points for k in SIM_UNITS if k >= 8]
    all_ratios = [(q["window_s"], k, r) for q in [*figure10, *[{"window_s": p["window_s"],
                                                                "ratios": p["sim_parallel_phase"]} for p in points]]
                  for k, r in q["ratios"].items() if int(k) >= 8]
    par_ratios = [r["parallel_phase"] for _, _, r in all_ratios]
    f10_par = [r["parallel_phase"] for q in figure10 for k, r in q["ratios"].items() if int(k) >= 8]
    f10_e2e = [r["end_to_end"] for q in figure10 for k, r in q["ratios"].items() if int(k) >= 8]
    cores = [p.get("cores_available", 0.0) for p in points]
    errs = [abs(v["error"]) for p in points for m in p["validation"].values() for v in m.values()]
    errs_eff = [abs(v["error_at_cores_used"]) for p in points for m in p["validation"].values() for v in m.values()]
    errs1 = [abs(m["1"]["error"]) for p in points for m in p["validation"].values()]
    cpu_errs = [abs(v["cpu_error"]) for p in points for m in p["validation"].values() for v in m.values()]
    cpu_errs1 = [abs(m["1"]["cpu_error"]) for p in points for m in p["validation"].values()]
    vs_detect = [p["real"]["hybrid"]["2"]["events_per_s"] / p["real"]["detect"]["1"]["events_per_s"] for p in points]
    vs_seq = [p["real"]["hybrid"]["2"]["events_per_s"] / p["real"]["sequential"]["1"]["events_per_s"] for p in points]
    speedup = [p["real"]["hybrid"]["2"]["events_per_s"] / p["real"]["hybrid"]["1"]["events_per_s"] for p in points]
    return {
        "real_hybrid_ahead_at_k2": f"{ahead}/{total}",
        "real_hybrid_ahead_everywhere_k2": ahead == total,
        "real_points_behind": behind,
        "real_hybrid_ahead_at_k2_where_1_5_cores": f"{ahead_free}/{total_free}",
        "real_hybrid_output_at_end_ahead_at_k2": f"{ahead_end}/{total_end}",
        "real_hybrid_less_cpu_at_k2": f"{cpu_less}/{total}",
        "sim_hybrid_ahead_k_ge_2": f"{sim_ahead}/{sim_total}",
        "sim_points_behind": sim_behind,
        "sim_hybrid_one_splitter_ahead_k_ge_2": f"{sim_ahead1}/{sim_total}",
        "sim_hybrid_over_rip_k_ge_8": _spread(over_rip),
        "cost_model_vs_equal_static_k_ge_8": _spread(ratios),
        "cost_model_with_fusion_vs_equal_static_k_ge_8": _spread(ratios_fused),
        "cost_model_vs_equal_dynamic_k_ge_8": _spread(ratios_dyn),
        "cost_model_ge_1_5x_equal_at_k_ge_8": bool(ratios) and bool(min(ratios) >= 1.5),
        "cost_model_vs_equal_parallel_phase_k_ge_8": _spread(par_ratios),
        "figure10_parallel_phase_k_ge_8": _spread(f10_par),
        "figure10_end_to_end_k_ge_8": _spread(f10_e2e),
        "figure10_parallel_phase_ge_1_5x_share": float(np.mean([r >= 1.5 for r in f10_par])) if f10_par else None,
        "parallel_phase_ge_1_5x_by_window": {
            f"{w:g}": float(np.mean([r["parallel_phase"] >= 1.5 for ww, _, r in all_ratios if ww == w]))
            for w in sorted({w for w, _, _ in all_ratios})},
        "cores_available_to_two_threads": _spread(cores),
        "sim_validation_max_error_1_unit": max(errs1) if errs1 else None,
        "sim_validation_max_error": max(errs) if errs else None,
        "sim_validation_median_error": float(np.median(errs)) if errs else None,
        "sim_validation_max_error_at_cores_used": max(errs_eff) if errs_eff else None,
        "sim_validated_within_20pct": bool(errs) and max(errs) <= 0.2,
        "sim_cpu_validation_max_error": max(cpu_errs) if cpu_errs else None,
        "sim_cpu_validation_median_error": float(np.median(cpu_errs)) if cpu_errs else None,
        "sim_cpu_validation_max_error_1_unit": max(cpu_errs1) if cpu_errs1 else None,
        "sim_cpu_validation_share_within_20pct": float(np.mean([e <= 0.2 for e in cpu_errs])) if cpu_errs else None,
        "cores_used_by_real_runs": _spread([v["cores_used"] for p in points for m in p["real"].values()
                                                   for v in m.values()]),
        "hybrid2_vs_batch_detect": _spread(vs_detect),
        "hybrid2_vs_sequential_engine": _spread(vs_seq),
        "hybrid_speedup_2_over_1_unit": _spread(speedup),
        **paper_summary(paper),
    }


def paper_summary(paper: list[dict]) -> dict:
    """The cost-model criterion in the paper's Figure 10 regime: per k >= 8, the cost model over
    the equal split (end to end and parallel phase), over all points and over those whose
    growth factors (Theorem 2's ``2 e s W``, every agent but the last) are all >= 2."""
    if not paper:
        return {}
    out: dict = {}
    for k in [k for k in paper[0]["ratios"] if int(k) >= 8]:
        e2e = [q["ratios"][k]["end_to_end"] for q in paper]
        par = [q["ratios"][k]["parallel_phase"] for q in paper]
        # agent i's load over agent i-1's follows m_i / m_(i-1): the growth of every agent but the
        # last (whose growth is the rate of composite events)
        grown = [q["ratios"][k]["end_to_end"] for q in paper if min(q["growth"][:-1]) >= 2.0]
        bound = [q["ratios"][k].get("eq6_bound", float("nan")) for q in paper]
        out[f"k={k}"] = {"end_to_end": _spread(e2e), "parallel_phase": _spread(par),
                         "parallel_phase_ge_1_5x": f"{sum(r >= 1.5 for r in par)}/{len(par)}",
                         # points where even the best allocation of the cost model's loads stays
                         # below 1.5x (a property of the workload), and how the others fared
                         "eq6_bound_below_1_5": f"{sum(b < 1.5 for b in bound)}/{len(bound)}",
                         "end_to_end_ge_1_5x_where_bound_ge_1_5":
                             f"{sum(r >= 1.5 for r, b in zip(e2e, bound) if b >= 1.5)}/{sum(b >= 1.5 for b in bound)}",
                         "end_to_end_ge_1_5x": f"{sum(r >= 1.5 for r in e2e)}/{len(e2e)}",
                         "end_to_end_where_growth_ge_2": _spread(grown),
                         "end_to_end_ge_1_5x_where_growth_ge_2": f"{sum(r >= 1.5 for r in grown)}/{len(grown)}"}
    return {"figure10_paper_regime": out}


def merge(results: list[dict]) -> dict:
    """Several :func:`run_bench` results (a benchmark split in runs) as one, summary recomputed."""
    points = [p for r in results for p in r["points"]]
    fig10 = [q for r in results for q in r.get("figure10", [])]
    paper = [q for r in results for q in r.get("figure10_paper", [])]
    return {"machine": results[0]["machine"], "runs": [{"machine": r["machine"], "settings": r["settings"],
                                                        "seconds": r["seconds"]} for r in results],
            "settings": results[0]["settings"], "points": points, "figure10": fig10, "figure10_paper": paper,
            "summary": summarize(points, fig10, paper), "seconds": sum(r["seconds"] for r in results)}


def plot(result: dict, path: str) -> None:
    """Four panels: real events/s against window and length (2 units), simulated events/s against
    units, and cost-model over equal allocation against units (simulation, static units)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = result["points"]
    wl = pts[0]["workload"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    methods = ("hybrid", "hybrid-equal", "state-parallel", "rip", "llsf")
    for ax, sweep, key, label in ((axes[0, 0], "window", "window_s", "window (s)"),
                                  (axes[0, 1], "length", "length", "pattern length")):
        sel = [p for p in pts if p["sweep"] == sweep and p["workload"] == wl]
        xs = [p[key] for p in sel]
        for m in methods:
            ax.plot(xs, [p["real"][m]["2"]["events_per_s"] for p in sel], marker="o", label=f"{m} (2 units)")
        ax.plot(xs, [p["real"]["hybrid"]["1"]["events_per_s"] for p in sel], "k--", label="hybrid (1 unit)")
        ax.plot(xs, [p["real"]["sequential"]["1"]["events_per_s"] for p in sel], "k:", label="sequential Engine")
        ax.plot(xs, [p["real"]["detect"]["1"]["events_per_s"] for p in sel], "r:", label="batch detect")
        ax.set_xlabel(label)
        ax.set_ylabel("events/s (real)")
        ax.set_yscale("log")
        ax.set_title(f"{wl}: real throughput against {label}")
        ax.legend(fontsize=7)
    ax = axes[1, 0]
    p = next(q for q in pts if q["sweep"] == "length" and q["workload"] == wl and q["length"] == 6) \
        if any(q["sweep"] == "length" and q["length"] == 6 for q in pts) else pts[-1]
    ks = [int(k) for k in p["sim"]["hybrid"]]
    for m in methods:
        ax.plot(ks, [p["sim"][m][str(k)] for k in ks], marker="o", label=m)
    for m in methods:
        if "2" in p["real"][m]:
            ax.scatter([1, 2], [p["real"][m]["1"]["events_per_s"], p["real"][m]["2"]["events_per_s"]], marker="x")
    ax.set_xlabel("units k")
    ax.set_ylabel("events/s (simulated; x = real)")
    ax.set_title(f"simulation: {p['workload']} L={p['length']} W={p['window_s']:g}")
    ax.legend(fontsize=7)
    ax = axes[1, 1]
    # the paper's Figure 10: cost model over equal split against the window (static units)
    sweep = [(q["workload"], q["length"], q["window_s"], q["ratios"]) for q in result.get("figure10") or []]
    sweep += [(q["workload"], q["length"], q["window_s"], q["sim_parallel_phase"]) for q in pts
              if q["sweep"] == "window"]
    for wl_ in sorted({w for w, *_ in sweep}):
        for k, style in (("8", "o-"), ("24", "s--")):
            # one ratio per window (the real sweep's point where both have it)
            sel = sorted({x[2]: x[3][k] for x in sweep if x[0] == wl_}.items(), key=lambda t: t[0])
            xs = [w for w, _ in sel]
            ax.plot(xs, [r["parallel_phase"] for _, r in sel], style, label=f"{wl_} k={k}: parallel phase")
            ax.plot(xs, [r["end_to_end"] for _, r in sel], style, alpha=0.35, label=f"{wl_} k={k}: end to end")
    ax.axhline(1.5, color="r", linestyle="--")
    ax.set_xlabel("window (s)")
    ax.set_ylabel("cost-model / equal allocation (static units)")
    ax.set_title("cost model over equal split (simulated, Figure 10 setting)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(result: dict, out: str | None, png: str | None) -> None:
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1, default=json_default)
    if png:
        plot(result, png)


def markdown(result: dict) -> str:
    """The tables of docs/performance.md's HYPERSONIC section, from a result of :func:`run_bench`."""
    pts = result["points"]
    lines = ["| workload | L | W (s) | matches | cores | hybrid x1 | hybrid x2 | output at end x2 | equal x2 | "
             "state-par. | RIP x2 | LLSF x2 | sequential | detect |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def k(v):
        return f"{v / 1e3:,.0f}k"

    for p in pts:
        r = p["real"]
        h2 = r["hybrid"]["2"]["events_per_s"]
        best = max(r[m]["2"]["events_per_s"] for m in ("state-parallel", "rip", "llsf"))
        mark = "**" if h2 > best else ""
        lines.append(
            f"| {p['workload']} | {p['length']} | {p['window_s']:g} | {p['matches']:,} | "
            f"{p.get('cores_available', 0.0):.2f} | "
            f"{k(r['hybrid']['1']['events_per_s'])} | {mark}{k(h2)}{mark} | "
            f"{k(r['hybrid-output-at-end']['2']['events_per_s']) if 'hybrid-output-at-end' in r else '-'} | "
            f"{k(r['hybrid-equal']['2']['events_per_s'])} | {k(r['state-parallel']['2']['events_per_s'])} | "
            f"{k(r['rip']['2']['events_per_s'])} | {k(r['llsf']['2']['events_per_s'])} | "
            f"{k(r['sequential']['1']['events_per_s'])} | {k(r['detect']['1']['events_per_s'])} |")
    lines += ["", "| workload | L | W (s) | sim k=1 | k=2 | k=8 | k=24 | k=24, one splitter | RIP k=2 | k=24 | "
              "LLSF k=24 | state-par. | "
              "cost/equal k=8: end to end | parallel phase | CPU-time error hybrid x1 | x2 | RIP x2 | LLSF x2 |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in pts:
        s, v, r8 = p["sim"], p["validation"], p["sim_parallel_phase"]["8"]
        lines.append(
            f"| {p['workload']} | {p['length']} | {p['window_s']:g} | {k(s['hybrid']['1'])} | {k(s['hybrid']['2'])} | "
            f"{k(s['hybrid']['8'])} | {k(s['hybrid']['24'])} | "
            f"{k(s['hybrid-one-splitter']['24']) if 'hybrid-one-splitter' in s else '-'} | "
            f"{k(s['rip']['2'])} | {k(s['rip']['24'])} | "
            f"{k(s['llsf']['24'])} | {k(s['state-parallel']['24'])} | "
            f"{r8['end_to_end']:.2f} | {r8['parallel_phase']:.2f} | "
            f"{v['hybrid']['1']['cpu_error']:+.0%} | {v['hybrid']['2']['cpu_error']:+.0%} | "
            f"{v['rip']['2']['cpu_error']:+.0%} | {v['llsf']['2']['cpu_error']:+.0%} |")
    fig10 = result.get("figure10") or []
    if fig10:
        ks = [k_ for k_ in fig10[0]["ratios"] if int(k_) >= 8]
        lines += ["", "| workload | L | W (s) | matches | " + " | ".join(f"k={k_}: end to end | parallel phase"
                                                                     for k_ in ks) + " | units k=8 (cost model / equal) |",
                  "|---|---|---|---|" + "---|---|" * len(ks) + "---|"]
        for q in fig10:
            rs = q["ratios"]
            lines.append(f"| {q['workload']} | {q['length']} | {q['window_s']:g} | {q['matches']:,} | "
                         + " | ".join(f"{rs[k_]['end_to_end']:.2f} | {rs[k_]['parallel_phase']:.2f}" for k_ in ks)
                         + f" | {rs['8']['units_cost_model']} / {rs['8']['units_equal']} |")
    paper = result.get("figure10_paper") or []
    if paper:
        ks = [k_ for k_ in paper[0]["ratios"] if int(k_) >= 8]
        lines += ["", "| workload | L | W (s) | matches | growth 2esW per agent | pairs a match | "
                  + " | ".join(f"k={k_}: end to end | parallel phase | Eq. 6 bound" for k_ in ks)
                  + " | GIL share | units k=24 (cost model / equal) |",
                  "|---|---|---|---|---|---|" + "---|---|---|" * len(ks) + "---|---|"]
        for q in paper:
            rs = q["ratios"]
            lines.append(f"| {q['workload']} | {q['length']} | {q['window_s']:g} | {q['matches']:,} | "
                         f"{', '.join(f'{g:.1f}' for g in q['growth'])} | {q['pairs_per_match']:.0f} | "
                         + " | ".join(f"{rs[k_]['end_to_end']:.2f} | {rs[k_]['parallel_phase']:.2f} | "
                                      f"{rs[k_].get('eq6_bound', float('nan')):.2f}" for k_ in ks)
                         + f" | {_share(q['units_serial_split'] if q.get('units_serial_split') is not None else q.get('units_serial'))} | {rs['24']['units_cost_model']} / "
                         f"{rs['24']['units_equal']} |")
    return "\n".join(lines)


def _share(x) -> str:
    return "-" if x is None else f"{x:.3f}"
