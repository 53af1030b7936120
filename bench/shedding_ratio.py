"""Why DARLING's recall is not 2x random's on the stock-like workload: a diagnosis in virtual time
(docs/performance.md, section "DARLING load shedding").

For each pattern length, at the benchmark's virtual-time setting (the cost model
``bench.VIRTUAL_COSTS``, base rate half the capacity, peaks x1000, L_max a quarter of the largest
peak's drain time) with 2000 warm-up and 6000 run events (the prices drift little over that
span, so the warm-up statistics hold and nothing is re-gathered), it runs the same harness with
four choices of the victim:

* ``random``: random input shedding under DARLING's constraints;
* ``darling``: Eq. 11 utilities;
* ``support``: the optional ``support`` utility (docs/shedding.md, resolution 23; reads time);
* ``value-oracle``: the best utility that reads only an event's type and value: the mean number of
  reference matches of the events of its type in its value bin (20 quantile bins, computed on the
  run itself, so an upper bound for any value-based utility such as Eq. 11);
* ``oracle``: the number of reference matches each event is in (the best any utility can do).

Recall is split into matches wholly inside the peaks and wholly in the base-rate stretches (where
nothing is dropped). ``--setting light`` is the lighter setting the section also quotes (1 ms per
event, no window cost, base rate 500 events/s, L_max = 0.3 s, 4000 events).

    .venv/bin/python bench/shedding_ratio.py [--setting default|light] [--lengths 3,4,5,6]
        [--workload stock|nasdaq] [--events N] [--window SECONDS] [--factor-c C]
"""

from __future__ import annotations

import argparse
import re

import numpy as np

from cep_gpu import detect
from cep_gpu.shedding import CostModel, Shedder, SheddingEngine, bench


def diagnose(length: int, setting: str = "default", seed: int = 0, window: int | None = None,
             factor_c: float | None = None, workload: str = "stock", n_run: int | None = None) -> dict:
    n_run = n_run or (6000 if setting == "default" else 4000)
    if workload == "nasdaq":  # the paper's Q1^A on per-minute volumes (resolution 19)
        rule, ev = bench.nasdaq(2000 + n_run, length, seed, factor_c=1.5 if factor_c is None else factor_c)
        attr = "volume"
    else:
        rule, ev = bench.stock(2000 + n_run, length, seed, factor_c=1.0 if factor_c is None else factor_c)
        attr = "price"
    if window is not None:  # the paper's windows hold many more events of each type (Sec. 5.1)
        rule = re.sub(r"within \d+ (s|min)", f"within {window} s", rule)
    warm, main = ev.iloc[:2000], ev.iloc[2000:].reset_index(drop=True)
    costs = bench.VIRTUAL_COSTS if setting == "default" else CostModel(default=1e-3)
    probe = SheddingEngine(rule, Shedder(1.0, policy="none"), mode="virtual", cost_model=costs)
    probe.warm_up(warm)
    zbar = probe.shedder.z_mean
    if setting == "default":
        base, bound = 0.5 / zbar, round(max(0.3 * n_run * zbar * 0.25, 20 * zbar), 4)
    else:
        base, bound = 500.0, 0.3
    arr = bench.load_profile(n_run, base, 1000)
    ref = [tuple(x) for x in detect(main, rule)["ids"]]
    peak = np.zeros(n_run, bool)
    for share, at in bench.PEAKS:
        lo = int(round(at * n_run))
        peak[lo:lo + int(round(share * n_run))] = True
    where = np.array(["peak" if peak[list(m)].all() else "base" if not peak[list(m)].any() else "mixed"
                      for m in ref])
    part = np.zeros(n_run)
    for m in ref:
        part[list(m)] += 1
    value = np.zeros(n_run)
    types, price = main["type"].to_numpy(), main[attr].to_numpy()
    for t in np.unique(types):
        m = types == t
        edges = np.quantile(price[m], np.linspace(0, 1, 21))
        b = np.clip(np.searchsorted(edges, price[m], "right") - 1, 0, 19)
        means = np.array([part[m][b == k].mean() if (b == k).any() else 0.0 for k in range(20)])
        value[m] = means[b]
    oracles = {"value-oracle": value / max(value.max(), 1), "oracle": part / max(part.max(), 1)}
    out = {"length": length, "latency_bound_s": bound, "matches": len(ref),
           "base_share": float((where == "base").mean()) if len(ref) else float("nan")}
    for name in ("random", "darling", "support", "value-oracle", "oracle"):
        eng = SheddingEngine(rule, Shedder(bound, policy="random" if name == "random" else "darling",
                                           seed=seed, utility="support" if name == "support" else "eq11"),
                             mode="virtual", cost_model=costs)
        eng.warm_up(warm)
        found = eng.run(main, arr, utilities=oracles.get(name))
        s = eng.stats()
        got = set(found["ids"])
        hit = np.array([m in got for m in ref])
        out[name] = {"recall": s["recall"], "violations": s["violations"], "dropped": s["dropped"],
                     "peak": float(hit[where == "peak"].mean()) if (where == "peak").any() else None,
                     "base": float(hit[where == "base"].mean()) if (where == "base").any() else None}
    return out


def _over(x: float, rnd: float) -> str:
    """x / random's recall, printable when random found nothing."""
    return f"{x / rnd:.2f}" if rnd > 0 else ("-" if x == 0 else "inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", choices=["default", "light"], default="default")
    ap.add_argument("--lengths", default="3,4,5,6")
    ap.add_argument("--workload", choices=["stock", "nasdaq"], default="stock")
    ap.add_argument("--events", type=int, default=None, help="run events (default 6000; light: 4000)")
    ap.add_argument("--window", type=int, default=None,
                    help="window in seconds (default: stock 4n² s, 2n events per type; nasdaq 60 min)")
    ap.add_argument("--factor-c", type=float, default=None,
                    help="C of a{i}.attr > a{i-1}.attr * C (default: stock 1, nasdaq 1.5)")
    args = ap.parse_args()
    print("length | matches (share outside peaks) | random | darling | support | value-oracle | oracle "
          "(recall: all / in peaks) | darling/random | support/random | oracle/random")
    for length in (int(x) for x in args.lengths.split(",")):
        d = diagnose(length, args.setting, window=args.window, factor_c=args.factor_c,
                     workload=args.workload, n_run=args.events)
        if not d["matches"]:
            print(f"{length} | 0 | (no reference match in this run: nothing to compare)")
            continue
        cells = " | ".join(f"{d[k]['recall']:.3f} / " + ("-" if d[k]["peak"] is None else f"{d[k]['peak']:.3f}")
                           for k in ("random", "darling", "support", "value-oracle", "oracle"))
        rnd = d["random"]["recall"]
        print(f"{length} | {d['matches']} ({d['base_share']:.2f}) | {cells} | "
              f"{_over(d['darling']['recall'], rnd)} | {_over(d['support']['recall'], rnd)} | "
              f"{_over(d['oracle']['recall'], rnd)}")
        assert d["darling"]["violations"] == 0


if __name__ == "__main__":
    main()
