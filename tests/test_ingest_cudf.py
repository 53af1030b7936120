"""cuDF ingestion (cep_gpu.ingest_cudf) without a GPU: a fake ``cudf`` over the host runtime.

The fake's ``DataFrame.from_arrow`` keeps each column as NumPy arrays (the host runtime's
buffers) with a validity mask, and, like cuDF, leaves whatever it likes under a null (here a
junk value) and refuses ``.values`` of a column with nulls: device columns built from it are
right only if ingestion fills, widens and permutes them as the kernels need. The GPU backend runs
over the host build with ``check_columns`` (every device column is compared with its host array).
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from cep_gpu.kernels.host import host_backend
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import rules_and_streams

import cep_gpu
from cep_gpu import ingest_cudf
from cep_gpu.backends import get_backend, register

pytest.importorskip("pyspark")
from cep_gpu.spark_udfs import task  # noqa: E402

JUNK = {"i": 77, "u": 77, "f": 12345.0, "b": True}


class FakeSeries:
    """A cuDF column: ``data`` (NumPy) and ``mask`` (validity, None = no nulls)."""

    def __init__(self, data: np.ndarray, mask: np.ndarray | None) -> None:
        self.data, self.mask = data, mask

    @property
    def values(self) -> np.ndarray:
        if self.mask is not None and not self.mask.all():
            raise ValueError("Column must have no nulls.")  # cuDF's Series.values
        return self.data

    def fillna(self, value) -> FakeSeries:
        data = self.data.copy()
        if self.mask is not None:
            data[~self.mask] = value
        return FakeSeries(data, None)

    def notna(self) -> FakeSeries:
        return FakeSeries(np.ones(len(self.data), bool) if self.mask is None else self.mask.copy(), None)


def fake_cudf() -> types.ModuleType:
    """A ``cudf`` module whose frames live in host memory; ``uploads`` lists each from_arrow's bytes."""
    module = types.ModuleType("cudf")
    module.uploads = []

    class DataFrame:
        def __init__(self, columns: dict[str, FakeSeries]) -> None:
            self._columns = columns

        def __getitem__(self, name: str) -> FakeSeries:
            return self._columns[name]

        @classmethod
        def from_arrow(cls, table: pa.Table) -> DataFrame:
            module.uploads.append(table.nbytes)
            columns = {}
            for name in table.column_names:
                col = table.column(name)
                mask = None if col.null_count == 0 else col.is_valid().to_numpy()
                junk = JUNK[np.dtype(col.type.to_pandas_dtype()).kind] if col.null_count else 0
                columns[name] = FakeSeries(np.ascontiguousarray(pc.fill_null(col, junk).to_numpy()), mask)
            return cls(columns)

    module.DataFrame = DataFrame
    return module


@pytest.fixture
def cudf(monkeypatch):
    module = fake_cudf()
    monkeypatch.setitem(sys.modules, "cudf", module)
    return module


_NAMES = iter(range(1_000_000))


def fresh_backend() -> str:
    """A new ``gpu-host`` backend (its own counters) that checks every device column."""
    name = f"gpu-host-cudf-{next(_NAMES)}"
    register(name, lambda: host_backend(check_columns=True))
    return name


def shuffled_arrow(events: pd.DataFrame, seed: int, nan_values: bool = False) -> pa.Table:
    """``events`` (ids = row positions) as an Arrow table in a shuffled row order; with
    ``nan_values``, ``y``'s missing values are NaN values instead of nulls."""
    events = events.assign(id=np.arange(len(events), dtype=np.int64))
    events = events.iloc[np.random.default_rng(seed).permutation(len(events))]
    table = pa.Table.from_pandas(events, preserve_index=False)
    if nan_values and "y" in events:
        y = pa.array(events["y"].to_numpy(), pa.float64(), from_pandas=False)
        table = table.set_column(table.schema.get_field_index("y"), "y", y)
    return table


def task_detect(table: pa.Table, rules: str, backend: str, time_unit: str = "s") -> pd.DataFrame:
    events = task.task_events(task.engine_input(table), backend, time_unit, None)
    return cep_gpu.detect(events, rules, backend=backend, time_unit=time_unit)


# -- (a) the same composite events as the CPU backend -------------------------------------------------

_CHECKED = fresh_backend()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(rules_and_streams(), st.integers(0, 2**16), st.booleans())
def test_generated_streams_equal_the_cpu_backend(case, seed, nan_values):
    text, events = case
    cudf, before = fake_cudf(), sys.modules.get("cudf")
    sys.modules["cudf"] = cudf  # (a function-scoped fixture would not be reset between examples)
    try:
        table = shuffled_arrow(events, seed, nan_values)
        assert isinstance(task.task_events(task.engine_input(table), _CHECKED, "s", None), cep_gpu.events.EventTable)
        got = task_detect(table, text, _CHECKED)
    finally:
        if before is None:
            del sys.modules["cudf"]
        else:
            sys.modules["cudf"] = before
    want = cep_gpu.detect(table, text, backend="cpu")
    assert got.equals(want)
    assert len(cudf.uploads) <= 1  # one from_arrow per table, if the kernels needed a column at all


# -- (b) one host-to-device copy: the kernels' columns are not uploaded again -------------------------

RULE = """
define R(v: float, s: string)
from C(k=$k and v > 0.1) as c
 and each B(k=$k and s=c.s and flag=true) within 40 ms from c
 and last A(k=$k and v < c.v and g=B.g) within 30 ms from B
where v=A.v, s=c.s
"""


def museum_like(n: int = 3000, seed: int = 4) -> pa.Table:
    """Unsorted rows, nulls in every attribute, NaN values in a float column, chunked columns."""
    rng = np.random.default_rng(seed)

    def nulls(values, p=0.1):
        return pa.array(values, mask=rng.random(n) < p)

    ts = rng.permutation(np.arange(n, dtype=np.int64))  # ms, out of order
    v = rng.random(n)
    v[rng.random(n) < 0.05] = np.nan
    table = pa.table({
        "type": pa.array(rng.choice(["A", "B", "C"], n)).dictionary_encode(),
        "ts": pa.array(ts, pa.timestamp("ms")),
        "k": nulls(rng.integers(0, 4, n).astype(np.int32)),
        "v": pa.array(v, mask=rng.random(n) < 0.05),
        "s": nulls(rng.choice(["x", "y"], n).astype(object)),
        "flag": nulls(rng.random(n) < 0.8),
        "g": nulls(rng.integers(0, 3, n).astype(np.uint16)),
    })
    return pa.Table.from_batches(table.to_batches(max_chunksize=700))


def _run(table: pa.Table, text: str = RULE) -> dict:
    """detect in a task on a fresh checked gpu-host backend: equal to the CPU backend; its stats."""
    name = fresh_backend()
    got = task_detect(table, text, name, "ms")
    want = cep_gpu.detect(table, text, backend="cpu", time_unit="ms")
    assert len(want) > 50 and got.equals(want)
    return get_backend(name).stats()


def test_the_kernels_read_the_frame_from_arrow_made(monkeypatch):
    table = museum_like()
    n = len(table)
    # (c) cuDF absent (``import cudf`` fails): detect gets the Arrow table, the backend uploads
    monkeypatch.setitem(sys.modules, "cudf", None)
    assert isinstance(task.task_events(task.engine_input(table), "gpu-host", "ms", None), pa.Table)
    before = _run(table)
    assert before["column_adoptions"] == 0 and before["launches"] > 0
    # (b) with cuDF: one from_arrow, and the kernels' columns come from it
    cudf = fake_cudf()
    monkeypatch.setitem(sys.modules, "cudf", cudf)
    after = _run(table)
    assert len(cudf.uploads) == 1
    assert after["launches"] == before["launches"]
    # ts, and the values and validity of k, v, s, flag and g: all adopted, none uploaded
    assert after["column_adoptions"] == 11 and after["columns_on_device"] == 11
    assert after["column_bytes_uploaded"] == 0 and after["column_full_uploads"] == 0
    # exactly the columns' bytes went up fewer: ts, four 8-byte values (k, v, s codes, g), flag's
    # byte and five validity bytes a row; the rest (launch arguments) is unchanged
    assert before["bytes_uploaded"] - after["bytes_uploaded"] == n * (8 + 4 * 8 + 1 + 5)


def test_a_cpu_task_does_not_touch_cudf(cudf):
    # no GPU backend: nothing changes (detect gets the Arrow table, from_arrow never runs)
    table = museum_like(500)
    assert isinstance(task.task_events(task.engine_input(table), "cpu", "ms", None), pa.Table)
    assert isinstance(task.task_events(task.engine_input(table), "auto", "ms", None), pa.Table)
    assert cudf.uploads == []


def test_auto_with_a_task_gpu_goes_through_cudf_and_copies_only_when_the_gpu_runs(cudf, monkeypatch):
    import cep_gpu.backends as backends

    monkeypatch.setattr(backends, "gpu_usable", lambda: True)
    assert ingest_cudf.wanted("auto", 0) and not ingest_cudf.wanted("auto", None)
    assert ingest_cudf.wanted("gpu-host", None) and not ingest_cudf.wanted("cpu", 0)
    assert not ingest_cudf.wanted("no-such-backend", 0)
    table = museum_like(500)
    events = task.task_events(task.engine_input(table), "auto", "ms", 0)
    assert isinstance(events, cep_gpu.events.EventTable)
    out = cep_gpu.detect(events, RULE, backend="cpu", time_unit="ms")  # every batch on the CPU
    assert out.equals(cep_gpu.detect(table, RULE, backend="cpu", time_unit="ms"))
    assert cudf.uploads == []  # the frame is made on the GPU's first use, which never came


def test_run_group_uses_it(cudf):
    # the Spark task body: type as int32 codes into type_names(rules), as the JVM sends it
    rules = cep_gpu.parse_rules(RULE)
    table = museum_like(1500)
    names = task.type_names(rules)
    codes = pa.array([names.index(t) for t in table.column("type").to_pylist()], pa.int32())
    sent = table.set_column(0, "type", codes)
    schema = pa.schema([("rule", pa.string()), ("ts", pa.timestamp("ms")), ("ids", pa.list_(pa.int64())),
                        ("v", pa.float64()), ("s", pa.string())])
    name = fresh_backend()
    got = task.run_group(sent, rules, name, "ms", schema)
    want = task.run_group(sent, rules, "cpu", "ms", schema)
    assert got.num_rows > 0 and got.equals(want)
    assert len(cudf.uploads) == 1 and get_backend(name).stats()["column_bytes_uploaded"] == 0


def test_a_hierarchy_extends_the_adopted_columns(cudf):
    # composite events re-enter the table (concat, merged in time order): the rows of the adopted
    # columns before the first composite event stay on the device, the rest is copied up
    text = RULE + """
define Q from C(k=$k) as c and each R(s=c.s) within 50 ms from c
"""
    table = museum_like(2000)
    name = fresh_backend()
    got = task_detect(table, text, name, "ms")
    want = cep_gpu.detect(table, text, backend="cpu", time_unit="ms")
    assert set(want["rule"]) == {"R", "Q"} and got.equals(want)
    st_ = get_backend(name).stats()
    first_r = want.loc[want["rule"] == "R", "ts"].min()
    kept = int(np.count_nonzero(table.column("ts").to_pandas() < first_r))  # composites' ids < 0
    assert kept > 0 and st_["column_adoptions"] > 0 and st_["column_appends"] > 0
    assert st_["column_rows_reused"] == st_["column_appends"] * kept


def test_columns_the_runtime_cannot_use_are_uploaded(cudf, monkeypatch):
    # a device array of another kind (say, another GPU's): the backend uploads the host array
    from cep_gpu.kernels.host import HostRuntime

    monkeypatch.setattr(HostRuntime, "adopt", lambda self, buf: None)
    table = museum_like(800)
    name = fresh_backend()
    assert task_detect(table, RULE, name, "ms").equals(cep_gpu.detect(table, RULE, backend="cpu", time_unit="ms"))
    st_ = get_backend(name).stats()
    assert st_["column_adoptions"] == 0 and st_["column_full_uploads"] == 11
