"""Benchmark: ``auto`` against ``cpu`` (and ``gpu`` where a device exists) over the seq3 sweep (issue 4).

    .venv/bin/python bench/auto_vs_cpu.py [--events 1000000] [--windows 100,1000,4000,10000]
        [--repeat 15] [--json out.json]

The planner's target is that ``auto`` stays within 10% of the better of ``cpu`` and ``gpu`` at every
window. The backends differ by a few percent at most, less than the drift of a shared machine
between two separate runs, so the runs are interleaved (cpu, auto, [gpu], cpu, auto, ...) on the
same ingested table and the medians are compared. Timed: ``detect_table`` with
``output="count"`` semantics (as ``cep-gpu bench``), after one unmeasured run per backend.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from cep_gpu.benchmarks.workloads import seq3_events, seq3_events_for, seq3_rule
from cep_gpu.detect import as_rules, detect_table
from cep_gpu.events import EventTable
from cep_gpu.planner import gpu_usable


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--windows", default="100,1000,4000,10000")
    ap.add_argument("--policies", default="each,last")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    backends = ["cpu", "auto"] + (["gpu"] if gpu_usable() else [])
    rows = []
    print(f"{'policy':6} {'WIN':>6} {'events':>9} " + " ".join(f"{b + ' ms':>10}" for b in backends)
          + f" {'auto/best':>10}")
    for policy in args.policies.split(","):
        for win in map(int, args.windows.split(",")):
            n = seq3_events_for(win, policy, args.events)
            table = EventTable.from_pandas(seq3_events(n, seed=0), time_unit="ms")
            rules = as_rules(seq3_rule(win, policy))
            times: dict[str, list[float]] = {b: [] for b in backends}
            counts = {b: sum(len(r) for r in detect_table(table, rules, b, count_only=True)) for b in backends}
            if len(set(counts.values())) != 1:
                raise SystemExit(f"backends disagree: {counts}")
            for _ in range(args.repeat):
                for b in backends:
                    t0 = time.perf_counter()
                    detect_table(table, rules, b, count_only=True)
                    times[b].append(time.perf_counter() - t0)
            med = {b: statistics.median(v) for b, v in times.items()}
            best = min(v for b, v in med.items() if b != "auto")
            row = {"policy": policy, "window_ms": win, "events": n, "median_s": med,
                   "auto_over_best": med["auto"] / best, "times_s": times}
            rows.append(row)
            print(f"{policy:6} {win:>6} {n:>9} " + " ".join(f"{med[b] * 1e3:>10.2f}" for b in backends)
                  + f" {row['auto_over_best']:>10.3f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backends": backends, "rows": rows}, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
