"""``cep-gpu bench decopa``: the model gains in the manner of the paper's Table 3, executed plans
against the model, and the wall time of a decomposed run next to ``detect``.

The paper does not publish the event rates of its Citi Bike and Google Cluster traces, so the
rates here are drawn, per draw, from a seeded skewed distribution (log-uniform over four and a half
orders of magnitude: the traces "showed skewed event rate distributions, with rate differences of
up to 5 orders of magnitude", §7.1); pair selectivities are the paper's overall figures (0.05% and
0.07%), ι = 2500 per window and κ = 80000 (Citi Bike) / 500000 (Google Cluster) as in §7.3.
"""

from __future__ import annotations

import datetime as _dt
import platform
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import detect, parse_rule
from .execute import execute
from .optimize import Units, optimize
from .stats import Stats


@dataclass(frozen=True)
class Query:
    """A query of the paper's Listing 1 (non-Kleene), flattened to one SEQ/AND level."""

    name: str
    text: str
    #: the aliases between which the paper's predicate applies (pairs of them)
    predicate_over: tuple[str, ...]
    selectivity: float
    kappa: float
    note: str = ""


QUERIES = (
    Query("CitiBike Q1", "define Q1 pattern AND(ShortY sy, VLong0 vl, Short0 so, Long0 lo, LongC lc) within 24 h",
          ("sy", "vl", "so", "lc"), 0.0005, 80000),
    Query("CitiBike Q2", "define Q2 pattern SEQ(ShortY sy, LongC lc, LongY ly, VLongY vly) within 24 h",
          ("sy", "lc", "ly", "vly"), 0.0005, 80000,
          "SEQ(sy, lc, AND(ly, vly)) flattened to SEQ (the rule language has no nesting)"),
    Query("Google Q1", "define G1 pattern AND(Submit s, Evict e1, Enable e2, Finish f) within 10 min",
          ("s", "e1", "e2", "f"), 0.0007, 500000,
          "AND(s, SEQ(e1, e2), f) flattened to AND (the rule language has no nesting)"),
    Query("Google Q2", "define G2 pattern AND(Enable e1, Enable e2, Lost l, Update u) within 10 min",
          ("e1", "e2", "l", "u"), 0.0007, 500000),
)
IOTA = 2500.0


def draw_stats(q: Query, rng: np.random.Generator) -> Stats:
    rule = parse_rule(q.text)
    aliases = [p.alias for p in rule.predicates]
    rates = {a: float(10 ** rng.uniform(0, 4.5)) for a in aliases}
    sel = {(a, b): q.selectivity for i, a in enumerate(q.predicate_over) for b in q.predicate_over[i + 1:]}
    return Stats(rates=rates, selectivity=sel)


def model_gains(units=(5, 10, 15, 20), draws: int = 20, seed: int = 0, progress=None) -> list[dict]:
    """Per query, units and draw: c* of each strategy and the gains over centralized."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in QUERIES:
        rule = parse_rule(q.text)
        for d in range(draws):
            stats = draw_stats(q, rng)
            central = optimize(rule, stats, Units(1, IOTA, q.kappa), strategy="centralized").c_star
            for n in units:
                u = Units(n, IOTA, q.kappa)
                t0 = time.perf_counter()
                dec = optimize(rule, stats, u)
                t_plan = time.perf_counter() - t0
                hyb = optimize(rule, stats, u, strategy="hybrid")
                rows.append({"query": q.name, "units": n, "draw": d, "c_centralized": central,
                             "c_hybrid": hyb.c_star, "c_decopa": dec.c_star,
                             "gain_hybrid": hyb.c_star / central, "gain_decopa": dec.c_star / central,
                             "decopa_over_hybrid": dec.c_star / hyb.c_star, "plan_seconds": t_plan,
                             "decopa_operators": len(dec.operators)})
            if progress:
                progress()
    return rows


def table3(rows: list[dict]) -> list[dict]:
    """Median gains per query and number of units (the shape of the paper's Table 3)."""
    df = pd.DataFrame(rows)
    out = []
    for (q, n), g in df.groupby(["query", "units"], sort=False):
        out.append({"query": q, "units": int(n), "draws": len(g),
                    "median_gain_decopa": float(g.gain_decopa.median()),
                    "median_gain_hybrid": float(g.gain_hybrid.median()),
                    "median_decopa_over_hybrid": float(g.decopa_over_hybrid.median()),
                    "min_decopa_over_hybrid": float(g.decopa_over_hybrid.min()),
                    "median_plan_seconds": float(g.plan_seconds.median())})
    return out


# ----------------------------------------------------------------------------------------------
# Executed plans against the model

EXEC_RULE = ("define E pattern SEQ(A a, B b, C c, D d) where a.k1 = b.k1 and b.k2 = c.k2 and "
             "c.k3 = d.k3 within 10 s")
EXEC_RATES = {"A": 150.0, "B": 150.0, "C": 8.0, "D": 60.0}  # per window of 10 s
EXEC_DOMAIN = 10  # each k uniform over 10 values: every equality has selectivity 1/10


def generate(duration_windows: float, seed: int = 0, window_s: float = 10.0) -> pd.DataFrame:
    """Poisson streams of A-D at EXEC_RATES per window, integer attributes k1-k3 uniform."""
    rng = np.random.default_rng(seed)
    parts = []
    for t, r in EXEC_RATES.items():
        n = rng.poisson(r * duration_windows)
        parts.append(pd.DataFrame({"type": t, "ts": rng.uniform(0, duration_windows * window_s, n)}))
    ev = pd.concat(parts).sort_values("ts", kind="stable").reset_index(drop=True)
    for k in ("k1", "k2", "k3"):
        ev[k] = rng.integers(0, EXEC_DOMAIN, len(ev))
    return ev


def executed_vs_model(windows: float = 40.0, n_units: int = 6, seed: int = 0, backend: str = "cpu") -> dict:
    rule = parse_rule(EXEC_RULE)
    events = generate(windows, seed)
    true_stats = Stats(rates={a.lower(): r for a, r in EXEC_RATES.items()},
                       selectivity={("a", "b"): 1 / EXEC_DOMAIN, ("b", "c"): 1 / EXEC_DOMAIN,
                                    ("c", "d"): 1 / EXEC_DOMAIN})
    units = Units(n_units, iota=2000, kappa=20000)
    out = {"rule": EXEC_RULE, "events": len(events), "windows": windows, "units": n_units, "plans": {}}
    expected = detect(events, rule, backend=backend)  # warms the kernels of the whole rule too
    for strategy in ("decopa", "hybrid"):
        plan = optimize(rule, true_stats, units, strategy=strategy)
        execute(events, plan, backend=backend)  # warm-up: compiles each operator's kernels
        t0 = time.perf_counter()
        rows, rep = execute(events, plan, backend=backend, report=True)
        t_exec = time.perf_counter() - t0
        t0 = time.perf_counter()
        detect(events, rule, backend=backend)
        t_detect = time.perf_counter() - t0
        exact = rows.equals(expected) or _same(rows, expected)
        ops = []
        nwin = rep.windows
        measured_rate = {frozenset([i]): rep.leaves[a] / nwin for i, a in enumerate(plan.pattern.aliases)}
        for o, orep in zip(plan.operators, rep.operators):
            r_in = [orep.input_events[j] / nwin for j in (0, 1)]
            part = o.partitioned
            n = o.n_units
            ing_model_total = orep.input_events[part] + n * orep.input_events[1 - part]
            pred_pairs = []
            meas_pairs = []
            for u in orep.units:
                # K̂ from the measured input rates (M7) at c = 1, against the unit's pairs per window
                d = [(n - 1) * (j == part) + 1 for j in (0, 1)]
                pred_pairs.append(2 * (r_in[0] / d[0]) * (r_in[1] / d[1]))
                meas_pairs.append(u.pairs / nwin)
            measured_rate[frozenset(o.positions)] = orep.outputs / nwin
            ops.append({
                "op": o.name, "sub_query": o.label(plan.pattern.aliases), "units": n,
                "ingested_total": sum(u.ingested for u in orep.units), "ingested_model_total": ing_model_total,
                "ingested_per_unit": [u.ingested for u in orep.units],
                "pairs_per_window_measured": meas_pairs, "pairs_per_window_model": pred_pairs,
                "pairs_error_max": max(abs(m / p - 1) for m, p in zip(meas_pairs, pred_pairs)) if pred_pairs and min(pred_pairs) > 0 else None,
                "outputs_per_window": orep.outputs / nwin, "rate_paper": o.rate, "rate_order": o.rate_order,
            })
        out["plans"][strategy] = {"c_star": plan.c_star, "exact": bool(exact), "rows": len(rows),
                                  "seconds_execute": t_exec, "seconds_detect": t_detect, "operators": ops}
    return out


def _same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    try:
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
        return True
    except AssertionError:
        return False


# ----------------------------------------------------------------------------------------------


def run(quick: bool = False, draws: int | None = None, seed: int = 0, backend: str = "cpu",
        progress=None, units=(5, 10, 15, 20), windows: float | None = None) -> dict:
    """The whole benchmark as a JSON-ready dict with a ``summary``."""
    draws = draws or (4 if quick else 20)
    rows = model_gains(units=units, draws=draws, seed=seed, progress=progress)
    t3 = table3(rows)
    df = pd.DataFrame(rows)
    big = df[df.units >= 10]
    med_by = big.groupby(["query", "units"]).decopa_over_hybrid.median()
    windows = windows or (10.0 if quick else 40.0)
    executed = executed_vs_model(windows=windows, seed=seed, backend=backend)
    summary = {
        "decopa_ge_hybrid_every_draw": bool((df.decopa_over_hybrid >= 1 - 1e-12).all()),
        "median_decopa_over_hybrid_10plus_units": {f"{q} @{n}": float(v) for (q, n), v in med_by.items()},
        "decopa_2x_hybrid_median_at_10plus_units_everywhere": bool((med_by >= 2).all()),
        "executed_exact": all(p["exact"] for p in executed["plans"].values()),
        "executed_ingestion_exact": all(o["ingested_total"] == o["ingested_model_total"]
                                        for p in executed["plans"].values() for o in p["operators"]),
        "pairs_error_max": max((o["pairs_error_max"] or 0) for p in executed["plans"].values()
                               for o in p["operators"]),
        "decomposed_over_detect_seconds": {s: p["seconds_execute"] / max(p["seconds_detect"], 1e-9)
                                           for s, p in executed["plans"].items()},
    }
    return {"benchmark": "decopa", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"python": platform.python_version(), "processor": platform.processor() or "unknown",
                        "machine": platform.machine(), "cpus": _cpus()},
            "settings": {"draws": draws, "seed": seed, "iota": IOTA, "backend": backend,
                         "queries": [{"name": q.name, "rule": q.text, "selectivity": q.selectivity,
                                      "kappa": q.kappa, "note": q.note} for q in QUERIES]},
            "summary": summary, "table3": t3, "draws": rows, "executed": executed}


def _cpus() -> int:
    import os

    return os.cpu_count() or 1


def plot(result: dict, path: str) -> None:
    """Median gains over centralized per query and units (log scale), and executed pairs against
    the model per operator unit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t3 = pd.DataFrame(result["table3"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    ax = axes[0]
    queries = list(dict.fromkeys(t3["query"]))
    units = sorted(set(t3["units"]))
    width = 0.8 / (2 * len(units))
    for i, n in enumerate(units):
        sub = t3[t3.units == n].set_index("query").reindex(queries)
        x = np.arange(len(queries))
        ax.bar(x + (2 * i) * width, sub.median_gain_decopa, width, label=f"DecoPa, {n} units")
        ax.bar(x + (2 * i + 1) * width, sub.median_gain_hybrid, width, label=f"hybrid, {n} units", hatch="//")
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(queries)) + 0.4 - width / 2)
    ax.set_xticklabels(queries, rotation=10)
    ax.set_ylabel("median throughput gain over centralized (c*/c*_central)")
    ax.set_title("Model gains (Table 3 style, drawn rates)")
    ax.legend(fontsize=6, ncol=2)
    ax = axes[1]
    for strategy, p in result["executed"]["plans"].items():
        for o in p["operators"]:
            ax.scatter(o["pairs_per_window_model"], o["pairs_per_window_measured"], label=f"{strategy} {o['op']} {o['sub_query']}", s=18)
    lim = [1, max(max(max(o["pairs_per_window_model"] + o["pairs_per_window_measured"]) for o in p["operators"])
                  for p in result["executed"]["plans"].values()) * 1.5]
    ax.plot(lim, lim, "k--", lw=0.8)
    ax.plot(lim, [v * 1.1 for v in lim], "k:", lw=0.6)
    ax.plot(lim, [v * 0.9 for v in lim], "k:", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("model K̂ per unit (from measured input rates)")
    ax.set_ylabel("measured window pairs per unit")
    ax.set_title("Executed plans against the model (±10%)")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary_table(result: dict) -> str:
    lines = [f"{'query':<13} {'units':>5} {'DecoPa':>12} {'hybrid':>10} {'DecoPa/hybrid':>14}"]
    for r in result["table3"]:
        lines.append(f"{r['query']:<13} {r['units']:>5} {r['median_gain_decopa']:>11.4g}x "
                     f"{r['median_gain_hybrid']:>9.4g}x {r['median_decopa_over_hybrid']:>13.4g}x")
    for s, p in result["executed"]["plans"].items():
        lines.append(f"executed {s}: exact={p['exact']} rows={p['rows']} "
                     f"execute {p['seconds_execute']:.3f} s vs detect {p['seconds_detect']:.3f} s")
    return "\n".join(lines)


