"""Spark ingestion edge cases (issue 11): timestamps whose nanoseconds overflow int64 fail the job
with the same message as ``detect``, naming the row and the value."""

from __future__ import annotations

import datetime
import warnings

import numpy as np
import pandas as pd
import pytest
from cep_gpu.spark_udfs import detect_spark  # noqa: E402
from conftest_spark import spark  # noqa: F401  (the shared session fixture)

import cep_gpu

pyspark_errors = pytest.importorskip("pyspark.errors")

RULE = cep_gpu.parse_rule("define AB(k: int) from B(k = $k) as b and each A(k = $k) as a within 5 s from b where k = $k")


@pytest.mark.parametrize("partition_by", [None, "k"])
@pytest.mark.parametrize(
    ("schema", "data", "shown", "range_text"),
    [
        ("type string, ts long, k long", [("A", 1, 1), ("B", 10**10, 1)], "10000000000", "9223372036 with time_unit='s'"),
        ("type string, ts double, k long", [("A", 1.0, 1), ("B", 1e12, 1)], "1.0E12", "9223372036 with time_unit='s'"),
        (
            "type string, ts timestamp, k long",
            [("A", datetime.datetime(2000, 1, 1), 1), ("B", datetime.datetime(3000, 1, 1), 1)],
            "3000-01-01", "2262-04-11 23:47:16 UTC",
        ),
    ],
    ids=["long-s", "double-s", "timestamp-3000"],
)
def test_timestamp_out_of_range_fails_with_a_clear_message(spark, schema, data, shown, range_text, partition_by):  # noqa: F811
    df = spark.createDataFrame(data, schema=schema)
    with pytest.raises(pyspark_errors.PySparkException) as err:
        detect_spark(df, [RULE], backend="cpu", partition_by=partition_by).collect()
    msg = str(err.value)
    # detect's words for the row (no id column: its position in df.collect()), and the value
    assert f"cep_gpu.errors.EventError: column 'ts' at row 1 holds {shown}" in msg
    assert "outside the representable range" in msg and range_text in msg


def test_timestamps_inside_the_range_still_match(spark):  # noqa: F811
    events = pd.DataFrame({"type": ["A", "B"], "ts": np.array([9_223_372_030, 9_223_372_033]), "k": [1, 1]})
    out = detect_spark(spark.createDataFrame(events), [RULE], backend="cpu").toPandas()
    assert [tuple(x) for x in out["ids"]] == [(1, 0)]
    assert out["ts"].tolist() == [9_223_372_033]



def _padding_concat_warnings(quiet: bool) -> list[str]:
    # what PySpark's applyInPandasWithState worker does with a state function's output
    from cep_gpu.spark_udfs.stream import quiet_state_padding

    out = pd.DataFrame({"rule": ["R"], "v": [1.0]})
    padding = pd.DataFrame(dict.fromkeys(["rule", "v"]), index=[0, 1])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if quiet:
            quiet_state_padding()
        pd.concat([out, padding], ignore_index=True)
    return [str(w.message) for w in seen if issubclass(w.category, FutureWarning)]


def test_stream_workers_silence_pandas_padding_warning():
    # the stream's state function installs the filter in the worker before PySpark concatenates
    if not _padding_concat_warnings(quiet=False):
        pytest.skip("this pandas does not warn about the padding concatenation")
    assert _padding_concat_warnings(quiet=True) == []


TOUCH = cep_gpu.parse_rule("""
define Touch(room: string, painting: string)
from   Vibration(painting=$p and value>3.0) and
       each PeopleNear(painting=$p) within 2 min. from Vibration
where  room=Vibration.room and painting=Vibration.painting
""")
TOUCH_EVENTS = pd.DataFrame({
    "type": ["PeopleNear", "Vibration"], "ts": [1.0, 2.0], "painting": ["M", "M"],
    "room": [None, None], "value": [None, 4.2],
})


@pytest.mark.parametrize("case", ["string-all-null", "void", "absent", "empty"])
def test_untyped_attribute_takes_declared_type_on_spark(spark, case):  # noqa: F811
    typed = "type string, ts double, painting string, room string, value double"
    df = {
        "string-all-null": lambda: spark.createDataFrame(TOUCH_EVENTS, typed),
        "void": lambda: spark.createDataFrame(TOUCH_EVENTS),  # Spark infers NullType for room
        "absent": lambda: spark.createDataFrame(TOUCH_EVENTS.drop(columns="room")),
        "empty": lambda: spark.createDataFrame(TOUCH_EVENTS.iloc[:0], typed),
    }[case]()
    out = detect_spark(df, [TOUCH], backend="cpu")
    assert dict(out.dtypes)["room"] == "string"
    got = out.toPandas()
    expected = cep_gpu.detect(TOUCH_EVENTS.iloc[:0] if case == "empty" else TOUCH_EVENTS, TOUCH, backend="cpu")
    assert [tuple(x) for x in got["ids"]] == [tuple(x) for x in expected["ids"]]
    assert got["room"].isna().all() and got["painting"].tolist() == expected["painting"].tolist()


def test_parquet_statistics_out_of_range_fail_on_the_driver(spark, tmp_path):  # noqa: F811
    import pyarrow as pa
    import pyarrow.parquet as pq

    ev = pd.DataFrame({"type": ["A", "B"] * 20, "ts": np.arange(40, dtype=np.int64) + 10**10, "k": 1})
    path = tmp_path / "ev.parquet"
    pq.write_table(pa.Table.from_pandas(ev, preserve_index=False), path, row_group_size=10)
    with pytest.raises(cep_gpu.EventError, match="'ts' in the Parquet statistics .* holds 10000000000, outside"):
        detect_spark(spark.read.parquet(str(path)), [RULE], backend="cpu", slicing="parquet")
