"""``cep-gpu muse`` (wired in by :mod:`cep_gpu.cli`): plan, simulate and benchmark MuSE graphs.

    cep-gpu muse network --nodes 20 --types 15 --ratio 0.5 --skew 1.5 --seed 0 --out net.json
    cep-gpu muse plan QUERIES NETWORK.json [--algorithm amuse] [--json plan.json]
    cep-gpu muse simulate QUERIES NETWORK.json [EVENTS] [--duration 60] [--backend auto] [--out FILE]
    cep-gpu muse bench [--quick] [--out muse.json] [--plot muse.png]

QUERIES is a file of cep-gpu ``define Q pattern SEQ(...)/AND(...)`` rules; NETWORK.json is
``{"nodes": {"n1": ["A", "B"]}, "rates": {"A": 10}}`` (see docs/muse.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..benchmarks.save import save_results
from ..cli import UsageError, argument, at_least, number, set_command
from ..errors import is_finite_positive

EPILOG = """examples:
  cep-gpu muse network --nodes 8 --types 4 --ratio 0.5 --skew 1.5 --out net.json
  cep-gpu muse plan queries.txt net.json --algorithm amuse
  cep-gpu muse simulate queries.txt net.json --duration 60 --algorithm amuse*
  cep-gpu muse simulate queries.txt net.json events.csv --out matches.csv
  cep-gpu muse bench --quick --out muse.json --plot muse.png
"""


def add_muse_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``cep-gpu muse`` to an argparse sub-parser set."""
    from .placement import ALGORITHMS

    p = subparsers.add_parser(
        "muse", help="MuSE graphs: plan query projections over a network of event sources",
        description="Multi-sink evaluation (MuSE) graphs: plan, simulate and benchmark.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="muse_command")

    net = sub.add_parser("network", help="generate a seeded network (paper §7.1) as JSON")
    net.add_argument("--nodes", type=at_least(1), default=20)
    net.add_argument("--types", type=at_least(1), default=15)
    net.add_argument("--ratio", type=number(lambda v: 0 < v <= 1, "in (0, 1]"), default=0.5,
                     help="event-node ratio (default 0.5)")
    net.add_argument("--skew", type=number(lambda v: is_finite_positive(v) and v > 1, "a finite number > 1"),
                     default=1.5, help="Zipf rate skew > 1 (default 1.5)")
    net.add_argument("--seed", type=int, default=0)
    net.add_argument("--out", help="write the network here (default: print it)")
    set_command(net, cmd_network)

    for name, helptext in (("plan", "plan queries over a network and explain the plan"),
                           ("simulate", "plan, then run the plan event by event on cep-gpu")):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("queries", help="file of SEQ/AND rules")
        c.add_argument("network", help="network JSON")
        if name == "simulate":
            c.add_argument("events", nargs="?", help="events (.csv/.parquet with type, ts in "
                           "seconds or datetimes, node); default: Poisson streams from the network's rates")
            c.add_argument("--duration", type=number(is_finite_positive, "a finite number of seconds > 0"),
                           default=None,
                           help="seconds of generated streams (default 60); with EVENTS, the "
                           "streams' duration for the predicted messages (default: the span of ts)")
            c.add_argument("--out", help="write the sinks' matches to this .csv or .parquet file: "
                           "cep-gpu run's columns (rule, ts, ids) and node, the sink")
            c.add_argument("--backend", default="auto",
                           choices=["auto", "cpu", "aip", "reference", "gpu"])
            c.add_argument("--seed", type=int, default=0)
        c.add_argument("--algorithm", default="amuse", choices=list(ALGORITHMS))
        c.add_argument("--json", help="write the plan (and results) as JSON here")
        set_command(c, cmd_plan if name == "plan" else cmd_simulate)

    b = sub.add_parser("bench", help="transmission ratios vs the paper's simulation (§7.2)")
    add_bench_arguments(b)
    set_command(b, cmd_bench)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    return p


def add_bench_arguments(b: argparse.ArgumentParser) -> None:
    b.add_argument("--seeds", type=int, default=2, help="networks per setting (default 2)")
    b.add_argument("--queries", type=int, default=5, help="queries per workload (default 5)")
    b.add_argument("--size", type=int, default=5,
                   help="primitive operators per query (default 5; the paper uses 6)")
    b.add_argument("--simulate-events", type=int, default=20000,
                   help="most events of the one simulated run per setting (0: none)")
    b.add_argument("--backend", default="aip", help="cep-gpu backend of simulated nodes")
    b.add_argument("--quick", action="store_true", help="two values per sweep, one seed")
    b.add_argument("--sweep", choices=["event_node_ratio", "skew", "nodes"], action="append",
                   help="run only this sweep (repeatable; default all)")
    b.add_argument("--max-rate", type=float, default=None,
                   help="clip of generated rates (default 1e6; docs/muse.md, Networks)")
    b.add_argument("--out", help="write JSON here")
    b.add_argument("--plot", help="write a PNG here")


def _load(args):
    from .network import Network
    from .query import as_queries

    qpath, npath = Path(args.queries), Path(args.network)
    if not qpath.exists():
        raise FileNotFoundError(f"{args.queries}: no such query file")
    if not npath.exists():
        raise FileNotFoundError(f"{args.network}: no such network file")
    from ..cli import read_text

    try:
        spec = json.loads(read_text(npath, "network file"))
    except json.JSONDecodeError as err:
        from .errors import MuseError

        raise MuseError(f"{args.network}: not JSON ({err})") from None
    return as_queries(read_text(qpath, "query file")), Network.from_dict(spec)


def cmd_network(args) -> int:
    from .network import Network

    net = Network.generate(args.nodes, args.types, args.ratio, args.skew, args.seed)
    text = json.dumps(net.to_dict(), indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
        print(f"network of {len(net.nodes)} nodes, {len(net.rates)} types -> {args.out}")
    else:
        print(text)
    return 0


def cmd_plan(args) -> int:
    from .placement import place

    queries, net = _load(args)
    plan = place(queries, net, args.algorithm)
    print(plan.explain())
    if args.json:
        Path(args.json).write_text(plan.to_json() + "\n")
    return 0


def cmd_simulate(args) -> int:
    from ..cli import writable_output
    from ..io import read_events, write_output
    from .placement import place
    from .simulate import generate_streams, simulate

    if args.out:  # before any work, as cep-gpu run checks it
        writable_output("--out", args.out)
    queries, net = _load(args)
    plan = place(queries, net, args.algorithm)
    if args.events:
        streams = read_events(args.events)
        duration = args.duration  # None: the span of the file's ts
    else:
        duration = 60.0 if args.duration is None else args.duration
        streams = generate_streams(net, queries, duration, seed=args.seed)
    res = simulate(plan, streams, backend=args.backend, duration=duration)
    print(plan.explain())
    print(f"\n{len(streams)} events, {len(res.matches)} matches at the sinks "
          f"({', '.join(f'{q}: {n}' for q, n in res.matches['query'].value_counts().items())})")
    print(f"messages: {res.total_messages} counted, {res.predicted_messages:.1f} predicted by "
          f"the cost model over {res.duration:g} s")
    if args.json:
        out = plan.to_dict()
        out["simulation"] = {"events": len(streams), "matches": len(res.matches),
                             "messages": res.messages.to_dict("records"),
                             "messages_counted": res.total_messages,
                             "messages_predicted": res.predicted_messages}
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    if args.out:
        write_output(res.composite_events(), args.out)
        print(f"{len(res.matches)} matches -> {args.out}", file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from . import bench

    sweeps = dict(bench.SWEEPS)
    seeds = args.seeds
    if args.quick:
        sweeps = {"event_node_ratio": [0.2, 1.0], "skew": [1.1, 2.0], "nodes": [5, 20]}
        seeds = 1
    if getattr(args, "sweep", None):
        sweeps = {k: v for k, v in sweeps.items() if k in args.sweep}
    _check_bench_args(args, seeds)
    result = bench.run(sweeps, seeds, args.queries, args.size, args.simulate_events,
                       args.backend, on_step=lambda s: print(f"  {s}", file=sys.stderr),
                       max_rate=getattr(args, "max_rate", None))
    save_results(result, args.out, args.plot, bench.plot)
    return 0


def _check_bench_args(args, seeds: int) -> None:
    """Bad values fail here, naming the option (they ran nothing, or failed in numpy or deep in
    the network checks, naming a generated event type)."""
    from ..backends import get_backend

    for name, v, low in (("seeds", seeds, 1), ("queries", args.queries, 1), ("size", args.size, 2),
                         ("simulate-events", args.simulate_events, 0)):
        if v < low:
            raise UsageError(f"--{name}", f"must be >= {low}, got {v}")
    max_rate = getattr(args, "max_rate", None)
    if max_rate is not None and not is_finite_positive(max_rate):
        raise UsageError("--max-rate", f"must be a finite rate > 0, got {max_rate}")
    if args.simulate_events:
        with argument("--backend"):
            get_backend(args.backend)


def muse_bench_from_bench_args(args) -> int:
    """``cep-gpu bench muse [--out F] [--plot F]``: the default MuSE benchmark."""
    ns = argparse.Namespace(seeds=2, queries=5, size=5, simulate_events=20000, backend="aip",
                            quick=False, sweep=None, max_rate=None, out=args.out, plot=args.plot)
    return cmd_bench(ns)
