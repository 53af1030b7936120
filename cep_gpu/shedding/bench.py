"""The shedding benchmark (paper Section 5, scaled to one core of this machine).

Workloads (seeded):

* ``stock``: a few dozen tickers, one event type each, prices as random walks around per-ticker
  levels; the pattern ``SEQ(S0 a0, ..., S{n-1} a{n-1})`` with ``a{i}.price > a{i-1}.price * C``
  within a window (the paper's Q1^A with prices); half of the events belong to tickers the
  pattern does not read (the paper's stock stream has 2500 identifiers).
* ``nasdaq``: the paper's stock workload as Section 5.1 describes it: per-minute bars (one event
  per symbol and minute; the symbol is the event type), a log-normal trading ``volume`` per
  symbol (heavy-tailed; per-symbol scales) and open/high/low/close prices; the query Q1^A,
  ``SEQ(S0 a0, ..., S{n-1} a{n-1}) where a{i}.volume > a{i-1}.volume * C within 60 min`` (so
  about 60 events of each pattern symbol per window); ``noise`` is the share of events of
  symbols the pattern does not read (docs/shedding.md, resolution 19).
* ``bus``: bus lines as types, ``dist`` (distance to the centre, log-normal: skewed, so the
  empirical CDF is used) and the pattern ``SEQ(L0, ..., L{n-1})`` with increasing ``dist``
  (the paper's Q1^C).

Load (Section 5.1): a warm-up prefix at the base rate, then 70 % of the run's events in four peaks
of 30/10/20/10 % of the data at the base rate x ``factor`` starting at 3/40/60/90 % of the events;
the rest at the base rate. The base rate is half of this engine's measured capacity; ``L_max`` is
chosen below the time the largest peak takes to drain, so that no shedding violates it.

    cep-gpu bench shedding --quick --out docs/perf/shedding.json --plot docs/perf/shedding.png
"""

from __future__ import annotations

import datetime
import os
import platform
import time
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from ..errors import ArgumentError
from .engine import SheddingEngine
from .shedder import Shedder
from .stats import CostModel

POLICIES = ("none", "random", "state", "darling")
PEAKS = ((0.30, 0.03), (0.10, 0.40), (0.20, 0.60), (0.10, 0.90))  # (share of data, start)


def stock(n_events: int, length: int, seed: int = 0, tickers: int = 24, noise: float = 0.5,
          factor_c: float = 1.0, walk: float = 0.1) -> tuple[str, pd.DataFrame]:
    """Stock-like events (``ts`` in seconds of data time, one event per second) and the rule."""
    if length < 2 or length > tickers:
        raise ArgumentError(f"length: the pattern length must be in [2, {tickers}], got {length}")
    rng = np.random.default_rng(seed)
    pat = [f"S{i}" for i in range(length)]
    other = [f"S{i}" for i in range(length, tickers)]
    p = np.r_[np.full(length, (1 - noise) / length), np.full(len(other), noise / max(len(other), 1))]
    names = np.array(pat + other)
    ty = names[rng.choice(len(names), n_events, p=p / p.sum())]
    level = dict(zip(names, rng.uniform(95, 105, len(names))))
    price = np.empty(n_events)
    for t in names:
        m = ty == t
        if not m.any():
            continue
        steps = rng.normal(0, 1.5, m.sum())
        trend = np.cumsum(steps) * walk
        price[m] = level[t] + trend - trend.mean() + rng.normal(0, 6, m.sum())
    volume = rng.lognormal(8, 1, n_events).round()
    ev = pd.DataFrame({"type": ty, "ts": np.arange(n_events, dtype=np.float64), "price": price,
                       "volume": volume})
    window = 4 * length * length  # seconds of data time: a few events of each pattern type per window
    where = " and ".join(f"a{i}.price > a{i - 1}.price * {factor_c}" for i in range(1, length))
    rule = (f"define Rise pattern SEQ({', '.join(f'{t} a{i}' for i, t in enumerate(pat))}) "
            f"where {where} within {window} s")
    return rule, ev


def nasdaq(n_events: int, length: int, seed: int = 0, noise: float = 0.5, factor_c: float = 1.5,
           window_min: int = 60) -> tuple[str, pd.DataFrame]:
    """Per-minute stock bars (``ts`` in seconds) and the paper's Q1^A on trading volume.

    Every symbol has one bar a minute, at a random second of it (so timestamps are distinct and
    the symbols' order within a minute is random); ``volume`` is log-normal per symbol,
    log V ~ N(μ_s, σ_s²) with μ_s ~ U(7, 9) and σ_s ~ U(0.8, 1.2); ``open``/``high``/``low``/
    ``close`` follow a per-symbol random walk (Q1^A does not read them). The pattern reads the
    symbols S0 .. S{n-1}; the others (``noise`` of the events) are symbols no rule reads.
    """
    if length < 2:
        raise ArgumentError(f"length: the pattern length must be >= 2, got {length}")
    if not 0 <= noise < 1:
        raise ArgumentError(f"noise must be in [0, 1), got {noise}")
    rng = np.random.default_rng(seed)
    n_sym = length + int(round(length * noise / (1 - noise)))
    names = np.array([f"S{i}" for i in range(n_sym)])
    minutes = -(-n_events // n_sym)
    offset = rng.random((minutes, n_sym))
    ty = names[np.argsort(offset, axis=1)].ravel()[:n_events]
    ts = (np.arange(minutes)[:, None] * 60.0 + np.sort(offset, axis=1) * 60.0).ravel()[:n_events]
    code = pd.Index(names).get_indexer(ty)
    mu, sd = rng.uniform(7, 9, n_sym), rng.uniform(0.8, 1.2, n_sym)
    volume = np.exp(mu[code] + sd[code] * rng.standard_normal(n_events)).round() + 1
    close = np.empty(n_events)
    for k in range(n_sym):
        m = code == k
        close[m] = rng.uniform(20, 200) * np.exp(np.cumsum(rng.normal(0, 0.002, m.sum())))
    opn = close * np.exp(rng.normal(0, 0.001, n_events))
    spread = np.abs(rng.normal(0, 0.002, n_events)) * close
    ev = pd.DataFrame({"type": ty, "ts": ts, "volume": volume, "open": opn.round(4),
                       "high": (np.maximum(opn, close) + spread).round(4),
                       "low": (np.minimum(opn, close) - spread).round(4), "close": close.round(4)})
    where = " and ".join(f"a{i}.volume > a{i - 1}.volume * {factor_c}" for i in range(1, length))
    rule = (f"define Rise pattern SEQ({', '.join(f'{t} a{i}' for i, t in enumerate(names[:length]))}) "
            f"where {where} within {window_min} min")
    return rule, ev


def bus(n_events: int, length: int, seed: int = 0, lines: int = 16, noise: float = 0.5) -> tuple[str, pd.DataFrame]:
    """Bus-like events: lines as types, log-normal distances from the centre."""
    if length < 2 or length > lines:
        raise ArgumentError(f"length: the pattern length must be in [2, {lines}], got {length}")
    rng = np.random.default_rng(seed)
    pat = [f"L{i}" for i in range(length)]
    other = [f"L{i}" for i in range(length, lines)]
    p = np.r_[np.full(length, (1 - noise) / length), np.full(len(other), noise / max(len(other), 1))]
    names = np.array(pat + other)
    ty = names[rng.choice(len(names), n_events, p=p / p.sum())]
    scale = dict(zip(names, rng.uniform(0.5, 1.5, len(names))))
    dist = np.array([scale[t] for t in ty]) * rng.lognormal(1.5, 0.6, n_events)
    delay = rng.exponential(60, n_events).round()
    ev = pd.DataFrame({"type": ty, "ts": np.arange(n_events, dtype=np.float64), "dist": dist,
                       "delay": delay})
    window = 4 * length * length
    where = " and ".join(f"b{i}.dist > b{i - 1}.dist * 1.05" for i in range(1, length))
    rule = (f"define Away pattern SEQ({', '.join(f'{t} b{i}' for i, t in enumerate(pat))}) "
            f"where {where} within {window} s")
    return rule, ev


#: the virtual-time cost model of the benchmark: 1 ms per event, 20 us per event a terminator reads
VIRTUAL_COSTS = CostModel(default=1e-3, window=2e-5)

WORKLOADS: dict[str, Callable[..., tuple[str, pd.DataFrame]]] = {"stock": stock, "nasdaq": nasdaq, "bus": bus}


def load_profile(n: int, base_rate: float, factor: float, start: float = 0.0) -> np.ndarray:
    """Arrival times (s) of ``n`` events: four peaks (:data:`PEAKS`) at ``base_rate * factor``."""
    gap = np.full(n, 1.0 / base_rate)
    for share, at in PEAKS:
        lo = int(round(at * n))
        hi = min(n, lo + int(round(share * n)))
        gap[lo + 1:hi] /= factor
    return start + np.cumsum(gap) - gap[0]


def run(
    workload: str = "stock",
    lengths: Sequence[int] = (3, 4, 5, 6),
    factors: Sequence[float] = (10, 100, 1000),
    sweep_length_factor: float = 1000,
    sweep_factor_length: int = 4,
    n_events: int = 24000,
    warmup: int = 2000,
    latency_bound: float | None = None,
    beta: float = 0.8,
    buckets: int = 100,
    policies: Sequence[str] = POLICIES,
    mode: str = "real",
    seeds: Sequence[int] = (0,),
    backend: str = "cpu",
    noise: float = 0.5,
    bound_fraction: float = 0.25,
    regather_every: int | None = None,
    guard: float | None = None,
    utility: str = "eq11",
    allocation: str = "paper",
    on_step: Callable[[str], None] | None = None,
) -> dict:
    """Recall and p99 latency per policy against pattern length and against the overload rate.

    ``noise``: the share of events of types the pattern does not read; ``bound_fraction``: L_max
    as a share of the time the largest peak takes to drain without shedding. In virtual time the cost
    model is :data:`VIRTUAL_COSTS` (a slower engine than this one). ``regather_every``: the
    statistics are gathered again from the last that many events (default: the warm-up's size;
    0: never), the paper's periodic gathering (Section 4.1); the prices drift.
    """
    every = warmup if regather_every is None else regather_every
    gen = WORKLOADS[workload]
    costs = VIRTUAL_COSTS if mode == "virtual" else None
    rows = []
    settings = [("length", L, sweep_length_factor) for L in lengths]
    settings += [("factor", sweep_factor_length, f) for f in factors]
    for seed in seeds:
        for sweep, length, factor in settings:
            rule, ev = gen(warmup + n_events, length, seed, noise=noise)
            warm, main = ev.iloc[:warmup], ev.iloc[warmup:].reset_index(drop=True)
            probe = SheddingEngine(rule, Shedder(1.0, policy="none", seed=seed), backend=backend, mode=mode,
                                   cost_model=costs)
            probe.warm_up(warm)
            zbar = probe.shedder.z_mean
            base = 0.5 / zbar  # half of the measured capacity
            arr = load_profile(len(main), base, factor)
            biggest = max(s for s, _ in PEAKS) * len(main) * zbar
            bound = latency_bound if latency_bound is not None else round(max(biggest * bound_fraction, 20 * zbar), 4)
            for policy in policies:
                sh = Shedder(bound, beta=beta, buckets=buckets, policy=policy, seed=seed, utility=utility,
                             allocation=allocation)
                eng = SheddingEngine(rule, sh, backend=backend, mode=mode, cost_model=costs,
                                     drift_check=_always if every else None, drift_every=every or 1,
                                     guard=guard)
                eng.warm_up(warm)
                t0 = time.perf_counter()
                eng.run(main, arr)
                wall = time.perf_counter() - t0
                s = eng.stats()
                row = {"sweep": sweep, "length": length, "factor": factor, "seed": seed,
                       "policy": policy, "latency_bound_s": bound, "base_rate": base,
                       "recall": s["recall"], "violations": s["violations"],
                       "p99_latency_s": s["latency_s"]["p99"], "max_latency_s": s["latency_s"]["max"],
                       "composites": s["composites"], "composites_reference": s["composites_reference"],
                       "dropped": s["dropped"], "evicted": s["evicted"],
                       "false_positives": s["false_positives"], "z_mean_s": sh.z_mean,
                       "estimated_recall": s["estimated_recall"], "wall_s": wall,
                       "deadline_drops": s["deadline_drops"],
                       "full_collections": s.get("full_collections")}
                rows.append(row)
                if on_step:
                    on_step(f"{workload} {sweep}: length {length} x{factor:g} {policy:8s} recall "
                            f"{row['recall']:.3f} violations {row['violations']} p99 "
                            f"{row['p99_latency_s'] if row['p99_latency_s'] is not None else float('nan'):.4f} s "
                            f"(bound {bound} s)")
    return {
        "workload": workload,
        "mode": mode,
        "machine": _machine(),
        "settings": {"lengths": list(lengths), "factors": list(factors), "n_events": n_events,
                     "warmup": warmup, "beta": beta, "buckets": buckets, "backend": backend,
                     "seeds": list(seeds), "peaks": PEAKS, "noise": noise, "regather_every": every, "guard": guard,
                     "utility": utility, "allocation": allocation,
                     "latency_bound_s": latency_bound or f"auto ({bound_fraction} x the largest peak's drain time)"},
        "rows": rows,
        "summary": summarize(rows),
    }


def _always(recent: pd.DataFrame) -> bool:
    """Periodic statistics gathering: every check re-gathers."""
    return True


def summarize(rows: list[dict]) -> dict:
    """Per policy: mean recall, total violations, worst p99 latency; and the issue's criteria."""
    out: dict = {}
    for pol in dict.fromkeys(r["policy"] for r in rows):
        rs = [r for r in rows if r["policy"] == pol]
        p99 = [r["p99_latency_s"] for r in rs if r["p99_latency_s"] is not None]
        out[pol] = {"recall": float(np.mean([r["recall"] for r in rs])),
                    "violations": int(sum(r["violations"] for r in rs)),
                    "p99_latency_s": float(max(p99)) if p99 else None,
                    "runs": len(rs)}
    if "darling" in out and "random" in out:
        ratios = []
        for r in rows:
            if r["policy"] == "darling" and r["length"] >= 4:
                rnd = [x for x in rows if x["policy"] == "random" and x["sweep"] == r["sweep"]
                       and x["length"] == r["length"] and x["factor"] == r["factor"] and x["seed"] == r["seed"]]
                if rnd:
                    ratios.append(r["recall"] / rnd[0]["recall"] if rnd[0]["recall"] > 0 else float("inf"))
        out["criteria"] = {
            "darling_violations": out["darling"]["violations"],
            "min_recall_ratio_darling_over_random_length_ge_4": min(ratios) if ratios else None,
            "met": out["darling"]["violations"] == 0 and bool(ratios) and min(ratios) >= 2.0,
        }
    return out


def _machine() -> dict:
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def plot(result: dict, path: str) -> None:
    """Recall and p99 latency per policy, against pattern length and against the overload rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for col, (sweep, key, label) in enumerate((("length", "length", "pattern length"),
                                               ("factor", "factor", "overload rate (x base)"))):
        for pol in dict.fromkeys(r["policy"] for r in rows):
            rs = [r for r in rows if r["sweep"] == sweep and r["policy"] == pol]
            xs = sorted(dict.fromkeys(r[key] for r in rs))
            rec = [np.mean([r["recall"] for r in rs if r[key] == x]) for x in xs]
            p99 = [np.max([r["p99_latency_s"] or 0 for r in rs if r[key] == x]) for x in xs]
            axes[0, col].plot(xs, rec, marker="o", label=pol)
            axes[1, col].plot(xs, p99, marker="o", label=pol)
        bounds = sorted({r["latency_bound_s"] for r in rows if r["sweep"] == sweep})
        for b in bounds:
            axes[1, col].axhline(b, color="k", ls="--", lw=0.8)
        axes[0, col].set_ylabel("recall (share of the matches found)")
        axes[1, col].set_ylabel("p99 detection latency (s)")
        axes[1, col].set_yscale("log")
        for ax in axes[:, col]:
            ax.set_xlabel(label)
            ax.grid(True, which="both", alpha=0.3)
            if sweep == "factor":
                ax.set_xscale("log")
    axes[0, 0].legend()
    fig.suptitle(f"DARLING load shedding, {result['workload']} workload, {result['mode']} time "
                 "(dashed: L_max)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
