"""Arrow table -> the columns of an :class:`~cep_gpu.events.EventTable`, column by column without a
pandas frame: exactly what the pandas ingestion makes of :func:`frame_from_arrow`'s frame (the
tests compare the two paths on generated tables)."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import EventError
from .checks import (
    check_datetime_ticks,
    check_ids,
    check_type_names,
    check_unsigned,
    null_error,
    numeric_ts,
)
from .from_pandas import convert_attribute, convert_ts, dictionary_strings, pandas_ids, pandas_types
from .values import AttributeColumn, StringDictionary, TimeFormat


def frame_from_arrow(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as the DataFrame :meth:`EventTable.from_pandas` reads fastest.

    String columns are dictionary-encoded in Arrow first, so they arrive as categoricals (codes
    and a small list of distinct strings) instead of one Python string per row; integers and
    booleans with nulls stay nullable integers and booleans instead of becoming floats.
    """
    cols = []
    for col in table.columns:
        if _is_plain_string(col.type):
            col = pc.dictionary_encode(col)
        cols.append(col)
    encoded = pa.Table.from_arrays(cols, names=table.column_names)
    return encoded.to_pandas(types_mapper=nullable_pandas_type)


def nullable_pandas_type(t: pa.DataType):
    """The pandas dtype for an Arrow type whose nulls pandas would otherwise turn into NaN floats
    (a ``types_mapper`` of ``to_pandas``)."""
    if pa.types.is_integer(t):
        # (of the same width: a ``ts`` column's dtype is the output's, docs/api.md)
        name = np.dtype(t.to_pandas_dtype()).name
        return pd.api.types.pandas_dtype("UI" + name[2:] if name[0] == "u" else name.capitalize())
    if pa.types.is_boolean(t):
        return pd.BooleanDtype()
    return None


_NS_PER_TICK = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}


def _is_plain_string(t: pa.DataType) -> bool:
    """Strings that ``to_pandas`` turns into Python strings and Arrow dictionary-encodes directly."""
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_string_type(t: pa.DataType) -> bool:
    is_view = getattr(pa.types, "is_string_view", lambda _: False)
    return _is_plain_string(t) or is_view(t)


def _encoded_by_frame_from_arrow(t: pa.DataType) -> bool:
    """Whether :func:`frame_from_arrow` turns a column of type ``t`` into string categories."""
    return _is_plain_string(t) or pa.types.is_dictionary(t)


def _holds_strings(t: pa.DataType) -> bool:
    """Strings, plain or dictionary-encoded: what arrives in pandas as string categories."""
    return _is_string_type(t.value_type if pa.types.is_dictionary(t) else t)


def _numpy(col: pa.ChunkedArray, dtype) -> np.ndarray:
    """A null-free column as a writable NumPy array of ``dtype`` (table arrays are plain arrays)."""
    arr = col.to_numpy().astype(dtype, copy=False)
    return arr if arr.flags.writeable else arr.copy()


def _valid(col: pa.ChunkedArray) -> np.ndarray:
    if col.null_count == 0:
        return np.ones(len(col), dtype=bool)
    return col.is_valid().to_numpy()


def _pandas_column(name: str, col: pa.ChunkedArray) -> pd.Series:
    """``col`` as :func:`frame_from_arrow` converts it (for the types whose meaning pandas decides)."""
    return frame_from_arrow(pa.table({name: col}))[name]


def _as_int64(name: str, col: pa.ChunkedArray, what: str) -> pa.ChunkedArray:
    if pa.types.is_uint64(col.type):
        check_unsigned(what, name, _numpy(pc.fill_null(col, 0), np.uint64))
    try:
        return col.cast(pa.int64())
    except pa.ArrowInvalid:
        raise EventError(f"{what} {name!r} holds integers outside the int64 range") from None


def _dictionary(col: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array, bool]:
    """A string column as dictionary indices (-1 = null), the dictionary, and whether the
    dictionary lists the strings in order of first appearance.

    Plain strings are dictionary-encoded (distinct strings in order of first appearance); the
    chunks of a dictionary column get one dictionary (chunk by chunk, new strings appended: the
    categories ``to_pandas`` gives them).
    """
    encoded = not pa.types.is_dictionary(col.type)
    if encoded:
        if not _is_plain_string(col.type):
            col = col.cast(pa.string())
        col = pc.dictionary_encode(col)
    if col.num_chunks == 0:
        return np.empty(0, np.int32), pa.array([], col.type.value_type), True
    first = col.chunk(0).dictionary
    if not all(c.dictionary.equals(first) for c in col.chunks[1:]):
        col = pa.table({"c": col}).unify_dictionaries().column(0)
        first, encoded = col.chunk(0).dictionary, False
    indices = pa.chunked_array([c.indices for c in col.chunks], col.type.index_type)
    if not pa.types.is_signed_integer(indices.type):
        indices = indices.cast(pa.int64())
    if indices.null_count:
        indices = pc.fill_null(indices, -1)
    return _numpy(indices, indices.type.to_pandas_dtype()), first, encoded


def arrow_types(col: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Type codes (in order of first appearance) and names of an Arrow ``type`` column."""
    if not _holds_strings(col.type):
        return pandas_types(_pandas_column("type", col))
    if col.null_count:
        raise null_error("type", ~_valid(col))
    idx, dictionary, in_order = _dictionary(col)
    if in_order:
        return check_type_names(idx, [str(t) for t in dictionary.to_pylist()])
    # a dictionary may list the types in any order and hold unused ones: number the used ones
    # in order of first appearance (the codes pandas' factorize gives the categorical)
    seen = pc.unique(pa.array(idx)).to_numpy()
    remap = np.full(len(dictionary), -1, dtype=np.int32)
    remap[seen] = np.arange(len(seen), dtype=np.int32)
    names = [str(t) for t in dictionary.take(pa.array(seen, pa.int64())).to_pylist()]
    return check_type_names(remap[idx], names)


def arrow_ts(col: pa.ChunkedArray, time_unit: str) -> tuple[TimeFormat, np.ndarray]:
    t = col.type
    if pa.types.is_null(t) and len(col) == 0:
        return numeric_ts(np.empty(0, np.float64), time_unit)  # no events: as convert_ts
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        # dates are datetimes at midnight, as cep_gpu.io.read_table reads a file's dates
        col = col.cast(pa.timestamp("s"))  # (whole days: exact in seconds)
        t = col.type
    if not (pa.types.is_timestamp(t) or pa.types.is_integer(t) or pa.types.is_floating(t)):
        return convert_ts(_pandas_column("ts", col), time_unit)  # an error for every other type
    if col.null_count or (pa.types.is_floating(t) and len(col)):
        isna = pc.is_null(col, nan_is_null=True)
        if pc.any(isna).as_py():
            raise null_error("ts", isna.to_numpy(), ": every event needs a timestamp")
    if pa.types.is_timestamp(t):
        tz = None if t.tz is None else _pandas_tz(t.tz)
        ticks = _numpy(col.cast(pa.int64()), np.int64)
        scale = _NS_PER_TICK[t.unit]
        check_datetime_ticks(ticks, scale)
        dtype = f"datetime64[{t.unit}]"
        return TimeFormat("datetime", dtype=dtype, tz=tz), ticks * scale if scale != 1 else ticks
    if pa.types.is_unsigned_integer(t):
        values = _numpy(col, np.uint64)
    elif pa.types.is_integer(t):
        values = _numpy(col, np.int64)
    else:
        values = col.to_numpy().astype(np.float64, copy=False)
    return numeric_ts(values, time_unit, t.to_pandas_dtype())


@functools.lru_cache(maxsize=64)
def _pandas_tz(tz: str) -> str:
    """The name pandas gives Arrow's time zone ``tz`` (the input's zone, restored on output)."""
    return str(pa.array([], pa.timestamp("ns", tz=tz)).to_pandas().dtype.tz)


def arrow_ids(col: pa.ChunkedArray) -> np.ndarray:
    if not pa.types.is_integer(col.type):
        return pandas_ids(_pandas_column("id", col))  # an error for every other type
    if col.null_count:
        raise null_error("id", ~_valid(col))
    return check_ids(_numpy(_as_int64("id", col, "column"), np.int64))


def arrow_attribute(name: str, col: pa.ChunkedArray, strings: StringDictionary) -> AttributeColumn:
    t = col.type
    if _holds_strings(t) and col.null_count == len(col) and not _encoded_by_frame_from_arrow(t):
        t = pa.null()  # string views arrive in pandas as objects: all null, they hold no type
    if _holds_strings(t):
        idx, dictionary, _ = _dictionary(col)
        return dictionary_strings(dictionary.to_numpy(zero_copy_only=False), idx, strings)
    if pa.types.is_integer(t):
        values = _as_int64(name, pc.fill_null(col, 0), "attribute column")
        return AttributeColumn("int", _numpy(values, np.int64), _valid(col))
    if pa.types.is_floating(t):
        values = _numpy(col, np.float64)  # nulls become NaN, and NaN is null
        return AttributeColumn("float", values, ~np.isnan(values))
    if pa.types.is_boolean(t):
        return AttributeColumn("bool", _numpy(pc.fill_null(col, False), np.bool_), _valid(col))
    if pa.types.is_null(t):
        return AttributeColumn("float", np.full(len(col), np.nan), np.zeros(len(col), dtype=bool))
    # dates, times, durations, decimals, binary, nested types, dictionaries of non-strings:
    # pandas decides what they are (and the attribute rules reject most of them)
    return convert_attribute(name, _pandas_column(name, col), strings)
