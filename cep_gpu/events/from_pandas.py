"""pandas DataFrame -> the columns of an :class:`~cep_gpu.events.EventTable` (type codes, int64 ns
timestamps, ids, attribute columns with strings dictionary-encoded)."""

from __future__ import annotations

import datetime
import warnings

import numpy as np
import pandas as pd

from ..errors import EventError
from .checks import (
    check_ids,
    check_type_names,
    check_unsigned,
    datetime_ns,
    datetime_ts_dtype,
    null_error,
    numeric_ts,
)
from .values import AttributeColumn, StringDictionary, TimeFormat


def pandas_types(tcol: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Type codes (in order of first appearance) and type names of a pandas ``type`` column."""
    isna = tcol.isna().to_numpy()
    if isna.any():
        raise null_error("type", isna)
    if isinstance(tcol.dtype, pd.CategoricalDtype) and _string_categories(tcol.dtype):
        type_codes, type_uniq = pd.factorize(tcol, sort=False)  # on the codes, no strings made
    else:
        type_codes, type_uniq = pd.factorize(tcol, sort=False)
        if len(type_uniq) and pd.api.types.infer_dtype(type_uniq, skipna=False) != "string":
            # event types are names: numbers are not silently turned into names (Spark refuses them too)
            bad = next(t for t in type_uniq if not isinstance(t, str))
            bad = bad.item() if isinstance(bad, np.generic) else bad
            row = int(np.flatnonzero(type_codes == list(type_uniq).index(bad))[0]) if len(tcol) else 0
            raise EventError(
                f"column 'type' must hold strings (event type names), got {bad!r} "
                f"({type(bad).__name__}) at row {row}; convert it first, e.g. df['type'].astype(str)"
            )
    return check_type_names(type_codes, [str(t) for t in type_uniq])


def pandas_ids(idcol: pd.Series) -> np.ndarray:
    isna = idcol.isna().to_numpy()
    if isna.any():
        raise null_error("id", isna)
    if not pd.api.types.is_integer_dtype(idcol.dtype):
        first = idcol.iloc[0] if len(idcol) else None
        first = first.item() if isinstance(first, np.generic) else first
        raise EventError(f"column 'id' must hold integers, got dtype {idcol.dtype} ({first!r} at row 0); "
                         "drop the column to number the events by row, or rename it to keep it as an attribute")
    if pd.api.types.is_unsigned_integer_dtype(idcol.dtype):
        check_unsigned("column", "id", idcol.to_numpy(dtype=np.uint64))
    return check_ids(idcol.to_numpy(dtype=np.int64))


def convert_ts(col: pd.Series, time_unit: str) -> tuple[TimeFormat, np.ndarray]:
    isna = col.isna().to_numpy()
    if isna.any():
        raise null_error("ts", isna, ": every event needs a timestamp")
    dtype = col.dtype
    if len(col) == 0 and pd.api.types.is_object_dtype(dtype):
        # no events, and so no type of their own (a header-only CSV): numbers in time_unit
        return numeric_ts(np.empty(0, np.float64), time_unit)
    if isinstance(dtype, pd.ArrowDtype):
        # pyarrow-backed: as pyarrow converts it to pandas (timestamps keep their unit and zone,
        # dates become datetime.date values), which is what the Arrow ingestion reads
        import pyarrow as pa

        return convert_ts(pa.chunked_array([pa.array(col.array)]).to_pandas(), time_unit)
    if pd.api.types.is_object_dtype(dtype) and _all_dates(col):
        # datetime.date values (an Arrow date column in pandas): datetimes at midnight, as the
        # Arrow ingestion and cep_gpu.io.read_table read dates
        # (output: datetime64[s], as the Arrow ingestion reads a date column)
        return TimeFormat("datetime", dtype="datetime64[s]"), datetime_ns(
            col.to_numpy(dtype=object).astype("datetime64[D]"))
    if isinstance(dtype, pd.DatetimeTZDtype):
        fmt = TimeFormat("datetime", dtype=datetime_ts_dtype(f"datetime64[{dtype.unit}]"), tz=str(dtype.tz))
        return fmt, datetime_ns(col.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy())
    if pd.api.types.is_datetime64_dtype(dtype):
        values = col.to_numpy()
        return TimeFormat("datetime", dtype=datetime_ts_dtype(values.dtype)), datetime_ns(values)
    if pd.api.types.is_bool_dtype(dtype) or not pd.api.types.is_numeric_dtype(dtype):
        raise ts_type_error(col)
    if pd.api.types.is_float_dtype(dtype):
        values = col.to_numpy(dtype=np.float64)
    elif pd.api.types.is_unsigned_integer_dtype(dtype):
        values = col.to_numpy(dtype=np.uint64)  # checked against the range before the cast
    else:
        values = col.to_numpy(dtype=np.int64)
    return numeric_ts(values, time_unit, dtype)


_TS_HINT = "use datetime64 or numbers in time_unit"


def _all_dates(col: pd.Series) -> bool:
    """Whether every value of an object column is a ``datetime.date`` and none a datetime (whose
    time of day would be lost; pandas' ``infer_dtype`` says "date" for a mix of both)."""
    distinct = pd.unique(col.to_numpy(dtype=object))
    return len(distinct) > 0 and all(
        isinstance(v, datetime.date) and not isinstance(v, datetime.datetime) for v in distinct)


def ts_type_error(col: pd.Series) -> EventError:
    """The error for a ``ts`` column of a type that is not a timestamp: the first row whose value
    is neither a number nor a datetime, and that value (one ``abc`` makes a CSV column text).

    Only on the error path; vectorised over the distinct values (a categorical's categories)."""
    dtype = col.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return EventError(f"column 'ts' holds booleans (e.g. {bool(col.iloc[0])} at row 0): {_TS_HINT}")
    if isinstance(dtype, pd.CategoricalDtype):
        codes, distinct = col.cat.codes.to_numpy(), np.asarray(dtype.categories, dtype=object)
    elif pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype):
        codes, distinct = pd.factorize(col.astype(object), use_na_sentinel=True)
        distinct = np.asarray(distinct, dtype=object)
    else:  # timedeltas, periods, intervals, complex numbers, ...
        return EventError(f"column 'ts' has unsupported dtype {dtype}: {_TS_HINT}")
    bad = ~_time_values(distinct)
    rows = np.flatnonzero(bad[codes]) if bad.any() else np.empty(0, np.int64)
    if len(rows):
        row = int(rows[0])
        value = distinct[codes[row]]
        more = f" (and {len(rows) - 1} more such row(s))" if len(rows) > 1 else ""
        return EventError(f"column 'ts' holds {value!r} at row {row}, which is neither a number nor a "
                          f"datetime{more}: {_TS_HINT}")
    value = distinct[codes[0]]
    what = "text" if isinstance(value, str) else f"{type(value).__name__} values"
    return EventError(f"column 'ts' holds {what} (e.g. {value!r} at row 0): {_TS_HINT} "
                      "(convert it first, e.g. with pd.to_numeric or pd.to_datetime)")


def _time_values(values: np.ndarray) -> np.ndarray:
    """Which of ``values`` (an object array) read as a number or as a datetime."""
    series = pd.Series(values, dtype=object)
    try:
        ok = pd.to_numeric(series, errors="coerce").notna().to_numpy()
    except (TypeError, ValueError):
        ok = np.zeros(len(values), bool)
    rest = ~ok
    if rest.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                ok[rest] = pd.to_datetime(series[rest], errors="coerce", format="mixed", utc=True).notna()
            except (TypeError, ValueError, OverflowError):
                pass
    return ok


def dictionary_strings(dictionary: np.ndarray, idx: np.ndarray, strings: StringDictionary) -> AttributeColumn:
    """A string attribute from indices ``idx`` (-1 = null) into ``dictionary`` (an object array of
    distinct strings): each distinct string is encoded once, then the indices are mapped."""
    dict_codes, _ = strings.encode(dictionary)
    lut = np.append(dict_codes, -1).astype(np.int32)  # index -1 (null) -> code -1
    codes = lut[idx]
    return AttributeColumn("string", codes, codes >= 0)


def _string_categories(dtype: pd.CategoricalDtype) -> bool:
    return pd.api.types.infer_dtype(dtype.categories, skipna=True) in ("string", "empty")


def convert_attribute(name: str, col: pd.Series, strings: StringDictionary) -> AttributeColumn:
    dtype = col.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        if _string_categories(dtype):
            # dictionary-encoded strings (Arrow dictionaries, pandas categoricals)
            categories = np.asarray(dtype.categories, dtype=object)
            return dictionary_strings(categories, col.cat.codes.to_numpy(), strings)
        col = col.astype(object)
        dtype = col.dtype
    isna = col.isna().to_numpy()
    valid = ~isna
    if pd.api.types.is_bool_dtype(dtype):
        return AttributeColumn("bool", col.fillna(False).to_numpy(dtype=bool), valid)
    if pd.api.types.is_integer_dtype(dtype):
        if pd.api.types.is_unsigned_integer_dtype(dtype):
            check_unsigned("attribute column", name, col.fillna(0).to_numpy(dtype=np.uint64))
        return AttributeColumn("int", col.fillna(0).to_numpy(dtype=np.int64), valid)
    if pd.api.types.is_float_dtype(dtype):
        return AttributeColumn("float", col.to_numpy(dtype=np.float64, na_value=np.nan), valid)
    if pd.api.types.is_datetime64_any_dtype(dtype):
        raise EventError(f"attribute column {name!r} holds datetimes; only 'ts' may be a datetime")
    values = col.to_numpy(dtype=object)
    present = values[valid]
    if len(present) == 0:
        return AttributeColumn("float", np.full(len(values), np.nan), valid)
    # the common cases are told apart in C (no Python loop over the values)
    inferred = pd.api.types.infer_dtype(present, skipna=False)
    if inferred == "string":
        codes, ok = strings.encode(np.where(valid, values, None))
        return AttributeColumn("string", codes, ok)
    if inferred == "boolean":
        return AttributeColumn("bool", np.where(valid, values, False).astype(bool), valid)
    if inferred == "integer":
        try:
            return AttributeColumn("int", np.where(valid, values, 0).astype(np.int64), valid)
        except OverflowError:
            raise EventError(f"attribute column {name!r} holds integers outside the int64 range") from None
    if inferred in ("floating", "mixed-integer-float"):
        num = np.where(valid, values, np.nan).astype(np.float64)
        return AttributeColumn("float", num, valid & ~np.isnan(num))
    # anything else is an error: say what is there
    kinds = sorted({type(v).__name__ for v in present})
    if len(kinds) == 1:
        raise EventError(
            f"attribute column {name!r} holds {kinds[0]} values (e.g. {present[0]!r}); "
            "attributes are strings, integers, floats or booleans"
        )
    first = type(present[0])
    bad = next(v for v in present if type(v) is not first)
    raise EventError(
        f"attribute column {name!r} mixes value types ({kinds}), e.g. {bad!r}; "
        "give each attribute one type"
    )
