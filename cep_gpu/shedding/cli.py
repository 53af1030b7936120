"""``cep-gpu shedding bench`` (wired in by :mod:`cep_gpu.cli`) and ``cep-gpu bench shedding``.

    cep-gpu shedding bench [--quick] [--workload stock|nasdaq|bus] [--mode real|virtual]
                           [--lengths 3,4,5,6] [--factors 10,100,1000] [--out F.json] [--plot F.png]
"""

from __future__ import annotations

import argparse
import sys

from ..benchmarks.save import save_results
from ..cli import UsageError, number, set_command
from ..errors import is_finite_positive

EPILOG = """examples:
  cep-gpu shedding bench --quick --out shedding.json --plot shedding.png
  cep-gpu shedding bench --workload bus --mode virtual --lengths 3,4,5
  cep-gpu bench shedding --out shedding.json --plot shedding.png
"""


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def add_shedding_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``cep-gpu shedding`` to an argparse sub-parser set."""
    p = subparsers.add_parser(
        "shedding", help="DARLING input load shedding: benchmark against random and state shedding",
        description="DARLING data-aware input load shedding (docs/shedding.md).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="shedding_command")
    b = sub.add_parser("bench", help="recall and p99 latency per policy (paper Section 5)")
    add_bench_arguments(b)
    set_command(b, cmd_bench)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    return p


def add_bench_arguments(b: argparse.ArgumentParser) -> None:
    b.add_argument("--workload", choices=["stock", "nasdaq", "bus"], default="stock",
                   help="stock: prices, short windows (the earlier workload); nasdaq: the paper's Q1^A "
                        "on per-minute volumes, 60-minute windows (docs/shedding.md, resolution 19)")
    b.add_argument("--mode", choices=["real", "virtual"], default="real",
                   help="real: the engine's measured time (default); virtual: charged costs")
    b.add_argument("--lengths", type=_ints, default=[3, 4, 5, 6], help="pattern lengths (default 3,4,5,6)")
    b.add_argument("--factors", type=_floats, default=[10, 100, 1000],
                   help="overload rates of the peaks, at length 4 (default 10,100,1000)")
    b.add_argument("--events", type=int, default=24000, help="events per run after the warm-up (default 24000)")
    b.add_argument("--warmup", type=int, default=2000, help="warm-up events (default 2000)")
    b.add_argument("--latency-bound", type=number(is_finite_positive, "a finite number of seconds > 0"),
                   default=None,
                   help="L_max in seconds (default: --bound-fraction x the largest peak's drain time)")
    b.add_argument("--bound-fraction", type=float, default=0.25,
                   help="L_max as a share of the largest peak's drain time (default 0.25)")
    b.add_argument("--beta", type=number(lambda v: 0 < v <= 1, "in (0, 1]"), default=0.8)
    b.add_argument("--buckets", type=int, default=100)
    b.add_argument("--seeds", type=int, default=1, help="seeds per setting (default 1)")
    b.add_argument("--backend", default="cpu")
    b.add_argument("--noise", type=float, default=0.5,
                   help="share of events of types the pattern does not read (default 0.5)")
    b.add_argument("--regather-every", type=int, default=None,
                   help="re-gather the statistics from the last N events every N events "
                        "(default: the warm-up size; 0: never)")
    b.add_argument("--guard", type=float, default=None,
                   help="the hard guard's share of L_max (default: beta in real time, 1 in virtual time)")
    b.add_argument("--utility", choices=["eq11", "chain"], default="eq11",
                   help="darling's utility: eq11 (the paper's, default) or chain (an extension: "
                        "docs/shedding.md, resolution 22)")
    b.add_argument("--quick", action="store_true", help="lengths 3,4,5; factors 100,1000; 4000 events")
    b.add_argument("--out", help="write the results (JSON, with a 'summary') here")
    b.add_argument("--plot", help="write the figure (PNG) here")


def cmd_bench(args) -> int:
    from . import bench

    lengths, factors, events = args.lengths, args.factors, args.events
    if args.quick:
        lengths, factors, events = [3, 4, 5], [100, 1000], 4000
    if not 0 < args.bound_fraction <= 1:
        raise UsageError("--bound-fraction", f"must be in (0, 1], got {args.bound_fraction}")
    if not 0 <= args.noise < 1:
        raise UsageError("--noise", f"must be in [0, 1), got {args.noise}")
    if args.guard is not None and not 0 < args.guard <= 1:
        raise UsageError("--guard", f"must be in (0, 1], got {args.guard}")
    if args.regather_every is not None and args.regather_every < 0:
        raise UsageError("--regather-every", f"must be >= 0, got {args.regather_every}")
    for name, values in (("lengths", lengths), ("factors", factors)):
        if not values:  # an empty list ran nothing and wrote an empty result
            raise UsageError(f"--{name}", "needs at least one value")
    bad = [f for f in factors if not is_finite_positive(f)]
    if bad:
        raise UsageError("--factors", f"peak rate multipliers must be finite numbers > 0, got {bad[0]}")
    for name, v in (("events", events), ("warmup", args.warmup), ("buckets", args.buckets), ("seeds", args.seeds)):
        if v < 1:
            raise UsageError(f"--{name}", f"must be >= 1, got {v}")
    result = bench.run(args.workload, lengths, factors, n_events=events, warmup=args.warmup,
                       latency_bound=args.latency_bound, beta=args.beta, buckets=args.buckets,
                       mode=args.mode, seeds=range(args.seeds), backend=args.backend, noise=args.noise,
                       bound_fraction=args.bound_fraction, regather_every=args.regather_every,
                       guard=args.guard, utility=args.utility,
                       on_step=lambda s: print(f"  {s}", file=sys.stderr, flush=True))
    save_results(result, args.out, args.plot, bench.plot)
    return 0


def shedding_bench_from_bench_args(args) -> int:
    """``cep-gpu bench shedding [--out F] [--plot F]``: the default shedding benchmark."""
    ns = argparse.Namespace(workload="stock", mode="real", lengths=[3, 4, 5, 6], factors=[10, 100, 1000],
                            events=24000, warmup=2000, latency_bound=None, beta=0.8, buckets=100,
                            seeds=1, backend="cpu", noise=0.5, bound_fraction=0.25, regather_every=None,
                            guard=None, utility="eq11", quick=False, out=args.out,
                            plot=args.plot)
    return cmd_bench(ns)
