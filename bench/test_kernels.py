"""Kernel micro-benchmarks (pytest-benchmark): combination each/last/first at fixed sizes, window
ranges by binary search, event-table ingestion.

Run with ``make bench`` (``pytest bench --benchmark-only``). Inputs are the seq3 events of
docs/performance.md (100,000 events, 1 ms apart, k in [0, 100)); every benchmark first checks its
result against an independent computation, so a fast wrong kernel cannot pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import N_EVENTS, WINDOW_MS

import cep_gpu
from cep_gpu.backends import get_backend
from cep_gpu.benchmarks import workloads as wl
from cep_gpu.events import EventTable
from cep_gpu.planner import estimate_work


def _backends():
    names = ["cpu"]
    for extra in ("gpu-host", "gpu"):
        try:
            get_backend(extra)
            names.append(extra)
        except Exception:  # not built here / no device: nothing to benchmark
            pass
    return names


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("policy", ["each", "last", "first"])
def test_combination(benchmark, seq3_table, policy, backend):
    """One seq3 rule over all 100,000 events at WIN=1000 ms (about 333 candidates per column)."""
    rule = cep_gpu.parse_rule(wl.seq3_rule(WINDOW_MS, policy))
    impl = get_backend(backend)
    expected = len(get_backend("cpu").match(rule, seq3_table, 0, len(seq3_table)))
    matches = benchmark(impl.match, rule, seq3_table, 0, len(seq3_table))
    assert len(matches) == expected > 0
    benchmark.extra_info.update(policy=policy, window_ms=WINDOW_MS, matches=len(matches),
                                terminators=int((seq3_table.types == seq3_table.type_code("C")).sum()))


@pytest.mark.parametrize("window_ms", [100, 4000])
def test_window_ranges(benchmark, seq3_table, window_ms):
    """Binary search of every terminator's window in every column (the host-side range step)."""
    rule = cep_gpu.parse_rule(wl.seq3_rule(window_ms, "last"))
    work = benchmark(estimate_work, rule, seq3_table)
    # about window/3 B events in each terminator's window
    assert work.steps[0].events_per_window == pytest.approx(window_ms / 3, rel=0.1)


def test_searchsorted_ranges(benchmark, seq3_table):
    """The bare binary search: lower and upper window edges of 33,000 terminators in one column."""
    ts = seq3_table.ts
    col = ts[seq3_table.rows_of_type("B")]
    term = ts[seq3_table.rows_of_type("C")]
    w = WINDOW_MS * 1_000_000

    def ranges():
        return np.searchsorted(col, term - w, "left"), np.searchsorted(col, term, "left")

    lo, hi = benchmark(ranges)
    assert ((hi - lo) >= 0).all() and abs((hi - lo).mean() - WINDOW_MS / 3) < 0.1 * WINDOW_MS


def test_ingest(benchmark, seq3_frame):
    """pandas -> EventTable for 100,000 events (types, int64 ns timestamps, attribute columns)."""
    table = benchmark(EventTable.from_pandas, seq3_frame, time_unit="ms")
    assert len(table) == N_EVENTS and np.all(np.diff(table.ts) >= 0)
