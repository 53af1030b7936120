"""Benchmark: the streaming ``Engine`` against batch ``detect`` on the same events (issue 2).

    .venv/bin/python bench/stream_vs_batch.py [--events 200000] [--chunks 10000,1000,100]
        [--workload seq3|museum] [--window 1000] [--policy each] [--backend cpu] [--json out.json]

Batch: ``cep_gpu.detect`` over the whole frame. Streaming: a fresh ``Engine`` that gets the same
frame through ``publish`` in chunks of N events (in timestamp order), then ``flush``. Both build the
full composite events (pandas output: the streaming engine returns them per publish), and both
must find the same number. Each configuration runs once to compile the kernels, then ``--repeat``
times; the best time is reported. The ratio ``stream_s / batch_s`` is what issue 2 bounds (2x).
"""

from __future__ import annotations

import argparse
import json
import time

import cep_gpu
from cep_gpu.benchmarks.workloads import seq3_events, seq3_rule
from cep_gpu.museum import MUSEUM_RULES, generate_museum


def workload(name: str, n: int, window: int, policy: str):
    """(events, rule text, time unit)."""
    if name == "seq3":
        return seq3_events(n, seed=0), seq3_rule(window, policy), "ms"
    if name == "museum":
        return generate_museum(n, seed=0), MUSEUM_RULES, "s"
    raise SystemExit(f"unknown workload {name!r}: seq3 or museum")


def best(fn, repeat: int) -> tuple[float, object]:
    out, t_best = fn(), float("inf")  # the first run compiles
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        t_best = min(t_best, time.perf_counter() - t0)
    return t_best, out


def stream(events, rules, unit: str, chunk: int, backend: str) -> int:
    eng = cep_gpu.Engine(rules, backend=backend, time_unit=unit)
    found = 0
    for start in range(0, len(events), chunk):
        found += len(eng.publish(events.iloc[start:start + chunk]))
    return found + len(eng.flush())


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="seq3")
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--window", type=int, default=1000, help="seq3 window (ms)")
    ap.add_argument("--policy", default="each")
    ap.add_argument("--chunks", default="10000,1000,100")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    events, rules, unit = workload(args.workload, args.events, args.window, args.policy)
    events = events.sort_values("ts", kind="stable").reset_index(drop=True)
    batch_s, out = best(lambda: cep_gpu.detect(events, rules, backend=args.backend, time_unit=unit),
                        args.repeat)
    n_batch = len(out)
    results = []
    print(f"{'chunk':>7} {'batch ev/s':>12} {'stream ev/s':>12} {'stream/batch':>13} {'composites':>11}")
    for chunk in map(int, args.chunks.split(",")):
        stream_s, n_stream = best(lambda c=chunk: stream(events, rules, unit, c, args.backend), args.repeat)
        if n_stream != n_batch:
            raise SystemExit(f"streaming found {n_stream} composite events, batch {n_batch}")
        row = {
            "workload": args.workload, "events": len(events), "window": args.window,
            "policy": args.policy, "backend": args.backend, "chunk": chunk,
            "batch_s": batch_s, "stream_s": stream_s, "ratio": stream_s / batch_s,
            "batch_events_per_s": len(events) / batch_s, "stream_events_per_s": len(events) / stream_s,
            "composites": n_batch,
        }
        results.append(row)
        print(f"{chunk:>7} {row['batch_events_per_s']:>12,.0f} {row['stream_events_per_s']:>12,.0f} "
              f"{row['ratio']:>13.2f} {n_batch:>11}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
