"""Shared inputs of the kernel micro-benchmarks (``make bench``; not part of ``make test``)."""

from __future__ import annotations

import pytest

from cep_gpu.benchmarks import workloads as wl
from cep_gpu.events import EventTable

#: fixed sizes, so that numbers from different commits compare
N_EVENTS = 100_000
WINDOW_MS = 1000


@pytest.fixture(scope="session")
def seq3_frame():
    return wl.seq3_events(N_EVENTS, seed=0)


@pytest.fixture(scope="session")
def seq3_table(seq3_frame):
    return EventTable.from_pandas(seq3_frame, time_unit="ms")
