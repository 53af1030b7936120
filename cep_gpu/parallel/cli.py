"""``cep-gpu parallel`` (wired in by :mod:`cep_gpu.cli`) and ``cep-gpu bench parallel``.

    cep-gpu parallel run RULES EVENTS [--units 2] [--allocation cost-model|equal] [--no-dynamic]
                         [--no-fusion] [--out FILE] [--limit 50] [--explain] [--stats FILE.json]
                         [--type-column NAME] [--ts-column NAME] [--id-column NAME]
    cep-gpu parallel bench [--quick] [--events N] [--out parallel.json] [--plot parallel.png]
    cep-gpu bench parallel [--out parallel.json] [--plot parallel.png]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ..benchmarks.save import json_default
from ..cli import add_column_options, at_least, check_outputs, nonempty_path, set_command, time_unit

EPILOG = """examples:
  cep-gpu parallel run rules.txt events.csv --units 2 --explain
  cep-gpu parallel bench --quick --out parallel.json --plot parallel.png
"""


def add_parallel_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``cep-gpu parallel`` to an argparse sub-parser set."""
    p = subparsers.add_parser(
        "parallel", help="HYPERSONIC hybrid-parallel detection of SEQ rules (run, bench)",
        description="Hybrid state- and data-parallel streaming detection (docs/parallel.md).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="parallel_command")
    r = sub.add_parser("run", help="detect with the hybrid engine; same rows as cep-gpu run")
    r.add_argument("rules", help="file of SEQ rules (or TESLA chains of each)")
    r.add_argument("events", help="events (.csv/.parquet)")
    r.add_argument("--units", type=_units, default=2, help="execution units, one thread each (default 2)")
    r.add_argument("--allocation", default="cost-model", choices=["cost-model", "equal"],
                   help="units per agent: the paper's cost model (Eq. 6, default) or an equal split")
    r.add_argument("--no-dynamic", action="store_true", help="static roles and agents")
    r.add_argument("--no-fusion", action="store_true", help="no agent fusion (Algorithm 2)")
    r.add_argument("--time-unit", type=time_unit, default="s",
                   help="unit of numeric ts values (default s; datetimes need none)")
    r.add_argument("--out", type=nonempty_path,
                   help="write the composite events here (.csv/.parquet); default: print them")
    r.add_argument("--limit", type=at_least(0), default=50, help="rows to print when no --out is given (default 50)")
    r.add_argument("--explain", action="store_true", help="print the cost model and the allocation")
    r.add_argument("--stats", type=nonempty_path, help="write the engine's stats() as JSON here")
    add_column_options(r)
    set_command(r, cmd_run)
    b = sub.add_parser("bench", help="hybrid vs state-parallel, RIP, LLSF; real and simulated")
    add_bench_arguments(b)
    set_command(b, cmd_bench)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    return p


def _units(text: str) -> int:
    """``--units``: a whole number from 1 to the engine's MAX_UNITS, so that too many is a usage
    error (exit 2) naming the option, not the engine's ArgumentError after reading the input."""
    from .engine import MAX_UNITS  # (lazily: the engine's import is not needed to parse)

    value = at_least(1)(text)
    if value > MAX_UNITS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_UNITS} (one thread each), got {value}")
    return value


def add_bench_arguments(b: argparse.ArgumentParser) -> None:
    b.add_argument("--events", type=at_least(500), default=30_000, help="events per point (default 30000)")
    b.add_argument("--repeat", type=at_least(1), default=2, help="measured runs per method (best kept)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--quick", action="store_true", help="one workload, two points, few events")
    b.add_argument("--out", type=nonempty_path,
                   help="write the results (JSON, with a summary) here")
    b.add_argument("--plot", type=nonempty_path, help="draw the figure (PNG) here")
    b.add_argument("--workloads", nargs="+", choices=["stock", "sensor"], default=["stock", "sensor"])
    b.add_argument("--no-real", action="store_true", help="leave out the real points (simulated Figure 10 only)")
    b.add_argument("--no-figure10", action="store_true", help="leave out both simulated Figure 10 sweeps")
    b.add_argument("--merge", nargs="+", metavar="JSON",
                   help="run nothing: merge these results (a benchmark split in runs) into --out/--plot")


def cmd_run(args) -> int:
    from rich.console import Console

    from ..cli import event_columns, event_types, print_table, read_rules, warn_absent_types
    from ..io import read_events, write_output
    from .engine import HybridEngine

    # before any work: a path that cannot be written was found only after the whole run
    check_outputs({"--out": args.out, "--stats": args.stats}, [("rule", args.rules), ("events", args.events)],
                  tables=("--out",))
    console = Console(stderr=True)
    t0 = time.perf_counter()
    # (a file, rule or event error is cep-gpu's one line and exit 1, as for run: cli.run_command)
    rules = read_rules(args.rules)
    events = read_events(args.events, event_columns(args))
    warn_absent_types(args.prog, rules, event_types(events), args.events)
    eng = HybridEngine(rules, units=args.units, allocation=args.allocation, dynamic=not args.no_dynamic,
                       fusion=not args.no_fusion, time_unit=args.time_unit)
    try:
        # the whole input: a rule reading an attribute no event has is detect's error; Arrow
        # output, as cep-gpu run writes and prints it
        out = eng.publish(events, output="arrow", complete=True)
        eng.flush()
    finally:
        eng.close()
    elapsed = time.perf_counter() - t0
    if args.explain:
        print(eng.explain(), file=sys.stderr)
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump(eng.stats(), f, indent=1, default=json_default)
    summary = f"{out.num_rows} composite events from {len(events)} events in {elapsed:.2f} s"
    if args.out:
        write_output(out, args.out)
        console.print(f"{summary} -> {args.out}")
    else:
        print_table(out.to_pandas(), args.limit)
        console.print(summary)
    return 0


def cmd_bench(args) -> int:
    from rich.console import Console

    from .bench import run_bench, write

    # before any run; a merged result is an input that --out must not overwrite
    check_outputs({"--out": args.out, "--plot": args.plot},
                  [("merged result", path) for path in getattr(args, "merge", None) or ()])
    console = Console(stderr=True)
    if getattr(args, "merge", None):
        from .bench import merge

        results = []
        for path in args.merge:
            try:
                with open(path) as f:
                    results.append(json.load(f))
            except (OSError, ValueError) as exc:
                print(f"cep-gpu parallel bench: error: cannot read {path}: {exc}", file=sys.stderr)
                return 1
            if not isinstance(results[-1], dict) or "points" not in results[-1]:
                print(f"cep-gpu parallel bench: error: {path} is not a 'cep-gpu parallel bench' result",
                      file=sys.stderr)
                return 1
        res = merge(results)
        write(res, args.out, args.plot)
        console.print_json(json.dumps(res["summary"], default=json_default))
        return 0
    kw = {"workloads": tuple(getattr(args, "workloads", None) or ("stock", "sensor")),
          "real": not getattr(args, "no_real", False), "figure10": not getattr(args, "no_figure10", False)}
    if args.quick:
        kw |= {"windows": (0.5,), "lengths": (3,), "workloads": ("stock",), "events": min(args.events, 5000),
               "repeat": 1, "figure10_windows": (1.0,), "figure10_events": 5000, "paper_windows": (1.0,),
               "paper_lengths": (3,), "paper_events": 5000}
    res = run_bench(events=kw.pop("events", args.events), repeat=kw.pop("repeat", args.repeat), seed=args.seed,
                    progress=lambda s: console.print(s, highlight=False), **kw)
    write(res, args.out, args.plot)
    console.print_json(json.dumps(res["summary"], default=json_default))
    return 0


def parallel_bench_from_bench_args(args) -> int:
    """``cep-gpu bench parallel [--events N] [--repeat R] [--out F] [--plot F]``."""
    ns = argparse.Namespace(events=args.events or 30_000, repeat=args.repeat if args.repeat else 2,
                            seed=args.seed, quick=False, out=args.out, plot=args.plot)
    return cmd_bench(ns)
