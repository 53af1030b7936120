"""The ``bench`` and ``calibrate`` subcommands of ``cep-gpu`` (wired in by :mod:`cep_gpu.cli`).

    cep-gpu bench seq3 --backend cpu,auto --sizes 100,1000,4000 --out seq3.json --plot seq3.png
    cep-gpu bench rules1000 --backend cpu,aip --sizes 2,3,4 --events 20000
    cep-gpu bench museum --sizes 100000,1000000
    cep-gpu calibrate [--out profile.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..cli import (
    UsageError,
    argument,
    at_least,
    check_outputs,
    nonempty_path,
    run_command,
    set_command,
)

EPILOG = """examples:
  cep-gpu bench seq3 --backend cpu,auto,gpu --sizes 100,1000,4000 --out seq3.json --plot seq3.png
  cep-gpu bench rules1000 --backend cpu,aip --sizes 2,3,4 --policy last --events 20000 --plot r.png
  cep-gpu bench museum --backend cpu,auto,aip --sizes 100000,1000000
  cep-gpu bench seq3 --backend reference,cpu,aip --sizes 100,1000 --events 3000
  cep-gpu bench seq3 --backend cpu --policy last --peers flink,flink-stream --stream --plot p.png

Every configuration (policy x size x backend) is run --warmup times unmeasured, then --repeat
times measured; the JSON holds every time, min/median/max of events/s, us per terminator and us
per event, the composite events, and the machine (CPU model, cores, memory, GPU, library
versions). Backends that cannot run are rows with status "not measured" (gpu without a usable
CUDA device) or "skipped" (reference on inputs of more than %(ref)d events); a backend that fails
is a row with status "error" and the exit status is 1. --plot draws the chapter's Figure 7 for
seq3 (us per terminator against window, CPU/GPU crossover marked when both were measured), its
Figure 6 for rules1000 (us per event against chain length) and events/s against size for museum,
with one panel per policy. --peers runs other engines on the same input right after cep-gpu at
every size (flink: Flink SQL MATCH_RECOGNIZE, batch; flink-stream: streaming mode; seq3 last only,
their JVM start-up timed once and kept apart; `make peers` installs them); --stream adds the
streaming Engine's one-event and micro-batch rows to seq3.
"""


def _int_list(text: str) -> list[int]:
    """``--sizes``: comma-separated whole numbers >= 1 (``1e5`` is accepted)."""
    try:
        values = [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        values = None
    if not values or any(not (v >= 1 and v == int(v)) for v in values):  # also rejects nan, inf
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 1, got {text!r}")
    return [int(v) for v in values]


def _name_list(text: str) -> list[str]:
    return [x for x in text.replace(" ", "").split(",") if x]


def add_bench_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``cep-gpu bench`` to an argparse sub-parser set."""
    from .runner import BACKENDS, DEFAULT_BACKENDS, REFERENCE_MAX_EVENTS

    defaults = "; ".join(f"{w}: {','.join(b)}" for w, b in DEFAULT_BACKENDS.items())
    p = subparsers.add_parser(
        "bench", help="run a benchmark workload (seq3, rules1000, museum)",
        description="Run a benchmark workload of docs/performance.md (seq3: the chapter's Figure 7;\n"
        "rules1000: its Figure 6; museum) on several backends; print a summary table, record\n"
        "min/median/max events/s and us per terminator, and the machine, as JSON.",
        epilog=EPILOG % {"ref": REFERENCE_MAX_EVENTS},
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("workload", choices=["seq3", "rules1000", "museum", "muse", "decopa", "parallel",
                                        "kleene", "shedding"],
                   help="muse: MuSE placement (cep-gpu muse bench --help has its options); "
                        "decopa: DecoPa decomposition (cep-gpu decopa bench --help); "
                        "parallel: HYPERSONIC (cep-gpu parallel bench --help); "
                        "kleene: Kleene closure, greedy and [1..2] against window (--sizes in ms); "
                        "shedding: DARLING load shedding (cep-gpu shedding bench --help)")
    p.add_argument("--backend", type=_name_list, action="extend", dest="backends",
                   help=f"backends, comma-separated or repeated: {', '.join(BACKENDS)} "
                        f"(default {defaults}). gpu without a usable device is reported as not "
                        f"measured; reference runs only inputs of at most {REFERENCE_MAX_EVENTS} "
                        "events; gpu-host is the host build of the CUDA kernels (not a GPU figure)")
    p.add_argument("--sizes", type=_int_list,
                   help="seq3: windows in ms (default 100,1000,4000,10000,40000); rules1000: chain "
                        "lengths (default 2,3,4); museum: event counts (default 100000,1000000)")
    p.add_argument("--policy", type=_name_list, default=["each", "last"],
                   help="seq3 and rules1000: each,last (default both; first also accepted); "
                        "ignored for museum")
    p.add_argument("--events", type=at_least(1), help="events per input (seq3: 200000, fewer for large each "
                                               "windows; rules1000: 200000; museum: --sizes)")
    p.add_argument("--repeat", type=at_least(1), default=3, help="measured repetitions (default 3)")
    p.add_argument("--warmup", type=at_least(0), default=1, help="unmeasured warm-up runs (default 1)")
    p.add_argument("--seed", type=at_least(0), default=0)
    p.add_argument("--output", choices=["count", "arrow"], default="count",
                   help="count composite events only, or also build the Arrow output")
    p.add_argument("--peers", type=_name_list, action="extend", default=[],
                   help="other engines on the same inputs: flink (Flink SQL MATCH_RECOGNIZE, batch), "
                        "flink-stream (streaming mode); seq3 last only (needs `make peers`)")
    p.add_argument("--stream", action="store_true",
                   help="seq3: add the streaming Engine's one-event and micro-batch figures")
    p.add_argument("--stream-events", type=at_least(1), default=5000,
                   help="--stream: timed one-event publishes per window (default 5000)")
    p.add_argument("--micro-batch", type=at_least(1), default=1000,
                   help="--stream: events per micro-batch publish (default 1000)")
    p.add_argument("--out", type=nonempty_path, help="write the results as JSON here")
    p.add_argument("--plot", type=nonempty_path, help="draw the figure (PNG) here")
    set_command(p, bench_main)
    return p


def add_calibrate_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``cep-gpu calibrate`` to an argparse sub-parser set."""
    from ..planner import user_profile_path

    p = subparsers.add_parser(
        "calibrate", help="measure the kernels and write a planner profile",
        description="Time the CPU kernels (and the GPU kernels where a device exists) on generated "
        "data and write the planner's cost profile (JSON).",
    )
    p.add_argument("--out", type=nonempty_path,
                   help=f"profile path (default: {user_profile_path()})")
    p.add_argument("--quick", action="store_true", help="fewer, smaller inputs (about 10 s)")
    p.add_argument("--events", type=at_least(1000), default=60_000, help="events per calibration input")
    p.add_argument("--seed", type=at_least(0), default=0)
    set_command(p, calibrate_main)
    return p


def bench_main(args: argparse.Namespace) -> int:
    """Run ``cep-gpu bench``; prints a summary table, writes JSON and a plot if asked."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .plots import plot
    from .runner import DEFAULT_BACKENDS, DEFAULT_SIZES, check_backends, run_bench

    # before any run: a typo must not cost the whole benchmark (bench makes missing folders)
    check_outputs({"--out": args.out, "--plot": args.plot}, make_folders=True)
    console = Console(stderr=True)
    if args.workload == "muse":  # its own settings: cep-gpu muse bench
        from ..muse.cli import muse_bench_from_bench_args

        return muse_bench_from_bench_args(args)
    if args.workload == "decopa":  # its own settings: cep-gpu decopa bench
        from ..decopa.cli import decopa_bench_from_bench_args

        return decopa_bench_from_bench_args(args)
    if args.workload == "parallel":  # its own settings: cep-gpu parallel bench
        from ..parallel.cli import parallel_bench_from_bench_args

        return parallel_bench_from_bench_args(args)
    if args.workload == "kleene":
        from .kleene import kleene_bench_from_bench_args

        return kleene_bench_from_bench_args(args)
    if args.workload == "shedding":  # its own settings: cep-gpu shedding bench
        from ..shedding.cli import shedding_bench_from_bench_args

        return shedding_bench_from_bench_args(args)
    backends = args.backends or list(DEFAULT_BACKENDS[args.workload])
    try:
        check_backends(backends)
    except ValueError as exc:
        raise UsageError("--backend", str(exc)) from None
    sizes = args.sizes or list(DEFAULT_SIZES[args.workload])
    from .peers.bench import check_peers

    with argument("--peers"):
        check_peers(args.peers)
    # checked here so that no run starts and fails half-way with a traceback
    bad_policies = [x for x in args.policy if x not in ("each", "last", "first")]
    if not args.policy and args.workload != "museum":
        raise UsageError("--policy", "expected each, last or first, got nothing")
    if bad_policies and args.workload != "museum":
        raise UsageError("--policy", f"expected each, last or first, got {', '.join(map(repr, bad_policies))}")
    if args.workload == "rules1000" and min(sizes) < 2:
        raise UsageError("--sizes", f"rules1000 chain lengths must be >= 2, got {min(sizes)}")
    policies = args.policy if args.workload != "museum" else ["rules"]
    stream = args.stream and args.workload == "seq3"
    total = (len(backends) + len(args.peers) + stream) * len(sizes) * len(policies)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task(args.workload, total=total)
        steps = {"n": 0, "desc": args.workload}

        def on_step(desc: str) -> None:
            if steps["n"]:
                progress.advance(task)
            steps["n"] += 1
            steps["desc"] = desc
            progress.update(task, description=desc)

        def on_detail(detail: str) -> None:  # inside one configuration: repetitions, rules
            progress.update(task, description=f"{steps['desc']}: {detail}")

        run = run_bench(args.workload, backends, sizes, args.policy, args.events, args.repeat,
                        args.warmup, args.seed, args.output, on_step, on_detail=on_detail,
                        peers=args.peers, stream=stream, stream_events=args.stream_events,
                        micro_batch=args.micro_batch)
        progress.advance(task)
    print_summary(run, console)
    for name, info in run.get("peers", {}).items():
        if "jvm_start_s" in info:
            console.print(f"{name}: Flink {info['flink_version']} on Java {info['java_version']}, JVM and "
                          f"environments started in {info['jvm_start_s']:.1f} s (not in any row)",
                          highlight=False, markup=False)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(run, indent=2) + "\n")
        console.print(f"results -> {args.out}")
    if args.plot:
        console.print(f"plot -> {plot(run, args.plot)}")
    return 0 if all(r["status"] != "error" for r in run["results"]) else 1


def print_summary(run: dict, console=None) -> None:
    """The results as a rich table: medians of events/s, us per terminator and per event, and
    composite events per terminator (the JSON holds min/median/max)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    m = run["machine"]
    table = Table(title=f"{run['workload']} on {m['cpu_model']} ({m['cores']} cores, "
                        f"{m['gpu'] or 'no GPU'})")
    for col in ("policy", "size", "backend", "events/s", "us/term.", "us/event", "out/term.", "status"):
        table.add_column(col, justify="right" if col not in ("policy", "backend", "status") else "left")
    for r in run["results"]:
        if r["status"] == "ok":
            table.add_row(r["policy"], str(r["size"]), r["backend"], f"{r['events_per_s']['median']:,.0f}",
                          f"{r['us_per_terminator']['median']:.3g}", f"{r['us_per_event']['median']:.3g}",
                          f"{r['composites_per_terminator']:.3g}",
                          "ok" if r.get("agree", True) else "DIFFERS")
        else:
            table.add_row(r["policy"], str(r["size"]), r["backend"], "", "", "", "", r["status"])
    console.print(table)
    reasons = sorted({f"{r['backend']}: {r.get('reason', '')}" for r in run["results"] if r["status"] != "ok"})
    for line in reasons:
        console.print(f"  {line}", highlight=False, markup=False)  # keeps [gpu] of pip hints


def calibrate_main(args: argparse.Namespace) -> int:
    """Run ``cep-gpu calibrate``; writes the profile and prints its coefficients."""
    from rich.console import Console

    from ..planner import user_profile_path
    from .calibrate import calibrate

    # before the calibration (minutes); the default path too (a cache folder that cannot be
    # made was found only when the profile was saved)
    out = Path(args.out) if args.out else user_profile_path()
    check_outputs({"--out": out}, make_folders=True)
    console = Console(stderr=True)
    with console.status("calibrating") as status:
        prof = calibrate(args.quick, args.events, args.seed, on_step=lambda s: status.update(s))
    prof.save(out)
    for dev in ("cpu", "gpu"):
        coefs = ", ".join(f"{k}={v:.3g}" for k, v in (prof.cpu if dev == "cpu" else prof.gpu).items())
        console.print(f"{dev}: {coefs}")
    console.print(f"cpu: {prof.meta.get('cpu_source')}; gpu: {prof.meta.get('gpu_source')}",
                  highlight=False, markup=False)
    cross = prof.meta.get("seq3_crossover_window_ms") or {}
    console.print("seq3 crossover (smallest window from which the GPU is chosen): " + ", ".join(
        f"{pol} {'never (up to 40000 ms)' if w is None else f'{w} ms'}" for pol, w in cross.items()),
        highlight=False, markup=False)
    console.print(f"profile -> {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m cep_gpu.benchmarks.cli bench seq3 ...``)."""
    parser = argparse.ArgumentParser(prog="cep-gpu")
    sub = parser.add_subparsers(dest="command", required=True)
    add_bench_parser(sub)
    add_calibrate_parser(sub)
    return run_command(parser, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
