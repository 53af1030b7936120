"""``detect_spark``'s ``ts`` has the input's Spark type (docs/spark.md, "The type of ts"): every
integral and fractional type, TIMESTAMP and TIMESTAMP_NTZ; the values are the terminators'."""

from __future__ import annotations

import datetime as dt

import pytest
from conftest_spark import spark  # noqa: F401  (the shared session fixture)

pytestmark = pytest.mark.spark

from cep_gpu.spark_udfs import detect_spark  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

RULE = "define Out from B() and each A() within 5 s from B"
SECONDS = [1.0, 2.0, 3.5, 4.0, 7.25, 8.0]
TYPES = list("ABABAB")


@pytest.mark.parametrize("spark_type", [
    T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType(), T.FloatType(), T.DoubleType(),
    T.TimestampType(), T.TimestampNTZType(),
])
def test_detect_spark_keeps_the_input_type(spark, spark_type):  # noqa: F811
    if isinstance(spark_type, (T.TimestampType, T.TimestampNTZType)):
        base = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc if isinstance(spark_type, T.TimestampType) else None)
        values = [base + dt.timedelta(seconds=s) for s in SECONDS]
    elif isinstance(spark_type, (T.FloatType, T.DoubleType)):
        values = [s + 0.1 for s in SECONDS]  # (0.1: a float32 value a double holds only approximately)
    else:
        values = [int(s) for s in SECONDS]
    schema = T.StructType([T.StructField("type", T.StringType()), T.StructField("ts", spark_type),
                           T.StructField("id", T.LongType())])
    df = spark.createDataFrame(list(zip(TYPES, values, range(len(TYPES)))), schema).repartition(2)
    out = detect_spark(df, RULE, backend="cpu")
    assert out.schema["ts"].dataType == spark_type
    got = sorted((tuple(r["ids"]), r["ts"]) for r in out.collect())
    inputs = {r["id"]: r["ts"] for r in df.collect()}
    assert len(got) >= 3 and [ts for _, ts in got] == [inputs[ids[0]] for ids, _ in got]
