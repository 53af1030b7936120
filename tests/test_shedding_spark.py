"""DARLING on Spark: ``detect_stream(..., shedding=...)`` in a real Structured Streaming query.

Below the latency constraint nothing is dropped, so the stream finds exactly batch ``detect``'s
composite events; above it, the shedder drops input events, so (for a rule without negation) the
stream finds a strict subset of them and never a composite event batch would not find.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest_spark import rows, spark  # noqa: F401  (the shared session fixture)
from test_shedding import RULE, stream

import cep_gpu
from cep_gpu.shedding import CostModel, Shedder

pytestmark = pytest.mark.spark

from cep_gpu.spark_udfs import detect_stream  # noqa: E402

EPOCH = 1_700_000_000  # seconds (Spark's first watermark is the epoch)


def stream_events(n: int = 600) -> pd.DataFrame:
    ev = stream(n, 4)
    ev["ts"] = ev["ts"] + EPOCH
    ev["id"] = np.arange(n, dtype=np.int64)
    # a far later event of a type no rule reads: the watermark passes every key's last events
    tick = pd.DataFrame({"type": ["Tick"], "ts": [EPOCH + 10_000.0], "price": [0.0], "id": [n]})
    return pd.concat([ev, tick], ignore_index=True)


def run_stream(spark, tmp_path, events: pd.DataFrame, shedder: Shedder) -> list:  # noqa: F811
    src, out_dir, ckpt = tmp_path / "src", tmp_path / "out", tmp_path / "ckpt"
    src.mkdir()
    for i, idx in enumerate(np.array_split(np.arange(len(events)), 3)):
        events.iloc[idx].to_parquet(src / f"part-{i:03d}.parquet")
    schema = spark.createDataFrame(events.iloc[:1]).schema
    source = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(src))
    out = detect_stream(source, RULE, partition_by=None, watermark="5 seconds", backend="cpu",
                        shedding=shedder)
    query = (out.writeStream.format("parquet").option("path", str(out_dir))
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    return rows(spark.read.parquet(str(out_dir)).toPandas())


def batch_rows(events: pd.DataFrame) -> list:
    return rows(cep_gpu.detect(events, RULE, backend="cpu"))


def test_no_overload_drops_nothing_on_spark(spark, tmp_path):  # noqa: F811
    events = stream_events()
    shedder = Shedder(1e6, policy="darling").fit(RULE, stream(300, 2),
                                                 costs=CostModel(default=1e-6, window=1e-7))
    want = batch_rows(events)
    assert want  # the rule finds something to keep
    assert run_stream(spark, tmp_path, events, shedder) == want


def test_overload_sheds_on_spark_and_only_loses_matches(spark, tmp_path):  # noqa: F811
    events = stream_events()
    shedder = Shedder(0.02, policy="darling").fit(RULE, stream(300, 2),
                                                  costs=CostModel(default=1e-3, window=1e-4))
    want = batch_rows(events)
    got = run_stream(spark, tmp_path, events, shedder)
    assert len(got) == len(set(got))
    assert set(got) < set(want)  # events were dropped: fewer matches, none that batch lacks
