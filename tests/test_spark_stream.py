"""detect_stream: per-key state, watermark expiry, and restart from a checkpoint."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest
from conftest_spark import rows, spark  # noqa: F401  (the shared session fixture)
from test_spark_batch import KEYED_RULES, SLICED_RULES, TIED, museum_like_stream, without_windows

import cep_gpu
from cep_gpu.errors import EventError, RuleError

pytestmark = pytest.mark.spark

from cep_gpu.spark_udfs import detect_stream, plan_job  # noqa: E402
from cep_gpu.spark_udfs import stream as st  # noqa: E402
from pyspark.sql import types as T  # noqa: E402
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

BACKEND = "reference"
EPOCH = 1_700_000_000  # seconds; realistic event times (Spark's first watermark is the epoch)


def stream_events() -> pd.DataFrame:
    ev = museum_like_stream()
    ev["ts"] += EPOCH
    # a far later event of a type no rule reads moves the watermark past every key's last events
    tick = pd.DataFrame({"type": ["Tick"], "ts": [EPOCH + 10_000], "id": [10**6], "k": [0],
                         "x": pd.array([pd.NA], dtype="Int64"), "v": [0.0]})
    return pd.concat([ev, tick], ignore_index=True)


# -- the state machine alone (no Spark): fast, many chunkings --------------------------------------


class FakeState:
    """Just enough of pyspark's GroupState for ``stream._step``."""

    def __init__(self):
        self.value = None
        self.timeout = None
        self.watermark_ms = 0
        self.hasTimedOut = False

    @property
    def exists(self):
        return self.value is not None

    @property
    def get(self):
        return self.value

    def update(self, value):
        self.value = value

    def remove(self):
        self.value, self.timeout = None, None

    def getCurrentWatermarkMs(self):
        return self.watermark_ms

    def setTimeoutTimestamp(self, ms):
        assert ms > self.watermark_ms
        self.timeout = ms


def _local_step(spark, events, rules, key="k", delay_s=5):  # noqa: F811
    """Feed ``events`` through ``_step`` in micro-batches as Spark would (watermark per batch)."""
    df = spark.createDataFrame(events.iloc[:1])
    job = plan_job(df, rules, key, BACKEND)
    cols = ["type", "ts", "id", *job.attributes]
    schema = T.StructType([f for f in df.schema.fields if f.name in cols])
    step = functools.partial(
        st._step, job=job, event_cols=cols, event_schema=to_arrow_schema(schema),
        out_schema=to_arrow_schema(job.engine_struct),
    )
    states: dict = {}
    outputs = []

    def run_batch(batch: pd.DataFrame, watermark_ms: int):
        for state in states.values():
            state.watermark_ms = watermark_ms
        for k, part in batch.groupby(key):
            state = states.setdefault(k, FakeState())
            state.hasTimedOut = False
            outputs.extend(step((k,), iter([part]), state))
        for k, state in states.items():  # timeouts of keys without data
            if state.exists and state.timeout is not None and state.timeout < watermark_ms and k not in set(batch[key]):
                state.hasTimedOut = True
                outputs.extend(step((k,), iter([]), state))
                state.hasTimedOut = False
    return job, states, outputs, run_batch


@pytest.mark.parametrize("n_batches", [1, 3, 7, 20])
def test_state_machine_equals_batch(spark, n_batches):  # noqa: F811
    events = stream_events()
    want = rows(cep_gpu.detect(events, KEYED_RULES, backend=BACKEND))
    job, states, outputs, run_batch = _local_step(spark, events, KEYED_RULES)
    watermark = 0
    for idx in np.array_split(np.arange(len(events)), n_batches):
        batch = events.iloc[idx]
        run_batch(batch, watermark)
        watermark = max(watermark, (int(batch.ts.max()) - 5) * 1000)
    run_batch(events.iloc[:0], watermark)  # the no-data batch that fires timeouts
    got = rows(pd.concat(outputs, ignore_index=True))
    assert got == want
    # expired: only keys still within the lookback of the watermark keep state
    assert sum(s.exists for s in states.values()) <= 1


# -- Structured Streaming end to end, with a restart from the checkpoint ---------------------------


def test_restart_from_checkpoint_no_duplicate_none_missing(spark, tmp_path):  # noqa: F811
    events = stream_events()
    want = rows(cep_gpu.detect(events, KEYED_RULES, backend=BACKEND))
    src, out_dir, ckpt = tmp_path / "src", tmp_path / "out", tmp_path / "ckpt"
    src.mkdir()
    schema = spark.createDataFrame(events.iloc[:1]).schema
    files = np.array_split(np.arange(len(events)), 4)

    def write(i):
        events.iloc[files[i]].to_parquet(src / f"part-{i:03d}.parquet")

    def run():
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(src))
        out = detect_stream(stream, KEYED_RULES, partition_by="k", watermark="5 seconds", backend=BACKEND)
        query = (
            out.writeStream.format("parquet")
            .option("path", str(out_dir))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None

    write(0)
    write(1)
    run()  # stops mid-stream: half the files, keys still hold state
    first = rows(spark.read.parquet(str(out_dir)).toPandas())
    assert 0 < len(first) < len(want)
    write(2)
    write(3)
    run()  # restarts from the checkpoint
    got = rows(spark.read.parquet(str(out_dir)).toPandas())
    assert len(got) == len(set(got)), "a composite event was output twice"
    assert got == want
    assert set(first) <= set(got)


def test_stream_input_errors(spark, tmp_path):  # noqa: F811
    events = stream_events()
    events.iloc[:5].to_parquet(tmp_path / "a.parquet")
    schema = spark.createDataFrame(events.iloc[:1]).schema
    stream = spark.readStream.schema(schema).parquet(str(tmp_path))
    with pytest.raises(RuleError, match="cannot keep state per 'k'.*U1"):
        detect_stream(stream, SLICED_RULES, partition_by="k", watermark="5 seconds")
    with pytest.raises(EventError, match="needs a streaming DataFrame"):
        detect_stream(spark.createDataFrame(events), KEYED_RULES, partition_by="k", watermark="5 seconds")
    with pytest.raises(EventError, match="'id' column"):
        detect_stream(stream.drop("id"), KEYED_RULES, partition_by="k", watermark="5 seconds")
    consuming = "define K(k: int) from C(k=$k) and each B(k=$k) within 5 s from C where k=C.k consuming B"
    with pytest.raises(RuleError, match="consuming"):
        detect_stream(stream, consuming, partition_by="k", watermark="5 seconds")
    # a window-less predicate could read any earlier event: a stream would have to keep them all
    with pytest.raises(RuleError, match="without a window"):
        detect_stream(stream, [without_windows(r) for r in cep_gpu.parse_rules(TIED)], partition_by="k",
                      watermark="5 seconds")
