"""``cep-gpu muse`` (wired in by :mod:`cep_gpu.cli`): plan, simulate and benchmark MuSE graphs.

    cep-gpu muse network --nodes 20 --types 15 --ratio 0.5 --skew 1.5 --seed 0 --out net.json
    cep-gpu muse network EVENTS [--node-column node] [--time-unit s] --out net.json
    cep-gpu muse plan QUERIES NETWORK.json [--algorithm amuse] [--selectivity [Q:]A,B=0.1 ...]
        [--selectivity-from SAMPLE] [--json plan.json]
    cep-gpu muse simulate QUERIES NETWORK.json [EVENTS] [--node-column node] [--time-unit s]
        [--duration 60] [--backend auto] [--selectivity ...] [--out FILE]
    (network EVENTS, plan/simulate: also [--type-column NAME] [--ts-column NAME] [--id-column NAME])
    cep-gpu muse bench [--quick] [--out muse.json] [--plot muse.png]

QUERIES is a file of cep-gpu ``define Q pattern SEQ(...)/AND(...)`` rules; NETWORK.json is
``{"nodes": {"n1": ["A", "B"]}, "rates": {"A": 10}}`` (see docs/muse.md), generated, written by
hand or measured on an event file whose events name the node that emitted them.
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
    event_columns,
    nonempty_path,
    number,
    set_command,
    time_unit,
)
from ..errors import is_finite_positive
from .errors import MuseError

EPILOG = """examples:
  cep-gpu muse network --nodes 8 --types 4 --ratio 0.5 --skew 1.5 --out net.json
  cep-gpu muse network events.csv --node-column node --out net.json
  cep-gpu muse plan queries.txt net.json --algorithm amuse
  cep-gpu muse plan queries.txt net.json --selectivity A,B=0.1 Q2:C=0.5
  cep-gpu muse plan queries.txt net.json --selectivity-from events.csv
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

    net = sub.add_parser(
        "network", help="a network as JSON: measured on an event file, or seeded (paper §7.1)",
        description="With EVENTS: the network the events were observed on (each node produces the "
        "types it emitted; a type's rate is its events per second per producing node over the "
        "file's time span). Without: a seeded random network as in the paper's simulation (§7.1).")
    net.add_argument("events", nargs="?", help="events (.csv/.parquet) with type, ts and the "
                     "node that emitted each (--node-column)")
    net.add_argument("--node-column", default=None, help="with EVENTS: the column naming each "
                     "event's node (default: node)")
    net.add_argument("--time-unit", type=time_unit, default=None,
                     help="with EVENTS: unit of numeric ts values "
                     "(default: s)")
    net.add_argument("--nodes", type=at_least(1), default=None, help="seeded: nodes (default 20)")
    net.add_argument("--types", type=at_least(1), default=None, help="seeded: types (default 15)")
    net.add_argument("--ratio", type=number(lambda v: 0 < v <= 1, "in (0, 1]"), default=None,
                     help="seeded: event-node ratio (default 0.5)")
    net.add_argument("--skew", type=number(lambda v: is_finite_positive(v) and v > 1, "a finite number > 1"),
                     default=None, help="seeded: Zipf rate skew > 1 (default 1.5)")
    net.add_argument("--seed", type=int, default=None, help="seeded: the seed (default 0)")
    net.add_argument("--out", type=nonempty_path, help="write the network here (default: print it)")
    add_column_options(net, "EVENTS")
    set_command(net, cmd_network)

    for name, helptext in (("plan", "plan queries over a network and explain the plan"),
                           ("simulate", "plan, then run the plan event by event on cep-gpu")):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("queries", help="file of SEQ/AND rules")
        c.add_argument("network", help="network JSON (cep-gpu muse network writes one)")
        if name == "simulate":
            c.add_argument("events", nargs="?", help="events (.csv/.parquet with type, ts in "
                           "--time-unit or datetimes, node); default: Poisson streams from the network's rates")
            c.add_argument("--node-column", default="node",
                           help="the column of EVENTS naming each event's node (default: node)")
            c.add_argument("--duration", type=number(is_finite_positive, "a finite number of seconds > 0"),
                           default=None,
                           help="seconds of generated streams (default 60); with EVENTS, the "
                           "streams' duration for the predicted messages (default: the span of ts)")
            c.add_argument("--out", type=nonempty_path,
                           help="write the sinks' matches to this .csv or .parquet file: "
                           "cep-gpu run's columns (rule, ts, ids) and node, the sink")
            c.add_argument("--backend", default="auto",
                           choices=["auto", "cpu", "aip", "reference", "gpu"])
            c.add_argument("--seed", type=int, default=0)
        c.add_argument("--algorithm", default="amuse", choices=list(ALGORITHMS))
        c.add_argument("--selectivity", nargs="+", action="extend", default=[], metavar="[Q:]A,B=σ",
                       help="σ of the where conditions over these types (a pair, or one type for "
                       "its own conditions), 0 < σ <= 1, for every query that has the types or "
                       "for query Q only (default 1)")
        c.add_argument("--selectivity-from", metavar="SAMPLE",
                       help="measure the selectivities on these events (.csv/.parquet); "
                       "--selectivity values take precedence")
        c.add_argument("--time-unit", type=time_unit, default="s",
                       help="unit of numeric ts values in the event "
                       "files (default: s)")
        c.add_argument("--json", type=nonempty_path,
                       help="write the plan (and results) as JSON here")
        add_column_options(c, "EVENTS and SAMPLE" if name == "simulate" else "SAMPLE")
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
    b.add_argument("--out", type=nonempty_path, help="write JSON here")
    b.add_argument("--plot", type=nonempty_path, help="write a PNG here")


def _inputs(args) -> list[tuple[str, str | None]]:
    """The input files of ``muse plan``/``simulate``, which no output may overwrite."""
    return [("query", args.queries), ("network", args.network), ("events", getattr(args, "events", None)),
            ("sample", args.selectivity_from)]


def _load(args):
    from .network import Network

    qpath, npath = Path(args.queries), Path(args.network)
    if not qpath.exists():
        raise FileNotFoundError(f"{args.queries}: no such query file")
    if not npath.exists():
        raise FileNotFoundError(f"{args.network}: no such network file")
    from ..cli import read_text
    from .errors import MuseError

    try:
        spec = json.loads(read_text(npath, "network file"), object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise MuseError(f"{args.network}: not JSON ({err})") from None
    except _DuplicateKey as err:
        raise MuseError(f"{args.network}: key {err.args[0]!r} appears twice in one object "
                        "(JSON would keep only the last)") from None
    try:
        network = Network.from_dict(spec)
    except MuseError as err:  # name the file: the fault is in it
        raise MuseError(f"{args.network}: {err}") from None
    text = read_text(qpath, "query file")  # (returned too: simulate warns of its types no event has)
    return _queries(args, text), network, text


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list) -> dict:
    """A JSON object as a dict, refusing a key given twice: ``json`` keeps the last silently, so
    a node written twice would lose the first one's types."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _queries(args, text: str):
    """The queries of ``text`` with the selectivities of ``--selectivity-from`` (measured) and
    ``--selectivity`` (given; these win)."""
    from .query import as_queries, parse_queries, selectivity_from_sample

    queries = as_queries(text)
    given = selectivity_arguments(args.selectivity, queries)
    sel: dict[str, dict[frozenset[str], float]] = {}
    if args.selectivity_from:
        from ..io import read_events

        measured = selectivity_from_sample(queries, read_events(args.selectivity_from, event_columns(args)),
                                           time_unit=args.time_unit,
                                           backend=getattr(args, "backend", "auto"))
        for q in queries:
            values = {frozenset([k] if isinstance(k, str) else k): v
                      for k, v in measured.get(q.name, {}).items()}
            sel[q.name] = values
            shown = [f"{','.join(sorted(k))}={v:.4g}" + (f" (--selectivity: {given[q.name][k]:g})"
                                                        if k in given.get(q.name, {}) else "")
                     for k, v in values.items()]
            print(f"{args.prog}: selectivity of {q.name} measured on {args.selectivity_from}: "
                  f"{', '.join(shown) or 'no condition over one or two types'}", file=sys.stderr)
    for name, values in given.items():
        sel.setdefault(name, {}).update(values)
    if not any(sel.values()):
        return queries
    return as_queries(parse_queries(text, selectivity={n: v for n, v in sel.items() if v}))


def selectivity_arguments(values, queries) -> dict[str, dict[frozenset[str], float]]:
    """``--selectivity [QUERY:]TYPE[,TYPE...]=σ ...`` as ``{query name: {types: σ}}``: a value
    without ``QUERY:`` is for every query that has all its types. A malformed value, σ outside
    (0, 1], an unknown query or types that no (or not that) query has are a :class:`UsageError`
    naming the value."""
    out: dict[str, dict[frozenset[str], float]] = {}
    first: dict[tuple[str, frozenset[str]], str] = {}
    names = [q.name for q in queries]
    for text in values or ():
        key, sep, value = text.rpartition("=")
        if not sep or not key.strip():
            hint = " (the event file goes before --selectivity)" if not sep and "." in text else ""
            raise UsageError("--selectivity", f"expected [QUERY:]TYPE,TYPE=σ (e.g. A,B=0.1), got {text!r}{hint}")
        qname, _, type_text = key.rpartition(":")
        types = [t.strip() for t in type_text.split(",")]
        if not all(types) or len(set(types)) != len(types):
            raise UsageError("--selectivity", f"{text!r}: expected distinct type names separated by "
                             "commas before '='")
        try:
            sigma = float(value)
        except ValueError:
            sigma = None
        if sigma is None or not 0 < sigma <= 1:
            raise UsageError("--selectivity", f"{text!r}: σ must be a number in (0, 1], got {value.strip()!r}")
        qname = qname.strip()
        if qname:
            if qname not in names:
                raise UsageError("--selectivity", f"{text!r}: no query named {qname!r} (queries: {', '.join(names)})")
            targets = [q for q in queries if q.name == qname]
            missing = sorted(set(types) - targets[0].types)
            if missing:
                raise UsageError("--selectivity", f"{text!r}: query {qname} has no type(s) {', '.join(missing)} "
                                 f"(its types: {', '.join(targets[0].order)})")
        else:
            targets = [q for q in queries if set(types) <= q.types]
            if not targets:
                have = "; ".join(f"{q.name}: {', '.join(q.order)}" for q in queries)
                raise UsageError("--selectivity", f"{text!r}: no query has the type(s) {', '.join(types)} "
                                 f"(queries: {have})")
        given = (qname, frozenset(types))
        if given in first:  # the last value would silently win
            raise UsageError("--selectivity", f"{text!r}: σ of these types given twice (first {first[given]!r})")
        first[given] = text
        for q in targets:
            out.setdefault(q.name, {})[frozenset(types)] = sigma
    return out


def _check_node_column(value: str | None, args=None) -> None:
    """A ``--node-column`` that cannot name nodes (``type``, ``ts``, ``id``: docs/muse.md) is a
    usage error naming the option (``ts`` made a node of each timestamp), and so is the column
    given to ``--type-column``, ``--ts-column`` or ``--id-column`` of ``args`` (it is read as
    ``type``, ``ts`` or ``id``)."""
    from ..io import COLUMN_OPTIONS
    from .network import check_node_column

    if value is not None:
        try:
            check_node_column(value)
        except MuseError as err:
            raise UsageError("--node-column", str(err).removeprefix("node_column ")) from None
    node = "node" if value is None else value
    for target, column in (event_columns(args) if args is not None else {}).items():
        if column == node:
            raise UsageError("--node-column", f"the column {node!r} is given to {COLUMN_OPTIONS[target]} "
                             f"too, which reads it as {target!r}: the nodes need a column of their own")


def _check_columns(args, *files: str | None) -> None:
    """``--type-column`` and the like without any of the event ``files`` they name columns of
    (``muse network`` without EVENTS, ``plan`` without ``--selectivity-from``): a usage error,
    not options ignored without a word."""
    from ..io import COLUMN_OPTIONS

    given = event_columns(args)
    if given and not any(files):
        raise UsageError(COLUMN_OPTIONS[next(iter(given))], "names a column of the events, and no "
                         "event file is given")


def cmd_network(args) -> int:
    from .network import Network

    _check_node_column(args.node_column, args)
    _check_columns(args, args.events)
    check_outputs({"--out": args.out}, [("events", args.events)])
    seeded = {"--nodes": args.nodes, "--types": args.types, "--ratio": args.ratio, "--skew": args.skew,
              "--seed": args.seed}
    if args.events:
        for option, value in seeded.items():
            if value is not None:
                raise UsageError(option, f"generates a random network, which EVENTS ({args.events}) "
                                 "does not need: give one or the other")
        return _network_from_events(args)
    for option, value in (("--node-column", args.node_column), ("--time-unit", args.time_unit)):
        if value is not None:
            raise UsageError(option, "reads an event file: give EVENTS (cep-gpu muse network EVENTS "
                             f"{option} ...)")
    net = Network.generate(20 if args.nodes is None else args.nodes,
                           15 if args.types is None else args.types,
                           0.5 if args.ratio is None else args.ratio,
                           1.5 if args.skew is None else args.skew,
                           0 if args.seed is None else args.seed)
    text = json.dumps(net.to_dict(), indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
        print(f"network of {len(net.nodes)} nodes, {len(net.rates)} types -> {args.out}")
    else:
        print(text)
    return 0


def _network_from_events(args) -> int:
    """``cep-gpu muse network EVENTS``: the network measured on an event file; with ``--out``, a
    table of the rates per type (mean, least and most over the type's nodes) besides."""
    import pandas as pd

    from ..cli import print_table
    from ..io import read_events
    from .network import Network, node_rates

    node_column = args.node_column or "node"
    time_unit = args.time_unit or "s"
    events = read_events(args.events, event_columns(args))
    rates = node_rates(events, node_column, time_unit)
    net = Network.from_rates(rates)
    text = json.dumps(net.to_dict(), indent=2)
    if not args.out:
        print(text)
        return 0
    Path(args.out).write_text(text + "\n")
    by_type = rates.groupby("type", sort=True)
    table = pd.DataFrame({
        "type": list(by_type.groups),
        "nodes": by_type.size().to_numpy(),
        "events": by_type["events"].sum().to_numpy(),
        "rate (events/s per node)": [f"{net.rate(str(t)):.4g}" for t in by_type.groups],
        "least": [f"{v:.4g}" for v in by_type["rate"].min()],
        "most": [f"{v:.4g}" for v in by_type["rate"].max()],
    })
    print_table(table, len(table))
    print(f"network of {len(net.nodes)} nodes, {len(net.rates)} types from {len(events)} events "
          f"over {rates.attrs['span_s']:g} s -> {args.out}")
    return 0


def cmd_plan(args) -> int:
    from .placement import place

    _check_columns(args, args.selectivity_from)
    check_outputs({"--json": args.json}, _inputs(args))
    queries, net, _ = _load(args)
    plan = place(queries, net, args.algorithm)
    print(plan.explain())
    if args.json:
        Path(args.json).write_text(plan.to_json() + "\n")
    return 0


def cmd_simulate(args) -> int:
    from .. import parse_rules
    from ..cli import event_types, warn_absent_types
    from ..io import read_events, write_output
    from .placement import place
    from .simulate import generate_streams, simulate

    _check_node_column(args.node_column, args)
    _check_columns(args, args.events, args.selectivity_from)
    check_outputs({"--out": args.out, "--json": args.json}, _inputs(args), tables=("--out",))  # as cep-gpu run
    queries, net, query_text = _load(args)
    plan = place(queries, net, args.algorithm)
    if args.events:
        streams = read_events(args.events, event_columns(args))
        duration = args.duration  # None: the span of the file's ts
        node_column, time_unit = args.node_column, args.time_unit
        warn_absent_types(args.prog, parse_rules(query_text), event_types(streams), args.events)
    else:
        duration = 60.0 if args.duration is None else args.duration
        streams = generate_streams(net, queries, duration, seed=args.seed)
        node_column, time_unit = "node", "s"
    res = simulate(plan, streams, backend=args.backend, duration=duration, node_column=node_column,
                   time_unit=time_unit)
    if res.ignored:
        n = sum(res.ignored.values())
        kinds = ", ".join(f"{t} ({c})" for t, c in res.ignored.items())
        print(f"{args.prog}: warning: ignored {n} event(s) of type(s) that no query reads: {kinds}",
              file=sys.stderr)
    print(plan.explain())
    simulated = len(streams) - sum(res.ignored.values())
    print(f"\n{simulated} events, {len(res.matches)} matches at the sinks "
          f"({', '.join(f'{q}: {n}' for q, n in res.matches['query'].value_counts().items())})")
    print(f"messages: {res.total_messages} counted, {res.predicted_messages:.1f} predicted by "
          f"the cost model over {res.duration:g} s")
    if args.json:
        out = plan.to_dict()
        out["simulation"] = {"events": simulated, "matches": len(res.matches),
                             "ignored_events": res.ignored,
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

    # before any run (save_results makes missing folders)
    check_outputs({"--out": args.out, "--plot": args.plot}, make_folders=True)

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
