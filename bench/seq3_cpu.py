"""Quick seq3 sweep of the ``cpu`` backend (docs/performance.md): events/s per window and policy.

    .venv/bin/python bench/seq3_cpu.py [--events N] [--output count|arrow] [--windows 100,1000]

Times ``cep_gpu.detect(..., backend="cpu")`` end to end (ingestion included; best of 3) after a
warm-up run that compiles the kernels, and also the backend's ``match`` alone. Inputs shrink where
``each`` would produce more than 3e7 composite events (memory). For tuning, not for the docs
(bench/ holds the real suites).
"""

from __future__ import annotations

import argparse
import time

import cep_gpu
from cep_gpu.backends import get_backend
from cep_gpu.benchmarks.workloads import SEQ3_WINDOWS_MS, seq3_events, seq3_events_for, seq3_rule
from cep_gpu.events import EventTable


def expected_composites(n: int, window: int, policy: str) -> float:
    """Composite events of seq3 over ``n`` events, counting the ramp-up before a full window."""
    if policy != "each":
        return n / 3
    ramp = min(n, window)
    return (ramp**3 / 3 + max(n - window, 0) * window**2) / 300**2 / 3


def events_for(window: int, policy: str, n_max: int, budget: float) -> int:
    """The most events (up to ``n_max``) whose composite events stay within ``budget`` (memory)."""
    n = seq3_events_for(window, policy, n_max, composite_budget=budget)
    while n > 1000 and expected_composites(n, window, policy) > budget:
        n = int(n * 0.8)
    return n


def run(window: int, policy: str, n_max: int, output: str) -> dict:
    n = events_for(window, policy, n_max, 3e7)
    events = seq3_events(n)
    text = seq3_rule(window, policy)
    # warm-up on the full input: compiles the serial and the parallel kernels
    cep_gpu.detect(events, text, backend="cpu", time_unit="ms", output=output)
    total = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        out = cep_gpu.detect(events, text, backend="cpu", time_unit="ms", output=output)
        total = min(total, time.perf_counter() - t0)
    composites = out["Seq3"] if output == "count" else len(out)
    table = EventTable.from_pandas(events, time_unit="ms")
    rule = cep_gpu.parse_rule(text)
    match_s = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        get_backend("cpu").match(rule, table)
        match_s = min(match_s, time.perf_counter() - t0)
    terms = int((events["type"] == "C").sum())
    return {
        "win": window, "policy": policy, "events": n, "composites": composites,
        "events_per_s": n / total, "match_events_per_s": n / match_s,
        "us_per_terminator": total / terms * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--output", default="count", choices=("count", "arrow"))
    ap.add_argument("--windows", default=",".join(map(str, SEQ3_WINDOWS_MS)))
    ap.add_argument("--policies", default="each,last")
    args = ap.parse_args()
    print(f"{'policy':6} {'WIN':>6} {'events':>9} {'composites':>11} {'events/s':>12} "
          f"{'match ev/s':>12} {'us/term':>8}")
    for policy in args.policies.split(","):
        for win in map(int, args.windows.split(",")):
            r = run(win, policy, args.events, args.output)
            print(f"{policy:6} {win:>6} {r['events']:>9} {r['composites']:>11} "
                  f"{r['events_per_s']:>12,.0f} {r['match_events_per_s']:>12,.0f} "
                  f"{r['us_per_terminator']:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
