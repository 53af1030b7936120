"""Benchmark: latency of one-event publishes and throughput against publish size (issue 12).

    .venv/bin/python bench/stream_latency.py [--events 20000] [--window 1000] [--policies each,last]
        [--sizes 1,10,100,1000,10000] [--rss-events 0] [--backend cpu] [--repeat 1]
        [--latency-output records] [--outputs records,pandas] [--png latency.png] [--json out.json]

Workload: seq3 (docs/performance.md) with k-equality, event i at i ms, WIN in ms (= events per
window). Latency: a fresh ``Engine`` is warmed with two windows of events, then every further
event is published alone as a plain dict with ``output="records"`` (``--latency-output tuples``:
the tuple form); each publish is timed
(``time.perf_counter_ns``) and reported as percentiles, split into terminators (C) and the rest.
Throughput: the same events as columnar micro-batches (a mapping of NumPy arrays) of each size,
with each of ``--outputs`` (``records``, ``tuples``, ``pandas``, ``arrow``,
``columns``), next to one batch
``detect`` (pandas output; Arrow output for ``arrow``: like for like), timed by the wall clock
and by the process's CPU time;
both must find the same number of composite events. RSS: resident memory before and after
``--rss-events`` more one-event publishes (0: skipped).

Timings are wall-clock on whatever machine runs this; on a shared machine they are noisy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

import cep_gpu
from cep_gpu.benchmarks.workloads import seq3_events, seq3_rule
from cep_gpu.output import composite_count


def plain_records(frame) -> list[dict]:
    """Rows as dicts of Python scalars (what a producer would publish)."""
    cols = {c: frame[c].to_numpy().tolist() for c in frame.columns}
    return [dict(zip(cols, vals)) for vals in zip(*cols.values())]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def latency(rule: str, events, backend: str, warm: int, output: str = "records") -> dict:
    recs = plain_records(events)
    eng = cep_gpu.Engine(rule, backend=backend, time_unit="ms")
    for r in recs[:warm]:
        eng.publish(r, output=output)
    lat = np.empty(len(recs) - warm, np.int64)
    kinds = np.array([r["type"] for r in recs[warm:]])
    found = 0
    t_all, c_all = time.perf_counter(), time.process_time()
    for k, r in enumerate(recs[warm:]):
        t0 = time.perf_counter_ns()
        found += len(eng.publish(r, output=output))
        lat[k] = time.perf_counter_ns() - t0
    wall = time.perf_counter() - t_all
    cpu = time.process_time() - c_all
    us = lat / 1e3
    # events/s by the wall clock, and by this process's CPU time (what a core of its own would
    # sustain: on a shared machine the wall clock includes other jobs' time slices)
    out = {"publishes": len(lat), "composites": found, "events_per_s": len(lat) / wall,
           "events_per_cpu_s": len(lat) / cpu, "fast_path": eng.stats()["fast_path"], "us": us}
    for name, sel in (("all", slice(None)), ("terminator", kinds == "C"), ("other", kinds != "C")):
        part = us[sel]
        out[name] = {q: float(np.percentile(part, p)) for q, p in (("median", 50), ("p90", 90), ("p99", 99))}
        out[name]["mean"] = float(part.mean())
    return out


def throughput(rule: str, events, backend: str, sizes: list[int], output: str, repeat: int = 1) -> list[dict]:
    """Events/s per publish size: the best of ``repeat`` runs (the least disturbed by other jobs)."""
    cols = {c: events[c].to_numpy() for c in events.columns}
    n = len(events)
    cep_gpu.detect(events.iloc[:2000], rule, backend=backend, time_unit="ms")  # compile
    batch_s = batch_cpu = math.inf
    batch_output = "arrow" if output == "arrow" else "pandas"
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        batch = len(cep_gpu.detect(events, rule, backend=backend, time_unit="ms", output=batch_output))
        batch_s = min(batch_s, time.perf_counter() - t0)
        batch_cpu = min(batch_cpu, time.process_time() - c0)
    rows = [{"size": "batch", "output": batch_output, "seconds": batch_s, "cpu_seconds": batch_cpu, "events_per_s": n / batch_s,
             "events_per_cpu_s": n / batch_cpu, "composites": batch}]
    same_s = None
    if output in ("records", "tuples"):
        # batch in the same output form: detect has no records output, so its frame converted
        # the way a user would (pandas' to_dict / itertuples), to compare like with like
        same_s = math.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            frame = cep_gpu.detect(events, rule, backend=backend, time_unit="ms")
            _ = frame.to_dict("records") if output == "records" else list(frame.itertuples(index=False, name=None))
            same_s = min(same_s, time.perf_counter() - t0)
        rows.append({"size": "batch", "output": f"pandas + {output}", "seconds": same_s, "events_per_s": n / same_s,
                     "composites": batch})
    for size in sizes:
        dt = cpu = math.inf
        for _ in range(repeat):
            eng = cep_gpu.Engine(rule, backend=backend, time_unit="ms")
            found = 0
            t0, c0 = time.perf_counter(), time.process_time()
            for s in range(0, n, size):
                found += composite_count(eng.publish({c: v[s:s + size] for c, v in cols.items()}, output=output))
            found += composite_count(eng.flush(output=output))
            dt = min(dt, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
            if found != batch:
                raise SystemExit(f"publish size {size}: {found} composite events, batch found {batch}")
        rows.append({"size": size, "output": output, "seconds": dt, "cpu_seconds": cpu, "events_per_s": n / dt,
                     "events_per_cpu_s": n / cpu, "composites": found, "vs_batch": dt / batch_s,
                     "vs_batch_cpu": cpu / batch_cpu}
                    | ({"vs_batch_same_form": dt / same_s} if same_s else {}))
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=20_000, help="timed one-event publishes")
    ap.add_argument("--window", type=int, default=1000, help="seq3 window (ms = events)")
    ap.add_argument("--policies", default="each,last")
    ap.add_argument("--sizes", default="1,10,100,1000,10000")
    ap.add_argument("--size-events", type=int, default=30_000, help="events of the throughput runs")
    ap.add_argument("--rss-events", type=int, default=0)
    ap.add_argument("--outputs", default="records,pandas", help="output forms of the throughput runs (records, tuples, pandas, arrow, columns)")
    ap.add_argument("--latency-output", default="records", choices=["records", "tuples"])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--repeat", type=int, default=1, help="throughput: best of this many runs per size")
    ap.add_argument("--png")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    warm = 2 * args.window
    report: dict = {"window_ms": args.window, "backend": args.backend, "latency": {}, "throughput": {},
                    "load_average": os.getloadavg(), "repeat": args.repeat}
    for policy in args.policies.split(","):
        rule = seq3_rule(args.window, policy)
        lat = latency(rule, seq3_events(warm + args.events, seed=0), args.backend, warm, args.latency_output)
        us = lat.pop("us")
        report["latency"][policy] = lat | {"histogram_us": us}
        print(f"{policy}: {lat['publishes']} one-event publishes, {lat['events_per_s']:,.0f} events/s "
              f"({lat['events_per_cpu_s']:,.0f} per CPU second), {lat['composites']} composites, "
              f"fast path {lat['fast_path']['calls']} calls")
        for name in ("all", "terminator", "other"):
            q = lat[name]
            print(f"  {name:10s} median {q['median']:8.1f} us  p90 {q['p90']:8.1f}  p99 {q['p99']:8.1f}  "
                  f"mean {q['mean']:8.1f}")
        for output in args.outputs.split(","):
            rows = throughput(rule, seq3_events(args.size_events, seed=1), args.backend, sizes, output, args.repeat)
            report["throughput"][f"{policy}/{output}"] = rows
            for r in rows:
                extra = f"  ({r['vs_batch']:.2f}x batch time, {r['vs_batch_cpu']:.2f}x by CPU time)" \
                    if "vs_batch" in r else ""
                if "vs_batch_same_form" in r:
                    extra += f"  ({r['vs_batch_same_form']:.2f}x batch in the same form)"
                cpu = f" ({r['events_per_cpu_s']:>12,.0f} per CPU second)" if "events_per_cpu_s" in r else ""
                print(f"  output={output} publish size {r['size']!s:>6} {r['output']}: {r['events_per_s']:>12,.0f} "
                      f"events/s{cpu}{extra}")
    if args.rss_events:
        rule = seq3_rule(args.window, "each")
        recs = plain_records(seq3_events(warm + args.rss_events, seed=2))
        eng = cep_gpu.Engine(rule, backend=args.backend, time_unit="ms")
        for r in recs[:warm]:
            eng.publish(r, output="records")
        before = rss_bytes()
        marks = []
        for k, r in enumerate(recs[warm:]):
            eng.publish(r, output="records")
            if k % max(1, args.rss_events // 10) == 0:
                marks.append(rss_bytes())
        report["rss"] = {"before_mb": before / 2**20, "after_mb": rss_bytes() / 2**20,
                         "marks_mb": [m / 2**20 for m in marks], "buffered": eng.stats()["buffered"]}
        print(f"RSS over {args.rss_events} one-event publishes: {before / 2**20:.1f} MB -> "
              f"{rss_bytes() / 2**20:.1f} MB (buffer {eng.stats()['buffered']} rows)")
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for policy, lat in report["latency"].items():
            us = lat["histogram_us"]
            ax.hist(us, bins=np.logspace(np.log10(max(us.min(), 1)), np.log10(us.max()), 60),
                    histtype="step", label=f"seq3 {policy}, WIN={args.window}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("publish latency (us), one event, output='records'")
        ax.set_ylabel("publishes")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)
        print(f"wrote {args.png}")
    for lat in report["latency"].values():
        lat["histogram_us"] = None  # not in the JSON
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
