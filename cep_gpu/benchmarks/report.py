"""Markdown tables of benchmark results (what docs/performance.md shows), and merging of runs.

    python -m cep_gpu.benchmarks.report docs/perf/seq3.json
    python -m cep_gpu.benchmarks.report --merge rules1000.json each.json last.json

``--merge OUT`` joins runs of one workload on one machine (for example ``rules1000`` with ``each``
and ``last`` measured at different event counts) into one results file, which ``--plot`` can
draw: ``python -m cep_gpu.benchmarks.report --merge r.json each.json last.json --plot r.png``.
"""

from __future__ import annotations

import argparse
import json

from .runner import SIZE_NAMES


def markdown_table(run: dict) -> str:
    """One row per (policy, size, backend): median (min-max) events/s and us per terminator."""
    size = SIZE_NAMES[run["workload"]]
    lines = [
        f"| policy | {size} | backend | events | events/s median (min-max) | us/terminator median (min-max) "
        "| composites/terminator |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in run["results"]:
        head = f"| {r['policy']} | {r['size']} | {r['backend']} |"
        if r["status"] != "ok":
            lines.append(f"{head} | {r['status']} | | |")
            continue
        e, u = r["events_per_s"], r["us_per_terminator"]
        lines.append(
            f"{head} {r['n_events']:,} | {e['median']:,.0f} ({e['min']:,.0f}-{e['max']:,.0f}) | "
            f"{u['median']:.3g} ({u['min']:.3g}-{u['max']:.3g}) | {r['composites_per_terminator']:.3g} |"
        )
    return "\n".join(lines)


def auto_vs_cpu(run: dict) -> str:
    """Per (policy, size): auto's median time relative to cpu's (the planner's overhead)."""
    by = {(r["policy"], r["size"], r["backend"]): r for r in run["results"] if r["status"] == "ok"}
    lines = ["| policy | size | cpu us/terminator | auto us/terminator | auto / cpu |", "|---|---:|---:|---:|---:|"]
    for (pol, size, b), r in by.items():
        if b != "cpu" or (pol, size, "auto") not in by:
            continue
        c = r["us_per_terminator"]["median"]
        a = by[(pol, size, "auto")]["us_per_terminator"]["median"]
        lines.append(f"| {pol} | {size} | {c:.3g} | {a:.3g} | {a / c:.2f} |")
    return "\n".join(lines)



def merge(runs: list[dict]) -> dict:
    """One run made of several runs of the same workload on the same machine.

    Rows are kept as they are (each carries its own ``n_events``). Settings that differ between
    the runs become ``{policy: value}`` when every run measured one distinct policy, else lists.
    """
    if not runs:
        raise ValueError("nothing to merge")
    workloads = {r["workload"] for r in runs}
    if len(workloads) != 1:
        raise ValueError(f"cannot merge runs of different workloads: {sorted(workloads)}")
    machines = {(r["machine"].get("cpu_model"), r["machine"].get("cores"), r["machine"].get("gpu"))
                for r in runs}
    if len(machines) != 1:
        raise ValueError(f"cannot merge runs from different machines: {sorted(map(str, machines))}")
    keys = [tuple(r["settings"]["policies"]) for r in runs]
    by_policy = all(len(k) == 1 for k in keys) and len(set(keys)) == len(keys)
    settings: dict = {}
    for name in runs[0]["settings"]:
        values = [r["settings"].get(name) for r in runs]
        if name in ("backends", "sizes", "policies"):
            settings[name] = list(dict.fromkeys(v for vs in values for v in vs))
        elif all(v == values[0] for v in values):
            settings[name] = values[0]
        elif by_policy:
            settings[name] = {k[0]: v for k, v in zip(keys, values)}
        else:
            settings[name] = values
    settings["note"] = f"merged from {len(runs)} runs"
    return {"workload": runs[0]["workload"], "machine": runs[0]["machine"], "settings": settings,
            "results": [row for r in runs for row in r["results"]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cep_gpu.benchmarks.report",
                                 description="Markdown tables of cep-gpu bench results; merge runs.")
    ap.add_argument("files", nargs="+", help="results files written by cep-gpu bench --out")
    ap.add_argument("--merge", metavar="OUT", help="write the files merged into one results file")
    ap.add_argument("--plot", metavar="PNG", help="with --merge: draw the merged results")
    args = ap.parse_args(argv)
    runs = [json.loads(open(path).read()) for path in args.files]
    if args.merge:
        runs = [merge(runs)]
        with open(args.merge, "w") as f:
            f.write(json.dumps(runs[0], indent=2) + "\n")
        if args.plot:
            from .plots import plot

            plot(runs[0], args.plot)
    for run in runs:
        print(markdown_table(run))
        print()
        print(auto_vs_cpu(run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
