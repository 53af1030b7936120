"""Quick AIP throughput numbers on the benchmark workloads (docs/performance.md), next to the other backends.

Usage: ``.venv/bin/python bench/aip_quick.py [--events N] [--backends aip,cpu] [--repeat 2]``.
Prints events/s of batch detection (``detect_table``: ingestion excluded, best of ``--repeat``
runs, so compiled backends are measured warm) and the composite events per run.
Small inputs: AIP runs a Python loop per event, so this is meant to take a minute, not an hour.
"""

from __future__ import annotations

import argparse
import platform
import time

from cep_gpu.backends import get_backend
from cep_gpu.benchmarks import workloads as wl
from cep_gpu.detect import as_rules, detect_table
from cep_gpu.events import EventTable


def run_one(workload: wl.Workload, backend: str, repeat: int = 2) -> tuple[float, int]:
    """Best seconds of ``repeat`` batch runs and the composite events (the event table is built
    beforehand; the first run also pays for kernel compilation, so the best is a warm run)."""
    rules = as_rules(workload.rules)
    table = EventTable.from_pandas(workload.events, time_unit=workload.time_unit)
    get_backend(backend)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        results = detect_table(table, rules, backend)
        best = min(best, time.perf_counter() - t0)
    return best, sum(len(r.ts) for r in results)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--rules1000-events", type=int, default=10_000)
    ap.add_argument("--backends", default="aip")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    backends = args.backends.split(",")
    print(f"# {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"{'workload':34s} {'backend':8s} {'events':>8s} {'seconds':>8s} {'events/s':>10s} {'composites':>10s}")
    cases = [
        (f"seq3 {p} WIN={w}", wl.seq3(w, p, n_events=args.events))
        for p in ("each", "last") for w in (100, 1000, 4000)
    ]
    cases += [
        (f"rules1000 L={n} {p}", wl.Workload(
            "rules1000", wl.rules1000_rules(n, p), wl.rules1000_events(n, args.rules1000_events),
            "ms", (), {}))
        for p in ("each", "last") for n in (2, 3)
    ]
    for name, w in cases:
        for b in backends:
            secs, n = run_one(w, b, args.repeat)
            print(f"{name:34s} {b:8s} {w.n_events:8d} {secs:8.2f} {w.n_events / secs:10.0f} {n:10d}",
                  flush=True)


if __name__ == "__main__":
    main()
