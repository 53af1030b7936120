"""GPU variants of the seq3 benchmark (docs/performance.md): per-terminator and batched.

    .venv/bin/python bench/seq3_gpu.py [--events N] [--windows 100,1000] [--policies each,last]

Runs only where ``backend="gpu"`` is usable (CuPy and a CUDA device); elsewhere it prints why and
exits with status 2. ``--backend gpu-host`` runs the same code on the host build of the kernels,
which checks the script but measures nothing about GPUs: its figures must never be reported as
GPU figures. Each row also times the ``cpu`` backend on the same input for the crossover.

* batched: ``detect(..., output="count")`` over the whole stream (all terminators of a rule share
  each launch); events/s, the fastest of ``--repeat`` runs after an untimed one.
* per-terminator: ``match(rule, table, lo=i, hi=i + 1)`` for a sample of terminators, as the
  streaming engine calls it; microseconds per terminator (launch and transfer latency included).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np

import cep_gpu
from cep_gpu.backends import get_backend
from cep_gpu.benchmarks.workloads import SEQ3_WINDOWS_MS, seq3_events, seq3_events_for, seq3_rule
from cep_gpu.errors import BackendUnavailableError
from cep_gpu.events import EventTable


def batched(backend: str, events, text: str, repeat: int) -> tuple[float, int]:
    """Seconds of the fastest of ``repeat`` batch detects, after one untimed run over the same
    events (it compiles every kernel variant the input reaches: a smaller warm-up input can leave
    the large-work paths cold), and the composite count."""
    out = cep_gpu.detect(events, text, backend=backend, time_unit="ms", output="count")
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        cep_gpu.detect(events, text, backend=backend, time_unit="ms", output="count")
        best = min(best, time.perf_counter() - t0)
    return best, int(out.get("Seq3", 0))


def per_terminator(backend: str, events, text: str, sample: int) -> float:
    """Microseconds per terminator, one ``match`` call per terminator (a sample of them)."""
    table = EventTable.from_pandas(events, time_unit="ms")
    rule = cep_gpu.parse_rule(text)
    impl = get_backend(backend)
    terms = np.flatnonzero(events["type"].to_numpy() == "C")
    terms = terms[len(terms) // 2 :][:sample]  # past the warm-up edge: full windows
    for t in terms[:10]:  # warm-up: compiles, first device allocations
        impl.match(rule, table, int(t), int(t) + 1)
    t0 = time.perf_counter()
    for t in terms:
        impl.match(rule, table, int(t), int(t) + 1)
    return (time.perf_counter() - t0) / max(len(terms), 1) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--windows", default=",".join(map(str, SEQ3_WINDOWS_MS)))
    ap.add_argument("--policies", default="each,last")
    ap.add_argument("--backend", default="gpu", choices=("gpu", "gpu-host"))
    ap.add_argument("--sample", type=int, default=200, help="terminators timed one by one")
    ap.add_argument("--repeat", type=int, default=3, help="timed batch runs per point (the fastest counts)")
    args = ap.parse_args()
    try:
        get_backend(args.backend)
    except BackendUnavailableError as err:
        print(f"seq3_gpu: not run: {err}", file=sys.stderr)
        sys.exit(2)
    if args.backend != "gpu":
        print("# host build of the GPU kernels: NOT a GPU measurement")
    else:
        import cupy  # type: ignore[import-not-found]

        props = cupy.cuda.runtime.getDeviceProperties(0)
        print(f"# device: {props['name'].decode()}, host: {platform.processor() or platform.machine()}")
    print(f"{'policy':6} {'WIN':>6} {'events':>9} {'composites':>11} {args.backend + ' ev/s':>14} "
          f"{'cpu ev/s':>12} {'speedup':>8} {args.backend + ' us/term':>14} {'cpu us/term':>12}")
    for policy in args.policies.split(","):
        for win in map(int, args.windows.split(",")):
            n = seq3_events_for(win, policy, args.events, composite_budget=1e8)
            events = seq3_events(n)
            text = seq3_rule(win, policy)
            g_s, count = batched(args.backend, events, text, args.repeat)
            c_s, count_cpu = batched("cpu", events, text, args.repeat)
            assert count == count_cpu, f"{args.backend} found {count}, cpu {count_cpu}"
            g_us = per_terminator(args.backend, events, text, args.sample)
            c_us = per_terminator("cpu", events, text, args.sample)
            print(f"{policy:6} {win:>6} {n:>9} {count:>11} {n / g_s:>14,.0f} {n / c_s:>12,.0f} "
                  f"{c_s / g_s:>8.2f} {g_us:>14.1f} {c_us:>12.1f}", flush=True)


if __name__ == "__main__":
    main()
