"""Benchmark workloads (docs/performance.md), the sweep runner, plots and calibration.

Installed with the package so that ``cep-gpu bench`` and ``cep-gpu calibrate`` work anywhere::

    from cep_gpu.benchmarks import run_bench, plot
    run = run_bench("seq3", backends=["cpu", "auto"], sizes=[100, 1000], n_events=20_000)
    plot(run, "seq3.png")
"""

from .plots import plot
from .runner import machine_info, run_bench
from .workloads import museum, rules1000, seq3

__all__ = ["machine_info", "museum", "plot", "rules1000", "run_bench", "seq3"]
