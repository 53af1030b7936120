"""The parity tests of tests/test_gpu_host.py on a real CUDA device (``backend="gpu"``).

Skipped, with the reason printed (CuPy missing, no driver, or no device), where no GPU is usable;
on a GPU machine they run the NVRTC-compiled kernels through CuPy: random rules and streams equal
the reference matcher, the overflow relaunch path, and the deterministic (CPU) output order.
With ``CEP_REQUIRE_GPU=1`` (set by bench/gpu_check.sh) a missing GPU is an error, not a skip.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from cep_gpu.kernels.gpu import GpuCombiner, gpu_available
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import rules_and_streams
from test_gpu_host import same  # (here, not in a @given test: hypothesis refuses nested @given)

import cep_gpu
from cep_gpu.backends import get_backend
from cep_gpu.cdp import CDPBackend
from cep_gpu.events import EventTable
from cep_gpu.reference import ReferenceBackend

OK, WHY = gpu_available()
if not OK and os.environ.get("CEP_REQUIRE_GPU") == "1":
    raise RuntimeError(f"CEP_REQUIRE_GPU=1 but no GPU is usable: {WHY}")
if not OK:
    print(f"\ntests/test_gpu_device.py skipped: {WHY}")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"no usable GPU: {WHY}")]

SEQ3 = "define Seq3 from C(k=$k) and {p} B(k=$k) within {w} ms from C and {p} A(k=$k) within {w} ms from B"


def _same(a, b) -> None:
    same(a, b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules_and_streams())
def test_device_kernels_equal_reference(case):
    text, events = case
    ref = cep_gpu.detect(events, text, backend="reference")
    _same(cep_gpu.detect(events, text, backend="gpu"), ref)
    counted = cep_gpu.detect(events, text, backend="gpu", output="count")
    assert {k: v for k, v in counted.items() if v} == ref["rule"].value_counts().to_dict()


@pytest.mark.parametrize("policy", ["each", "last", "first"])
def test_device_overflow_relaunch_and_order(policy):
    from cep_gpu.kernels.gpu import CupyRuntime
    from test_gpu_host import seq3_events

    table = EventTable.from_pandas(seq3_events(2000), time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p=policy, w=60))
    backend = CDPBackend(GpuCombiner(CupyRuntime(), "gpu", initial_capacity=1), "gpu")
    got = backend.match(rule, table)
    ref = ReferenceBackend().match(rule, table)
    assert len(got) == len(ref) > 0
    assert np.array_equal(got.rows, get_backend("cpu").match(rule, table).rows)  # same order as cpu
    if policy == "each":
        assert backend.combiner.stats.relaunches >= 1


@pytest.mark.parametrize("rules", ["seq3", "hierarchy"])
def test_device_streaming_updates_columns_incrementally(rules):
    """tests/test_gpu_host.py's streaming tests through CuPy: asynchronous copies into the device
    columns, device-to-device compaction, every column checked against its host array."""
    from cep_gpu.kernels.gpu import CupyRuntime, GpuBackend
    from test_gpu_host import HIERARCHY, _joined, _publish_in_chunks, seq3_events

    from cep_gpu.backends import register

    text = SEQ3.format(p="each", w=40) if rules == "seq3" else HIERARCHY
    events = seq3_events(900, seed=5)
    name = f"gpu-stream-check-{rules}"
    register(name, lambda: GpuBackend(GpuCombiner(CupyRuntime(), "gpu", check_columns=True), "gpu"))
    parts, _ = _publish_in_chunks(cep_gpu.Engine(text, backend=name, time_unit="ms"), events)
    _same(_joined(parts), cep_gpu.detect(events, text, backend="reference", time_unit="ms"))
    st = get_backend(name).stats()
    assert st["column_appends"] > 0 and st["column_rows_reused"] > 0
    if rules == "seq3":
        assert st["column_bytes_uploaded"] <= 17 * len(events) * 1.2


def test_device_grid_stride_loops_past_one_full_grid():
    """More (sequence, candidate) pairs in one launch than 256 x 65535 threads: every thread runs
    several rounds of the grid-stride loop; results equal the CPU backend's, in its order."""
    from cep_gpu.kernels.gpu import DEVICE_BLOCK, DEVICE_MAX_BLOCKS, CupyRuntime
    from test_gpu_host import seq3_events

    table = EventTable.from_pandas(seq3_events(36000, seed=13), time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p="last", w=6000))
    backend = CDPBackend(GpuCombiner(CupyRuntime(), "gpu"), "gpu", use_index=False)
    cpu = CDPBackend(get_backend("cpu").combiner, "cpu", use_index=False)
    got = backend.match(rule, table)
    # terminators x B-candidates of the first step, without the parameter index
    assert (len(table) // 3) * (6000 // 3) > 1.2 * DEVICE_BLOCK * DEVICE_MAX_BLOCKS
    assert np.array_equal(got.rows, cpu.match(rule, table).rows)


def test_device_backend_runs_on_the_current_device():
    """backend="gpu" keeps one combiner per device and uses the current one's."""
    import cupy  # type: ignore[import-not-found]
    from test_gpu_host import seq3_events

    backend = get_backend("gpu")
    table = EventTable.from_pandas(seq3_events(500), time_unit="ms")
    rule = cep_gpu.parse_rule(SEQ3.format(p="each", w=30))
    for dev in range(min(cupy.cuda.runtime.getDeviceCount(), 2)):
        with cupy.cuda.Device(dev):
            got = backend.match(rule, table)
            assert backend.combiner.runtime.device.id == dev
            assert np.array_equal(got.rows, get_backend("cpu").match(rule, table).rows)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_device_kleene_rules_match_the_reference(data):
    """Kleene closure on the device (cdp_kleene_elements / cdp_kleene_sets), one-slot output
    buffers so that every Kleene step overflows and relaunches; sets in the CPU kernel's order."""
    from cep_gpu.kernels.gpu import CupyRuntime
    from test_kleene import KLEENE_STREAMS, kleene_rules, records

    text, events = data.draw(kleene_rules()), data.draw(KLEENE_STREAMS)
    assert records(events, text, "gpu") == records(events, text, "reference")
    rule = cep_gpu.parse_rule(text)
    table = EventTable.from_pandas(events, time_unit="s")
    tight = CDPBackend(GpuCombiner(CupyRuntime(), "gpu", initial_capacity=1), "gpu")
    got, want = tight.match(rule, table), get_backend("cpu").match(rule, table)
    assert np.array_equal(got.rows, want.rows)
