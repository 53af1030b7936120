"""``cep-gpu decompose`` and ``cep-gpu decopa bench`` (wired in by :mod:`cep_gpu.cli`).

    cep-gpu decompose RULES --rates a=1000,b=1000,c=30 --selectivity a:b=0.01 --units 4 \\
        --iota 6000 --kappa 60000 [--strategy decopa|hybrid|centralized] [--json plan.json]
    cep-gpu decompose RULES --sample EVENTS --units 8 --iota 2500 --kappa 80000 --json plan.json
    cep-gpu decopa run plan.json EVENTS [--out FILE] [--backend auto] [--time-unit s] [--chunk N]
        [--type-column NAME] [--ts-column NAME] [--id-column NAME]   (decompose --sample: too)
    cep-gpu decopa bench [--quick] [--draws 20] [--out decopa.json] [--plot decopa.png]

RULES is a rule file (or rule text starting with ``define``) holding one SEQ/AND rule (or pick
one with ``--rule NAME``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..benchmarks.save import save_results
from ..cli import (
    UsageError,
    add_column_options,
    argument,
    at_least,
    check_outputs,
    nonempty_path,
    number,
    set_command,
    time_unit,
)
from ..errors import is_finite_positive
from .errors import DecompositionError

EPILOG = """examples:
  cep-gpu decompose q.rules --rates a=1000,b=1000,c=30 --selectivity a:b=0.01,a:c=0.01,b:c=0.01 \\
      --units 4 --iota 6000 --kappa 60000
  cep-gpu decompose q.rules --sample events.parquet --units 10 --iota 2500 --kappa 80000 --json plan.json
  cep-gpu decopa run plan.json events.parquet --out matches.csv
  cep-gpu decopa bench --quick --out decopa.json --plot decopa.png
"""

RUN_EPILOG = """The plan file is what `cep-gpu decompose ... --json PLAN.json` writes (it holds the rule's
text). The output has the columns and rows of `cep-gpu run` on the plan's rule.

examples:
  cep-gpu decompose q.rules --sample events.csv --units 4 --iota 6000 --kappa 60000 --json plan.json
  cep-gpu decopa run plan.json events.csv --out matches.csv
  cep-gpu decopa run plan.json events.parquet --chunk 10000 --report
"""


def _pairs(text: str) -> dict[str, float]:
    out, given = {}, {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected NAME=NUMBER, got {part!r}")
        key = key.strip()
        if key in given:  # the last one would silently win
            raise argparse.ArgumentTypeError(f"{key!r} given twice ({given[key]}, then {part})")
        given[key] = part
        try:
            out[key] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: {value!r} is not a number") from None
    return out


_capacity = number(is_finite_positive, "a finite number > 0")


def add_decompose_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``cep-gpu decompose`` to an argparse sub-parser set."""
    p = subparsers.add_parser(
        "decompose", help="plan a SEQ/AND rule as a DecoPa decomposition over processing units",
        description="Build a DecoPa plan (query decomposition for parallel CEP, docs/decopa.md) and "
        "print it as a table: operators, inputs, units, ingestion and comparisons per unit, c*.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("rules", help="rule file (or rule text starting with 'define')")
    p.add_argument("--rule", help="the rule to plan, by name (default: the only one)")
    p.add_argument("--rates", type=_pairs, default=None, help="alias=events per window, comma-separated")
    p.add_argument("--selectivity", type=_pairs, default=None,
                   help="alias:alias=s, comma-separated (0 < s <= 1; pairs left out: 1)")
    p.add_argument("--sample", help="measure rates and selectivities on these events (CSV/Parquet) "
                   "instead of --rates/--selectivity")
    p.add_argument("--time-unit", type=time_unit, default="s",
                   help="unit of numeric ts in --sample (default s)")
    p.add_argument("--units", type=at_least(1), required=True, help="number of processing units")
    p.add_argument("--iota", type=_capacity, required=True, help="events a unit ingests per window")
    p.add_argument("--kappa", type=_capacity, required=True, help="comparisons a unit makes per window")
    p.add_argument("--strategy", default="decopa", choices=["decopa", "hybrid", "centralized"])
    p.add_argument("--estimate", default="paper", choices=["paper", "order"],
                   help="rate estimate: the paper's (default) or order-aware for SEQ")
    p.add_argument("--compare", action="store_true", help="also print c* of the other strategies")
    p.add_argument("--json", type=nonempty_path, help="write the plan as JSON here")
    add_column_options(p, "--sample")
    set_command(p, cmd_decompose)
    return p


def add_decopa_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``cep-gpu decopa bench``."""
    p = subparsers.add_parser("decopa", help="run a DecoPa plan on events; the DecoPa benchmark",
                              description="DecoPa query decomposition: run a saved plan, the benchmark.")
    sub = p.add_subparsers(dest="decopa_command")
    r = sub.add_parser(
        "run", help="execute a plan (cep-gpu decompose --json) on an event file",
        description="Execute a DecoPa plan on your events: every operator unit runs as a cep-gpu "
        "rule; the composite events are those cep-gpu run finds for the plan's rule.",
        epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("plan", help="plan JSON written by cep-gpu decompose --json")
    r.add_argument("events", help="events as .csv or .parquet")
    r.add_argument("--out", type=nonempty_path,
                   help="write the composite events to this .csv or .parquet file")
    r.add_argument("--backend", default="auto", help="backend of the operator units (default auto)")
    r.add_argument("--time-unit", type=time_unit, default="s",
                   help="unit of numeric ts values (default: s)")
    r.add_argument("--chunk", type=at_least(1), default=None, metavar="N",
                   help="run as a stream: one Engine per unit, about N events per chunk")
    r.add_argument("--report", action="store_true",
                   help="print what each operator's units ingested and found (not with --chunk)")
    r.add_argument("--limit", type=at_least(0), default=50, help="rows to print when no --out is given")
    add_column_options(r)
    set_command(r, cmd_run)
    b = sub.add_parser("bench", help="Table-3-style model gains, executed plans against the model, wall time")
    _bench_args(b)
    set_command(b, cmd_bench)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    return p


def _bench_args(b) -> None:
    b.add_argument("--quick", action="store_true", help="4 draws and a short executed run (about 30 s)")
    # 0 ran nothing, -1 was a KeyError traceback
    b.add_argument("--draws", type=at_least(1), help="rate draws per query (default 20)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--backend", default="cpu", help="backend of the executed runs (default cpu)")
    b.add_argument("--out", type=nonempty_path, help="write the results as JSON here")
    b.add_argument("--plot", type=nonempty_path, help="draw the figure (PNG) here")


def _load_rule(args):
    from .. import parse_rules

    path = Path(args.rules)
    if path.exists():
        from ..cli import read_rules

        # (as every subcommand reads a rule file: an empty one was '0 rules given: pick one
        # with --rule ([])', an event file a parse error)
        rules = read_rules(args.rules)
    elif args.rules.lstrip().startswith("define"):
        rules = parse_rules(args.rules)
    else:
        raise DecompositionError(f"{args.rules}: no such rule file")
    if args.rule:
        chosen = [r for r in rules if r.name == args.rule]
        if not chosen:
            raise DecompositionError(f"no rule named {args.rule!r} (rules: {[r.name for r in rules]})")
        return chosen[0]
    if len(rules) != 1:
        raise DecompositionError(f"{len(rules)} rules given: pick one with --rule ({[r.name for r in rules]})")
    return rules[0]


def cmd_decompose(args) -> int:
    from . import Stats, Units, optimize
    from .query import analyse

    if args.sample:  # the sample measures both: given values would be silently replaced
        for option, value in (("--rates", args.rates), ("--selectivity", args.selectivity)):
            if value is not None:
                raise UsageError(option, "give --rates/--selectivity or --sample, not both "
                                 "(--sample measures the rates and selectivities)")
    # before any work: a typo in the folder must not cost the planning, nor --json the input
    check_outputs({"--json": args.json}, [("rule", args.rules), ("sample", args.sample)])
    from ..cli import event_columns
    from ..io import COLUMN_OPTIONS

    columns = event_columns(args)
    if columns and not args.sample:  # ignored without a word otherwise
        raise UsageError(COLUMN_OPTIONS[next(iter(columns))], "names a column of the sample: give "
                         "--sample EVENTS")
    with argument("--units"):
        units = Units(args.units, args.iota, args.kappa)
    rule = _load_rule(args)
    if args.sample:
        from ..cli import event_types, warn_absent_types
        from ..events import frame_from_arrow
        from ..io import read_table

        table = read_table(args.sample, columns)
        if not table.num_rows:  # (was 'Stats.from_sample: the sample has no events', no file named)
            raise UsageError("--sample", f"{args.sample} holds no event: rates and selectivities need some")
        # a type the sample lacks gets rate 0: a plan of no load (c* = inf) without a word
        warn_absent_types(args.prog, [rule], event_types(table), args.sample)
        events = frame_from_arrow(table)
        stats = Stats.from_sample(events, rule, time_unit=args.time_unit)
    else:
        if args.rates is None:
            raise UsageError("--rates", "give --rates alias=rate,... or --sample EVENTS")
        pattern = analyse(rule)
        with argument("--rates"):  # the rates alone, against the rule's positions
            Stats(rates=args.rates).resolve(pattern)
        sel = {}
        for key, s in (args.selectivity or {}).items():
            a, sep, b = key.partition(":")
            if not sep:
                raise UsageError("--selectivity", f"expected alias:alias=s, got {key!r}")
            sel[(a.strip(), b.strip())] = s
        with argument("--selectivity"):
            stats = Stats(rates=args.rates, selectivity=sel)
            stats.resolve(pattern)
    plan = optimize(rule, stats, units, strategy=args.strategy, estimate=args.estimate)
    print(plan.explain())
    if args.compare:
        for s in ("decopa", "hybrid", "centralized"):
            other = plan if s == args.strategy else optimize(rule, stats, units, strategy=s,
                                                             estimate=args.estimate)
            print(f"  {s:<12} c* = {other.c_star:.6g}")
    if args.json:
        Path(args.json).write_text(json.dumps(plan.to_json(), indent=2) + "\n")
        print(f"plan -> {args.json}", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    """``cep-gpu decopa run PLAN.json EVENTS``: execute a saved plan on a user's event file."""
    import time

    from ..backends import get_backend
    from ..cli import (
        check_outputs,
        event_columns,
        event_types,
        print_table,
        read_text,
        warn_absent_types,
    )
    from ..io import read_table, write_output
    from . import Plan, execute, execute_stream

    if args.report and args.chunk is not None:
        raise UsageError("--report", "is measured by the batch run: leave out --chunk")
    # before any work, as cep-gpu run
    check_outputs({"--out": args.out}, [("plan", args.plan), ("events", args.events)], tables=("--out",))
    with argument("--backend"):
        get_backend(args.backend)
    path = Path(args.plan)
    if not path.exists():
        raise FileNotFoundError(f"{args.plan}: no such plan file")
    try:
        plan = Plan.from_json(read_text(path, "plan file"))
    except DecompositionError as err:
        raise DecompositionError(f"{args.plan}: {err}") from None
    t0 = time.perf_counter()
    events = read_table(args.events, event_columns(args))
    warn_absent_types(args.prog, [plan.rule], event_types(events), args.events)
    report = None
    if args.chunk is not None:
        out = execute_stream(events, plan, time_unit=args.time_unit, backend=args.backend, chunk=args.chunk)
    elif args.report:
        out, report = execute(events, plan, time_unit=args.time_unit, backend=args.backend, report=True)
    else:
        out = execute(events, plan, time_unit=args.time_unit, backend=args.backend)
    elapsed = time.perf_counter() - t0
    summary = (f"{len(out)} composite events of {plan.rule.name} from {events.num_rows} events in "
               f"{elapsed:.2f} s ({len(plan.operators)} operators on {plan.units.n} units)")
    if args.out:
        write_output(out, args.out)
        print(f"{summary} -> {args.out}", file=sys.stderr)
    else:
        print_table(out, args.limit)
        print(summary, file=sys.stderr)
    if report is not None:
        print(_report_text(plan, report), file=sys.stderr)
    return 0


def _report_text(plan, report) -> str:
    lines = [f"measured over {report.windows:.4g} windows (per window: ingested / pairs within the window):"]
    for op, rep in zip(plan.operators, report.operators):
        per_unit = ", ".join(f"unit {u.unit}: {u.ingested / report.windows:.4g} / {u.pairs / report.windows:.4g}"
                             for u in rep.units)
        lines.append(f"  {op.name} {op.label(plan.pattern.aliases)}: inputs {rep.input_events[0]} + "
                     f"{rep.input_events[1]}, {rep.outputs} matches; {per_unit}")
    return "\n".join(lines)


def cmd_bench(args) -> int:
    from . import bench

    # before any run (save_results makes missing folders)
    check_outputs({"--out": args.out, "--plot": args.plot}, make_folders=True)

    steps = [0]

    def progress() -> None:
        steps[0] += 1
        print(f"  draw {steps[0]}", file=sys.stderr, end="\r")

    from ..backends import get_backend

    with argument("--backend"):
        get_backend(args.backend)  # before the draws, not after them
    result = bench.run(quick=args.quick, draws=args.draws, seed=args.seed, backend=args.backend,
                       progress=progress)
    print(file=sys.stderr)
    print(bench.summary_table(result))
    save_results(result, args.out, args.plot, bench.plot)
    return 0


def decopa_bench_from_bench_args(args) -> int:
    """``cep-gpu bench decopa [--out F] [--plot F] [--seed N]``: the default DecoPa benchmark."""
    ns = argparse.Namespace(quick=False, draws=None, seed=getattr(args, "seed", 0), backend="cpu",
                            out=args.out, plot=args.plot)
    return cmd_bench(ns)
