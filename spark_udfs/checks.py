"""Bad input on the Spark path: what the driver refuses before any job, and the per-row checks
that run in the JVM (or, for Parquet files the tasks read themselves, in the task) before the
engine sees an event.

Driver (schema only, no job): a DataFrame at all, column names Spark can tell apart, attribute
columns of types the engine reads. Rows: a null ``type``, a null, NaN, infinite or
unrepresentable ``ts``, a null or negative ``id``. Each row check names the row as ``detect``
would: ``at row R`` (the row's position in ``df.collect()``, known when the events have no ``id``
column and the driver numbered them), else ``at row R of input partition P`` (``R`` counts from 0
within partition ``P``: the numbering of ``df.rdd.glom()``, or of ``F.spark_partition_id()`` and
the rows' order in it), or, in a stream, the event's id. The wording is ``detect``'s
(:mod:`cep_gpu.events.checks`); a row check that fails in the JVM raises Spark's
``USER_RAISED_EXCEPTION`` with the message ``cep_gpu.errors.EventError: <message>`` (``cep-gpu
spark`` prints the message alone).
"""

from __future__ import annotations

import datetime
import math
import numbers
import re
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cep_gpu.errors import ArgumentError, EventError
from cep_gpu.events import TS_MAX_NS, UNIT_NS, ts_range_text
from cep_gpu.events.checks import DUPLICATE_ID, ROW_MESSAGES, check_unique_columns

#: internal column: ``monotonically_increasing_id()`` of the input row (partition and position)
POS = "__cep_pos"

#: the row checks, in the order a row is checked (the templates ``detect`` words the same rows
#: with: ``{where}`` names the row, ``{value}`` the value)
MESSAGES = ROW_MESSAGES

#: what a failing JVM check raises, so that the message reads as the error ``detect`` raises
PREFIX = "cep_gpu.errors.EventError: "


def require_dataframe(df: object, where: str) -> DataFrame:
    """``df`` if it is a Spark DataFrame, else an :class:`ArgumentError` naming ``where``."""
    if not isinstance(df, DataFrame):
        hint = (
            " (spark.createDataFrame(frame) makes one; cep_gpu.detect takes the pandas frame itself)"
            if type(df).__module__.startswith("pandas")
            else ""
        )
        raise ArgumentError(
            f"{where}: events must be a Spark DataFrame, got {type(df).__name__}{hint}"
        )
    return df


def check_column_names(df: DataFrame, used: Sequence[str] = ()) -> None:
    """Refuse column names Spark cannot tell apart: two columns of one name (as ``detect``
    refuses them), or, where ``spark.sql.caseSensitive`` is off (Spark's default), a column the
    engine reads (``used``) whose name differs from another's only in case."""
    names = list(df.columns)
    check_unique_columns(names)
    try:
        sensitive = (
            str(df.sparkSession.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
        )
    except Exception:  # a session without the setting: Spark's default
        sensitive = False
    if sensitive:
        return
    for name in used:
        same = [c for c in names if c.lower() == name.lower()]
        if len(same) > 1:
            raise EventError(
                f"events have columns {same[0]!r} and {same[1]!r}, which Spark does not tell apart "
                f"(spark.sql.caseSensitive is false): rename one (columns: {names})"
            )


_ATTRIBUTE_TYPES = (
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.FloatType,
    T.DoubleType,
    T.StringType,
    T.BooleanType,
    T.NullType,
)


def check_attribute_types(schema: T.StructType, names: Sequence[str]) -> None:
    """Refuse attribute columns the engine cannot read (``detect`` refuses their values), on the
    driver: decimals (``detect`` refuses ``Decimal`` values too; cast them to double), dates and
    timestamps (only ``ts`` may be a time), binary, nested and interval types."""
    for name in names:
        t = schema[name].dataType
        if isinstance(t, _ATTRIBUTE_TYPES):
            continue
        if isinstance(t, T.DecimalType):
            hint = (
                f"; cast it to double first, e.g. df.withColumn({name!r}, F.col({name!r}).cast('double')) "
                "(detect refuses Decimal values too)"
            )
        elif isinstance(t, (T.DateType, T.TimestampType, T.TimestampNTZType)):
            hint = "; only 'ts' may be a time"
        else:
            hint = ""
        raise EventError(
            f"attribute column {name!r} has type {t.simpleString()}, which the engine cannot read: "
            f"attributes are strings, integers, floats or booleans{hint}"
        )


# -- ids that repeat anywhere in the input -------------------------------------------------------------


def check_unique_ids(df: DataFrame) -> None:
    """Refuse an ``id`` that two rows of ``df`` share, as ``detect`` refuses it, wherever the two
    rows are (one input partition, or two: the tasks would each see only their own group or
    slice, and a repeat across them went through).

    One Spark job on the driver, all in the JVM: ``count(id)`` against ``countDistinct(id)``
    (Spark deduplicates ids per task, then shuffles the distinct ones by value: about 8 bytes per
    distinct id; Parquet input reads only the ``id`` column). Only when they differ does a second
    job find the id ``detect`` names (the first row, in ``df.collect()`` order, whose id an earlier
    row has) and the two rows, in their input partitions. Null ids are not counted (the row
    checks refuse them). No ``id`` column: ids are row positions, unique by construction."""
    if "id" not in df.columns:
        return
    ids = df.select(F.col("id"))
    total, distinct = ids.agg(F.count("id"), F.countDistinct("id")).first()
    if total == distinct:
        return
    from pyspark.sql import Window

    ranked = (
        ids.withColumn(POS, F.monotonically_increasing_id())
        .where(F.col("id").isNotNull())
        .withColumn("__cep_n", F.row_number().over(Window.partitionBy("id").orderBy(POS)))
        .where(F.col("__cep_n") <= 2)
    )
    first = (
        ranked.groupBy("id")
        .agg(F.min(POS).alias("a"), F.max(POS).alias("b"), F.count(F.lit(1)).alias("n"))
        .where(F.col("n") == 2)
        .orderBy("b")
        .first()
    )
    if first is None:  # the input changed between the two jobs (a non-deterministic source)
        raise EventError(f"column 'id' has duplicate ids ({total} ids, {distinct} distinct)")

    def row(pos: int) -> str:
        return f"at row {pos - ((pos >> 33) << 33)} of input partition {pos >> 33}"

    raise EventError(
        f"{DUPLICATE_ID.format(value=first['id'])} ({row(first['a'])} and {row(first['b'])}; "
        f"{total - distinct} row(s) in all repeat an earlier row's id): ids must be unique"
    )


# -- per-row checks in the JVM -------------------------------------------------------------------------


def _jvm_message(key: str, **parts) -> Column:
    """``MESSAGES[key]`` as a string Column: ``parts`` are Columns or plain strings."""
    pieces = []
    for i, text in enumerate(re.split(r"\{(\w+)\}", PREFIX + MESSAGES[key])):
        if i % 2 == 0:
            if text:
                pieces.append(F.lit(text))
        else:
            part = parts[text]
            pieces.append(
                F.lit(part)
                if isinstance(part, str)
                else F.coalesce(part.cast("string"), F.lit("null"))
            )
    return F.concat(*pieces)


def _fail(key: str, **parts) -> Column:
    return F.raise_error(_jvm_message(key, **parts))


def with_positions(df: DataFrame) -> DataFrame:
    """``df`` with :data:`POS`, so that a failing row check can name the row in its partition.

    A column of its own (a projection Spark does not merge into the checks): the id counts the
    rows it is evaluated on, so it must be evaluated for every row, not only in a failing branch."""
    return df.withColumn(POS, F.monotonically_increasing_id())


def checked_rows(df: DataFrame, spec, rows: str) -> DataFrame:
    """``df`` (with ``type``, ``ts`` as given, ``id``) filtered through the row checks, which
    raise on the first bad row they meet (before the engine, and before any arithmetic on
    ``ts`` that Spark would fail on with its own error: a NaN cast to a long is CAST_OVERFLOW).

    ``rows`` says how a row is named: ``"ids"`` (``id`` is the row's position in
    ``df.collect()``, made by the driver), ``"partitions"`` (``df`` has :data:`POS`, from
    :func:`with_positions`) or ``"stream"`` (the event's id; a stream's rows have no position).
    Every row is checked, whatever its type: ``detect`` refuses a bad row of a type no rule reads
    too. The check is a filter that keeps every row, so Spark keeps it below the projections.
    """
    ts = F.col("ts")
    if rows == "ids":
        where = where_id = F.concat(F.lit("at row "), F.col("id").cast("string"))
    elif rows == "partitions":
        pid = F.shiftright(F.col(POS), 33)
        where = where_id = F.concat(
            F.lit("at row "),
            (F.col(POS) - F.shiftleft(pid, 33)).cast("string"),
            F.lit(" of input partition "),
            pid.cast("string"),
        )
    else:
        where = F.concat(F.lit("in the event with id "), F.col("id").cast("string"))
        where_id = F.concat(
            F.lit("in an event of type "),
            F.coalesce(F.col("type"), F.lit("null")),
            F.lit(" at ts "),
            F.coalesce(ts.cast("string"), F.lit("null")),
        )
    engine = spec.to_engine(ts)
    scale = UNIT_NS[spec.engine_unit]
    if spec.kind == "fractional":
        finite = ~F.isnan(engine) & (F.abs(engine) < F.lit(float("inf")))
        ns = engine * F.lit(float(scale))
        in_range = (ns >= F.lit(-(2.0**63))) & (ns < F.lit(2.0**63))
    else:
        finite = F.lit(True)
        in_range = engine.between(F.lit(-(2**63 // scale)), F.lit(TS_MAX_NS // scale))
    range_text = ts_range_text(None if spec.kind == "timestamp" else spec.unit)
    check = (
        F.when(F.col("type").isNull(), _fail("type_null", where=where))
        .when(ts.isNull(), _fail("ts_null", where=where))
        .when(~finite, _fail("ts_not_finite", where=where, value=ts))
        .when(~in_range, _fail("ts_range", where=where, value=ts, range=range_text))
        .when(F.col("id").isNull(), _fail("id_null", where=where_id))
        .when(F.col("id") < 0, _fail("id_negative", where=where_id, value=F.col("id")))
        .otherwise(F.lit(True))
    )
    return df.where(check)


# -- the same checks on an Arrow table (tasks that read Parquet files themselves) ---------------------


def check_arrow_rows(table: pa.Table, kind: str, unit: str, where: Callable[[int], str]) -> None:
    """The row checks of :func:`checked_rows` on the Arrow table of raw rows a task read (``type``,
    ``ts`` as stored, ``id``): an :class:`EventError` for the first bad row, named by ``where(i)``
    (``i``: the row's index in ``table``). ``kind`` and ``unit``: the :class:`TimeSpec`'s ``kind``
    and the unit of numeric ``ts`` values."""
    n = table.num_rows
    if not n:
        return
    found: list[tuple[int, str, object]] = []

    def first(mask: np.ndarray, key: str, values=None) -> None:
        if mask.any():
            i = int(np.flatnonzero(mask)[0])
            found.append((i, key, None if values is None else values[i]))

    first(_nulls(table.column("type")), "type_null")
    ts = table.column("ts")
    first(_nulls(ts), "ts_null")
    valid = ~_nulls(ts)
    if pa.types.is_timestamp(ts.type):
        values = ts.cast(pa.timestamp("us", ts.type.tz)).cast(pa.int64()).fill_null(0).to_numpy()
        scale, shown = 1_000, _timestamp_text
    else:
        values = ts.fill_null(0).to_numpy()
        scale, shown = UNIT_NS[unit], None
    if values.dtype.kind == "f":
        values = values.astype(np.float64, copy=False)
        finite = np.isfinite(values)
        first(valid & ~finite, "ts_not_finite", values)
        with np.errstate(over="ignore", invalid="ignore"):
            ns = values * float(scale)
        first(valid & finite & ~((ns >= -(2.0**63)) & (ns < 2.0**63)), "ts_range", values)
    else:
        values = values.astype(np.int64, copy=False)
        first(
            valid & ((values > TS_MAX_NS // scale) | (values < -(2**63 // scale))),
            "ts_range",
            values,
        )
    if "id" in table.column_names:
        ids = table.column("id")
        first(_nulls(ids), "id_null")
        first(
            pc.fill_null(pc.less(ids, 0), False).to_numpy(zero_copy_only=False),
            "id_negative",
            ids.fill_null(0).to_numpy(),
        )
    if not found:
        return
    order = list(MESSAGES)
    i, key, value = min(found, key=lambda f: (f[0], order.index(f[1])))
    if value is not None and shown is not None and key.startswith("ts"):
        value = shown(value)
    elif isinstance(value, (float, np.floating)) and not np.isfinite(value):
        # as Spark shows them
        value = "NaN" if np.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    raise EventError(
        MESSAGES[key].format(
            where=where(i), value=value, range=ts_range_text(None if kind == "timestamp" else unit)
        )
    )


def _timestamp_text(us: int) -> str:
    """Microseconds since the epoch as Spark shows a timestamp (UTC): ``3000-01-01 00:00:00``."""
    text = str(np.datetime64(int(us), "us")).replace("T", " ")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _nulls(col: pa.ChunkedArray) -> np.ndarray:
    if col.null_count == 0:
        return np.zeros(len(col), bool)
    return col.is_null().to_numpy(zero_copy_only=False)


# -- detect_stream's watermark -------------------------------------------------------------------------

#: the units of Spark's interval strings (``withWatermark``), case-insensitive, an ``s`` allowed
_INTERVAL_US = {
    "year": 372 * 86_400_000_000,
    "month": 31 * 86_400_000_000,
    "week": 7 * 86_400_000_000,
    "day": 86_400_000_000,
    "hour": 3_600_000_000,
    "minute": 60_000_000,
    "second": 1_000_000,
    "millisecond": 1_000,
    "microsecond": 1,
}
_PAIR = re.compile(r"([+-]?)\s*(\d+(?:\.\d*)?|\.\d+)\s+([A-Za-z]+)")
_ACCEPTS = (
    "a Spark interval such as '30 seconds' or '1 hour 30 minutes', a number in time_unit, "
    "or a datetime.timedelta / pandas.Timedelta"
)


def watermark_delay(value, time_unit: str) -> str:
    """``detect_stream``'s ``watermark`` as the delay string ``withWatermark`` takes, checked on
    the driver: a Spark interval string (units year, month, week, day, hour, minute, second,
    millisecond, microsecond, optionally plural), a number in ``time_unit`` or a
    ``timedelta`` (as ``Engine(allowed_lateness=...)`` takes them). An :class:`ArgumentError` for
    any other type, a negative delay or an interval Spark cannot parse (an unknown unit, no unit)."""
    if isinstance(value, str):
        text = value.strip()
        body = re.sub(r"^interval\s+", "", text, flags=re.IGNORECASE)
        pairs = _PAIR.findall(body)
        if not text or not pairs or _PAIR.sub("", body).strip():
            if re.fullmatch(r"[+-]?\s*(\d+(\.\d*)?|\.\d+)", body):
                raise ArgumentError(
                    f"watermark {value!r} has no unit: write e.g. '{body} seconds', "
                    f"or pass the number itself (in time_unit={time_unit!r})"
                )
            raise ArgumentError(f"watermark {value!r} is not a delay: use {_ACCEPTS}")
        total = 0.0
        for sign, number, unit in pairs:
            key = unit.lower()
            key = key[:-1] if key.endswith("s") and key[:-1] in _INTERVAL_US else key
            if key not in _INTERVAL_US:
                raise ArgumentError(
                    f"watermark {value!r}: unknown unit {unit!r}; Spark's intervals take "
                    f"{', '.join(_INTERVAL_US)} (a plural too), e.g. '{number} seconds'"
                )
            total += (-1 if sign == "-" else 1) * float(number) * _INTERVAL_US[key]
        if total < 0:
            raise ArgumentError(f"watermark must not be negative, got {value!r}")
        return text
    if isinstance(value, (datetime.timedelta, np.timedelta64)):  # (NumPy's are integers too)
        import pandas as pd

        if _is_nat(value):
            raise ArgumentError(f"watermark must be a delay: {_ACCEPTS}; got {value!r}")
        ns = int(pd.Timedelta(value).value)
    elif (
        isinstance(value, numbers.Real)
        and not isinstance(value, (bool, np.bool_))
        and math.isfinite(value)
    ):
        if not isinstance(time_unit, str) or time_unit not in UNIT_NS:
            raise EventError(f"unknown time_unit {time_unit!r}; use one of {sorted(UNIT_NS)}")
        ns = round(float(value) * UNIT_NS[time_unit])
    else:
        raise ArgumentError(f"watermark must be a delay: {_ACCEPTS}; got {value!r}")
    if ns < 0:
        raise ArgumentError(f"watermark must not be negative, got {value!r}")
    return f"{-(-ns // 1000)} microseconds"  # event time is in microseconds: round up


def _is_nat(value) -> bool:
    return isinstance(value, np.timedelta64) and bool(np.isnat(value))
