"""Shared inputs of the kernel micro-benchmarks (``make bench``; not part of ``make test``).

``CEP_GPU_BENCH_TINY=1`` shrinks the input so that the suite runs in seconds: the CI smoke test
(``tests/test_bench_smoke.py``) runs it that way with ``--benchmark-disable``, so that it cannot
rot; its numbers mean nothing.
"""

from __future__ import annotations

import os

import pytest

from cep_gpu.benchmarks import workloads as wl
from cep_gpu.events import EventTable

#: fixed sizes, so that numbers from different commits compare
TINY = bool(os.environ.get("CEP_GPU_BENCH_TINY"))
N_EVENTS = 30_000 if TINY else 100_000
WINDOW_MS = 1000


@pytest.fixture(scope="session")
def seq3_frame():
    return wl.seq3_events(N_EVENTS, seed=0)


@pytest.fixture(scope="session")
def seq3_table(seq3_frame):
    return EventTable.from_pandas(seq3_frame, time_unit="ms")
