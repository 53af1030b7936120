"""EventTable: events as time-sorted columns of plain NumPy arrays.

A pandas DataFrame or an Arrow table (read column by column, without pandas) with ``type``,
``ts``, optional ``id`` and attribute columns becomes one struct-of-arrays over all events: ``ts`` as int64 nanoseconds, ``type`` as int32 codes
into ``type_names``, ``ids`` as int64, and one :class:`AttributeColumn` per attribute (values plus a
validity mask; strings dictionary-encoded to int32 codes through one table-wide
:class:`StringDictionary`, so that equal strings have equal codes across columns and types).
Kernels index these arrays by row; nothing here knows about rules. Rows are sorted by
``(ts, id)``, so row order is the total order that ``last``/``first`` tie-break on.

Row lineage (:class:`RowTag`, :func:`row_tag`): tables made by :meth:`EventTable.concat` (or
given a lineage by :func:`start_lineage`) and their contiguous slices (:meth:`EventTable.take` of
a range, how the engine drops an expired prefix) record which rows they share with the tables
they came from, so that device copies of the columns (the GPU backend) can be updated with the
new rows only.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .errors import EventError

Kind = Literal["int", "float", "string", "bool"]
RESERVED = ("type", "ts", "id")

UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000}
UNIT_NS["sec"] = UNIT_NS["s"]  # rule text accepts `sec` too (docs/language.md)


class StringDictionary:
    """Interns strings to int32 codes; grows as new strings arrive (codes never change)."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._strings: list[str] = []

    def encode_one(self, s: str) -> int:
        code = self._codes.get(s)
        if code is None:
            code = len(self._strings)
            self._codes[s] = code
            self._strings.append(s)
        return code

    def lookup(self, s: str) -> int:
        """The code of ``s``, or -2 (matches nothing) when it never occurred."""
        return self._codes.get(s, -2)

    def encode(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Codes and validity for an object array of str/None."""
        uniq, inverse = _unique_objects(values)
        table = np.array([-1 if u is None else self.encode_one(u) for u in uniq], dtype=np.int32)
        codes = table[inverse] if len(values) else np.empty(0, np.int32)
        return codes.astype(np.int32), codes >= 0

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """An object array of str (None where the code is negative)."""
        lut = np.array(self._strings + [None], dtype=object)
        codes = np.asarray(codes)
        return lut[np.where(codes < 0, len(self._strings), codes)]

    def __len__(self) -> int:
        return len(self._strings)


def _unique_objects(values: np.ndarray) -> tuple[list, np.ndarray]:
    codes, uniq = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
    uniq_list = list(uniq) + [None]
    codes = np.where(codes < 0, len(uniq_list) - 1, codes)
    return uniq_list, codes


@dataclass
class AttributeColumn:
    """One attribute over all rows: ``values`` (int64, float64, int32 string codes or bool) and ``valid``."""

    kind: Kind
    values: np.ndarray
    valid: np.ndarray

    def take(self, rows: np.ndarray) -> AttributeColumn:
        return AttributeColumn(self.kind, self.values[rows], self.valid[rows])


@dataclass(frozen=True)
class TimeFormat:
    """How input timestamps map to int64 ns, so output ``ts`` gets the input's dtype back."""

    kind: Literal["datetime", "numeric"]
    unit: str = "s"
    dtype: str = "float64"
    tz: str | None = None

    def scale_ns(self) -> int:
        """Nanoseconds per unit of the input's ``ts`` (1 for datetimes)."""
        return 1 if self.kind == "datetime" else UNIT_NS[self.unit]

    def to_ns(self, values: np.ndarray) -> np.ndarray:
        if self.kind == "datetime":
            return values.astype("datetime64[ns]").astype(np.int64)
        scale = UNIT_NS[self.unit]
        if np.issubdtype(values.dtype, np.integer):
            return values.astype(np.int64) * scale
        return np.round(values.astype(np.float64) * scale).astype(np.int64)

    def from_ns(self, ns: np.ndarray) -> pd.Series | np.ndarray:
        ns = np.asarray(ns, dtype=np.int64)
        if self.kind == "datetime":
            out = pd.Series(ns.astype("datetime64[ns]"))
            return out.dt.tz_localize("UTC").dt.tz_convert(self.tz) if self.tz else out
        scale = UNIT_NS[self.unit]
        if np.issubdtype(np.dtype(self.dtype), np.integer):
            return (ns // scale).astype(self.dtype)
        return (ns / scale).astype(self.dtype)


@dataclass
class EventTable:
    """Time-sorted events as NumPy arrays (see module docstring)."""

    ts: np.ndarray
    ids: np.ndarray
    types: np.ndarray
    type_names: list[str]
    columns: dict[str, AttributeColumn]
    strings: StringDictionary
    time: TimeFormat
    #: attribute names present per type name (for schema checks)
    schema: dict[str, set[str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ts)

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_arrow(
        cls,
        table: pa.Table,
        time_unit: str = "s",
        strings: StringDictionary | None = None,
        sort: bool = True,
    ) -> EventTable:
        """Build a table straight from Arrow columns (no pandas frame in between).

        Gives exactly the table that :meth:`from_pandas` builds from :func:`frame_from_arrow`'s
        frame of ``table`` (the same codes, string dictionary, time format and errors; the tests
        compare the two paths on generated tables), column by column in Arrow and NumPy: strings
        (plain or dictionary-encoded) as dictionary indices mapped through the string dictionary
        once per distinct string, numbers and booleans from their buffers with nulls filled,
        timestamps from their integer ticks. Columns of other Arrow types (dates, decimals,
        binary, durations, dictionaries of non-strings, ...), whose conversion pandas decides,
        go through that column's pandas conversion, which rejects most of them.
        """
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        if not isinstance(table, pa.Table):
            raise EventError(f"events must be a pyarrow Table, got {type(table).__name__}")
        names = table.column_names
        _require_columns(names)
        _check_unique_columns(names)
        _check_time_unit(time_unit)
        strings = strings if strings is not None else StringDictionary()
        n = table.num_rows

        type_codes, type_names = _arrow_types(table.column("type"))
        time, ts = _arrow_ts(table.column("ts"), time_unit)
        ids = _arrow_ids(table.column("id")) if "id" in names else np.arange(n, dtype=np.int64)
        columns = {
            name: _arrow_attribute(name, table.column(name), strings) for name in names if name not in RESERVED
        }
        return cls._assemble(ts, ids, type_codes, type_names, columns, strings, time, sort)

    @classmethod
    def from_pandas(
        cls,
        df: pd.DataFrame,
        time_unit: str = "s",
        strings: StringDictionary | None = None,
        sort: bool = True,
    ) -> EventTable:
        """Build a table from a DataFrame; rows are sorted stably by ``ts`` unless ``sort=False``."""
        if not isinstance(df, pd.DataFrame):
            raise EventError(f"events must be a pandas DataFrame, got {type(df).__name__}")
        names = list(map(str, df.columns))
        _require_columns(names)
        _check_unique_columns(names)
        _check_time_unit(time_unit)
        strings = strings if strings is not None else StringDictionary()
        type_codes, type_names = _pandas_types(df["type"])
        time, ts = _convert_ts(df["ts"], time_unit)
        ids = _pandas_ids(df["id"]) if "id" in df.columns else np.arange(len(df), dtype=np.int64)
        columns: dict[str, AttributeColumn] = {}
        for name in df.columns:
            if name in RESERVED:
                continue
            columns[str(name)] = _convert_attribute(str(name), df[name], strings)
        return cls._assemble(ts, ids, type_codes, type_names, columns, strings, time, sort)

    @classmethod
    def _assemble(
        cls,
        ts: np.ndarray,
        ids: np.ndarray,
        type_codes: np.ndarray,
        type_names: list[str],
        columns: dict[str, AttributeColumn],
        strings: StringDictionary,
        time: TimeFormat,
        sort: bool,
    ) -> EventTable:
        """The table of converted columns: the schema (attributes present per type), then sorted."""
        schema: dict[str, set[str]] = {t: set() for t in type_names}
        codes = type_codes.astype(np.int32, copy=False)
        k = np.int32(len(type_names))
        for name, col in columns.items():
            # rows counted by (valid, type) in one pass: the types with a valid value of ``name``
            present = np.flatnonzero(np.bincount(codes + k * col.valid, minlength=2 * len(type_names))[k:])
            for c in present:
                schema[type_names[c]].add(name)
        table = cls(ts, ids, codes, type_names, columns, strings, time, schema)
        return table.sorted() if sort else table

    @classmethod
    def empty_like(cls, other: EventTable) -> EventTable:
        return other.take(np.empty(0, dtype=np.int64))

    # -- access ---------------------------------------------------------------------------------

    def type_code(self, name: str) -> int:
        """The code of event type ``name`` (-1 if no such event occurs)."""
        try:
            return self.type_names.index(name)
        except ValueError:
            return -1

    def rows_of_type(self, name: str) -> np.ndarray:
        """Row indices (time-sorted) of the events of type ``name``."""
        code = self.type_code(name)
        if code < 0:
            return np.empty(0, dtype=np.int64)
        return np.flatnonzero(self.types == code)

    def column(self, name: str) -> AttributeColumn | None:
        return self.columns.get(name)

    def has_attribute(self, type_name: str, attr: str) -> bool:
        return attr in self.schema.get(type_name, set())

    # -- reshaping ------------------------------------------------------------------------------

    def take(self, rows: np.ndarray) -> EventTable:
        """A new table with the given rows (in the given order).

        A contiguous ascending range of rows keeps the row lineage (see :class:`RowTag`).
        """
        rows = np.asarray(rows, dtype=np.int64)
        out = replace(
            self,
            ts=self.ts[rows],
            ids=self.ids[rows],
            types=self.types[rows],
            columns={k: c.take(rows) for k, c in self.columns.items()},
        )
        if rows.ndim == 1 and len(rows) and _is_range(rows, len(self)):
            tag_slice(self, out, int(rows[0]))
        return out

    def concat(self, other: EventTable) -> EventTable:
        """This table and ``other`` merged in (ts, id) order.

        Both must share the string dictionary; type codes and attribute columns are unified.
        """
        if other.strings is not self.strings:
            raise ValueError("tables to concatenate must share one StringDictionary")
        type_names = list(self.type_names)
        remap = np.empty(max(len(other.type_names), 1), dtype=np.int32)
        for i, t in enumerate(other.type_names):
            if t not in type_names:
                type_names.append(t)
            remap[i] = type_names.index(t)
        types = np.concatenate([self.types, remap[other.types] if len(other) else other.types])
        columns: dict[str, AttributeColumn] = {}
        for name in list(self.columns) + [k for k in other.columns if k not in self.columns]:
            a, b = self.columns.get(name), other.columns.get(name)
            kind = _merge_kind(name, a, b)
            columns[name] = AttributeColumn(
                kind,
                np.concatenate([values_as(a, kind, len(self)), values_as(b, kind, len(other))]),
                np.concatenate([
                    a.valid if a else np.zeros(len(self), bool),
                    b.valid if b else np.zeros(len(other), bool),
                ]),
            )
        schema = {t: set(s) for t, s in self.schema.items()}
        for t, s in other.schema.items():
            schema.setdefault(t, set()).update(s)
        merged = EventTable(
            np.concatenate([self.ts, other.ts]),
            np.concatenate([self.ids, other.ids]),
            types,
            type_names,
            columns,
            self.strings,
            self.time,
            schema,
        )
        order = merged._order()
        if order is None:
            kept = len(self)  # other's rows all come after self's
        else:
            merged = merged.take(order)
            k = min(len(self), len(order))
            moved = np.flatnonzero(order[:k] != np.arange(k))
            kept = int(moved[0]) if len(moved) else k
        tag_concat(self, merged, kept)
        return merged

    def _order(self) -> np.ndarray | None:
        """The (ts, id) sort permutation, or None when the rows are already in that order."""
        if len(self) < 2:
            return None
        d = np.diff(self.ts)
        if np.all((d > 0) | ((d == 0) & (np.diff(self.ids) > 0))):
            return None
        return np.lexsort((self.ids, self.ts))

    def sorted(self) -> EventTable:
        """This table in (ts, id) order: row order is the engine's notion of "earlier".

        With default ids (row positions) this is the stable sort by ``ts`` of the input.
        """
        order = self._order()
        return self if order is None else self.take(order)

    def to_pandas(self) -> pd.DataFrame:
        """Back to a DataFrame (for debugging and for re-ingestion elsewhere)."""
        data = {
            "type": np.array(self.type_names, dtype=object)[self.types] if len(self) else [],
            "ts": self.time.from_ns(self.ts),
            "id": self.ids,
        }
        for name, col in self.columns.items():
            data[name] = column_to_python(col, self.strings)
        return pd.DataFrame(data)


def column_to_python(col: AttributeColumn, strings: StringDictionary) -> pd.Series:
    """An attribute column as a pandas Series with nulls (strings decoded)."""
    if col.kind == "string":
        return pd.Series(strings.decode(np.where(col.valid, col.values, -1)), dtype=object)
    if col.kind == "float":
        return pd.Series(np.where(col.valid, col.values, np.nan))
    dtype = "Int64" if col.kind == "int" else "boolean"
    return pd.Series(pd.array(col.values, dtype=dtype)).mask(~col.valid)


# ------------------------------------------------------------------------------------------------
# Row lineage


@dataclass(frozen=True)
class RowTag:
    """What is known about one array of a table: its ``ts``, or an attribute's values or validity.

    ``role`` names the array (``"ts"``, ``"values:NAME"``, ``"valid:NAME"``, see :func:`array_role`).
    Row ``r`` of the array is global row ``base + r`` of lineage ``lineage``. Arrays with the same
    ``lineage`` and ``role`` hold the same value at every global row that both have (they differ
    only in which range of rows they hold). ``ancestors``, nearest first, lists ``(lineage, cut)``:
    the arrays of that lineage and this role hold the same values as this one at every global row
    below ``cut`` that both have.

    Only :meth:`EventTable.concat` (it appends, or merges rows in after the first ``kept`` rows of
    ``self``) and :func:`start_lineage` start a lineage, and only :meth:`EventTable.take` of a
    contiguous range continues one. Tags belong to the array objects, so arrays swapped into a table by other means carry
    none. Table arrays are never written in place.
    """

    lineage: int
    base: int
    role: str
    ancestors: tuple[tuple[int, int], ...] = ()


#: How many earlier lineages a tag remembers (each concat adds one).
MAX_ANCESTORS = 16

class ArrayNotes:
    """Values attached to NumPy arrays by identity, forgotten when the array is collected.

    Arrays are not hashable, and an ``id`` is reused once its object is gone: each note keeps a
    weak reference that both checks the identity on lookup and drops the note with the array.
    """

    def __init__(self) -> None:
        self._notes: dict[int, tuple[weakref.ref, object]] = {}

    def set(self, arr: np.ndarray, value: object) -> None:
        key = id(arr)

        def drop(ref: weakref.ref, key: int = key) -> None:
            hit = self._notes.get(key)
            if hit is not None and hit[0] is ref:
                del self._notes[key]

        self._notes[key] = (weakref.ref(arr, drop), value)

    def get(self, arr: np.ndarray):
        """The note on ``arr``, or None."""
        hit = self._notes.get(id(arr))
        return hit[1] if hit is not None and hit[0]() is arr else None

    def clear(self) -> None:
        self._notes.clear()


_LINEAGES = itertools.count(1)
_TAGS = ArrayNotes()  # array -> RowTag


def array_role(part: str, name: str = "") -> str:
    """The role of a table array: ``array_role("ts")``, ``array_role("values", attr)``, ``array_role("valid", attr)``."""
    return part if part == "ts" else f"{part}:{name}"


def row_tag(arr: np.ndarray) -> RowTag | None:
    """The lineage tag of a table array, or None (see :class:`RowTag`)."""
    return _TAGS.get(arr)


def start_lineage(table: EventTable) -> None:
    """Give the arrays of ``table`` a lineage of their own (rows ``0..n-1``, no ancestors).

    For a table whose columns were put on the device at ingestion (:mod:`cep_gpu.ingest_cudf`):
    the GPU backend keeps tagged arrays as device columns, which tables concatenated to this one
    (composite events re-entering) extend instead of uploading again.
    """
    lineage = next(_LINEAGES)
    for role, arr, _ in tagged_arrays(table):
        set_tag(arr, RowTag(lineage, 0, role))


def set_tag(arr: np.ndarray, tag: RowTag) -> None:
    _TAGS.set(arr, tag)


def tagged_arrays(table: EventTable):
    """(role, array, kind) of each array of ``table`` a tag can describe (see :func:`array_role`)."""
    yield "ts", table.ts, None
    for name, col in table.columns.items():
        yield array_role("values", name), col.values, col.kind
        yield array_role("valid", name), col.valid, col.kind


def _is_range(rows: np.ndarray, n: int) -> bool:
    """``rows`` is ``arange(a, b)`` within ``[0, n)``."""
    first, last = int(rows[0]), int(rows[-1])
    if first < 0 or last >= n or last - first != len(rows) - 1:
        return False
    return len(rows) < 2 or bool(np.all(np.diff(rows) == 1))


def tag_slice(src: EventTable, out: EventTable, start: int) -> None:
    """``out`` holds rows ``start, start + 1, ...`` of ``src``: its arrays continue src's lineage."""
    for (role, a, _), (_, b, _) in zip(tagged_arrays(src), tagged_arrays(out), strict=True):
        tag = row_tag(a)
        if tag is not None and tag.role == role:
            set_tag(b, replace(tag, base=tag.base + start))


def tag_concat(src: EventTable, out: EventTable, kept: int) -> None:
    """``out`` (a new lineage) equals ``src`` in its first ``kept`` rows, array by array where the
    array was carried over unchanged (values: same kind and dtype; concat converts values when an
    attribute's kind changes, never validity)."""
    lineage = next(_LINEAGES)
    before = {role: (a, kind) for role, a, kind in tagged_arrays(src)}
    for role, b, kind in tagged_arrays(out):
        a, a_kind = before.get(role, (None, None))
        tag = row_tag(a) if a is not None else None
        converted = role.startswith("values:") and a_kind != kind
        if tag is None or tag.role != role or converted or a.dtype != b.dtype:
            set_tag(b, RowTag(lineage, 0, role))
            continue
        cut = tag.base + kept
        ancestors = ((tag.lineage, cut),) + tuple((lin, min(c, cut)) for lin, c in tag.ancestors)
        set_tag(b, RowTag(lineage, tag.base, role, ancestors[:MAX_ANCESTORS]))


# ------------------------------------------------------------------------------------------------


def _require_columns(names: list[str]) -> None:
    for col in ("type", "ts"):
        if col not in names:
            raise EventError(f"events have no {col!r} column (columns: {names})")


def _check_unique_columns(names: list[str]) -> None:
    if len(set(names)) != len(names):
        dup = next(c for c in names if names.count(c) > 1)
        raise EventError(f"events have more than one column named {dup!r} (columns: {names})")


def _check_time_unit(time_unit: str) -> None:
    if time_unit not in UNIT_NS:
        raise EventError(f"unknown time_unit {time_unit!r}; use one of {sorted(UNIT_NS)}")


def _null_error(name: str, isna: np.ndarray, what: str = "") -> EventError:
    row = int(np.flatnonzero(isna)[0])
    return EventError(f"column {name!r} is null at row {row}{what}")


def _pandas_types(tcol: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Type codes (in order of first appearance) and type names of a pandas ``type`` column."""
    isna = tcol.isna().to_numpy()
    if isna.any():
        raise _null_error("type", isna)
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
    return type_codes, [str(t) for t in type_uniq]


def _pandas_ids(idcol: pd.Series) -> np.ndarray:
    isna = idcol.isna().to_numpy()
    if isna.any():
        raise _null_error("id", isna)
    if not pd.api.types.is_integer_dtype(idcol.dtype):
        raise EventError(f"column 'id' must hold integers, got dtype {idcol.dtype}")
    if pd.api.types.is_unsigned_integer_dtype(idcol.dtype):
        _check_unsigned("column", "id", idcol.to_numpy(dtype=np.uint64))
    return _check_ids(idcol.to_numpy(dtype=np.int64))


def _check_unsigned(what: str, name: str, values: np.ndarray) -> None:
    """Reject unsigned values above the int64 maximum (they would wrap to negative numbers)."""
    big = values > np.uint64(TS_MAX_NS)
    if big.any():
        row = int(np.flatnonzero(big)[0])
        raise EventError(
            f"{what} {name!r} holds {int(values[row])} at row {row}, above the int64 maximum {TS_MAX_NS}"
        )


def _check_ids(ids: np.ndarray) -> np.ndarray:
    """``ids`` (int64), or an error naming the first negative or repeated id."""
    n = len(ids)
    if n and ids.min() < 0:
        row = int(np.flatnonzero(ids < 0)[0])
        raise EventError(
            f"column 'id' is negative ({ids[row]}) at row {row}: ids must be >= 0 "
            "(negative ids are reserved for composite events)"
        )
    if not (n < 2 or bool(np.all(ids[1:] > ids[:-1]))) and len(np.unique(ids)) != n:
        dup = pd.Series(ids)[pd.Series(ids).duplicated()].iloc[0]
        raise EventError(f"column 'id' has duplicate id {int(dup)}")
    return ids


def _convert_ts(col: pd.Series, time_unit: str) -> tuple[TimeFormat, np.ndarray]:
    isna = col.isna().to_numpy()
    if isna.any():
        raise _null_error("ts", isna, ": every event needs a timestamp")
    dtype = col.dtype
    if len(col) == 0 and pd.api.types.is_object_dtype(dtype):
        # no events, and so no type of their own (a header-only CSV): numbers in time_unit
        return _numeric_ts(np.empty(0, np.float64), time_unit)
    if isinstance(dtype, pd.DatetimeTZDtype):
        fmt = TimeFormat("datetime", tz=str(dtype.tz))
        return fmt, _datetime_ns(col.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy())
    if pd.api.types.is_datetime64_dtype(dtype):
        return TimeFormat("datetime"), _datetime_ns(col.to_numpy())
    if pd.api.types.is_bool_dtype(dtype) or not pd.api.types.is_numeric_dtype(dtype):
        raise EventError(
            f"column 'ts' has unsupported dtype {dtype}: use datetime64 or numbers in time_unit"
        )
    if pd.api.types.is_float_dtype(dtype):
        values = col.to_numpy(dtype=np.float64)
    elif pd.api.types.is_unsigned_integer_dtype(dtype):
        values = col.to_numpy(dtype=np.uint64)  # checked against the range before the cast
    else:
        values = col.to_numpy(dtype=np.int64)
    return _numeric_ts(values, time_unit)


def _numeric_ts(values: np.ndarray, time_unit: str) -> tuple[TimeFormat, np.ndarray]:
    """Numeric timestamps (int64, uint64 or float64 in ``time_unit``) as int64 ns, range-checked."""
    if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
        row = int(np.flatnonzero(~np.isfinite(values))[0])
        raise EventError(f"column 'ts' is not finite at row {row}")
    check_ts_range(values, time_unit)
    np_dtype = "float64" if values.dtype.kind == "f" else "int64"
    fmt = TimeFormat("numeric", unit=time_unit, dtype=np_dtype)
    return fmt, fmt.to_ns(values.astype(np.int64, copy=False) if values.dtype.kind == "u" else values)


#: Timestamps are int64 nanoseconds: the representable instants, in ns.
TS_MIN_NS, TS_MAX_NS = -(2**63), 2**63 - 1


def ts_range_text(unit: str | None) -> str:
    """The representable range of timestamps: numbers in ``unit``, or datetimes (``None``)."""
    if unit is None:
        lo, hi = pd.Timestamp(TS_MIN_NS + 1), pd.Timestamp(TS_MAX_NS)
        return f"datetimes from {lo:%Y-%m-%d %H:%M:%S} to {hi:%Y-%m-%d %H:%M:%S} UTC (int64 nanoseconds)"
    scale = UNIT_NS[unit]
    return f"{-(2**63 // scale)} to {TS_MAX_NS // scale} with time_unit={unit!r} (int64 nanoseconds)"


def _ts_range_error(row: int | str, value, unit: str | None) -> EventError:
    where = f"at row {row}" if isinstance(row, int) else row
    return EventError(
        f"column 'ts' {where} holds {value}, outside the representable range: {ts_range_text(unit)}"
    )


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


def _datetime_ns(values: np.ndarray) -> np.ndarray:
    """datetime64 values of any unit as int64 ns; an error for instants outside that range."""
    unit, count = np.datetime_data(values.dtype)
    if unit == "ns":
        return values.view(np.int64) if values.dtype == np.dtype("datetime64[ns]") else values.astype(np.int64)
    ticks = values.astype(np.int64)
    scale = np.timedelta64(count, unit) // np.timedelta64(1, "ns")
    _check_datetime_ticks(ticks, int(scale), ~np.isnat(values))
    return ticks * np.int64(scale)


def _check_datetime_ticks(ticks: np.ndarray, scale: int, valid: np.ndarray | None = None) -> None:
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


# ------------------------------------------------------------------------------------------------
# Arrow columns -> NumPy (EventTable.from_arrow: what from_pandas does to frame_from_arrow's frame)

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
        _check_unsigned(what, name, _numpy(pc.fill_null(col, 0), np.uint64))
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


def _arrow_types(col: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Type codes (in order of first appearance) and names of an Arrow ``type`` column."""
    if not _holds_strings(col.type):
        return _pandas_types(_pandas_column("type", col))
    if col.null_count:
        raise _null_error("type", ~_valid(col))
    idx, dictionary, in_order = _dictionary(col)
    if in_order:
        return idx, [str(t) for t in dictionary.to_pylist()]
    # a dictionary may list the types in any order and hold unused ones: number the used ones
    # in order of first appearance (the codes pandas' factorize gives the categorical)
    seen = pc.unique(pa.array(idx)).to_numpy()
    remap = np.full(len(dictionary), -1, dtype=np.int32)
    remap[seen] = np.arange(len(seen), dtype=np.int32)
    names = [str(t) for t in dictionary.take(pa.array(seen, pa.int64())).to_pylist()]
    return remap[idx], names


def _arrow_ts(col: pa.ChunkedArray, time_unit: str) -> tuple[TimeFormat, np.ndarray]:
    t = col.type
    if pa.types.is_null(t) and len(col) == 0:
        return _numeric_ts(np.empty(0, np.float64), time_unit)  # no events: as _convert_ts
    if not (pa.types.is_timestamp(t) or pa.types.is_integer(t) or pa.types.is_floating(t)):
        return _convert_ts(_pandas_column("ts", col), time_unit)  # an error for every other type
    if col.null_count or (pa.types.is_floating(t) and len(col)):
        isna = pc.is_null(col, nan_is_null=True)
        if pc.any(isna).as_py():
            raise _null_error("ts", isna.to_numpy(), ": every event needs a timestamp")
    if pa.types.is_timestamp(t):
        tz = None if t.tz is None else _pandas_tz(t.tz)
        ticks = _numpy(col.cast(pa.int64()), np.int64)
        scale = _NS_PER_TICK[t.unit]
        _check_datetime_ticks(ticks, scale)
        return TimeFormat("datetime", tz=tz), ticks * scale if scale != 1 else ticks
    if pa.types.is_unsigned_integer(t):
        values = _numpy(col, np.uint64)
    elif pa.types.is_integer(t):
        values = _numpy(col, np.int64)
    else:
        values = col.to_numpy().astype(np.float64, copy=False)
    return _numeric_ts(values, time_unit)


@functools.lru_cache(maxsize=64)
def _pandas_tz(tz: str) -> str:
    """The name pandas gives Arrow's time zone ``tz`` (the input's zone, restored on output)."""
    return str(pa.array([], pa.timestamp("ns", tz=tz)).to_pandas().dtype.tz)


def _arrow_ids(col: pa.ChunkedArray) -> np.ndarray:
    if not pa.types.is_integer(col.type):
        return _pandas_ids(_pandas_column("id", col))  # an error for every other type
    if col.null_count:
        raise _null_error("id", ~_valid(col))
    return _check_ids(_numpy(_as_int64("id", col, "column"), np.int64))


def _arrow_attribute(name: str, col: pa.ChunkedArray, strings: StringDictionary) -> AttributeColumn:
    t = col.type
    if _holds_strings(t) and col.null_count == len(col) and not _encoded_by_frame_from_arrow(t):
        t = pa.null()  # string views arrive in pandas as objects: all null, they hold no type
    if _holds_strings(t):
        idx, dictionary, _ = _dictionary(col)
        return _dictionary_strings(dictionary.to_numpy(zero_copy_only=False), idx, strings)
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
    return _convert_attribute(name, _pandas_column(name, col), strings)


def _dictionary_strings(dictionary: np.ndarray, idx: np.ndarray, strings: StringDictionary) -> AttributeColumn:
    """A string attribute from indices ``idx`` (-1 = null) into ``dictionary`` (an object array of
    distinct strings): each distinct string is encoded once, then the indices are mapped."""
    dict_codes, _ = strings.encode(dictionary)
    lut = np.append(dict_codes, -1).astype(np.int32)  # index -1 (null) -> code -1
    codes = lut[idx]
    return AttributeColumn("string", codes, codes >= 0)


def nullable_pandas_type(t: pa.DataType):
    """The pandas dtype for an Arrow type whose nulls pandas would otherwise turn into NaN floats
    (a ``types_mapper`` of ``to_pandas``)."""
    if pa.types.is_integer(t):
        return pd.Int64Dtype()
    if pa.types.is_boolean(t):
        return pd.BooleanDtype()
    return None


def _string_categories(dtype: pd.CategoricalDtype) -> bool:
    return pd.api.types.infer_dtype(dtype.categories, skipna=True) in ("string", "empty")


def _convert_attribute(name: str, col: pd.Series, strings: StringDictionary) -> AttributeColumn:
    dtype = col.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        if _string_categories(dtype):
            # dictionary-encoded strings (Arrow dictionaries, pandas categoricals)
            categories = np.asarray(dtype.categories, dtype=object)
            return _dictionary_strings(categories, col.cat.codes.to_numpy(), strings)
        col = col.astype(object)
        dtype = col.dtype
    isna = col.isna().to_numpy()
    valid = ~isna
    if pd.api.types.is_bool_dtype(dtype):
        return AttributeColumn("bool", col.fillna(False).to_numpy(dtype=bool), valid)
    if pd.api.types.is_integer_dtype(dtype):
        if pd.api.types.is_unsigned_integer_dtype(dtype):
            _check_unsigned("attribute column", name, col.fillna(0).to_numpy(dtype=np.uint64))
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


def _merge_kind(name: str, a: AttributeColumn | None, b: AttributeColumn | None) -> Kind:
    kinds = {c.kind for c in (a, b) if c is not None and c.valid.any()}
    if not kinds:
        return (a or b).kind  # type: ignore[union-attr]
    if len(kinds) == 1:
        return kinds.pop()
    if kinds == {"int", "float"}:
        return "float"
    raise EventError(f"attribute {name!r} has kinds {sorted(kinds)} in different events")


def values_as(col: AttributeColumn | None, kind: Kind, n: int) -> np.ndarray:
    dtype = {"int": np.int64, "float": np.float64, "string": np.int32, "bool": np.bool_}[kind]
    if col is None:
        return np.full(n, -1 if kind == "string" else 0, dtype=dtype)
    values = col.values
    if values.dtype.kind == "f" and kind != "float":
        # an all-null column read as float (e.g. one event without the attribute): NaN -> filler
        values = np.where(col.valid, values, -1 if kind == "string" else 0)
    return values.astype(dtype, copy=False)


def from_arrow(table: pa.Table, time_unit: str = "s") -> EventTable:
    """Build an :class:`EventTable` from an Arrow table (:meth:`EventTable.from_arrow`)."""
    return EventTable.from_arrow(table, time_unit=time_unit)
