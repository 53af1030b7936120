"""``detect_stream``: Structured Streaming with per-key engine state (``applyInPandasWithState``).

State per key: the buffered events the engine may still need (an Arrow IPC blob), ``emitted`` (every
composite event with a timestamp below it has been output) and ``tmax`` (the newest event time
of the key). Each micro-batch runs the engine over buffer + new events and outputs the
composite events that can no longer change: terminators before ``watermark - horizon``. Spark
drops rows at or before the watermark as late, so every row still to come is after it and can
change only composite events with terminators at ``row - horizon`` or later. Holding back only
the key's newest events (``tmax - horizon``) would lose late rows within the watermark. A key
without new data is woken by an event-time timeout when its next pending composite event becomes
final; once the watermark passes ``tmax + lookback`` the key's state is dropped. Events older
than ``emitted - lookback`` are expired from the buffer every batch.

The output is exactly the batch result on the rows Spark keeps, in any arrival order within the
watermark; the sink and the state commit together with the checkpoint, so a query restarted from
its checkpoint neither repeats nor loses a composite event.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.state import GroupStateTimeout

from cep_gpu.detect import detect
from cep_gpu.errors import ArgumentError, EventError, RuleError
from cep_gpu.events import TimeFormat

from .batch import SparkJob, plan_job
from .checks import checked_rows, require_dataframe, watermark_delay
from .rapids import use_task_gpu
from .task import (
    conform,
    engine_input,
    from_ipc,
    task_error,
    task_events,
    to_ipc,
    under_drivers_limit,
)

KEY = "__cep_key"
EVENT_TIME = "__cep_evt"
STATE = T.StructType([
    T.StructField("events", T.BinaryType()),
    T.StructField("emitted", T.LongType()),
    T.StructField("tmax", T.LongType()),
])


def detect_stream(
    stream_df: DataFrame,
    rules,
    partition_by: str | None,
    watermark,
    backend: str = "auto",
    time_unit: str = "s",
    shedding=None,
) -> DataFrame:
    """Composite events of a streaming DataFrame, as a streaming DataFrame (append mode).

    ``partition_by``: a column every predicate, negation and aggregate is tied to (as for keyed
    ``detect_spark``); ``None`` keeps one state for the whole stream. ``watermark``: how late an
    event may arrive: a Spark interval string such as ``"1 minute"`` or ``"1 hour 30 minutes"``,
    a number in ``time_unit``, or a ``datetime.timedelta`` / ``pandas.Timedelta`` (as
    ``Engine(allowed_lateness=...)`` takes it); it decides when a key's last composite events are
    final and when its state is dropped. A negative delay, another type, or a string Spark cannot
    read as an interval is an :class:`~cep_gpu.errors.ArgumentError` before anything runs. The
    input needs an ``id`` column (row positions mean nothing in a stream); a bad row (null
    ``type``, null / NaN / unrepresentable ``ts``, null or negative ``id``) fails the query with
    ``detect``'s message naming the event's id (docs/spark.md, "Bad input"). ``shedding``: a fitted
    :class:`cep_gpu.shedding.Shedder`, applied to each key's micro-batch (docs/shedding.md, Spark).
    """
    from cep_gpu.shedding.spark import check_shedder

    require_dataframe(stream_df, "detect_stream")
    if not stream_df.isStreaming:
        raise EventError("detect_stream needs a streaming DataFrame; use detect_spark for batch input")
    delay = watermark_delay(watermark, time_unit)  # Spark's own errors name its own argument
    shedding = check_shedder(shedding)
    if "id" not in stream_df.columns:
        raise EventError("streaming events need an 'id' column (integers >= 0, unique)")
    job = plan_job(stream_df, rules, partition_by, backend, time_unit, num_slices=1)
    if partition_by is not None and job.plan.mode != "keyed":
        raise RuleError(
            f"detect_stream cannot keep state per {partition_by!r}: {job.plan.reason}; "
            "pass partition_by=None to keep one state for the whole stream"
        )
    if job.plan.unbounded:
        raise RuleError(
            "a rule has a predicate without a window: every composite event could read any "
            "earlier event, so a stream would have to keep all of them; use detect_spark"
        )
    consuming = [r.name for r in job.rules if r.consuming]
    if consuming:
        raise RuleError(
            f"rule(s) {', '.join(map(repr, consuming))} use 'consuming', which depends on every "
            "earlier match, while a stream keeps only the events within the rules' lookback; "
            "run them with detect_spark or the streaming cep_gpu.Engine"
        )
    spec = job.time
    cols = [F.col("type"), spec.to_engine(F.col("ts")).alias("ts"), F.col("id").cast("long").alias("id")]
    cols += [F.col(f"`{a}`") for a in job.attributes]
    key = F.col(f"`{partition_by}`") if partition_by else F.lit(0)
    # bad rows (null type, null / NaN / unrepresentable ts, null or negative id) fail the query
    # naming the event, before the arithmetic on ts below (Spark's CAST_OVERFLOW for a NaN)
    events = checked_rows(stream_df, spec, "stream").select(*cols, key.alias(KEY))
    nanos = spec.nanos(F.col("ts"))
    events = events.withColumn(EVENT_TIME, F.timestamp_micros(F.floor(nanos / 1000).cast("long")))
    try:
        events = events.withWatermark(EVENT_TIME, delay)
    except Exception as err:  # a form watermark_delay let through: Spark's reason, as an ArgumentError
        raise ArgumentError(f"watermark {watermark!r}: {str(err).splitlines()[0]}") from None

    event_cols = ["type", "ts", "id", *job.attributes]
    event_struct = T.StructType([f for f in events.schema.fields if f.name in event_cols])
    out_struct = job.engine_struct
    fn = under_drivers_limit(functools.partial(
        _step,
        job=job,
        event_cols=event_cols,
        event_schema=to_arrow_schema(event_struct),
        out_schema=to_arrow_schema(out_struct),
        shedding=shedding,
    ))
    out = events.groupBy(KEY).applyInPandasWithState(
        fn, out_struct, STATE, "append", GroupStateTimeout.EventTimeTimeout
    )
    return out.withColumn("ts", spec.from_engine(F.col("ts")))


# -- the state machine (runs in the Python workers) -----------------------------------------------


def _to_ns(values: np.ndarray, unit: str) -> np.ndarray:
    dtype = "float64" if values.dtype.kind == "f" else "int64"
    return TimeFormat("numeric", unit=unit, dtype=dtype).to_ns(values)


def _arrow_events(pdf: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    # Spark hands int columns with nulls as floats: let Arrow cast them back by the fixed schema
    arrays = [pa.array(pdf[f.name], type=f.type, from_pandas=True) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


#: what pandas says when PySpark's worker concatenates the frames a state function yields with the
#: all-null rows it pads them with (``applyInPandasWithState``): once per key and batch otherwise
_PADDING_WARNING = "The behavior of DataFrame concatenation with empty or all-NA entries is deprecated"


def quiet_state_padding() -> None:
    """Silence, in this (worker) process, pandas' FutureWarning about PySpark's own padding rows.

    The concatenation is PySpark's (``worker.py``), after our function returns, so a filter scoped
    to our code cannot reach it; this one is narrow (that message, FutureWarning only).
    """
    if not any(f[0] == "ignore" and f[1] is not None and f[1].pattern == _PADDING_WARNING for f in warnings.filters):
        warnings.filterwarnings("ignore", message=_PADDING_WARNING, category=FutureWarning)


def _step(key, pdfs: Iterator[pd.DataFrame], state, *, job: SparkJob, event_cols, event_schema, out_schema,
          shedding=None):
    """One key, one micro-batch (or one timeout): the composite events that became final."""
    quiet_state_padding()
    unit = job.time.engine_unit
    lookback, horizon = job.plan.lookback_ns, job.plan.horizon_ns
    if state.exists:
        blob, emitted, tmax = state.get
        buffer = from_ipc(blob)
    else:
        buffer, emitted, tmax = event_schema.empty_table(), None, None
    wm_ns = max(state.getCurrentWatermarkMs(), 0) * 1_000_000

    if not state.hasTimedOut:
        parts = [_arrow_events(p[event_cols], event_schema) for p in pdfs if len(p)]
        if shedding is not None and parts:  # DARLING per key and micro-batch (docs/shedding.md)
            from cep_gpu.shedding.spark import shed_parts

            parts = [p for p in shed_parts(parts, buffer, shedding, unit) if p.num_rows]
        if parts:
            buffer = pa.concat_tables([buffer, *parts])
            newest = int(_to_ns(np.concatenate([p.column("ts").to_numpy() for p in parts]), unit).max())
            tmax = newest if tmax is None else max(tmax, newest)
            if emitted is None:  # below every event of the key: those here, and late ones to come
                emitted = min(int(_to_ns(buffer.column("ts").to_numpy(), unit).min()), wm_ns + 1)

    if buffer.num_rows == 0 or tmax is None:
        if state.exists:
            state.remove()
        return

    # final: the terminators no event still to come can change. Later micro-batches bring only
    # events after the watermark (Spark drops the others as late), and an event at X changes
    # only composite events with terminators at X - horizon or later. Terminators up to the
    # key's newest event alone would miss late events within the watermark: a late terminator
    # before `emitted` would never be output, a late negated event not cancel its match.
    bound = min(tmax + 1, wm_ns - horizon)
    out = _final_events(buffer, job, unit, emitted, bound) if bound > emitted else None
    emitted = max(emitted, bound)

    # expire what no pending terminator can read: pending ones are the buffered ones at or after
    # `emitted`, and future ones come at or after the watermark
    pending = emitted if emitted <= tmax else max(emitted, wm_ns)
    floor = pending - lookback
    ts_ns = _to_ns(buffer.column("ts").to_numpy(), unit)
    buffer = buffer.filter(pa.array(ts_ns >= floor))
    if buffer.num_rows == 0:
        state.remove()
    else:
        state.update((to_ipc(buffer), int(emitted), int(tmax)))
        # come back when the watermark makes the next pending terminator final (each pending
        # composite event is at the time of a buffered event), or, with none left, when no
        # event to come can read the buffer any more (then the state goes)
        wm_ms = max(state.getCurrentWatermarkMs(), 0)
        kept_ns = ts_ns[ts_ns >= floor]
        if emitted <= tmax:
            due = int(kept_ns[kept_ns >= emitted].min()) + horizon + 1
        else:
            due = tmax + lookback + 1
        state.setTimeoutTimestamp(max(due // 1_000_000 + 1, wm_ms + 1))
    if out is not None and out.num_rows:
        yield out.to_pandas()


def _final_events(buffer: pa.Table, job: SparkJob, unit: str, lo: int, hi: int) -> pa.Table:
    """The composite events over ``buffer`` with terminator time in ``[lo, hi)`` (ns)."""
    events = task_events(engine_input(buffer), job.backend, unit, use_task_gpu())
    try:
        out = detect(events, list(job.rules), backend=job.backend, time_unit=unit, output="arrow")
    except EventError as err:  # a row of the key's buffer is no row of the input
        raise task_error(err) from None
    ts_ns = _to_ns(out.column("ts").to_numpy(), unit)
    keep = (ts_ns >= lo) & (ts_ns < hi)
    return conform(out.filter(pa.array(keep)), to_arrow_schema(job.engine_struct))
