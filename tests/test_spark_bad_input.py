"""Bad input on the Spark path: a cep_gpu error naming the column and the input row (or the
argument), on the driver when the schema shows it, before any arithmetic Spark would fail on
with its own message otherwise."""

from __future__ import annotations

import datetime
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest_spark import rows, spark  # noqa: F401  (the shared session fixture)
from hypothesis import given, settings
from hypothesis import strategies as st
from test_spark_batch import (
    BACKEND,
    KEYED_RULES,
    SLICED_RULES,
    _no_job_runs,
    cuts_between,
    museum_like_stream,
    time_partitions,
)

import cep_gpu
from cep_gpu.errors import ArgumentError, EventError

pytestmark = pytest.mark.spark

from cep_gpu.spark_udfs import detect_spark, detect_stream  # noqa: E402
from cep_gpu.spark_udfs.checks import check_arrow_rows, watermark_delay  # noqa: E402
from cep_gpu.spark_udfs.task import task_error  # noqa: E402
from pyspark.errors import PySparkException  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

RULE = (
    "define AB(k: int) from B(k = $k) as b and each A(k = $k) as a within 5 s from b where k = $k"
)


def job_error(run) -> str:
    """The cep_gpu message of the Spark job that fails in ``run()`` (as ``cep-gpu spark`` prints
    it). The plans that look at the data on the driver (slice quantiles, partition statistics)
    fail inside ``detect_spark``; the others at the first action on its result."""
    with pytest.raises(PySparkException) as info:
        run()
    found = re.findall(
        r"cep_gpu\.errors\.EventError: ([^\n]+?)(?:\s+SQLSTATE: \w+)?$", str(info.value), re.M
    )
    assert found, str(info.value)[:2000]
    return found[-1]


def float_events(n: int = 100, bad_row: int = 77, bad: float = float("nan")) -> pa.Table:
    """Events with float seconds, one ``bad`` ts: a real NaN (pandas would write NaN as a null)."""
    ts = np.arange(n, dtype=np.float64)
    ts[bad_row] = bad
    return pa.table(
        {
            "type": ["A", "B"] * (n // 2),
            "ts": pa.array(ts, from_pandas=False),
            "k": np.ones(n, np.int64),
        }
    )


# -- issue 1: a NaN / infinite ts is our error naming the column and the row -----------------------


@pytest.mark.parametrize("plan", ["keyed", "shuffle", "partitions", "parquet"])
def test_nan_ts_names_the_row_in_every_plan(spark, tmp_path, plan):  # noqa: F811
    """It was Spark's CAST_OVERFLOW (shuffle and partitions: the NaN cast to a long for the slice
    of an event), 'is null at row 5' (the row in a slice) or 'holds nan, outside the range'."""
    path = tmp_path / "ev.parquet"
    pq.write_table(float_events(), path, row_group_size=10)
    df = spark.read.parquet(str(path))
    kwargs = {"partition_by": "k"} if plan == "keyed" else {"slicing": plan}

    def run():
        out = detect_spark(df, RULE, backend="cpu", num_slices=3, **kwargs)
        assert out.cep_plan.kind == plan
        out.collect()

    assert (
        job_error(run) == "column 'ts' is not finite (NaN) at row 77: every event needs a timestamp"
    )


@pytest.mark.parametrize("bad, shown", [(float("inf"), "Infinity"), (float("-inf"), "-Infinity")])
def test_infinite_ts_names_the_row(spark, bad, shown):  # noqa: F811
    df = spark.createDataFrame(float_events(bad=bad).to_pandas()).coalesce(1)

    def run():
        detect_spark(df, RULE, backend="cpu", num_slices=2, slicing="shuffle").collect()

    assert (
        job_error(run)
        == f"column 'ts' is not finite ({shown}) at row 77: every event needs a timestamp"
    )
    with pytest.raises(EventError, match="column 'ts' is not finite at row 77"):
        cep_gpu.detect(float_events(bad=bad), RULE)  # detect's wording, less the value


def test_cli_nan_ts_is_one_line(spark, tmp_path, capsys):  # noqa: F811
    """`cep-gpu spark` printed Spark's CAST_OVERFLOW trace (it maps only cep_gpu errors)."""
    from cep_gpu.cli import main

    (tmp_path / "r.tesla").write_text(RULE)
    pq.write_table(float_events(), tmp_path / "ev.parquet")
    status = main(
        [
            "spark",
            str(tmp_path / "r.tesla"),
            str(tmp_path / "ev.parquet"),
            "--out",
            str(tmp_path / "out"),
            "--backend",
            "cpu",
            "--slicing",
            "shuffle",
            "--no-plot",
        ]
    )
    err = capsys.readouterr().err
    assert status == 1
    assert err.strip().splitlines()[-1] == (
        "cep-gpu: error: column 'ts' is not finite (NaN) at row 77: every event needs a timestamp"
    )
    assert "SQLSTATE" not in err and "Traceback" not in err


@pytest.mark.parametrize("names", [("k", "k"), ("k", "K")])
def test_cli_duplicate_columns_are_one_line(spark, tmp_path, capsys, names):  # noqa: F811
    """Spark's reader refuses a file with two columns of one name (or, case-insensitive by
    default, of names differing in case) before detect_spark sees it: it was a Python traceback
    ending in AnalysisException COLUMN_ALREADY_EXISTS."""
    from cep_gpu.cli import main

    (tmp_path / "r.tesla").write_text(RULE)
    cols = [pa.array(["A", "B"]), pa.array([1.0, 2.0]), pa.array([1, 1]), pa.array([2, 2])]
    pq.write_table(pa.Table.from_arrays(cols, names=["type", "ts", *names]), tmp_path / "ev.parquet")
    status = main(["spark", str(tmp_path / "r.tesla"), str(tmp_path / "ev.parquet"), "--out",
                   str(tmp_path / "out"), "--backend", "cpu", "--no-plot"])
    err = capsys.readouterr().err
    assert status == 1
    assert err.strip().splitlines()[-1].startswith(
        "cep-gpu: error: " + str(tmp_path / "ev.parquet") + ": events have more than one column named 'k'"
    ), err[-2000:]
    assert "Traceback" not in err and "COLUMN_ALREADY_EXISTS" not in err
    # a failed task's Java and Python traces, logged by the JVM at ERROR (to its own stderr, which
    # capsys cannot see), are silenced: the one line above is the report
    level = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel()
    assert level.toString() == "FATAL"


# -- issue 2: rows are the input's, not a task's -----------------------------------------------------


@pytest.mark.parametrize("slicing", ["shuffle", "partitions"])
def test_rows_are_input_rows_without_id(spark, slicing):  # noqa: F811
    """Without an id column the row is the position in df.collect(), as detect names it. It was
    the row within a time slice."""
    ev = museum_like_stream(n=120, seed=3, with_id=False).astype({"type": object})
    ev.loc[101, "type"] = None  # late in time: in the last of 3 slices, far from its first row
    ev = ev.assign(id=0)[["type", "ts", "id", "k", "x", "v"]]  # (time_partitions' schema)
    df = time_partitions(spark, ev, cuts_between(ev["ts"].to_numpy(), 3)).drop("id").cache()
    assert df.rdd.getNumPartitions() == 3
    want = str(pytest.raises(EventError, cep_gpu.detect, df.toPandas(), SLICED_RULES).value)
    assert want == "column 'type' is null at row 101"
    assert (
        job_error(
            lambda: detect_spark(
                df, SLICED_RULES, backend=BACKEND, num_slices=3, slicing=slicing
            ).collect()
        )
        == want
    )


@pytest.mark.parametrize(
    "partition_by, slicing", [("k", "auto"), (None, "shuffle"), (None, "partitions")]
)
def test_rows_are_named_in_their_input_partition_with_ids(spark, partition_by, slicing):  # noqa: F811
    """With an id column the driver does not count rows: the row is named within its input
    partition (three partitions here). It was the row within a key's group or a slice."""
    ev = museum_like_stream(n=120, seed=3)
    ev.loc[95, "id"] = -7
    df = time_partitions(spark, ev, cuts_between(ev["ts"].to_numpy(), 3)).cache()
    parts = df.rdd.glom().collect()
    p = next(i for i, part in enumerate(parts) if any(r["id"] == -7 for r in part))
    r = next(j for j, row in enumerate(parts[p]) if row["id"] == -7)
    assert p == 2 and r != 95  # the row within the partition is not the row in the input

    def run():
        detect_spark(
            df,
            KEYED_RULES,
            partition_by=partition_by,
            backend=BACKEND,
            num_slices=3,
            slicing=slicing,
        ).collect()

    assert job_error(run) == (
        f"column 'id' is negative (-7) at row {r} of input partition 2: ids must be >= 0 "
        "(negative ids are reserved for composite events)"
    )


def test_rows_of_unread_types_are_checked_too(spark):  # noqa: F811
    """detect refuses a null ts whatever the event's type; the Spark plans drop unread types
    early, but only after the row checks."""
    ev = museum_like_stream(n=60, seed=4, with_id=False).astype({"ts": float})
    ev.loc[30, "type"] = "Noise"
    ev.loc[30, "ts"] = np.nan  # (a null once in Spark)
    df = spark.createDataFrame(ev, "type string, ts double, k long, x long, v double").coalesce(1)

    def run():
        detect_spark(df, SLICED_RULES, backend=BACKEND, num_slices=2, slicing="shuffle").collect()

    assert job_error(run) == "column 'ts' is null at row 30: every event needs a timestamp"


def test_parquet_rows_of_several_files_name_the_file(spark, tmp_path):  # noqa: F811
    ev = museum_like_stream(n=200, seed=5)
    first, second = ev.iloc[:100], ev.iloc[100:].reset_index(drop=True).copy()
    second.loc[5, "id"] = -1
    pq.write_table(
        pa.Table.from_pandas(first, preserve_index=False), tmp_path / "a.parquet", row_group_size=25
    )
    pq.write_table(
        pa.Table.from_pandas(second, preserve_index=False),
        tmp_path / "b.parquet",
        row_group_size=25,
    )
    out = detect_spark(
        spark.read.parquet(str(tmp_path)),
        SLICED_RULES,
        backend=BACKEND,
        num_slices=2,
        slicing="parquet",
    )
    assert job_error(out.collect).startswith(
        f"column 'id' is negative (-1) at row 5 of {tmp_path / 'b.parquet'}:"
    )


# -- ids that repeat, in one input partition or across partitions ------------------------------------


@pytest.mark.parametrize(
    "partition_by, slicing", [("k", "auto"), (None, "shuffle"), (None, "partitions")]
)
@pytest.mark.parametrize("across", [True, False])
def test_repeated_ids_are_refused_as_detect_refuses_them(spark, partition_by, slicing, across):  # noqa: F811
    """An id two rows share went through when the rows reached different tasks (other keys,
    other slices): each task saw its own group only. Now the driver refuses it in every plan,
    with detect's words for the id detect names, then the two rows in their input partitions."""
    ev = museum_like_stream(n=120, seed=3)
    cuts = cuts_between(ev["ts"].to_numpy(), 3)  # partitions: rows [0, c0), [c0, c1), [c1, 120)
    lo = cuts[1] if across else 6
    # a second pair whose later row comes first in the input: detect names its id, not row 5's
    b = next(i for i in range(lo, 120) if ev.loc[i, "k"] != ev.loc[5, "k"])  # another key
    ev.loc[b, "id"] = ev.loc[5, "id"]
    ev.loc[b + 1 if not across else 4, "id"] = ev.loc[2, "id"]  # rows 2 and 4 (or b+1 > b)
    want = str(pytest.raises(EventError, cep_gpu.detect, ev, KEYED_RULES).value)
    first = 4 if across else b
    assert want == f"column 'id' has duplicate id {ev.loc[first, 'id']}"
    df = time_partitions(spark, ev, cuts).cache()
    parts = df.rdd.glom().collect()

    def where(i: int) -> str:
        p = int(np.searchsorted(cuts, i, side="right"))
        start = ([0, *cuts])[p]
        assert parts[p][i - start]["id"] == ev.loc[i, "id"]
        return f"at row {i - start} of input partition {p}"

    pair = (2, 4) if across else (5, b)
    with pytest.raises(EventError) as info:
        detect_spark(
            df, KEYED_RULES, partition_by=partition_by, backend=BACKEND, num_slices=3, slicing=slicing
        ).collect()
    assert str(info.value) == (
        f"{want} ({where(pair[0])} and {where(pair[1])}; 2 row(s) in all repeat an earlier row's "
        "id): ids must be unique"
    )


def test_repeated_ids_in_a_decopa_plan_are_refused(spark):  # noqa: F811
    from cep_gpu.spark_udfs import execute_plan_spark

    from cep_gpu import decopa

    ev = museum_like_stream(n=60, seed=4)
    ev.loc[50, "id"] = ev.loc[1, "id"]
    rule = cep_gpu.parse_rule("define Q pattern SEQ(A a, B b) within 3 s")
    plan = decopa.optimize(rule, decopa.Stats(rates={"a": 1, "b": 1}), decopa.Units(2, 10, 10))
    df = time_partitions(spark, ev, [30])
    with pytest.raises(EventError, match=rf"^column 'id' has duplicate id {ev.loc[1, 'id']} \(at row 1 "
                       r"of input partition 0 and at row 20 of input partition 1;"):
        execute_plan_spark(df, plan, backend=BACKEND)


def test_check_ids_false_skips_the_id_job_and_keeps_the_rows(spark):  # noqa: F811
    """``check_ids=False`` (ids unique by construction) starts no Spark job in detect_spark:
    the count vs countDistinct job is what the default runs, before any task; the rows are
    still detect's."""
    ev = museum_like_stream(n=60, seed=5)
    df = time_partitions(spark, ev, [30]).cache()
    df.count()  # (the cache filled: the jobs below are detect_spark's own)
    runs = {}
    # (False first: the helper's job group keeps the ids of every job started in it so far)
    for check in (False, True):
        runs[check] = _no_job_runs(spark, lambda c=check: runs.setdefault(
            ("out", c), detect_spark(df, KEYED_RULES, partition_by="k", backend=BACKEND, check_ids=c)))
    assert runs[False] == [] and len(runs[True]) >= 1
    got = runs[("out", False)].toPandas()
    assert rows(got, ["rule", "ts", "ids"]) == rows(cep_gpu.detect(ev, KEYED_RULES), ["rule", "ts", "ids"])


def test_check_ids_false_lets_a_repeat_across_partitions_past_the_driver(spark):  # noqa: F811
    from cep_gpu.spark_udfs import execute_plan_spark

    from cep_gpu import decopa
    from cep_gpu.decopa import DecompositionError

    ev = museum_like_stream(n=60, seed=4)
    ev.loc[50, "id"] = ev.loc[1, "id"]
    df = time_partitions(spark, ev, [30])
    detect_spark(df, KEYED_RULES, partition_by="k", backend=BACKEND, check_ids=False)  # no driver error
    with pytest.raises(EventError, match="duplicate id"):
        detect_spark(df, KEYED_RULES, partition_by="k", backend=BACKEND)
    with pytest.raises(ArgumentError, match="check_ids must be True or False, got 'no'"):
        detect_spark(df, KEYED_RULES, partition_by="k", backend=BACKEND, check_ids="no")
    rule = cep_gpu.parse_rule("define Q pattern SEQ(A a, B b) within 3 s")
    plan = decopa.optimize(rule, decopa.Stats(rates={"a": 1, "b": 1}), decopa.Units(2, 10, 10))
    execute_plan_spark(df, plan, backend=BACKEND, check_ids=False)
    with pytest.raises(DecompositionError, match="check_ids must be True or False, got 0"):
        execute_plan_spark(df, plan, backend=BACKEND, check_ids=0)


def test_task_errors_do_not_pass_for_input_rows():
    err = task_error(EventError("column 'x' holds 3 at row 5, above the int64 maximum"))
    assert str(err) == (
        "column 'x' holds 3 at row 5 of the events one Spark task ran (not an input row), "
        "above the int64 maximum"
    )
    assert isinstance(err, EventError)
    plain = EventError("column 'id' has duplicate id 4")
    assert task_error(plain) is plain


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 30),
    data=st.data(),
    fault=st.sampled_from(
        ["type_null", "ts_null", "nan", "inf", "range", "id_null", "id_negative"]
    ),
)
def test_arrow_row_checks_name_the_row_detect_names(n, data, fault):
    """The task-side checks (Parquet files read by the tasks) find the row detect finds, with
    detect's wording (NaN and infinity: 'not finite', the value added)."""
    row = data.draw(st.integers(0, n - 1))
    types = pa.array(["A"] * n)
    ts = np.arange(n, dtype=np.float64)
    ids = pa.array(np.arange(n) * 2)
    if fault == "type_null":
        types = pa.array(["A"] * row + [None] + ["A"] * (n - row - 1))
    elif fault in ("nan", "inf", "range"):
        ts[row] = {"nan": np.nan, "inf": np.inf, "range": 1e12}[fault]
    elif fault in ("id_null", "id_negative"):
        values = list(range(0, 2 * n, 2))
        values[row] = None if fault == "id_null" else -5
        ids = pa.array(values, pa.int64())
    ts_col = pa.array(ts, from_pandas=False)
    if fault == "ts_null":
        ts_col = pa.array([None if i == row else float(i) for i in range(n)], pa.float64())
    table = pa.table({"type": types, "ts": ts_col, "id": ids})
    with pytest.raises(EventError) as ours:
        check_arrow_rows(table, "fractional", "s", lambda i: f"at row {i}")
    with pytest.raises(EventError) as theirs:
        cep_gpu.detect(table, "define X from B() and each A() within 5 s from B", time_unit="s")
    assert f"at row {row}" in str(ours.value) and f"at row {row}" in str(theirs.value)
    column = str(theirs.value).split("'")[1]
    assert str(ours.value).startswith(f"column '{column}'")


# -- issue 3: decimals (and other types the engine cannot read) on the driver ------------------------


@pytest.mark.parametrize(
    "schema, value, message",
    [
        (
            "decimal(10,2)",
            "1.50",
            r"attribute column 'v' has type decimal\(10,2\).*cast it to double",
        ),
        (
            "date",
            datetime.date(2024, 1, 1),
            r"attribute column 'v' has type date.*only 'ts' may be a time",
        ),
        ("binary", b"x", r"attribute column 'v' has type binary"),
        ("array<double>", [1.0], r"attribute column 'v' has type array<double>"),
    ],
)
def test_attribute_types_the_engine_cannot_read_fail_on_the_driver(spark, schema, value, message):  # noqa: F811
    """A decimal attribute failed in every task ('holds Decimal values'), behind a Java trace."""
    import decimal

    if schema.startswith("decimal"):
        value = decimal.Decimal(value)
    df = spark.createDataFrame(
        [("A", 1.0, 1, value), ("B", 2.0, 1, value)], f"type string, ts double, k long, v {schema}"
    )
    rule = RULE.replace("B(k = $k)", "B(k = $k and v > 0)")

    def call():
        with pytest.raises(EventError, match=message):
            detect_spark(df, rule, backend="cpu", num_slices=2)

    assert _no_job_runs(spark, call) == []
    if schema.startswith("decimal"):  # detect refuses the same column (the values, there)
        with pytest.raises(EventError, match="attribute column 'v' holds Decimal values"):
            cep_gpu.detect(df.toPandas(), rule)


def test_unread_decimal_columns_are_no_error(spark):  # noqa: F811
    import decimal

    df = spark.createDataFrame(
        [("A", 1.0, 1, decimal.Decimal(2)), ("B", 2.0, 1, decimal.Decimal(3))],
        "type string, ts double, k long, price decimal(10,2)",
    )
    assert len(detect_spark(df, RULE, backend="cpu", num_slices=1).collect()) == 1


# -- issue 4: column names Spark cannot tell apart ----------------------------------------------------


def test_duplicate_column_names_fail_on_the_driver(spark):  # noqa: F811
    """It was Spark's AMBIGUOUS_REFERENCE for the first column it referenced."""
    df = spark.createDataFrame([("A", 1.0, 1), ("B", 2.0, 1)], "type string, ts double, k long")
    for dup in ("k", "ts"):
        twice = df.select("type", "ts", "k", df[dup].alias(dup))

        def call(twice=twice, dup=dup):
            with pytest.raises(EventError, match=f"events have more than one column named '{dup}'"):
                detect_spark(twice, RULE, backend="cpu")

        assert _no_job_runs(spark, call) == []
    with pytest.raises(EventError, match="events have more than one column named 'k'"):
        # the same words as detect
        cep_gpu.detect(df.select("type", "ts", "k", df["k"].alias("k")).toPandas(), RULE)
    cased = df.select("type", "ts", "k", (F.col("k") + 1).alias("K"))
    with pytest.raises(EventError, match=r"columns 'k' and 'K', which Spark does not tell apart"):
        detect_spark(cased, RULE, backend="cpu")
    # names that no rule reads may differ in case only: Spark never has to tell them apart
    unread = df.select("*", F.lit(1).alias("Unread"), F.lit(2).alias("unread"))
    assert len(detect_spark(unread, RULE, backend="cpu").collect()) == 1


# -- other arguments -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "events, kwargs, error, message",
    [
        (
            "pandas",
            {},
            ArgumentError,
            r"events must be a Spark DataFrame, got DataFrame \(spark.createDataFrame",
        ),
        (None, {}, ArgumentError, "events must be a Spark DataFrame, got NoneType"),
        ("spark", {"partition_by": 3}, ArgumentError, "partition_by must be a column name"),
        ("spark", {"slicing": ["auto"]}, ArgumentError, "slicing must be 'auto'"),
        ("spark", {"time_unit": ["s"]}, EventError, "unknown time_unit"),
        ("spark", {"rules": 123}, ArgumentError, "rules must be a Rule"),
    ],
)
def test_bad_arguments_are_cep_gpu_errors(spark, events, kwargs, error, message):  # noqa: F811
    """A pandas frame or None was an AttributeError ('no attribute schema'); a list as slicing or
    time_unit a TypeError (unhashable)."""
    frame = pd.DataFrame({"type": ["A", "B"], "ts": [1.0, 2.0], "k": [1, 1]})
    df = {"pandas": frame, None: None, "spark": None}[events]
    if events == "spark":
        df = spark.createDataFrame(frame)
    rules = kwargs.pop("rules", RULE)
    with pytest.raises(error, match=message):
        detect_spark(df, rules, **kwargs)


# -- issue 5: detect_stream's watermark -----------------------------------------------------------------


@pytest.mark.parametrize(
    "watermark, message",
    [
        ("-5 seconds", "watermark must not be negative"),
        ("5 seconds -10 seconds", "watermark must not be negative"),
        (-1, "watermark must not be negative"),
        (datetime.timedelta(seconds=-1), "watermark must not be negative"),
        ("5 parsecs", "unknown unit 'parsecs'"),
        ("5 min", "unknown unit 'min'"),
        ("5", "has no unit: write e.g. '5 seconds'"),
        ("", "is not a delay"),
        ("soon", "is not a delay"),
        ("5 seconds ago", "is not a delay"),
        (None, "watermark must be a delay"),
        (True, "watermark must be a delay"),
        (float("nan"), "watermark must be a delay"),
        (np.timedelta64("NaT"), "watermark must be a delay"),
    ],
)
def test_bad_watermarks_are_argument_errors(watermark, message):
    """They were Spark's own errors (IllegalArgumentException, CANNOT_PARSE_INTERVAL, and
    '[NOT_EXPECTED_TYPE] should be str, got str' for an empty string)."""
    with pytest.raises(ArgumentError, match=re.escape(message)):
        watermark_delay(watermark, "s")


@pytest.mark.parametrize(
    "watermark, delay",
    [
        ("2 minutes", "2 minutes"),
        (" interval 1 hour 30 minutes ", "interval 1 hour 30 minutes"),
        ("1 hour -5 minutes", "1 hour -5 minutes"),
        ("5 SECONDS", "5 SECONDS"),
        (30, "30000000 microseconds"),
        (1.5, "1500000 microseconds"),
        (np.int64(2), "2000000 microseconds"),
        (datetime.timedelta(milliseconds=3), "3000 microseconds"),
        (pd.Timedelta(1, "ns"), "1 microseconds"),
    ],
)
def test_watermarks_spark_reads(watermark, delay):
    assert watermark_delay(watermark, "s") == delay


def test_stream_checks_its_arguments_first(spark, tmp_path):  # noqa: F811
    events = museum_like_stream(n=20, seed=1)
    events.to_parquet(tmp_path / "a.parquet")
    stream = spark.readStream.schema(spark.createDataFrame(events).schema).parquet(str(tmp_path))
    with pytest.raises(ArgumentError, match="watermark must not be negative"):
        detect_stream(stream, KEYED_RULES, partition_by="k", watermark="-5 seconds")
    with pytest.raises(ArgumentError, match="detect_stream: events must be a Spark DataFrame"):
        detect_stream(events, KEYED_RULES, partition_by="k", watermark="5 seconds")
    # 5 seconds, as time_unit says
    out = detect_stream(stream, KEYED_RULES, partition_by="k", watermark=5)
    assert out.isStreaming


def test_stream_nan_ts_names_the_event(spark, tmp_path):  # noqa: F811
    """A NaN ts failed the query with Spark's CAST_OVERFLOW (the event-time column)."""
    n = 20
    ts = np.arange(n, dtype=np.float64) + 1_700_000_000
    ts[12] = np.nan
    table = pa.table(
        {
            "type": ["A", "B"] * (n // 2),
            "ts": pa.array(ts, from_pandas=False),
            "id": np.arange(n) * 10,
            "k": np.ones(n, np.int64),
        }
    )
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "a.parquet")
    stream = spark.readStream.schema(spark.read.parquet(str(tmp_path / "in")).schema).parquet(
        str(tmp_path / "in")
    )
    out = detect_stream(stream, RULE, partition_by="k", watermark="5 seconds", backend="cpu")
    query = (
        out.writeStream.format("memory")
        .queryName("cep_bad_nan")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        with pytest.raises(Exception) as info:
            query.processAllAvailable()
    finally:
        query.stop()
    assert (
        "column 'ts' is not finite (NaN) in the event with id 120: every event needs a timestamp"
        in str(info.value)
    )
