"""DARLING vs random input shedding in virtual time, the exploratory setting of docs/performance.md
(section "DARLING load shedding"): 1 ms per event, no window cost, base rate 500 events/s, peaks
x1000, L_max = 0.3 s, 2000 warm-up + 4000 events of the stock-like workload.

    .venv/bin/python bench/shedding_ratio.py [walk] [noise]
"""

from __future__ import annotations

import sys

from cep_gpu.shedding import CostModel, Shedder, SheddingEngine, bench


def main(walk: float = 0.1, noise: float = 0.5) -> None:
    for length in (3, 4, 5, 6):
        rule, ev = bench.stock(6000, length, 0, walk=walk, noise=noise)
        warm, run = ev.iloc[:2000], ev.iloc[2000:].reset_index(drop=True)
        arrival = bench.load_profile(len(run), 500, 1000)
        recall = {}
        for policy in ("random", "darling"):
            eng = SheddingEngine(rule, Shedder(0.3, policy=policy), mode="virtual",
                                 cost_model=CostModel(default=1e-3))
            eng.warm_up(warm)
            eng.run(run, arrival)
            recall[policy] = eng.stats()["recall"]
            assert eng.stats()["violations"] == 0
        ratio = recall["darling"] / max(recall["random"], 1e-9)
        print(f"length {length}: random {recall['random']:.3f} darling {recall['darling']:.3f} ratio {ratio:.2f}")


if __name__ == "__main__":
    main(*(float(a) for a in sys.argv[1:3]))
