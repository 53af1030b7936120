"""Checks of input events shared by the pandas and the Arrow ingestion: required and unique
columns, nulls, ids, and timestamps that must fit int64 nanoseconds (errors name the first bad row)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from ..errors import ArgumentError, CepError, EventError
from .values import UNIT_NS, TimeFormat

#: Timestamps are int64 nanoseconds: the representable instants, in ns.
TS_MIN_NS, TS_MAX_NS = -(2**63), 2**63 - 1


def require_columns(names: list[str], required: Sequence[str] = ("type", "ts"), *, where: str = "",
                    error: type[CepError] = EventError) -> None:
    """Raise ``error`` naming the first of the ``required`` columns missing from ``names``;
    ``where`` (the call that was given the events) starts the message."""
    for col in required:
        if col not in names:
            raise error(f"{where + ': ' if where else ''}events have no {col!r} column (columns: {names})")


def require_frame(events: object, where: str, required: Sequence[str] = ("type", "ts")) -> pd.DataFrame:
    """``events`` if it is a DataFrame with the ``required`` columns, else an :class:`ArgumentError`
    naming ``where``: the check of the functions that take events only as a pandas frame."""
    if not isinstance(events, pd.DataFrame):
        raise ArgumentError(f"{where}: events must be a pandas DataFrame, got {type(events).__name__}")
    require_columns(list(events.columns), required, where=where, error=ArgumentError)
    return events


def check_unique_columns(names: list[str]) -> None:
    if len(set(names)) != len(names):
        dup = next(c for c in names if names.count(c) > 1)
        raise EventError(f"events have more than one column named {dup!r} (columns: {names})")


#: the messages of a bad row (``{where}``: "at row R", ``{value}``: the value), in the order the
#: Spark path checks a row in the JVM (spark_udfs/checks.py), which words them the same way
ROW_MESSAGES = {
    "type_null": "column 'type' is null {where}",
    "ts_null": "column 'ts' is null {where}: every event needs a timestamp",
    "ts_not_finite": "column 'ts' is not finite ({value}) {where}: every event needs a timestamp",
    "ts_range": "column 'ts' {where} holds {value}, outside the representable range: {range}",
    "id_null": "column 'id' is null {where}",
    "id_negative": (
        "column 'id' is negative ({value}) {where}: ids must be >= 0 "
        "(negative ids are reserved for composite events)"
    ),
}


#: an id that two events share (``{value}``: the id); the Spark path words it the same way
DUPLICATE_ID = "column 'id' has duplicate id {value}"


def check_time_unit(time_unit: str) -> None:
    if time_unit not in UNIT_NS:
        raise EventError(f"unknown time_unit {time_unit!r}; use one of {sorted(UNIT_NS)}")


def null_error(name: str, isna: np.ndarray, what: str = "") -> EventError:
    row = int(np.flatnonzero(isna)[0])
    return EventError(f"column {name!r} is null at row {row}{what}")


def check_unsigned(what: str, name: str, values: np.ndarray) -> None:
    """Reject unsigned values above the int64 maximum (they would wrap to negative numbers)."""
    big = values > np.uint64(TS_MAX_NS)
    if big.any():
        row = int(np.flatnonzero(big)[0])
        raise EventError(
            f"{what} {name!r} holds {int(values[row])} at row {row}, above the int64 maximum {TS_MAX_NS}"
        )


def check_type_names(codes: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """``(codes, names)`` of a ``type`` column, or an error naming the first row whose type is
    the empty string: every event needs a type, whatever the input (a CSV file's empty field,
    Parquet, pandas, Arrow; one rule and one message for all of them)."""
    if "" in names:
        rows = np.flatnonzero(codes == names.index(""))
        if len(rows):
            raise EventError(f"column 'type' is empty at row {int(rows[0])}: every event needs a type")
    return codes, names


def check_ids(ids: np.ndarray) -> np.ndarray:
    """``ids`` (int64), or an error naming the first negative or repeated id."""
    n = len(ids)
    if n and ids.min() < 0:
        row = int(np.flatnonzero(ids < 0)[0])
        raise EventError(ROW_MESSAGES["id_negative"].format(value=ids[row], where=f"at row {row}"))
    if not (n < 2 or bool(np.all(ids[1:] > ids[:-1]))) and len(np.unique(ids)) != n:
        dup = pd.Series(ids)[pd.Series(ids).duplicated()].iloc[0]
        raise EventError(DUPLICATE_ID.format(value=int(dup)))
    return ids


def numeric_ts(values: np.ndarray, time_unit: str, dtype=None) -> tuple[TimeFormat, np.ndarray]:
    """Numeric timestamps (int64, uint64 or float64 in ``time_unit``) as int64 ns, range-checked;
    ``dtype``: the input's own (int8 .. uint64, float32, float64; default: ``values``'), which
    the output's ``ts`` gets back."""
    if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
        row = int(np.flatnonzero(~np.isfinite(values))[0])
        raise EventError(f"column 'ts' is not finite at row {row}")
    check_ts_range(values, time_unit)
    np_dtype = numeric_ts_dtype(values.dtype if dtype is None else dtype)
    fmt = TimeFormat("numeric", unit=time_unit, dtype=np_dtype)
    return fmt, fmt.to_ns(values.astype(np.int64, copy=False) if values.dtype.kind == "u" else values)


def numeric_ts_dtype(dtype) -> str:
    """The NumPy name of a numeric ``ts`` dtype (a pandas nullable or Arrow-backed one: its NumPy
    counterpart)."""
    dtype = np.dtype(getattr(dtype, "numpy_dtype", dtype))
    return dtype.name if dtype.kind in "iuf" else "float64"


def datetime_ts_dtype(values_dtype) -> str:
    """The NumPy name of a datetime ``ts`` dtype in a unit the output keeps (s, ms, us, ns; a
    coarser unit such as days reads as seconds, a finer one as ns)."""
    unit = np.datetime_data(np.dtype(values_dtype))[0] if values_dtype is not None else "ns"
    if unit not in ("s", "ms", "us", "ns"):
        unit = "ns" if unit in ("ps", "fs", "as") else "s"
    return f"datetime64[{unit}]"


def ts_range_text(unit: str | None) -> str:
    """The representable range of timestamps: numbers in ``unit``, or datetimes (``None``)."""
    if unit is None:
        lo, hi = pd.Timestamp(TS_MIN_NS + 1), pd.Timestamp(TS_MAX_NS)
        return f"datetimes from {lo:%Y-%m-%d %H:%M:%S} to {hi:%Y-%m-%d %H:%M:%S} UTC (int64 nanoseconds)"
    scale = UNIT_NS[unit]
    return f"{-(2**63 // scale)} to {TS_MAX_NS // scale} with time_unit={unit!r} (int64 nanoseconds)"


def _ts_range_error(row: int | str, value, unit: str | None) -> EventError:
    where = f"at row {row}" if isinstance(row, int) else row
    msg = ROW_MESSAGES["ts_range"].format(where=where, value=value, range=ts_range_text(unit))
    return EventError(msg + _finer_unit_hint(value, unit))


def _finer_unit_hint(value, unit: str | None) -> str:
    """A hint for numbers that fit a finer unit (epoch milli-, micro- or nanoseconds read in
    seconds, the common case): the coarsest such unit, or nothing."""
    if unit is None:
        return ""
    try:
        v = abs(float(value))
    except (TypeError, ValueError):
        return ""
    for finer in ("ms", "us", "ns"):
        if UNIT_NS[finer] < UNIT_NS[unit] and v * UNIT_NS[finer] < 2.0**63:
            return (f"; if these are numbers of {finer}, say so: time_unit={finer!r} "
                    f"(--time-unit {finer} on the command line)")
    return ""


def check_ts_range(values: np.ndarray, unit: str, where: str | None = None) -> None:
    """Reject timestamps (in ``unit``) whose nanoseconds do not fit in an int64, naming the first
    row (or ``where`` the values come from, when they are not rows)."""
    if not len(values):
        return
    scale = UNIT_NS[unit]
    if values.dtype.kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):
            ns = values * float(scale)
        # 2**63 is exact in float64; the largest float below it converts to int64 safely
        bad = ~((ns >= -(2.0**63)) & (ns < 2.0**63))
    elif values.dtype.kind == "u":
        bad = values > np.uint64(TS_MAX_NS // scale)
    else:
        bad = (values > TS_MAX_NS // scale) | (values < -(2**63 // scale))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise _ts_range_error(where or row, values[row], unit)


def datetime_ns(values: np.ndarray) -> np.ndarray:
    """datetime64 values of any unit as int64 ns; an error for instants outside that range."""
    unit, count = np.datetime_data(values.dtype)
    if unit == "ns":
        return values.view(np.int64) if values.dtype == np.dtype("datetime64[ns]") else values.astype(np.int64)
    ticks = values.astype(np.int64)
    scale = np.timedelta64(count, unit) // np.timedelta64(1, "ns")
    check_datetime_ticks(ticks, int(scale), ~np.isnat(values))
    return ticks * np.int64(scale)


def check_datetime_ticks(ticks: np.ndarray, scale: int, valid: np.ndarray | None = None) -> None:
    """Reject datetimes of ``scale`` ns per tick outside the int64 ns range, naming the first row."""
    if scale == 1 or not len(ticks):
        return
    bad = (ticks > TS_MAX_NS // scale) | (ticks < -(2**63 // scale))
    if valid is not None:
        bad &= valid
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        value = np.datetime64(int(ticks[row]) * scale // 1_000, "us")  # microseconds reach year 294247
        raise _ts_range_error(row, value, None)


def stream_time(
    stream: TimeFormat | None,
    fmt: TimeFormat,
    ts: np.ndarray,
    unreported: Callable[[], np.ndarray] | None = None,
) -> TimeFormat | None:
    """The time format of a stream (``stream``: its format so far, None before its first rows)
    after a publish of format ``fmt`` and timestamps ``ts`` (int64 ns), or an ``EventError``:
    the first publish with rows fixes the stream's kind and ``ts`` dtype (docs/api.md, "The
    dtype of ts"); a later one of another dtype must bring values the stream's dtype holds
    exactly, but float timestamps in an integer stream make it float64 from then on. Zones may
    differ (the first one's stays); naive and zoned datetimes do not mix.

    ``unreported`` gives the timestamps (int64 ns) of earlier events that a later output may
    still report as a composite event's ``ts`` (held matches, late-buffered events): when float
    timestamps widen an integer stream, each must be exact in float64, else an ``EventError``
    names the first that is not (an int64 nanosecond epoch beyond 2**53 would come back rounded)."""
    if not len(ts):
        return stream  # no timestamp to speak of: an empty publish leaves the stream open
    if stream is None:
        return fmt
    if fmt.kind != stream.kind:
        raise EventError(
            f"column 'ts' holds {fmt.kind} values, but earlier events had {stream.kind} "
            "timestamps: use one kind for the whole stream"
        )
    if fmt.kind == "datetime" and (fmt.tz is None) != (stream.tz is None):
        # (as pandas: a naive time has no place on a time zone's line, nor the reverse)
        now, then = (f"time-zone-aware ({fmt.tz})", "naive") if fmt.tz else ("naive", f"time-zone-aware ({stream.tz})")
        raise EventError(
            f"column 'ts' holds {now} datetimes, but earlier events had {then} ones: use one "
            "for the whole stream"
        )
    if fmt.dtype == stream.dtype:
        return stream
    if fmt.kind == "numeric" and fmt.numpy_dtype.kind == "f" and stream.numpy_dtype.kind in "iu":
        # int then float timestamps: report as float64 from then on, like a batch would
        wide = replace(stream, dtype="float64")
        held = np.asarray(unreported() if unreported is not None else (), dtype=np.int64)
        exact = wide.exact(held)
        if not exact.all():
            i = int(np.flatnonzero(~exact)[0])
            raise EventError(
                f"column 'ts' holds {fmt.from_ns(ts[:1])[0]} ({fmt.dtype}), which would widen the "
                f"stream's ts dtype from {stream.dtype} to float64, but an earlier event at "
                f"{stream.from_ns(held[i:i + 1])[0]} ({stream.dtype}) may still be reported (a "
                "held match or a late-buffered event) and float64 cannot hold that timestamp "
                f"exactly (it would read {float(wide.from_ns(held[i:i + 1])[0])!r}): publish ts as "
                f"{stream.dtype}, or start the stream with float64 timestamps"
            )
        return wide
    exact = stream.exact(ts)
    if not exact.all():
        i = int(np.flatnonzero(~exact)[0])
        raise EventError(
            f"column 'ts' holds {fmt.from_ns(ts[i:i + 1])[0]} ({fmt.dtype}), which the stream's "
            f"ts dtype {stream.dtype} cannot hold exactly: the first publish fixed the dtype of "
            f"the composite events' ts; publish ts as {stream.dtype}, or start the stream with a "
            "wider dtype"
        )
    return stream
