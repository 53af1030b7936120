"""The concurrent host emulation of the GPU kernels, and ThreadSanitizer over it (issue 14, part 1).

The serial host build (tests/test_gpu_host.py) runs kernel threads one after the other, so it
cannot show a race. Here the same sources are built with ``CEP_HOST_CONCURRENT``: the threads of a
launch run on several ``std::thread``\\ s at once, in seeded shuffled orders, with CUDA's relaxed
atomics. We prove that (1) the runner really runs threads concurrently, each exactly once, in a
seeded order; (2) results still equal the reference and the CPU backend on random rules; (3) under
ThreadSanitizer a subset of the differential tests gives zero reports; (4) the same TSan run over a
kernel with a planted race (the output index read and written without an atomic) reports it, so the
detector is live.
"""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cep_gpu.kernels.gpu import cuda_dir
from cep_gpu.kernels.host import (
    MODE_FLAGS,
    HostRuntime,
    HostRuntimeError,
    build,
    host_backend,
    host_combiner,
    tsan_env,
    tsan_runtime,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import rules_and_streams
from test_gpu_host import SEQ3, same, seq3_events

import cep_gpu
from cep_gpu.cdp import register_combiner
from cep_gpu.errors import BackendUnavailableError

HAVE_CPU = importlib.util.find_spec("cep_gpu.cdp") is not None
TESTS = Path(__file__).resolve().parent

# Tiny grids and groups of two threads: many std::threads per launch, every `each` step with more
# than one result overflows its one-sequence buffer and relaunches under concurrent writers.
register_combiner(
    "gpu-host-threads-tiny",
    lambda: host_combiner(initial_capacity=1, block=4, max_blocks=4, mode="threads", group=2, seed=7),
)


# -- the runner itself --------------------------------------------------------------------------------

PROBE = r"""
#include "portable.cuh"
#include <chrono>
#include <functional>
#include <thread>

// Each kernel thread: count itself in, record the most threads inside at once, sleep so that
// others can enter, note its turn and its OS thread, count itself out.
CEP_DEVICE void probe_body(cep_i64* active, cep_i64* peak, cep_u64* turn, cep_i64* order, cep_i64* worker) {
    cep_i64 now = __atomic_add_fetch(active, 1, __ATOMIC_RELAXED);
    cep_atomic_max(peak, now);
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    cep_u64 k = cep_atomic_add(turn, 1ULL);
    order[k] = cep_thread_id();
    worker[cep_thread_id()] = (cep_i64)(std::hash<std::thread::id>{}(std::this_thread::get_id()) >> 1);
    __atomic_sub_fetch(active, 1, __ATOMIC_RELAXED);
}
CEP_KERNEL(probe, (cep_i64* active, cep_i64* peak, cep_u64* turn, cep_i64* order, cep_i64* worker),
           (probe_body(active, peak, turn, order, worker)))
"""

GRID, BLOCK, GROUP = 3, 8, 4


def _probe(mode: str):
    flags = MODE_FLAGS[mode] + ((f"-DCEP_HOST_GROUP={GROUP}",) if mode != "serial" else ("-pthread",))
    lib = ctypes.CDLL(str(build(PROBE, flags)))
    fn = lib.probe
    fn.restype = None
    fn.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_uint64] + [ctypes.c_void_p] * 5

    def run(seed: int):
        n = GRID * BLOCK
        bufs = [np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.uint64),
                np.full(n, -1, np.int64), np.zeros(n, np.int64)]
        fn(GRID, BLOCK, seed, *(b.ctypes.data for b in bufs))
        return int(bufs[1][0]), bufs[3], bufs[4]

    return run


def _group_orders(order: np.ndarray) -> list[list[int]]:
    """The order in which the threads of each group ran."""
    return [[int(t) for t in order if t // GROUP == g] for g in range(GRID * BLOCK // GROUP)]


def test_concurrent_runner_runs_every_thread_once_concurrently_in_seeded_orders():
    run = _probe("threads")
    peak, order, worker = run(seed=1)
    assert sorted(order.tolist()) == list(range(GRID * BLOCK))  # each kernel thread exactly once
    assert peak > 1  # several kernel threads were inside the kernel at the same time
    # one OS thread per group of GROUP consecutive threads of a block, and a new one per group
    groups = worker.reshape(-1, GROUP)
    assert all(len(set(g)) == 1 for g in groups.tolist())
    assert len({g[0] for g in groups.tolist()}) == GRID * BLOCK // GROUP
    # inside a group the order is a shuffle that the seed decides
    orders = {seed: _group_orders(run(seed)[1]) for seed in (1, 2, 3)}
    assert _group_orders(order) == orders[1]
    identity = [list(range(g * GROUP, (g + 1) * GROUP)) for g in range(GRID * BLOCK // GROUP)]
    assert any(o != identity for o in orders.values())
    assert len({str(o) for o in orders.values()}) > 1


def test_serial_runner_runs_threads_one_after_the_other_in_index_order():
    peak, order, worker = _probe("serial")(seed=1)
    assert peak == 1
    assert order.tolist() == list(range(GRID * BLOCK))
    assert len(set(worker.tolist())) == 1


# -- differential tests through the concurrent build ---------------------------------------------------


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules_and_streams())
def test_concurrent_build_equals_reference_and_cpu(case):
    text, events = case
    ref = cep_gpu.detect(events, text, backend="reference")
    same(cep_gpu.detect(events, text, backend="gpu-host-threads-tiny"), ref)
    if HAVE_CPU:
        same(cep_gpu.detect(events, text, backend="cpu"), ref)


@pytest.mark.parametrize("policy", ["each", "last", "first"])
@given(seed=st.integers(0, 2**32 - 1), group=st.sampled_from([0, 1, 3, 8]))
@settings(max_examples=4, deadline=None)
def test_concurrent_build_on_seq3_for_any_seed_and_group(policy, seed, group):
    """Output order comes from the pair keys, not from which thread won the atomic: equal to the
    serial build row for row (same order), whatever the schedule."""
    from cep_gpu.events import EventTable

    table = EventTable.from_pandas(seq3_events(500, seed=3), time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p=policy, w=40))
    serial = host_backend(initial_capacity=1, block=8, max_blocks=4).match(rule, table)
    threads = host_backend(initial_capacity=1, block=8, max_blocks=4, mode="threads", group=group, seed=seed)
    got = threads.match(rule, table)
    assert len(got) == len(serial) > 50
    assert np.array_equal(got.rows, serial.rows)
    if policy == "each":
        assert threads.combiner.stats.relaunches >= 1


def test_registered_threads_backend_equals_reference():
    ev = seq3_events(400, seed=2)
    text = SEQ3.format(p="each", w=30)
    same(cep_gpu.detect(ev, text, backend="gpu-host-threads", time_unit="ms"),
         cep_gpu.detect(ev, text, backend="reference", time_unit="ms"))


def test_bad_runtime_options_are_named():
    with pytest.raises(HostRuntimeError, match="mode must be one of"):
        HostRuntime(mode="parallel")
    with pytest.raises(HostRuntimeError, match="group=-1"):
        HostRuntime(mode="threads", group=-1)
    with pytest.raises(HostRuntimeError, match="block=0"):
        HostRuntime(block=0)


def test_tsan_build_refuses_a_process_without_the_tsan_runtime():
    with pytest.raises(BackendUnavailableError, match="LD_PRELOAD"):
        HostRuntime(mode="tsan")


# -- ThreadSanitizer -----------------------------------------------------------------------------------


def _tsan_available() -> str | None:
    if shutil.which("g++") is None:
        return "g++ is not installed"
    try:
        tsan_runtime()
    except BackendUnavailableError as err:
        return str(err)
    return None


needs_tsan = pytest.mark.skipif(_tsan_available() is not None, reason=f"no ThreadSanitizer: {_tsan_available()}")

#: Reports only from instrumented code (our kernels): NumPy, pandas and Arrow are not built with
#: TSan, which cannot see their atomics and would report their own thread pools.
TSAN_OPTIONS = "ignore_noninstrumented_modules=1"


def _tsan_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TESTS / "tsan_subset.py"), *args],
        env=tsan_env(options=TSAN_OPTIONS), capture_output=True, text=True, timeout=600,
    )


@needs_tsan
def test_differential_subset_under_thread_sanitizer_has_zero_reports():
    proc = _tsan_run()
    assert "ThreadSanitizer" not in proc.stderr, proc.stderr[-6000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TSAN-SUBSET-OK 14" in proc.stdout


@needs_tsan
def test_thread_sanitizer_reports_a_planted_race(tmp_path):
    """The same run over a copy of cuda/ whose `each` kernel takes its output slot with a plain
    read and write of the index instead of the atomic: TSan must name the race in cdp_each_body."""
    planted = tmp_path / "cuda"
    shutil.copytree(cuda_dir(), planted)
    src = planted / "cdp.cuh"
    text = src.read_text()
    atomic = "cep_u64 k = cep_atomic_add(count, 1ULL);"
    assert text.count(atomic) == 1, "the kernel's atomic output index moved: update the planted race"
    src.write_text(text.replace(atomic, "cep_u64 k = *count; *count = k + 1;  // planted race"))
    proc = _tsan_run("--include", str(planted), "--only", "each", "--streams", "1")
    assert "WARNING: ThreadSanitizer: data race" in proc.stderr, proc.stderr[-3000:]
    assert "cdp_each_body" in proc.stderr
    assert proc.returncode != 0
