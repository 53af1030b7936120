"""Where a benchmark command puts its results: the summary on stdout, the JSON and the plot on disk."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path


def save_results(result: dict, out: str | None, plot: str | None, plot_fn: Callable[[dict, str], object]) -> None:
    """Print ``result["summary"]``; write ``result`` as JSON to ``out`` and ``plot_fn``'s figure to
    ``plot`` (each skipped when None, folders made as needed), saying where on stderr."""
    print(json.dumps(result["summary"], indent=2))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"results -> {out}", file=sys.stderr)
    if plot:
        Path(plot).parent.mkdir(parents=True, exist_ok=True)
        plot_fn(result, plot)
        print(f"plot -> {plot}", file=sys.stderr)


def json_default(o):
    """``json.dump``'s ``default`` for results and reports: NumPy scalars and arrays as Python
    values, other numbers as floats, anything else as its text."""
    if hasattr(o, "tolist"):
        return o.tolist()
    try:
        return float(o)
    except (TypeError, ValueError):
        return str(o)
