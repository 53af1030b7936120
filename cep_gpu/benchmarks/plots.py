"""Plots of benchmark results in the style of the chapter's Figures 6 and 7 (matplotlib, PNG).

* :func:`plot_seq3` (Figure 7): microseconds per terminator against window size, one curve per
  backend, ``each`` and ``last`` panels; the CPU/GPU crossover is marked when both were measured.
* :func:`plot_rules1000` (Figure 6): microseconds per event against sequence length for 1000
  rules, one curve per backend (AIP against CDP), ``each`` and ``last`` panels.
* :func:`plot_museum`: events per second against input size, one curve per backend.

Peers (Flink) are dashed, the streaming Engine's rows dotted.

Only rows with ``status == "ok"`` are drawn; others are listed in the panel as "not measured".
"""

from __future__ import annotations

import math
from pathlib import Path

STYLE = {
    "cpu": ("CDP on CPU (Numba)", "o", "tab:blue"),
    "gpu": ("CDP on GPU (CUDA)", "s", "tab:green"),
    "auto": ("auto (planner)", "x", "tab:purple"),
    "aip": ("AIP (automata)", "^", "tab:red"),
    "reference": ("reference", ".", "tab:gray"),
    "gpu-host": ("CDP host build of CUDA", "d", "tab:olive"),
    # peers (cep_gpu.benchmarks.peers) and the streaming Engine (cep_gpu.benchmarks.stream_rows)
    "flink": ("Flink SQL, batch (same matches as last)", "D", "tab:orange"),
    "flink-stream": ("Flink SQL, streaming (one match per A)", "v", "tab:brown"),
    "stream-1": ("cep-gpu Engine, one-event publishes", "<", "tab:cyan"),
}


def _style(backend: str) -> tuple[str, str, str | None, str]:
    """(label, marker, colour, line style) of a curve: peers dashed, streaming dotted."""
    if backend in STYLE:
        label, marker, color = STYLE[backend]
    elif backend.startswith("stream-"):
        label, marker, color = f"cep-gpu Engine, {backend[7:]}-event micro-batches", ">", "tab:pink"
    else:
        label, marker, color = backend, "o", None
    line = "--" if backend.startswith("flink") else ":" if backend.startswith("stream-") else "-"
    return label, marker, color, line


def _series(results: list[dict], policy: str, metric: str):
    """{backend: (xs, medians, mins, maxs)} of the measured rows of one policy."""
    out: dict[str, tuple[list, list, list, list]] = {}
    for row in results:
        if row.get("policy") != policy or row.get("status") != "ok":
            continue
        xs, med, lo, hi = out.setdefault(row["backend"], ([], [], [], []))
        xs.append(row["size"])
        med.append(row[metric]["median"])
        lo.append(row[metric]["min"])
        hi.append(row[metric]["max"])
    for b, (xs, med, lo, hi) in out.items():
        order = sorted(range(len(xs)), key=xs.__getitem__)
        out[b] = tuple([v[i] for i in order] for v in (xs, med, lo, hi))
    return out


def crossover(xs: list[float], a: list[float], b: list[float]) -> float | None:
    """The first x where curve ``b`` drops below curve ``a`` (log-log interpolation), or None."""
    for i in range(1, len(xs)):
        d0, d1 = math.log(b[i - 1]) - math.log(a[i - 1]), math.log(b[i]) - math.log(a[i])
        if d0 >= 0 > d1:
            f = d0 / (d0 - d1)
            return math.exp(math.log(xs[i - 1]) + f * (math.log(xs[i]) - math.log(xs[i - 1])))
    if xs and b[0] < a[0]:
        return xs[0]
    return None


def _panels(run: dict, metric: str, xlabel: str, ylabel: str, title: str, path, logx: bool, mark_cross: bool):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = run["settings"]["policies"]
    fig, axes = plt.subplots(1, len(policies), figsize=(5.2 * len(policies), 4.0), squeeze=False)
    for ax, policy in zip(axes[0], policies):
        series = _series(run["results"], policy, metric)
        for backend, (xs, med, lo, hi) in series.items():
            label, marker, color, line = _style(backend)
            yerr = [[m - a for m, a in zip(med, lo)], [b - m for m, b in zip(med, hi)]]
            ax.errorbar(xs, med, yerr=yerr, label=label, marker=marker, color=color, capsize=3,
                        linestyle=line)
        if mark_cross and "cpu" in series and "gpu" in series:
            xc, yc, yg = _common(series["cpu"], series["gpu"])
            x = crossover(xc, yc, yg)
            if x is not None:
                ax.axvline(x, color="k", linestyle=":", linewidth=1)
                ax.annotate(f"GPU faster from ~{x:.0f}", (x, ax.get_ylim()[1]), fontsize=8,
                            ha="left", va="top")
        missing = sorted({r["backend"] for r in run["results"] if r.get("policy") == policy
                          and r.get("status") != "ok"})
        if missing:
            ax.text(0.02, 0.02, "not measured: " + ", ".join(missing), transform=ax.transAxes,
                    fontsize=8, color="gray")
        if logx:
            ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} ({policy}-within)" if policy in ("each", "last", "first") else title)
        ax.grid(True, which="both", alpha=0.3)
        if series:
            ax.legend(fontsize=8)
    machine = run.get("machine", {})
    fig.suptitle(f"{machine.get('cpu_model', '')}, {machine.get('cores', '?')} cores"
                 + (f", {machine['gpu']}" if machine.get("gpu") else ", no GPU"), fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _common(a, b):
    xs = sorted(set(a[0]) & set(b[0]))
    return xs, [a[1][a[0].index(x)] for x in xs], [b[1][b[0].index(x)] for x in xs]


def plot_seq3(run: dict, path) -> Path:
    """Figure 7: time per terminator against window size."""
    return _panels(run, "us_per_terminator", "window size (ms = events)", "time per terminator (us)",
                   "seq3", path, logx=True, mark_cross=True)


def plot_rules1000(run: dict, path) -> Path:
    """Figure 6: time per event against sequence length, 1000 rules."""
    return _panels(run, "us_per_event", "sequence length", "time per event (us)", "1000 rules", path,
                   logx=False, mark_cross=False)


def plot_museum(run: dict, path) -> Path:
    """Events per second against input size."""
    return _panels(run, "events_per_s", "events", "events per second", "museum", path, logx=True,
                   mark_cross=False)


def plot(run: dict, path) -> Path:
    """The plot that fits the run's workload."""
    return {"seq3": plot_seq3, "rules1000": plot_rules1000, "museum": plot_museum}[run["workload"]](run, path)
