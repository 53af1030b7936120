"""cuDF ingestion against the real ``cudf`` on a real device (issue 14, part 4).

tests/test_ingest_cudf.py proves the ingestion logic against a fake ``cudf`` over the host build.
These tests run only where the real thing is importable and a GPU is usable (bench/gpu_check.sh
runs them): one ``cudf.DataFrame.from_arrow`` per table, columns adopted by the GPU backend instead
of uploaded, every adopted column equal to its host array, and composite events equal to the CPU
backend's on generated rules and streams (shuffled rows, nulls, NaN values).
With ``CEP_REQUIRE_CUDF=1`` a missing cuDF or GPU is an error, not a skip.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from cep_gpu.kernels.gpu import GpuBackend, GpuCombiner, gpu_available
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import rules_and_streams

import cep_gpu
from cep_gpu import ingest_cudf
from cep_gpu.backends import get_backend, register

OK, WHY = gpu_available()
CUDF = ingest_cudf.cudf_module() if OK else None
if CUDF is None:
    WHY = WHY if not OK else "cudf is not importable (pip install cudf-cu12)"
    if os.environ.get("CEP_REQUIRE_CUDF") == "1":
        raise RuntimeError(f"CEP_REQUIRE_CUDF=1 but real cuDF cannot run here: {WHY}")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(CUDF is None, reason=f"no real cuDF: {WHY}")]

_NAMES = iter(range(1_000_000))


def checked_backend() -> str:
    """A new ``gpu`` backend (its own counters) that compares every device column with its host
    array after each update."""
    from cep_gpu.kernels.gpu import CupyRuntime

    name = f"gpu-cudf-checked-{next(_NAMES)}"
    register(name, lambda: GpuBackend(GpuCombiner(CupyRuntime(), "gpu", check_columns=True), "gpu"))
    return name


def shuffled_arrow(events: pd.DataFrame, seed: int) -> pa.Table:
    events = events.assign(id=np.arange(len(events), dtype=np.int64))
    events = events.iloc[np.random.default_rng(seed).permutation(len(events))]
    return pa.Table.from_pandas(events, preserve_index=False)


def test_real_cudf_is_not_a_fake():
    assert hasattr(CUDF, "__version__") and hasattr(CUDF.DataFrame, "from_arrow")


def test_seq3_columns_are_adopted_from_cudf():
    from test_gpu_host import SEQ3, seq3_events

    table = shuffled_arrow(seq3_events(20000, seed=3), seed=1)
    text = SEQ3.format(p="each", w=40)
    events = ingest_cudf.device_events(table, "ms")
    assert events is not None
    name = checked_backend()
    got = cep_gpu.detect(events, text, backend=name, time_unit="ms")
    assert got.equals(cep_gpu.detect(table, text, backend="cpu", time_unit="ms")) and len(got) > 1000
    st_ = get_backend(name).stats()
    assert st_["column_adoptions"] >= 3  # ts, k's values and validity came from the cuDF frame
    assert st_["column_full_uploads"] == 0


_CHECKED = None


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(rules_and_streams(), st.integers(0, 2**16))
def test_generated_streams_through_real_cudf_equal_the_cpu_backend(case, seed):
    global _CHECKED
    _CHECKED = _CHECKED or checked_backend()
    text, events = case
    table = shuffled_arrow(events, seed)
    on_device = ingest_cudf.device_events(table, "s")
    assert on_device is not None
    got = cep_gpu.detect(on_device, text, backend=_CHECKED)
    assert got.equals(cep_gpu.detect(table, text, backend="cpu"))
