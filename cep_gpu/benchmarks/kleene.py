"""``cep-gpu bench kleene``: Kleene closure (issue 19) against window size.

Events: event ``i`` at ``i`` ms; type A, B or C (B nine times in ten: the set's events); ``k``
uniform in ``[0, keys)``; ``v`` uniform in ``[0, 1)``. Two rules, each with the set tied to the
key of its neighbours:

* **greedy**: ``SEQ(A a, KL(B b), C c) where a.k = c.k and b.k = a.k within WIN select greedy
  return n := count(b), s := avg(b.v)``: one set per (a, c) pair, linear in the span;
* **bounded each**: ``SEQ(A a, KL(B b)[1..2], C c)`` with the same conditions: every set of one or
  two elements, quadratic in the span.

Reported per (rule, window, backend): events/s (min/median/max over the repetitions), composite
events, and microseconds per C event (the terminators), on the machine that ran them (recorded
in the JSON). Every backend of :data:`cep_gpu.kleene.KLEENE_BACKENDS` may be timed; ``gpu-host``
figures are figures of the host build (the CUDA C kernels compiled by g++ and run serially on the
CPU), never GPU figures; ``gpu`` needs a CUDA device.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd

RULES = {
    "greedy": (
        "define KGreedy(n: int, s: float) pattern SEQ(A a, KL(B b), C c) "
        "where a.k = c.k and b.k = a.k within {win} ms select greedy "
        "return n := count(b), s := avg(b.v)"
    ),
    "each[1..2]": (
        "define KPairs pattern SEQ(A a, KL(B b)[1..2], C c) "
        "where a.k = c.k and b.k = a.k within {win} ms"
    ),
}
DEFAULT_WINDOWS = (100, 1000, 4000, 10000)


def events(n: int, keys: int = 100, seed: int = 0) -> pd.DataFrame:
    """The workload's events (see the module docstring)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "type": rng.choice(np.array(["A", "B", "C"]), n, p=[0.05, 0.9, 0.05]),
        "ts": np.arange(n, dtype=np.int64),
        "k": rng.integers(0, keys, n),
        "v": rng.random(n),
    })


def run(windows=DEFAULT_WINDOWS, n_events: int = 20000, backends=("cpu",), repeat: int = 3,
        warmup: int = 1, seed: int = 0, on_row=None) -> dict:
    """Time both rules for every window and backend; the results as a dict (JSON-ready)."""
    import cep_gpu

    from .runner import machine_info

    ev = events(n_events, seed=seed)
    n_term = int((ev["type"] == "C").sum())
    rows = []
    for name, template in RULES.items():
        for win in windows:
            text = template.format(win=win)
            for backend in backends:
                for _ in range(warmup):
                    cep_gpu.detect(ev, text, backend=backend, time_unit="ms", output="count")
                secs, count = [], 0
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    got = cep_gpu.detect(ev, text, backend=backend, time_unit="ms", output="count")
                    secs.append(time.perf_counter() - t0)
                    count = sum(got.values())
                eps = sorted(n_events / s for s in secs)
                row = {
                    "rule": name, "window_ms": win, "backend": backend, "events": n_events,
                    "composite_events": count,
                    "events_per_s": {"min": eps[0], "median": eps[len(eps) // 2], "max": eps[-1]},
                    "us_per_terminator": float(np.median(secs)) / max(n_term, 1) * 1e6,
                }
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    return {"workload": "kleene", "machine": machine_info(), "rows": rows}


def markdown(result: dict) -> str:
    """The results as a Markdown table."""
    lines = ["| rule | window (ms) | backend | composite events | events/s (median) | us per C |",
             "|---|---:|---|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(
            f"| {r['rule']} | {r['window_ms']} | {r['backend']} | {r['composite_events']} | "
            f"{r['events_per_s']['median']:,.0f} | {r['us_per_terminator']:.1f} |"
        )
    return "\n".join(lines)


def kleene_bench_from_bench_args(args) -> int:
    """``cep-gpu bench kleene [--sizes WINDOWS_MS] [--events N] [--backend cpu,gpu-host] ...``."""
    from ..kleene import KLEENE_BACKENDS

    backends = args.backends or ["cpu"]
    bad = [b for b in backends if b not in KLEENE_BACKENDS]
    if bad:
        from ..cli import UsageError

        raise UsageError("--backend", f"{', '.join(map(repr, bad))} cannot run Kleene rules; use {', '.join(KLEENE_BACKENDS)}")
    result = run(
        windows=args.sizes or DEFAULT_WINDOWS, n_events=args.events or 20000, backends=backends,
        repeat=args.repeat, warmup=args.warmup, seed=args.seed,
        on_row=lambda r: print(f"  {r['rule']} window {r['window_ms']} ms {r['backend']}: "
                               f"{r['events_per_s']['median']:,.0f} events/s", flush=True),
    )
    print(markdown(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return 0
