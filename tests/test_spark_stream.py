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


# -- exactness with late events within the watermark, and ties split across micro-batches ---------

# every rule tied to k: AND over a composite type (its terminator held at one timestamp), a leading
# NOT before a composite, a trailing NOT, first/last with an aggregate, a greedy Kleene set
LATE_RULES = """
define P(k: int, x: int)
pattern AND(A a, B b) where a.k = b.k within 3 s
return k := a.k, x := a.x

define Q(k: int)
pattern AND(P p, C c) where p.k = c.k within 2 s
return k := c.k

define N(k: int)
pattern SEQ(A a, B b, NOT(D d)) where a.k = b.k and d.k = b.k within 4 s
return k := b.k

define L(k: int)
pattern SEQ(NOT(D d), N n, C c) where n.k = c.k and d.k = c.k within 3 s
return k := c.k

define T(k: int, m: float)
from C(k=$k) and last B(k=$k) within 5 s from C and first A(k=$k) within 2 s from B
  and m=Avg(A(k=$k) within 6 s from C).v
where k=C.k and m=m

define K(k: int, n: int)
pattern SEQ(A a, KL(B b), C c) where a.k = c.k and b.k = a.k within 4 s
select greedy
return k := a.k, n := count(b)
"""


def late_events(seed: int, n: int = 160, span: int = 60) -> pd.DataFrame:
    """Float-second times with ties, ids not in time order, two keys, a far tick at the end."""
    rng = np.random.default_rng(seed)
    ev = pd.DataFrame({
        "type": rng.choice(list("AABBCCD"), n).astype(object),
        "ts": EPOCH + np.sort(rng.integers(0, span, n)).astype(np.float64),
        "id": (rng.permutation(n) * 5 + 2).astype(np.int64),
        "k": rng.integers(0, 2, n).astype(np.int64),
        "x": rng.integers(0, 3, n).astype(np.int64),
        "v": rng.random(n).round(2),
    })
    tick = pd.DataFrame({"type": ["Tick"], "ts": [EPOCH + 10_000.0], "id": [10**6], "k": [0], "x": [0], "v": [0.0]})
    return pd.concat([ev, tick], ignore_index=True)


def spark_like_batches(spark, events, rules, batches, delay_s):  # noqa: F811
    """Run ``_step`` over micro-batches of ``events`` (row positions per batch, in arrival order)
    as Spark does: each batch sees the watermark of the batches before it (newest time minus
    ``delay_s``), rows at or before the previous batch's watermark are dropped as late, and a key
    without data times out once the watermark passes its timeout. Returns (rows kept, outputs)."""
    job, states, outputs, _ = _local_step(spark, events, rules)
    cols = ["type", "ts", "id", *job.attributes]
    schema = T.StructType([f for f in spark.createDataFrame(events.iloc[:1]).schema.fields if f.name in cols])
    step = functools.partial(
        st._step, job=job, event_cols=cols, event_schema=to_arrow_schema(schema),
        out_schema=to_arrow_schema(job.engine_struct),
    )
    kept, wm_prev, wm, newest = [], 0, 0, None
    for idx in [*batches, np.array([], int)]:  # the last: the no-data batch after the watermark moved
        batch = events.iloc[idx]
        batch = batch[np.floor(batch.ts.to_numpy() * 1e6) > wm_prev * 1000]  # late rows go
        kept.append(batch)
        for state in states.values():
            state.watermark_ms = wm
        for k, part in batch.groupby("k"):
            state = states.setdefault(k, FakeState())
            outputs.extend(step((k,), iter([part]), state))
        for k, state in states.items():
            if state.exists and state.timeout is not None and state.timeout < wm and k not in set(batch.k):
                state.hasTimedOut = True
                outputs.extend(step((k,), iter([]), state))
                state.hasTimedOut = False
        if len(batch):
            newest = max(newest or -np.inf, batch.ts.max())
        wm_prev, wm = wm, max(wm, int((newest - delay_s) * 1000)) if newest is not None else wm
    return pd.concat(kept), outputs


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("late", [False, True])
def test_state_machine_exact_with_late_events_and_split_ties(spark, seed, late):  # noqa: F811
    """Events up to 8 s late within a 10 s watermark (and in order, with micro-batches cutting
    through events of one timestamp) give batch detect's rows on the events Spark keeps. Was: a
    late terminator before the key's newest event minus the horizon was never output, and a late
    negated event did not cancel a composite event already output."""
    events = late_events(seed)
    rng = np.random.default_rng(100 + seed)
    order = np.arange(len(events) - 1)
    if late:  # a third of the events arrive up to 8 s of event time later than their time
        delay = rng.uniform(0, 8, len(order)) * (rng.random(len(order)) < 0.3)
        order = np.argsort(events.ts.to_numpy()[:-1] + delay, kind="stable")
    cuts = np.sort(rng.choice(np.arange(1, len(order)), int(rng.integers(3, 20)), replace=False))
    batches = [*np.split(order, cuts), np.array([len(events) - 1])]  # the tick last
    kept, outputs = spark_like_batches(spark, events, LATE_RULES, batches, delay_s=10)
    assert len(kept) == len(events)  # nothing was later than the watermark
    want = rows(cep_gpu.detect(events, LATE_RULES, backend=BACKEND))
    assert {r[0] for r in want} == {"P", "Q", "N", "L", "T", "K"}
    got = rows(pd.concat(outputs, ignore_index=True))
    assert len(got) == len(set(got)), "a composite event was output twice"
    assert got == want


def test_late_events_within_the_watermark_end_to_end(spark, tmp_path):  # noqa: F811
    """Structured Streaming, one file per micro-batch. Key 1 sees B@100 and C@104 (R@104), then
    B@130; then, late but within the 60 s watermark, C@110 (a new R@110, binding B@100) and D@102
    (which cancels R@104). Was: R@110 never output (before the key's newest event minus the
    horizon) and R@104 output though a late D cancels it; Spark keeps both late rows."""
    rule = ("define R(k: int) from C(k=$k) and each B(k=$k) within 20 s from C "
            "and not D(k=$k) within 5 s from C where k=C.k")
    files = [
        [("B", 100, 1, 1), ("C", 104, 2, 1), ("B", 101, 3, 2)],
        [("B", 130, 4, 1)],
        [("C", 110, 6, 1), ("D", 102, 5, 1), ("C", 111, 7, 2)],
        [("Tick", 1000, 8, 0)],  # moves the watermark past everything: the key's rest comes out
    ]

    def frame(rows_):
        df = pd.DataFrame(rows_, columns=["type", "ts", "id", "k"])
        df["ts"] = df["ts"].astype(np.float64) + EPOCH
        return df

    src, out_dir, ckpt = tmp_path / "src", tmp_path / "out", tmp_path / "ckpt"
    src.mkdir()
    for i, f in enumerate(files):
        frame(f).to_parquet(src / f"part-{i:03d}.parquet")
    events = pd.concat([frame(f) for f in files], ignore_index=True)
    want = rows(cep_gpu.detect(events, rule, backend=BACKEND))
    assert [(r[0], r[1] - EPOCH) for r in want] == [("R", 110.0), ("R", 111.0)]
    stream = spark.readStream.schema(spark.createDataFrame(events).schema) \
        .option("maxFilesPerTrigger", 1).parquet(str(src))
    out = detect_stream(stream, rule, partition_by="k", watermark="60 seconds", backend=BACKEND)
    query = (out.writeStream.format("parquet").option("path", str(out_dir))
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    assert rows(spark.read.parquet(str(out_dir)).toPandas()) == want
