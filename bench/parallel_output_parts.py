"""Does building HYPERSONIC's output in parallel parts pay on this machine? (docs/performance.md)

The hybrid engine at the Figure 10 points (pattern length 4, long windows, many composite events)
with its output built as it is by default (a group of composite events cut in up to ``units + 1``
parts that the publishing thread and idle units build: ``engine.output_parts``) against the same
engine building each group as one part (on the publishing thread, or the unit that takes it).
Each the best of ``--repeat`` runs, interleaved; wall clock and process CPU time; what two
threads got of the cores (``bench.cores_available``) before and after.

    .venv/bin/python bench/parallel_output_parts.py [--out docs/perf/parallel_output_parts.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import cep_gpu
from cep_gpu.parallel import HybridEngine
from cep_gpu.parallel import engine as engine_mod
from cep_gpu.parallel.bench import WORKLOADS, cores_available


def one_part(rules, results, store, table, arrow, part, most):
    """``engine.output_parts`` with every group built as one part."""
    return PARTS(rules, results, store, table, arrow, part, 1)


PARTS = engine_mod.output_parts


def timed(rule, ev, units: int, stats, parallel: bool) -> tuple[float, float, int, int, int]:
    engine_mod.output_parts = PARTS if parallel else one_part
    try:
        eng = HybridEngine(rule, units=units, stats=stats)
        t0, c0 = time.perf_counter(), time.process_time()
        out = eng.publish(ev)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        st = eng.stats()
        parts, by_units = st["output_parts"], st["output_parts_by_units"]
        eng.close()
    finally:
        engine_mod.output_parts = PARTS
    return wall, cpu, len(out), parts, by_units


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = []
    load0 = os.getloadavg()
    for workload in ("stock", "sensor"):
        gen, rule_of = WORKLOADS[workload]
        ev = gen(args.events, seed=0)
        for window in (1.0, 1.5, 2.0):
            rule = rule_of(4, window)
            stats = HybridEngine(rule, units=1).calibrate(ev)
            n_ref = len(cep_gpu.detect(ev, rule))
            cores = [cores_available()]
            for units in (1, 2):
                best = {True: [float("inf")] * 2, False: [float("inf")] * 2}
                info = {}
                timed(rule, ev, units, stats, True)  # warm
                for _ in range(args.repeat):
                    for parallel in (True, False):
                        wall, cpu, n, parts, by_units = timed(rule, ev, units, stats, parallel)
                        assert n == n_ref, (n, n_ref)
                        best[parallel] = [min(best[parallel][0], wall), min(best[parallel][1], cpu)]
                        info[parallel] = (parts, by_units)
                rows.append({"workload": workload, "length": 4, "window_s": window, "units": units,
                             "matches": n_ref, "parts_wall_s": best[True][0], "parts_cpu_s": best[True][1],
                             "one_part_wall_s": best[False][0], "one_part_cpu_s": best[False][1],
                             "parts": info[True][0], "parts_by_units": info[True][1],
                             "one_part_parts": info[False][0]})
                r = rows[-1]
                print(f"{workload} W={window} x{units}: parts {r['parts_wall_s'] * 1e3:.1f} ms "
                      f"(cpu {r['parts_cpu_s'] * 1e3:.1f}, {r['parts']} parts, {r['parts_by_units']} by units), "
                      f"one part {r['one_part_wall_s'] * 1e3:.1f} ms (cpu {r['one_part_cpu_s'] * 1e3:.1f})",
                      flush=True)
            cores.append(cores_available())
            for r in rows[-2:]:
                r["cores"] = cores
    result = {"machine": "2-core shared dev machine", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "load_before": load0, "load_after": os.getloadavg(), "events": args.events, "repeat": args.repeat,
              "points": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
