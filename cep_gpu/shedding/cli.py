"""``cep-gpu shedding run|bench`` (wired in by :mod:`cep_gpu.cli`) and ``cep-gpu bench shedding``.

    cep-gpu shedding run RULES EVENTS --latency-bound S [--policy darling|random|state|none]
                         [--arrival COLUMN | --speedup X] [--warmup N | --sample FILE]
                         [--mode real|virtual] [--out FILE] [--report F.json]
                         [--type-column NAME] [--ts-column NAME] [--id-column NAME]
    cep-gpu shedding bench [--quick] [--workload stock|nasdaq|bus] [--mode real|virtual]
                           [--lengths 3,4,5,6] [--factors 10,100,1000] [--out F.json] [--plot F.png]
"""

from __future__ import annotations

import argparse
import sys

from ..benchmarks.save import json_default, save_results
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
from ..errors import is_finite_nonnegative, is_finite_positive

#: a replay of this many events or more shows a progress bar (one event at a time: tens of µs each)
PROGRESS_EVENTS = 100_000

EPILOG = """examples:
  cep-gpu shedding run rules.txt events.parquet --latency-bound 0.5 --arrival arrival_s --out found.csv
  cep-gpu shedding run rules.txt events.csv --latency-bound 0.02 --speedup 1000 --report report.json
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
        "shedding", help="DARLING input load shedding: run on your events, or benchmark against random and state shedding",
        description="DARLING data-aware input load shedding (docs/shedding.md).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="shedding_command")
    r = sub.add_parser("run", help="replay your events through the shedder and the engine under a latency bound",
                       description="Replay an event file through DARLING (or a baseline) and the engine: "
                                   "composite events with their detection latency, and a report "
                                   "(docs/shedding.md, 'On your own events').")
    add_run_arguments(r)
    set_command(r, cmd_run)
    b = sub.add_parser("bench", help="recall and p99 latency per policy (paper Section 5)")
    add_bench_arguments(b)
    set_command(b, cmd_bench)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    return p


def add_run_arguments(r: argparse.ArgumentParser) -> None:
    seconds = number(is_finite_positive, "a finite number of seconds > 0")
    r.add_argument("rules", help="rule file (TESLA or SEQ)")
    r.add_argument("events", help="events (.csv/.parquet): type, ts and the attributes")
    r.add_argument("--latency-bound", type=seconds, required=True, metavar="S",
                   help="L_max: the longest a composite event may take from the arrival of its latest "
                        "event to its detection (seconds)")
    r.add_argument("--policy", choices=["darling", "random", "state", "none"], default="darling",
                   help="darling (default); random: random input shedding at the same constraints; "
                        "state: random eviction of column events; none: no shedding")
    r.add_argument("--beta", type=number(lambda v: 0 < v <= 1, "in (0, 1]"), default=0.8,
                   help="share of the input constraint the local constraints fill (default 0.8)")
    r.add_argument("--buckets", type=at_least(1), default=100, help="utility buckets per type (default 100)")
    r.add_argument("--utility", choices=["eq11", "chain", "support"], default="eq11",
                   help="darling's utility: eq11 (the paper's, default), or the extensions chain "
                        "(resolution 22) and support (resolution 23; reads time too)")
    r.add_argument("--allocation", choices=["paper", "spread"], default="paper",
                   help="how N_in is split into the local constraints: paper (Z(T)R(T), default) or the "
                        "extension spread (the terminators' combination work shared by every read type; "
                        "resolution 26)")
    r.add_argument("--seed", type=int, default=0, help="seed of the random choices (default 0)")
    r.add_argument("--arrival", metavar="COLUMN",
                   help="column of arrival times in seconds (default: the events arrive at their timestamps)")
    r.add_argument("--speedup", type=number(is_finite_positive, "a finite number > 0"), default=None,
                   help="replay the timestamps this many times faster (no --arrival column)")
    r.add_argument("--warmup", type=at_least(1), default=None, metavar="N",
                   help="gather the statistics on the first N events by timestamp (default: a tenth of "
                        "the events, at most 10000); the run replays every event")
    r.add_argument("--sample", metavar="FILE",
                   help="gather the statistics on this event file instead (its own timestamps or "
                        "--arrival column give its rates)")
    r.add_argument("--mode", choices=["real", "virtual"], default="real",
                   help="real: this engine's measured processing time (default); virtual: the costs "
                        "of --cost and --window-cost (deterministic)")
    r.add_argument("--cost", type=number(is_finite_nonnegative, "a finite number >= 0"),
                   default=None, metavar="S", help="virtual time: seconds charged per event (default 0.001)")
    r.add_argument("--window-cost", type=number(is_finite_nonnegative, "a finite number >= 0"),
                   default=None, metavar="S",
                   help="virtual time: seconds per event a terminator reads (default 0)")
    r.add_argument("--time-unit", type=time_unit, default="s",
                   help="unit of numeric ts values (default s)")
    r.add_argument("--backend", default="cpu", help="the engine's backend (default cpu)")
    r.add_argument("--no-reference", action="store_true",
                   help="skip the run of detect on every event (no measured recall; the estimate stays)")
    r.add_argument("--out", type=nonempty_path,
                   help="write the composite events here (.csv/.parquet): rule, ts, ids (as "
                                 "cep-gpu run gives them), detected_s, latency_s; default: print")
    r.add_argument("--report", type=nonempty_path, metavar="FILE",
                   help="write the report (stats()) here as JSON")
    r.add_argument("--limit", type=at_least(0), default=50,
                   help="composite events printed without --out (default 50), as cep-gpu run")
    add_column_options(r, "EVENTS and --sample")


def cmd_run(args) -> int:
    import json

    import numpy as np

    from ..cli import (
        argument,
        check_outputs,
        event_columns,
        event_types,
        print_table,
        progress_bar,
        read_rules,
        warn_absent_types,
    )
    from ..io import write_output
    from .engine import SheddingEngine
    from .shedder import UNIT_NS, Shedder
    from .stats import CostModel, times_ns

    if args.arrival and args.speedup:
        raise UsageError("--speedup", "replays the timestamps; it cannot go with --arrival")
    if args.warmup and args.sample:
        raise UsageError("--sample", "gives the statistics; it cannot go with --warmup")
    if args.mode == "real" and (args.cost is not None or args.window_cost is not None):
        raise UsageError("--cost" if args.cost is not None else "--window-cost",
                         "is for --mode virtual; real time measures this engine")
    check_outputs({"--out": args.out, "--report": args.report},
                  [("rule", args.rules), ("events", args.events), ("sample", args.sample)], tables=("--out",))
    from ..backends import get_backend

    with argument("--backend"):  # (the engine's own check came out as an error of --time-unit)
        get_backend(args.backend)
    rules = read_rules(args.rules)
    columns = event_columns(args)
    events = _read_events(args.events, columns, args.arrival)
    warn_absent_types(args.prog, rules, event_types(events), args.events)
    if not len(events):
        raise UsageError("events", f"{args.events} holds no event")
    costs = (CostModel(default=1e-3 if args.cost is None else args.cost,
                       window=args.window_cost or 0.0) if args.mode == "virtual" else None)
    with argument("--buckets"):
        shedder = Shedder(args.latency_bound, beta=args.beta, buckets=args.buckets, policy=args.policy,
                          seed=args.seed, utility=args.utility, allocation=args.allocation)
    with argument("--time-unit"):
        engine = SheddingEngine(rules, shedder, backend=args.backend, time_unit=args.time_unit, mode=args.mode,
                                cost_model=costs)

    def arrival_of(frame, path, ts_ns=None):
        if args.arrival:
            if args.arrival not in frame.columns:
                raise UsageError("--arrival", f"no column {args.arrival!r} in the events (columns: "
                                              f"{', '.join(map(str, frame.columns))})")
            if ts_ns is None:
                ts_ns = times_ns(frame["ts"], UNIT_NS[args.time_unit])
            return arrival_column(frame[args.arrival], path, ts_ns)
        if args.speedup:
            sec = (times_ns(frame["ts"], UNIT_NS[args.time_unit]) if ts_ns is None else ts_ns) / 1e9
            return (sec - sec.min()) / args.speedup
        return None

    ts_ns = times_ns(events["ts"], UNIT_NS[args.time_unit])  # (once: the warm-up's order and the arrivals)
    arr = arrival_of(events, args.events, ts_ns)
    if args.sample:
        sample = _read_events(args.sample, columns, args.arrival)
        if not len(sample):  # (was the engine's 'events is empty', without the option or the file)
            raise UsageError("--sample", f"{args.sample} holds no event")
        engine.warm_up(sample, arrival_of(sample, args.sample))
    else:
        n = args.warmup or max(1, min(len(events) // 10, 10_000))
        if n > len(events):
            raise UsageError("--warmup", f"the events hold {len(events)} events, fewer than {n}")
        first = np.argsort(ts_ns, kind="stable")[:n]
        engine.warm_up(events.iloc[first], None if arr is None else arr[first])
    from rich.console import Console

    with progress_bar(Console(stderr=True), len(events) >= PROGRESS_EVENTS) as bar:
        task = bar.add_task("replay", total=len(events))
        found = engine.run(events, arr, reference=not args.no_reference,
                           progress=lambda done, total: bar.update(task, completed=done))
    found["ids"] = _input_ids(found["ids"], engine.input_rows, events)
    report = engine.stats()
    print(_summary(report), file=sys.stderr)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1, default=json_default)
    if args.out:
        write_output(found, args.out)
    else:
        print_table(found, args.limit)
    return 0


def arrival_column(column, path: str, ts_ns):
    """The ``--arrival`` column ``column`` of the event file ``path`` (timestamps ``ts_ns``) as
    float64 seconds, or a :class:`UsageError` naming the option, the column, the row and the
    value: a value that is not a finite number (a text value was the engine's ``could not convert
    string to float: 'C'``, naming neither), or arrivals that go back in timestamp order."""
    import math

    import numpy as np
    import pandas as pd

    def number(v) -> bool:
        try:
            return math.isfinite(float(v))
        except (TypeError, ValueError):
            return False

    name = column.name
    try:
        arr = np.asarray(column, np.float64)
        bad = np.flatnonzero(~np.isfinite(arr))
    except (TypeError, ValueError):
        arr, bad = None, np.flatnonzero([not number(v) for v in column.to_numpy(object)])
    if len(bad):
        row = int(bad[0])
        value = column.iloc[row]
        value = value.item() if isinstance(value, np.generic) else value
        what = "is null (or NaN)" if pd.isna(value) else f"holds {value!r}"
        raise UsageError("--arrival", f"column {name!r} of {path} {what} at row {row}: "
                                      "arrival times must be finite numbers of seconds")
    order = np.argsort(ts_ns, kind="stable")
    back = np.flatnonzero(np.diff(arr[order]) < 0)
    if len(back):  # (the engine's check, which named neither the option nor a row)
        i, j = int(order[back[0]]), int(order[back[0] + 1])
        raise UsageError("--arrival", f"column {name!r} of {path}: row {j} arrives at {arr[j]:g} s, before "
                                      f"row {i} ({arr[i]:g} s), whose timestamp is not later: arrival times "
                                      "must not decrease in timestamp order")
    return arr


def _read_events(path: str, columns: dict[str, str] | None = None, arrival: str | None = None):
    """The event file ``path`` (``columns``: ``cep_gpu.io.read_table``'s mapping of its columns
    to ``type``, ``ts``, ``id``) as a frame, checked as ``cep-gpu run`` checks it where this
    command reads it itself: ``type`` and ``ts`` present, no two columns of one name, and an
    ``id`` column (which names the events in the output) of distinct integers >= 0, without
    nulls (a repeated or fractional id named two events alike, silently). ``arrival``: the
    ``--arrival`` column, which no rule reads and :func:`arrival_column` checks itself, so the
    CSV reader's warning of numbers read as text is not given for it."""
    import re
    import warnings

    from ..errors import CepWarning
    from ..events.checks import check_unique_columns, require_frame
    from ..events.from_pandas import pandas_ids
    from ..io import read_events

    with warnings.catch_warnings():
        if arrival:
            warnings.filterwarnings("ignore", f".*column {re.escape(repr(arrival))} is read as text", CepWarning)
        frame = read_events(path, columns)
    events = require_frame(frame, path)
    check_unique_columns([str(c) for c in events.columns])
    if "id" in events.columns:
        pandas_ids(events["id"])
    return events


def _input_ids(ids, order, events):
    """The run's ids (positions in timestamp order) as ``cep-gpu run`` gives them: the events'
    ``id`` column where there is one, else their row in the file; composite events' ids (< 0)
    stay."""
    import numpy as np

    own = events["id"].to_numpy(np.int64) if "id" in events.columns else np.arange(len(events), dtype=np.int64)
    return [tuple(int(own[order[i]]) if i >= 0 else i for i in t) for t in ids]


def _summary(r: dict) -> str:
    recall = "not measured (--no-reference)" if r["recall"] is None else f"{r['recall']:.3f}"
    p99 = r["latency_s"]["p99"]
    per = ", ".join(f"{t} {k}" for t, k in sorted(r["dropped_per_type"].items())) or "none"
    return (f"{r['policy']} ({r['mode']} time): {r['events']} events, {r['dropped']} dropped ({per}); "
            f"{r['composites']} composite events, recall {recall} (estimated {r['estimated_recall']:.3f}); "
            f"p99 latency {'-' if p99 is None else f'{p99:.4g} s'}, bound {r['latency_bound_s']:g} s, "
            f"{r['violations']} violations")


def add_bench_arguments(b: argparse.ArgumentParser) -> None:
    b.add_argument("--workload", choices=["stock", "nasdaq", "bus"], default="stock",
                   help="stock: prices, short windows (the earlier workload); nasdaq: the paper's Q1^A "
                        "on per-minute volumes, 60-minute windows (docs/shedding.md, resolution 19)")
    b.add_argument("--mode", choices=["real", "virtual"], default="real",
                   help="real: the engine's measured time (default); virtual: charged costs")
    b.add_argument("--lengths", type=_ints, default=None, help="pattern lengths (default 3,4,5,6)")
    b.add_argument("--factors", type=_floats, default=None,
                   help="overload rates of the peaks, at length 4 (default 10,100,1000)")
    b.add_argument("--events", type=int, default=None, help="events per run after the warm-up (default 24000)")
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
    b.add_argument("--utility", choices=["eq11", "chain", "support"], default="eq11",
                   help="darling's utility: eq11 (the paper's, default), or the extensions chain "
                        "(docs/shedding.md, resolution 22) and support (resolution 23; reads time too)")
    b.add_argument("--allocation", choices=["paper", "spread"], default="paper",
                   help="how N_in is split into the local constraints: paper (default) or the extension "
                        "spread (docs/shedding.md, resolution 26)")
    b.add_argument("--quick", action="store_true",
                   help="lengths 3,4,5; factors 100,1000; 4000 events (each unless given)")
    b.add_argument("--out", type=nonempty_path,
                   help="write the results (JSON, with a 'summary') here")
    b.add_argument("--plot", type=nonempty_path, help="write the figure (PNG) here")


def cmd_bench(args) -> int:
    from . import bench

    # before any run (save_results makes missing folders)
    check_outputs({"--out": args.out, "--plot": args.plot}, make_folders=True)

    # the defaults (--quick: shorter ones), for what was not given
    default = {"lengths": [3, 4, 5], "factors": [100, 1000], "events": 4000} if args.quick else \
        {"lengths": [3, 4, 5, 6], "factors": [10, 100, 1000], "events": 24000}
    lengths, factors, events = (default[k] if getattr(args, k) is None else getattr(args, k) for k in default)
    if not 0 < args.bound_fraction <= 1:
        raise UsageError("--bound-fraction", f"must be in (0, 1], got {args.bound_fraction}")
    if not 0 <= args.noise < 1:
        raise UsageError("--noise", f"must be in [0, 1), got {args.noise}")
    if args.guard is not None and not 0 < args.guard <= 1:
        raise UsageError("--guard", f"must be in (0, 1], got {args.guard}")
    if args.regather_every is not None and args.regather_every < 0:
        raise UsageError("--regather-every", f"must be >= 0, got {args.regather_every}")
    if not lengths and not factors:  # both sweeps empty ran nothing and wrote an empty result
        raise UsageError("--lengths", "and --factors are both empty: give at least one value to either")
    if lengths and min(lengths) < 2:
        raise UsageError("--lengths", f"pattern lengths must be >= 2, got {min(lengths)}")
    bad = [f for f in factors if not is_finite_positive(f)]
    if bad:
        raise UsageError("--factors", f"peak rate multipliers must be finite numbers > 0, got {bad[0]}")
    for name, v in (("events", events), ("warmup", args.warmup), ("buckets", args.buckets), ("seeds", args.seeds)):
        if v < 1:
            raise UsageError(f"--{name}", f"must be >= 1, got {v}")
    from ..backends import get_backend

    with argument("--backend"):  # before the runs (was an error without the option's name, rc 1)
        get_backend(args.backend)
    result = bench.run(args.workload, lengths, factors, n_events=events, warmup=args.warmup,
                       latency_bound=args.latency_bound, beta=args.beta, buckets=args.buckets,
                       mode=args.mode, seeds=range(args.seeds), backend=args.backend, noise=args.noise,
                       bound_fraction=args.bound_fraction, regather_every=args.regather_every,
                       guard=args.guard, utility=args.utility, allocation=args.allocation,
                       on_step=lambda s: print(f"  {s}", file=sys.stderr, flush=True))
    save_results(result, args.out, args.plot, bench.plot)
    return 0


def shedding_bench_from_bench_args(args) -> int:
    """``cep-gpu bench shedding [--out F] [--plot F]``: the default shedding benchmark."""
    ns = argparse.Namespace(workload="stock", mode="real", lengths=[3, 4, 5, 6], factors=[10, 100, 1000],
                            events=24000, warmup=2000, latency_bound=None, beta=0.8, buckets=100,
                            seeds=1, backend="cpu", noise=0.5, bound_fraction=0.25, regather_every=None,
                            guard=None, utility="eq11", allocation="paper", quick=False, out=args.out,
                            plot=args.plot)
    return cmd_bench(ns)
