"""Markdown tables of benchmark results (what docs/performance.md shows).

    python -m cep_gpu.benchmarks.report docs/perf/seq3.json
"""

from __future__ import annotations

import json
import sys

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


if __name__ == "__main__":
    for path in sys.argv[1:]:
        data = json.loads(open(path).read())
        print(markdown_table(data))
        print()
        print(auto_vs_cpu(data))
