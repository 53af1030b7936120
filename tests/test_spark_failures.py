"""engine_errors(): a cep_gpu error raised inside a Spark task comes out of the action as that
error, with its one-line message, whatever PySpark wraps it in (PythonException, a JVM row check's
SparkRuntimeException, a StreamingQueryException whose text also holds the query plan)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from cep_gpu.spark_udfs import engine_errors
from cep_gpu.spark_udfs.failures import error_from_text, spark_cep_error
from conftest_spark import spark  # noqa: F401  (the shared session fixture; skips without PySpark)
from pyspark.errors import PySparkException

from cep_gpu.errors import CepError, EventError, RuleError, UsageError

RULE = "define AB(k: int) from B(k = $k) as b and each A(k = $k) as a within 5 s from b where k = $k"

# the shape of a failed stream's text (PySpark 4): the exception, then the query's plan, whose row
# checks hold cep_gpu messages as literals of raise_error(...)
PLAN = """
=== Streaming Query ===
Identifier: q [id = 1, runId = 2]

Logical Plan:
WriteToMicroBatchDataSource MemorySink
+- ~Project [rule#14, ts#18, ids#16, k#17L]
   +- ~Filter CASE WHEN isnull(type#4) THEN cast(raise_error(USER_RAISED_EXCEPTION, map(errorMessage, concat(cep_gpu.errors.EventError: column 'type' is null , coalesce(cast(concat(in the event with id , cast(id#6L as string)) as string), ))) as boolean) ELSE true END
      +- ~StreamingExecutionRelation FileStreamSource[file:/in], [type#4, ts#5, id#6L, k#7L]
"""
PYTHON_FAILURE = """[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: [PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):
  File "/x/cep_gpu/spark_udfs/stream.py", line 240, in _final_events
    raise task_error(err) from None
  File "/x/cep_gpu/events/checks.py", line 101, in check_ids
    raise EventError(DUPLICATE_ID.format(value=int(dup)))
cep_gpu.errors.EventError: column 'id' has duplicate id 2
 SQLSTATE: 38000 SQLSTATE: XXKST""" + PLAN
JVM_FAILURE = (
    "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: [USER_RAISED_EXCEPTION] "
    "cep_gpu.errors.EventError: column 'ts' is null in the event with id 5: every event needs a "
    "timestamp SQLSTATE: P0001 SQLSTATE: XXKST" + PLAN
)


def test_the_raised_exception_is_read_not_the_plan():
    """The last ``cep_gpu.errors.X:`` of a stream's text is a literal of the plan, not the error."""
    err = error_from_text(PYTHON_FAILURE)
    assert type(err) is EventError and str(err) == "column 'id' has duplicate id 2"
    err = error_from_text(JVM_FAILURE)
    assert type(err) is EventError
    assert str(err) == "column 'ts' is null in the event with id 5: every event needs a timestamp"


def test_only_a_raised_cep_gpu_exception_counts():
    # the worker failed with something else: the cep_gpu words in its text (a message, the plan) do not count
    other = ("Traceback (most recent call last):\n  File \"w.py\", line 1\n    import cep_gpu\n"
             "ModuleNotFoundError: No module named 'cep_gpu'\n" + PLAN)
    assert error_from_text(other) is None
    assert error_from_text("[USER_RAISED_EXCEPTION] boom SQLSTATE: P0001" + PLAN) is None
    assert error_from_text("java.lang.OutOfMemoryError: Java heap space") is None
    # chained tracebacks: the last one raised
    chained = (PYTHON_FAILURE.split("\n SQLSTATE")[0] + "\n\nDuring handling of the above exception, another "
               "exception occurred:\n\nTraceback (most recent call last):\n  File \"w.py\", line 3\nMemoryError\n")
    assert error_from_text(chained) is None


def test_the_class_and_the_first_line_of_the_message_are_kept():
    rule_error = ("Traceback (most recent call last):\n  File \"d.py\", line 205, in check_schema\n"
                  "    raise rule.error(\ncep_gpu.errors.RuleError: rule 'AB': attribute 'k' is declared int "
                  "but its value is string (line 1, column 87)\n    define AB(k: int) from B(k = $k)\n"
                  "                           ^\n\tat org.apache.spark.api.python.BasePythonRunner")
    err = error_from_text(rule_error)
    assert type(err) is RuleError
    assert str(err) == "rule 'AB': attribute 'k' is declared int but its value is string (line 1, column 87)"
    # a class made from more than a message keeps its class; a name this version lacks is a CepError
    err = error_from_text("Traceback (most recent call last):\ncep_gpu.errors.UsageError: argument --x: bad")
    assert type(err) is UsageError and str(err) == "argument --x: bad"
    err = error_from_text("Traceback (most recent call last):\ncep_gpu.errors.NewerError: from a newer worker")
    assert type(err) is CepError and str(err) == "from a newer worker"


def test_engine_errors_unwraps_pyspark_failures_only():
    with pytest.raises(EventError) as info, engine_errors():
        raise PySparkException(message=PYTHON_FAILURE)
    assert str(info.value) == "column 'id' has duplicate id 2"
    assert info.value.__cause__ is None and info.value.__suppress_context__  # raised from None
    assert spark_cep_error(PySparkException(message=JVM_FAILURE)) is not None
    # anything else passes through, the same object
    for err in (ValueError(PYTHON_FAILURE), EventError("raised on the driver"),
                PySparkException(message="[USER_RAISED_EXCEPTION] boom")):
        with pytest.raises(type(err)) as info, engine_errors():
            raise err
        assert info.value is err
    with engine_errors():  # and no failure, nothing
        pass


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:toPandas attempted Arrow optimization:UserWarning")  # PySpark's own note
def test_engine_errors_at_batch_actions(spark):  # noqa: F811
    """A RuleError raised by the engine in a task (Python worker) and a row check's EventError
    (JVM), as their classes and one-line messages; another Spark failure unchanged."""
    from cep_gpu.spark_udfs import detect_spark

    text_k = pd.DataFrame({"type": ["A", "B", "A", "B"], "ts": [1.0, 2.0, 3.0, 4.0], "k": ["1", "1", "x", "x"]})
    out = detect_spark(spark.createDataFrame(text_k), RULE, backend="cpu")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with pytest.raises(RuleError) as info, engine_errors():
            out.toPandas()
    assert str(info.value) == (
        "rule 'AB': attribute 'k' is declared int but its value is string (line 1, column 87)"
    )
    # nor toPandas' warning, which repeats the task's whole trace before the failure
    assert [str(w.message)[:60] for w in shown if "Arrow optimization" in str(w.message)] == []
    null_ts = pd.DataFrame({"type": ["A", "B", "A", "B"], "ts": [1.0, None, 3.0, 4.0], "k": [1, 1, 1, 1]})
    out = detect_spark(spark.createDataFrame(null_ts), RULE, backend="cpu", partition_by="k")
    with pytest.raises(EventError) as info, engine_errors():
        out.collect()
    assert str(info.value) == "column 'ts' is null at row 1: every event needs a timestamp"
    with pytest.raises(PySparkException, match="USER_RAISED_EXCEPTION.*not ours"), engine_errors():
        spark.range(1).selectExpr("raise_error('not ours')").collect()


@pytest.mark.spark
def test_engine_errors_at_a_failed_stream(spark, tmp_path):  # noqa: F811
    """A repeated id within one key (raised by the engine in the state function) and a null ts
    (a JVM row check), from ``processAllAvailable`` and ``awaitTermination``: the text of the
    StreamingQueryException also holds the plan, whose row checks hold cep_gpu messages."""
    from cep_gpu.spark_udfs import detect_stream

    ts = np.array([0.0, 1, 2, 3, 30]) + 1.7e9  # the last event moves the watermark past the others
    cases = {
        "dup": (pd.DataFrame({"type": list("ABABA"), "ts": ts, "id": [1, 2, 2, 3, 4], "k": [1] * 5}),
                "column 'id' has duplicate id 2"),
        "nullts": (pd.DataFrame({"type": list("ABABA"), "ts": np.where(np.arange(5) == 2, np.nan, ts),
                                 "id": [1, 2, 5, 3, 4], "k": [1] * 5}),
                   "column 'ts' is null in the event with id 5: every event needs a timestamp"),
    }
    for name, (events, message) in cases.items():
        folder = tmp_path / name / "in"
        folder.mkdir(parents=True)
        events.to_parquet(folder / "a.parquet")
        stream = spark.readStream.schema(spark.read.parquet(str(folder)).schema).parquet(str(folder))
        out = detect_stream(stream, RULE, partition_by="k", watermark="5 seconds", backend="cpu")
        query = (out.writeStream.format("memory").queryName(f"cep_failures_{name}")
                 .option("checkpointLocation", str(tmp_path / name / "ckpt")).start())
        try:
            with pytest.raises(EventError) as info, engine_errors():
                if name == "dup":
                    query.processAllAvailable()
                else:
                    query.awaitTermination(60)
        finally:
            query.stop()
        assert str(info.value) == message, name
