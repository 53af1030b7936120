"""The MuSE benchmark (paper §7.2): transmission ratios of aMuSE, aMuSE* and oOP against
centralised evaluation on seeded networks, planning times, and one simulated run per setting with
counted messages beside the cost model's prediction.

    cep-gpu muse bench --out docs/perf/muse.json --plot docs/perf/muse.png
"""

from __future__ import annotations

import math
import platform
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from .network import Network
from .placement import place
from .query import Query, leaves, tree_text
from .simulate import generate_streams, simulate

ALGS = ("amuse", "amuse*", "oop", "centralized")
DEFAULTS = {"nodes": 20, "types": 15, "event_node_ratio": 0.5, "skew": 1.5, "max_rate": 1e6}
SWEEPS = {
    "event_node_ratio": [0.2, 0.35, 0.5, 0.75, 1.0],
    "skew": [1.1, 1.3, 1.5, 1.7, 2.0],
    "nodes": [5, 10, 20, 35],
}


def random_tree(rng: np.random.Generator, types: list[str], kind: str | None = None):
    """A random SEQ/AND operator tree over ``types`` (alternating kinds, 2-3 children)."""
    if len(types) == 1:
        return types[0]
    kind = kind or str(rng.choice(["SEQ", "AND"]))
    other = "AND" if kind == "SEQ" else "SEQ"
    k = int(rng.integers(2, min(3, len(types)) + 1))
    cuts = sorted(rng.choice(np.arange(1, len(types)), k - 1, replace=False))
    parts = np.split(np.array(types), cuts)
    return (kind, tuple(random_tree(rng, list(map(str, p)), other) for p in parts))


def random_workload(
    network: Network, queries: int = 5, size: int = 6, seed: int = 0, window: float = 1.0
) -> list[Query]:
    """Queries as in §7.1: ``size`` primitive operators each (distinct types), random SEQ/AND
    nesting, a selectivity uniform in [0.01, 0.2] for each pair of types; window 1 s (so r̂ is the
    paper's product of rates times the number of accepted orders over (k-1)!, see docs/muse.md)."""
    rng = np.random.default_rng(seed)
    universe = sorted(network.rates)
    out = []
    for i in range(queries):
        types = [str(t) for t in rng.choice(universe, min(size, len(universe)), replace=False)]
        tree = random_tree(rng, types)
        sel = {(a, b): float(rng.uniform(0.01, 0.2)) for a in types for b in types if a < b}
        out.append(Query.from_pattern(tree_text(tree), window, name=f"Q{i}", selectivity=sel))
    return out


def with_conditions(q: Query) -> tuple[Query, list[str]]:
    """``q`` with one ``where`` condition per pair of types realising its selectivity σ on the
    streams of :func:`generate_streams`: ``x_A.h_j - x_B.h_j > 1 - sqrt(2σ)`` on an attribute
    ``h_j`` of its own (uniform in [0, 1)), which holds with probability σ (σ <= 0.5)."""
    conds, attrs = {}, []
    for j, (pair, sigma) in enumerate(sorted(q.selectivity.items(), key=lambda kv: sorted(kv[0]))):
        a, b = sorted(pair)
        attr = f"h{j}"
        attrs.append(attr)
        conds[(a, b)] = f"x_{a}.{attr} - x_{b}.{attr} > {1 - math.sqrt(2 * sigma):.12f}"
    sel = {tuple(sorted(k)): v for k, v in q.selectivity.items()}
    return Query.from_pattern(tree_text(q.tree), q.window, q.name, sel, conds), attrs


def run_setting(params: dict, seed: int, queries: int, size: int) -> dict:
    """Plan one seeded network and workload with every algorithm."""
    net = Network.generate(params["nodes"], params["types"], params["event_node_ratio"],
                           params["skew"], seed, params.get("max_rate", 1e6))
    work = random_workload(net, queries, size, seed)
    row: dict = {"seed": seed, **params}
    for alg in ALGS:
        plan = place(work, net, alg)
        row[alg] = {"cost": plan.cost, "transmission_ratio": plan.transmission_ratio,
                    "planning_seconds": plan.planning_seconds}
    return row


def simulated_run(params: dict, seed: int, size: int, events: int, backend: str) -> dict:
    """One query of the setting's workload on the same network, planned with aMuSE and
    simulated over 200 windows. Rates are scaled down (a common factor keeps their ratios) so that
    the rarest type's stream at a node holds about 100 events, or the whole input ``events``
    events if that is fewer (counts of a few events would only show Poisson noise)."""
    net = Network.generate(params["nodes"], params["types"], params["event_node_ratio"],
                           params["skew"], seed, params.get("max_rate", 1e6))
    q, attrs = with_conditions(random_workload(net, 1, size, seed)[0])
    duration = 200 * q.window
    total = sum(net.rate(t) * len(net.nodes_of(t)) for t in q.types)
    rarest = min(net.rate(t) for t in q.types)
    factor = min(events / (total * duration), 100 / (rarest * duration))
    scaled = net.scaled(factor)
    plan = place(q, scaled, "amuse")
    streams = generate_streams(scaled, [q], duration, seed=seed, attributes=attrs)
    t0 = time.perf_counter()
    res = simulate(plan, streams, backend=backend, duration=duration)
    return {
        "query": tree_text(q.tree), "events": len(streams),
        "rarest_stream_events": rarest * factor * duration,
        "transmission_ratio": plan.transmission_ratio, "sinks": len(plan.sinks[q.name]),
        "matches": len(res.matches), "messages_counted": res.total_messages,
        "messages_predicted": res.predicted_messages,
        "simulation_seconds": time.perf_counter() - t0,
        "projections_sent": sorted({plan.projections[v.key].name for v, _, _ in plan.sends()
                                    if len(plan.projections[v.key].order) > 1}),
    }


def run(
    sweeps: dict[str, Sequence] | None = None,
    seeds: int = 3,
    queries: int = 5,
    size: int = 6,
    simulate_events: int = 20000,
    backend: str = "aip",
    on_step: Callable[[str], None] | None = None,
    max_rate: float | None = None,
) -> dict:
    """Every sweep (one parameter varied from :data:`DEFAULTS`), ``seeds`` networks each;
    ``max_rate`` replaces the default clip of generated rates."""
    sweeps = SWEEPS if sweeps is None else sweeps
    defaults = dict(DEFAULTS) if max_rate is None else {**DEFAULTS, "max_rate": max_rate}
    rows, sims = [], []
    for param, values in sweeps.items():
        for value in values:
            params = {**defaults, param: value}
            if on_step:
                on_step(f"{param}={value}")
            for seed in range(seeds):
                rows.append({"sweep": param, **run_setting(params, seed, queries, size)})
            if simulate_events:
                sims.append({"sweep": param, param: value,
                             **simulated_run(params, 0, min(size, 3), simulate_events, backend)})
    return {
        "benchmark": "muse",
        "settings": {"defaults": defaults, "sweeps": sweeps, "seeds": seeds, "queries": queries,
                     "size": size, "simulate_events": simulate_events, "backend": backend},
        "machine": {"python": platform.python_version(), "processor": platform.processor(),
                    "machine": platform.machine()},
        "rows": rows,
        "simulations": sims,
        "summary": summarize(rows, sims),
    }


def _median(rows, alg, key="transmission_ratio"):
    return statistics.median(r[alg][key] for r in rows) if rows else float("nan")


def summarize(rows: list[dict], sims: list[dict]) -> dict:
    """Medians per sweep value and the paper's trends (§7.2) as numbers."""
    out: dict = {"median_transmission_ratio": {}, "median_planning_seconds": {}}
    for param in dict.fromkeys(r["sweep"] for r in rows):
        for value in dict.fromkeys(r[param] for r in rows if r["sweep"] == param):
            sel = [r for r in rows if r["sweep"] == param and r[param] == value]
            key = f"{param}={value}"
            out["median_transmission_ratio"][key] = {a: _median(sel, a) for a in ALGS}
            out["median_planning_seconds"][key] = {
                a: _median(sel, a, "planning_seconds") for a in ALGS[:3]}
    n = len(rows)
    out["share_amuse_le_amuse_star"] = sum(
        r["amuse"]["cost"] <= r["amuse*"]["cost"] * (1 + 1e-9) for r in rows) / max(n, 1)
    out["share_amuse_star_le_oop"] = sum(
        r["amuse*"]["cost"] <= r["oop"]["cost"] * (1 + 1e-9) for r in rows) / max(n, 1)
    out["share_amuse_le_centralized"] = sum(
        r["amuse"]["cost"] <= r["centralized"]["cost"] * (1 + 1e-9) for r in rows) / max(n, 1)
    skew = [r for r in rows if r["sweep"] == "skew" and r["skew"] == min(
        (x["skew"] for x in rows if x["sweep"] == "skew"), default=None)]
    if skew:
        out["oop_over_amuse_at_lowest_skew_max"] = max(
            r["oop"]["cost"] / r["amuse"]["cost"] for r in skew)
    at20 = [r for r in rows if r["nodes"] == 20]
    if at20:
        out["max_planning_seconds_20_nodes"] = {
            a: max(r[a]["planning_seconds"] for r in at20) for a in ("amuse", "amuse*", "oop")}
    if sims:
        out["simulated_counted_over_predicted"] = [
            (s["messages_counted"] / s["messages_predicted"]) if s["messages_predicted"] else None
            for s in sims]
    return out


def plot(result: dict, path: str) -> None:
    """One panel per sweep: median transmission ratio (log scale) per algorithm, min-max band;
    a last panel with planning times."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    sweeps = list(dict.fromkeys(r["sweep"] for r in rows))
    fig, axes = plt.subplots(1, len(sweeps) + 1, figsize=(4.2 * (len(sweeps) + 1), 3.6))
    for ax, param in zip(axes, sweeps, strict=False):
        values = list(dict.fromkeys(r[param] for r in rows if r["sweep"] == param))
        for alg in ALGS[:3]:
            med, lo, hi = [], [], []
            for v in values:
                xs = [r[alg]["transmission_ratio"] for r in rows
                      if r["sweep"] == param and r[param] == v]
                med.append(statistics.median(xs))
                lo.append(min(xs))
                hi.append(max(xs))
            ax.plot(values, med, marker="o", label=alg)
            ax.fill_between(values, lo, hi, alpha=0.15)
        ax.set_yscale("log")
        ax.set_xlabel(param.replace("_", " "))
        ax.set_ylabel("transmission ratio (to centralised)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    ax = axes[-1]
    for alg in ALGS[:3]:
        ax.scatter([r["nodes"] for r in rows], [r[alg]["planning_seconds"] for r in rows],
                   label=alg, s=12)
    ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("planning time (s)")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("MuSE placement (seeded networks as in paper §7.1)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["leaves", "plot", "random_workload", "run", "summarize", "with_conditions"]
