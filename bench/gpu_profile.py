"""Where the GPU backend's time goes on seq3 (the ``profile`` step of bench/gpu_check.sh).

    python bench/gpu_profile.py [--events 200000] [--window 10000] [--terminators 300] [--top 20]

Prints, for ``each`` and ``last``:

* the floor of the small runtime calls a launch makes (a host-to-device copy, a synchronising
  device-to-host read, a one-element fill), in microseconds (GPU only);
* one batched ``detect(..., output="count")`` under cProfile, GPU next to CPU, the functions
  with the most time of their own (host work shared by both backends shows in both);
* ``match`` per terminator under cProfile (GPU), with the combiner's launch and transfer counters.

What it is for: the next change to the GPU path starts from where the time is (docs/performance.md,
"GPU: NVIDIA H200"). ``--backend gpu-host`` runs the same on the host build of the kernels, to
check the script without a GPU: its times say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from functools import partial

import numpy as np

import cep_gpu
from cep_gpu.backends import get_backend
from cep_gpu.benchmarks.workloads import seq3_events, seq3_rule
from cep_gpu.errors import BackendUnavailableError
from cep_gpu.events import EventTable


def runtime_floor(calls: int = 2000) -> None:
    """Microseconds of the three small calls every launch makes, through the combiner's own
    runtime (``CupyRuntime``: pinned staging, its stream, a synchronising read)."""
    from cep_gpu.kernels.gpu import CupyRuntime

    rt = CupyRuntime()
    x = np.arange(64, dtype=np.int64)
    d = rt.to_device(x)
    for name, fn in (("to device, 512 B", lambda: rt.to_device(x)), ("to host, 512 B", lambda: rt.to_host(d)),
                     ("fill, 1 element", lambda: rt.full(1, 0, np.uint64))):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        rt.to_host(d)  # (waits for the stream)
        print(f"floor {name}: {(time.perf_counter() - t0) / calls * 1e6:.1f} us")


def profiled(fn, top: int) -> tuple[float, str]:
    """Seconds of ``fn()`` under cProfile, and its ``top`` functions by own time."""
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    fn()
    prof.disable()
    secs = time.perf_counter() - t0
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    body = text.getvalue()
    return secs, body[body.find("   ncalls"):].rstrip()


def per_terminator(impl, rule, table: EventTable, terms: np.ndarray) -> None:
    """One ``match`` call per terminator, as the streaming engine makes them."""
    for t in terms:
        impl.match(rule, table, int(t), int(t) + 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--window", type=int, default=10_000, help="seq3 window (ms) of the batched runs")
    ap.add_argument("--terminator-window", type=int, default=4000, help="seq3 window (ms) per terminator")
    ap.add_argument("--terminators", type=int, default=300)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--backend", default="gpu", choices=("gpu", "gpu-host"))
    args = ap.parse_args(argv)
    for name in ("events", "window", "terminator_window", "terminators", "top"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    try:
        impl = get_backend(args.backend)
    except BackendUnavailableError as err:
        print(f"gpu_profile: not run: {err}", file=sys.stderr)
        return 2
    if args.backend == "gpu":
        runtime_floor()
    else:
        print("# host build of the GPU kernels: NOT a GPU measurement")
    events = seq3_events(args.events)
    for policy in ("each", "last"):
        text = seq3_rule(args.window, policy)
        for backend in (args.backend, "cpu"):
            cep_gpu.detect(events, text, backend=backend, time_unit="ms", output="count")  # compiles
            secs, top = profiled(partial(cep_gpu.detect, events, text, backend=backend, time_unit="ms",
                                         output="count"), args.top)
            print(f"\n== batched {policy}, window {args.window} ms, {args.events} events, {backend}: "
                  f"{secs:.3f} s under cProfile\n{top}")
        rule = cep_gpu.parse_rule(seq3_rule(args.terminator_window, policy))
        table = EventTable.from_pandas(events, time_unit="ms")
        terms = np.flatnonzero(events["type"].to_numpy() == "C")
        terms = terms[len(terms) // 2:][: args.terminators]  # past the warm-up edge: full windows
        for t in terms[:10]:
            impl.match(rule, table, int(t), int(t) + 1)
        before = dict(impl.combiner.stats_dict())
        secs, top = profiled(partial(per_terminator, impl, rule, table, terms), args.top)
        after = impl.combiner.stats_dict()
        counters = {k: after[k] - before[k] for k in ("launches", "relaunches", "bytes_uploaded")}
        print(f"\n== per terminator {policy}, window {args.terminator_window} ms, {args.backend}: "
              f"{secs / max(len(terms), 1) * 1e6:.1f} us a terminator under cProfile; over "
              f"{len(terms)} terminators {counters}\n{top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
