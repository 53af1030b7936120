"""The direct Parquet plan: tasks read time-ordered Parquet row groups themselves, and
detect_spark still equals detect on the collected input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest_spark import rows, spark  # noqa: F401  (the shared session fixture)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_spark_batch import BACKEND, CONSUMING_RULE, SLICED_RULES, museum_like_stream

import cep_gpu

pytestmark = pytest.mark.spark

from cep_gpu.spark_udfs import detect_spark, plan_job  # noqa: E402
from cep_gpu.spark_udfs.parquet_scan import (  # noqa: E402
    RowGroup,
    chunks_of,
    open_parquet,
    parquet_layout,
    pyarrow_path,
    type_codes,
    unbalanced_reason,
)
from pyspark.sql import functions as F  # noqa: E402


def write(events: pd.DataFrame, path, row_group_size: int) -> str:
    pq.write_table(pa.Table.from_pandas(events, preserve_index=False), path, row_group_size=row_group_size)
    return str(path)


def spark_rows(out) -> list[tuple]:
    return rows(out.toPandas())


@pytest.fixture(scope="module")
def long_events():
    ev = museum_like_stream(n=3000, span=2400, seed=11)
    return ev, rows(cep_gpu.detect(ev, SLICED_RULES, backend=BACKEND))


# -- the layout, without Spark ------------------------------------------------------------------


def rg(i, lo, hi, rows=10):
    return RowGroup(0, i, rows, lo, hi, 10 * i)


def test_row_groups_that_touch_or_overlap_share_a_chunk():
    groups = [rg(0, 0, 10), rg(1, 10, 20), rg(2, 21, 30), rg(3, 25, 40), rg(4, 41, 50), rg(5, 60, 70)]
    chunks = chunks_of(groups, 8, lookback=3, horizon=0)
    # ties at 10 and the overlap 25..30 keep those groups together: 4 disjoint blocks at most
    assert [[g.index for g in c.own] for c in chunks] == [[0, 1], [2, 3], [4], [5]]
    assert [(c.min_ns, c.max_ns) for c in chunks] == [(0, 20), (21, 40), (41, 50), (60, 70)]
    # tiles cover all of time, each around its chunk
    for a, b in zip(chunks, chunks[1:]):
        assert a.tile[1] == b.tile[0] and a.max_ns < a.tile[1] <= b.min_ns
    # context: only the row groups that reach into the 3 ns before / nothing after
    assert [[g.index for g in c.before] for c in chunks] == [[], [1], [3], []]
    assert all(not c.after for c in chunks)
    assert chunks[1].context_kept() == pytest.approx(10 * 3 / 11)


def test_chunks_balance_rows_and_keep_time_order():
    groups = [rg(i, 100 * i, 100 * i + 50, rows=1 + (i % 3)) for i in range(12)][::-1]  # any order
    for n in (1, 2, 3, 5):
        chunks = chunks_of(groups, n, lookback=0, horizon=0)
        assert len(chunks) == n
        assert sorted(g.index for c in chunks for g in c.own) == list(range(12))
        assert all(a.max_ns < b.min_ns for a, b in zip(chunks, chunks[1:]))
        sizes = [c.rows for c in chunks]
        assert max(sizes) - min(sizes) <= 3


def test_type_codes_by_dictionary_and_plain():
    types = ["A", "C"]
    plain = pa.chunked_array([pa.array(["C", None, "B", "A"])])
    coded = pa.chunked_array([pa.array(["C", None, "B", "A"]).dictionary_encode()])
    for col in (plain, coded):
        assert type_codes(col, types).to_pylist() == [1, None, None, 0]


def test_file_uris_as_pyarrow_opens_them(tmp_path):
    assert pyarrow_path("file:/tmp/a%20b.parquet") == "/tmp/a b.parquet"
    assert pyarrow_path("file:///tmp/x.parquet") == "/tmp/x.parquet"
    assert pyarrow_path("s3a://bucket/dir/x.parquet") == "s3://bucket/dir/x.parquet"
    assert pyarrow_path("hdfs://nn:8020/x.parquet") == "hdfs://nn:8020/x.parquet"
    path = write(museum_like_stream(n=30), tmp_path / "e v.parquet", 10)
    by_uri = open_parquet((tmp_path / "e v.parquet").as_uri())  # through pyarrow's file systems
    assert by_uri.metadata.num_rows == open_parquet(path).metadata.num_rows == 30
    assert by_uri.read().equals(open_parquet(path).read())


# -- detect_spark over Parquet files ----------------------------------------------------------------


@pytest.mark.parametrize("slices", range(1, 9))
def test_parquet_plan_equals_detect(spark, long_events, tmp_path, slices):  # noqa: F811
    ev, want = long_events
    df = spark.read.parquet(write(ev, tmp_path / "ev.parquet", row_group_size=250))
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=slices)
    assert out.cep_plan.kind == "parquet", out.cep_plan
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert "MapInArrow" in plan and "Exchange" not in plan and "FileScan" not in plan
    got = spark_rows(out)
    assert got == want
    if slices > 1:
        # composites bind events of two chunks: the context rows were read and used
        layout, _ = parquet_layout(df, plan_job(df, SLICED_RULES, backend=BACKEND, num_slices=slices))
        starts = [c.min_ns for c in layout.chunks]
        chunk_of = dict(zip(ev["id"], np.searchsorted(starts, ev["ts"].to_numpy() * 10**9, side="right")))
        assert len(starts) == slices
        assert any(len({chunk_of[i] for i in r[2] if i in chunk_of}) > 1 for r in got)  # (composite ids aside)


def test_large_inputs_get_more_chunks_than_slices(spark, long_events, tmp_path, monkeypatch):  # noqa: F811
    from cep_gpu.spark_udfs import parquet_scan

    ev, want = long_events
    df = spark.read.parquet(write(ev, tmp_path / "ev.parquet", row_group_size=250))
    monkeypatch.setattr(parquet_scan, "MAX_CHUNK_ROWS", 700)  # 3000 rows: 5 chunks of 500-750
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=2)
    assert out.cep_plan.kind == "parquet" and "5 chunks of 12 row groups" in out.cep_plan.reason
    assert spark_rows(out) == want


def test_context_reaches_across_chunks(spark, tmp_path):  # noqa: F811
    # 8 chunks of 20 s (distinct ms timestamps) with 40 s of context: composites span several chunks
    ev = museum_like_stream(n=400, span=160)
    ev["ts"] = np.arange(len(ev), dtype=np.int64) * 400
    want = rows(cep_gpu.detect(ev, SLICED_RULES, backend=BACKEND, time_unit="ms"))
    df = spark.read.parquet(write(ev, tmp_path / "ev.parquet", row_group_size=50))
    auto = detect_spark(df, SLICED_RULES, backend=BACKEND, time_unit="ms", num_slices=8)
    assert auto.cep_plan.kind != "parquet" and "not read as Parquet: a chunk" in auto.cep_plan.reason
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, time_unit="ms", num_slices=8, slicing="parquet")
    assert out.cep_plan.kind == "parquet" and "8 chunks" in out.cep_plan.reason
    assert spark_rows(out) == want


def test_ties_across_row_groups_and_several_files(spark, long_events, tmp_path):  # noqa: F811
    ev, want = long_events
    ts = ev["ts"].to_numpy()
    ties = np.flatnonzero(ts[1:] == ts[:-1]) + 1  # a file boundary inside a run of equal ts
    cuts = [int(ties[len(ties) // 3]), int(ties[2 * len(ties) // 3])]
    d = tmp_path / "parts"
    d.mkdir()
    for i, part in enumerate(np.split(np.arange(len(ev)), cuts)):
        write(ev.iloc[part], d / f"part-{2 - i}.parquet", row_group_size=333)  # names against time
    df = spark.read.parquet(str(d))
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=4)
    assert out.cep_plan.kind == "parquet" and "3 files" in out.cep_plan.reason
    assert spark_rows(out) == want


def test_row_positions_are_ids_in_one_file(spark, tmp_path):  # noqa: F811
    ev = museum_like_stream(n=1200, span=900, seed=5, with_id=False)
    noise = ev.sample(frac=0.3, random_state=1).assign(type="Noise")  # read by no rule
    ev = pd.concat([ev, noise]).sort_values("ts", kind="stable").reset_index(drop=True)
    df = spark.read.parquet(write(ev, tmp_path / "ev.parquet", row_group_size=200))
    want = rows(cep_gpu.detect(df.toPandas(), SLICED_RULES, backend=BACKEND))
    assert want
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=3)
    assert out.cep_plan.kind == "parquet"
    assert spark_rows(out) == want
    # several files without ids: Spark's split order decides positions, so another plan runs
    d = tmp_path / "two"
    d.mkdir()
    write(ev.iloc[:600], d / "a.parquet", 200)
    write(ev.iloc[600:], d / "b.parquet", 200)
    two = spark.read.parquet(str(d))
    out = detect_spark(two, SLICED_RULES, backend=BACKEND, num_slices=3)
    assert out.cep_plan.kind != "parquet" and "no 'id' column" in out.cep_plan.reason
    assert spark_rows(out) == rows(cep_gpu.detect(two.toPandas(), SLICED_RULES, backend=BACKEND))


@pytest.mark.parametrize("unit", ["us", "ms"])
@pytest.mark.parametrize("tz", [None, "UTC", "Europe/Rome"])
def test_timestamp_files(spark, long_events, tmp_path, unit, tz):  # noqa: F811
    ev, _ = long_events
    ev = ev.copy()
    ts = pd.Timestamp("2024-03-31 00:59:00") + pd.to_timedelta(ev["ts"] * 1000 + 7, unit="ms")
    ev["ts"] = ts
    table = pa.Table.from_pandas(ev, preserve_index=False)
    table = table.set_column(table.schema.get_field_index("ts"), "ts",
                             table.column("ts").cast(pa.timestamp(unit, tz)))
    pq.write_table(table, tmp_path / "ev.parquet", row_group_size=400)
    df = spark.read.parquet(str(tmp_path / "ev.parquet"))
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=3)
    assert out.cep_plan.kind == "parquet"
    assert dict(out.dtypes)["ts"] == dict(df.dtypes)["ts"]
    assert spark_rows(out) == rows(cep_gpu.detect(df.toPandas(), SLICED_RULES, backend=BACKEND))


def test_float_seconds_and_attribute_types(spark, long_events, tmp_path):  # noqa: F811
    ev, _ = long_events
    ev = ev.copy()
    ev["ts"] = ev["ts"] * 1000.0 + 0.25  # ms as doubles
    table = pa.Table.from_pandas(ev, preserve_index=False)
    # narrow and unsigned integers: Spark widens uint16 to int, keeps int16
    table = table.set_column(table.schema.get_field_index("k"), "k", table.column("k").cast(pa.uint16()))
    table = table.set_column(table.schema.get_field_index("x"), "x", table.column("x").cast(pa.int16()))
    pq.write_table(table, tmp_path / "ev.parquet", row_group_size=500)
    df = spark.read.parquet(str(tmp_path / "ev.parquet"))
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, time_unit="ms", num_slices=3)
    assert out.cep_plan.kind == "parquet"
    want = rows(cep_gpu.detect(df.toPandas(), SLICED_RULES, backend=BACKEND, time_unit="ms"))
    assert spark_rows(out) == want


def test_inputs_that_are_not_plain_scans_use_the_jvm(spark, long_events, tmp_path):  # noqa: F811
    ev, want = long_events
    df = spark.read.parquet(write(ev, tmp_path / "ev.parquet", row_group_size=500))
    picked = detect_spark(df.select("ts", "type", "id", "k", "x", "v"), SLICED_RULES, backend=BACKEND)
    assert picked.cep_plan.kind == "parquet"  # a selection of columns is still a plain scan
    assert spark_rows(picked) == want
    cases = {
        "Filter": df.filter("v >= 0"),
        "computes or renames": df.withColumn("v", F.col("v") + 0.0),
    }
    for why, case in cases.items():
        out = detect_spark(case, SLICED_RULES, backend=BACKEND, num_slices=2)
        assert out.cep_plan.kind != "parquet" and why in out.cep_plan.reason
        with pytest.raises(ValueError, match=why):
            detect_spark(case, SLICED_RULES, backend=BACKEND, slicing="parquet")
        assert spark_rows(out) == want
    # consuming rules: never the time-sliced plans
    with pytest.raises(ValueError, match="consuming"):
        detect_spark(df, CONSUMING_RULE, backend=BACKEND, num_slices=1, slicing="parquet")


def test_unordered_files_use_another_plan(spark, long_events, tmp_path):  # noqa: F811
    ev, want = long_events
    shuffled = ev.sample(frac=1.0, random_state=3)
    df = spark.read.parquet(write(shuffled, tmp_path / "ev.parquet", row_group_size=500))
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=3)
    assert out.cep_plan.kind != "parquet" and "overlap in time" in out.cep_plan.reason
    assert spark_rows(out) == want
    # forced, the overlapping row groups run in one task: exact, not parallel
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=3, slicing="parquet")
    assert out.cep_plan.kind == "parquet" and "1 chunk of" in out.cep_plan.reason
    assert spark_rows(out) == want


def test_unbalanced_chunks_say_why(spark, long_events, tmp_path):  # noqa: F811
    """One row group cannot overlap: the reason was 'the row groups overlap in time' for a file of
    a single row group; it names the real limit (the chunk balance) now."""
    ev, want = long_events
    df = spark.read.parquet(write(ev, tmp_path / "one.parquet", row_group_size=len(ev)))
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=3)
    reason = out.cep_plan.reason
    assert out.cep_plan.kind != "parquet"
    assert "not read as Parquet: one row group holds 3,000 of 3,000 rows" in reason, reason
    assert "overlap" not in reason.split("not read as Parquet:")[1].split(";")[0]
    assert spark_rows(out) == want
    # a few disjoint, large row groups: too few to balance, not overlapping either
    big = [rg(0, 0, 10, rows=100), rg(1, 20, 30, rows=10), rg(2, 40, 50, rows=10)]
    why = unbalanced_reason(chunks_of(big, 3, 0, 0)[0].own + (big[1],), 120, 3)
    assert "too few row groups to balance" in why and "overlap" not in why
    assert "overlap in time" in unbalanced_reason((rg(0, 0, 10), rg(1, 5, 20)), 40, 4)


def test_null_type_fails_as_in_detect(spark, tmp_path):  # noqa: F811
    ev = museum_like_stream(n=50, seed=6).astype({"type": object})
    ev.loc[7, "type"] = None
    df = spark.read.parquet(write(ev, tmp_path / "ev.parquet", row_group_size=20))
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=1)
    assert out.cep_plan.kind == "parquet"
    with pytest.raises(Exception, match="column 'type' is null"):
        out.collect()


def test_a_file_changed_after_planning_is_an_error(spark, long_events, tmp_path):  # noqa: F811
    ev, _ = long_events
    path = write(ev, tmp_path / "ev.parquet", row_group_size=500)
    out = detect_spark(spark.read.parquet(path), SLICED_RULES, backend=BACKEND, num_slices=2)
    write(ev.iloc[:-10], path, row_group_size=500)
    with pytest.raises(Exception, match="changed after planning"):
        out.collect()


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    n=st.integers(1, 400),
    span=st.integers(1, 300),
    seed=st.integers(0, 10_000),
    row_group_size=st.integers(1, 120),
    slices=st.integers(1, 6),
)
def test_generated_streams(spark, tmp_path_factory, n, span, seed, row_group_size, slices):  # noqa: F811
    ev = museum_like_stream(n=n, span=span, seed=seed)
    path = write(ev, tmp_path_factory.mktemp("gen") / "ev.parquet", row_group_size)
    df = spark.read.parquet(path)
    out = detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=slices, slicing="parquet")
    assert spark_rows(out) == rows(cep_gpu.detect(ev, SLICED_RULES, backend=BACKEND))
